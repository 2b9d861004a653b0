"""`manage.py compile_rules`: the full rule set, or the increment since a stored version."""

import io

import pytest
from django.core.management import CommandError, call_command

from apps.firewall.compiled import ruleset_compile
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.versions import version_snapshots_store
from apps.network.models import Device
from tests.factories import device_add, forward_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def host():
    return FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")


def compile_rules(**options):
    out = io.StringIO()
    call_command("compile_rules", stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def stored_version(host):
    (version,) = ruleset_compile(cause="test")
    version_snapshots_store(versions=[version])
    return RuleSetVersion.objects.get(pk=version.pk)


def test_full_rule_set_to_stdout_and_file(host, tmp_path):
    member = member_active()
    device = device_add(member)
    text = compile_rules(host="pl-nat1")
    assert "table inet portal_fw {" in text
    assert "table ip portal_nat {" in text  # the NAT chains and maps, in the same transaction
    assert device.ipv4 in text
    target = tmp_path / "rules.nft"
    tc = tmp_path / "rules.tc"
    assert compile_rules(out=str(target), tc=str(tc)) == ""
    assert target.read_text() == text  # deterministic: the same database, the same bytes
    assert tc.read_text().startswith("qdisc")


def test_since_a_version_gives_only_the_element_changes(host):
    member = member_active()
    device_add(member)
    version = stored_version(host)
    forward_add(member, ports="25565")
    increment = compile_rules(since=version.pk)
    assert "25565" in increment
    assert "add element ip portal_nat fwd_tcp" in increment
    assert "table inet portal_fw {" not in increment  # not the whole rule set
    assert "table ip portal_nat {" not in increment
    assert len(increment) < len(compile_rules()) / 2


def test_clear_errors(host):
    with pytest.raises(CommandError, match=r"no firewall host 'nope' \(known: pl-nat1\)"):
        compile_rules(host="nope")
    with pytest.raises(CommandError, match="version 999 is not a stored version of pl-nat1"):
        compile_rules(since=999)
    (bare,) = ruleset_compile(cause="no snapshot kept")
    with pytest.raises(CommandError, match="no longer keeps its snapshot"):
        compile_rules(since=bare.pk)
    device = device_add(member_active())
    Device.objects.filter(pk=device.pk).update(ipv6="2001:db8:ffff::1")
    with pytest.raises(CommandError, match=f"cannot be compiled: device #{device.pk}"):
        compile_rules()


def test_only_the_newest_versions_keep_their_snapshot(host):
    member = member_active()
    device = device_add(member)
    kept = []
    for port in range(7000, 7007):
        forward_add(member, device, ports=str(port))
        kept.append(stored_version(host).pk)
    with_snapshot = set(
        RuleSetVersion.objects.filter(snapshot_json__isnull=False).values_list("pk", flat=True)
    )
    assert with_snapshot == set(kept[-5:])
