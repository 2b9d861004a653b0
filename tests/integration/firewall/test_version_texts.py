"""A rollout stores each new version's texts beside its pushes (16 MB at 20,000 members): the row
first, marked pending, the texts right after. A version whose texts never arrived (the worker
stopped in between) is never pushed nor put back, and is repaired when compiled again."""

import pytest
from django.urls import reverse

from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.push import ruleset_push
from apps.firewall.services import PinRefused, host_pin
from apps.firewall.versions import ruleset_version_store, version_texts_write

pytestmark = pytest.mark.django_db

NFT = "table inet portal_fw {\n}\n"


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def store(host, *, texts_later: bool, content_hash: str = "a" * 64) -> RuleSetVersion:
    return ruleset_version_store(
        host=host,
        nft_text=NFT,
        tc_text="qdisc add dev x root handle 1: htb\n",
        files={"kea-dhcp4.conf": "{}"},
        content_hash=content_hash,
        counts={},
        compile_seconds=0.0,
        cause="test",
        texts_later=texts_later,
    )


def test_texts_later_stores_the_row_first_and_the_texts_when_written(host):
    version = store(host, texts_later=True)
    row = RuleSetVersion.objects.get(pk=version.pk)
    assert (row.nft_text, row.tc_text, row.files, row.texts_pending) == ("", "", {}, True)
    assert version.nft_text == NFT  # the rollout pushes from the object it holds
    assert not version.texts_pending
    version_texts_write(version)
    row.refresh_from_db()
    assert (row.nft_text, row.files, row.texts_pending) == (NFT, {"kea-dhcp4.conf": "{}"}, False)
    assert row.tc_text.startswith("qdisc add")


def test_a_version_whose_texts_never_arrived_is_never_pushed_nor_put_back(host, make_user):
    version = store(host, texts_later=True)  # ... and the worker stops before writing them
    pending = RuleSetVersion.objects.get(pk=version.pk)
    outcome = ruleset_push(host=host, version=pending)
    assert not outcome.ok
    assert "never stored completely" in outcome.message
    assert "nothing was sent" in outcome.message
    host.refresh_from_db()
    assert host.push_status == "error"
    with pytest.raises(PinRefused, match="cannot be put back"):
        host_pin(host=host, version=pending, actor=make_user(roles=("admin",)))
    host.refresh_from_db()
    assert host.pinned_version is None


def test_compiling_the_same_content_again_repairs_a_pending_version(host):
    version = store(host, texts_later=True)
    again = store(host, texts_later=False)  # the next run compiles the same bundle
    assert again.pk == version.pk
    row = RuleSetVersion.objects.get(pk=version.pk)
    assert (row.nft_text, row.texts_pending) == (NFT, False)


def test_the_diff_page_says_when_texts_are_not_stored(host, client_for):
    old = store(host, texts_later=False, content_hash="b" * 64)
    new = store(host, texts_later=True)  # pending in the database
    url = reverse("firewall:version_diff", args=[host.name]) + f"?a={old.pk}&b={new.pk}"
    page = client_for("admin").get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert f"The texts of #{new.pk} are not stored (yet)" in text
    assert "diff-del" not in text  # not shown as every line removed
