"""Edits in the Django admin reach the portal's audit trail like the pages' changes do, and the
records of what happened (rule-set versions, the push log) cannot be touched there."""

from __future__ import annotations

from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import reverse
from django.utils import translation

from apps.audit.models import AuditEntry
from apps.firewall.models import FirewallHost, PushLogEntry, RuleSetVersion
from apps.tickets.models import CannedResponse, Queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(make_user) -> Client:
    client = Client()
    client.force_login(make_user("ada", roles=("admin",), first_name="Ada", last_name="Byron"))
    return client


def _form_data(client: Client, obj: Any, **changes: Any) -> dict[str, Any]:
    """What the admin's change form posts for `obj` as shown, with `changes` applied."""
    meta = obj._meta
    page = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk]))
    fields = list(page.context["adminform"].form.fields)
    data: dict[str, Any] = {}
    for name, value in {**model_to_dict(obj, fields=fields), **changes}.items():
        if value is None or value is False:
            continue
        data[name] = "on" if value is True else value
    return data


def test_a_host_changed_in_the_admin_shows_on_its_page_with_old_and_new_value(admin_client_):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", link_kbit=1000)
    url = reverse("admin:firewall_firewallhost_change", args=[host.pk])
    response = admin_client_.post(url, _form_data(admin_client_, host, link_kbit=2000))
    assert response.status_code == 302, response.context["adminform"].form.errors

    entry = AuditEntry.objects.get(action="firewallhost.change")
    assert entry.actor_name == "ada"
    assert entry.changes == {"link_kbit": [1000, 2000]}
    with translation.override("en"):
        page = admin_client_.get(reverse("firewall:host_detail", args=[host.name])).text
    assert "Ada Byron changed the firewall host" in page


def test_canned_responses_added_changed_and_deleted_in_the_admin_are_audited(admin_client_):
    queue = Queue.objects.create(slug="net", name="Network")
    add = admin_client_.post(
        reverse("admin:tickets_cannedresponse_add"),
        {"title": "Outage", "body": "We are on it.", "queue": queue.pk},
    )
    assert add.status_code == 302
    canned = CannedResponse.objects.get(title="Outage")
    created = AuditEntry.objects.get(action="cannedresponse.create")
    assert created.changes["title"] == [None, "Outage"]
    assert created.changes["queue"] == [None, "Network"]

    admin_client_.post(
        reverse("admin:tickets_cannedresponse_change", args=[canned.pk]),
        _form_data(admin_client_, canned, body="We are on it; back soon."),
    )
    changed = AuditEntry.objects.get(action="cannedresponse.change")
    assert changed.changes == {"body": ["We are on it.", "We are on it; back soon."]}

    admin_client_.post(
        reverse("admin:tickets_cannedresponse_delete", args=[canned.pk]), {"post": "yes"}
    )
    assert not CannedResponse.objects.exists()
    deleted = AuditEntry.objects.get(action="cannedresponse.delete")
    assert deleted.object_repr == "Outage"
    assert deleted.changes["title"] == ["Outage", None]


def test_a_queue_saved_unchanged_writes_nothing_and_a_bulk_delete_one_entry_each(admin_client_):
    first = Queue.objects.create(slug="net", name="Network")
    second = Queue.objects.create(slug="mail", name="Mail")
    admin_client_.post(
        reverse("admin:tickets_queue_change", args=[first.pk]), _form_data(admin_client_, first)
    )
    assert not AuditEntry.objects.exists()

    admin_client_.post(
        reverse("admin:tickets_queue_changelist"),
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"},
    )
    assert not Queue.objects.exists()
    assert sorted(
        AuditEntry.objects.filter(action="queue.delete").values_list("object_repr", flat=True)
    ) == sorted([str(first), str(second)])


def test_versions_and_the_push_log_cannot_be_added_changed_or_deleted(admin_client_):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    version = RuleSetVersion.objects.create(
        host=host, content_hash="ab" * 32, nft_text="table inet x {}", counts={}, cause="sync"
    )
    entry = PushLogEntry.objects.create(host=host, step="apply", ok=True, seconds=0.1)
    for obj, name in ((version, "version"), (entry, "pushlogentry")):
        model = type(obj)._meta.model_name
        add = admin_client_.get(reverse(f"admin:firewall_{model}_add"))
        assert add.status_code == 403, name
        delete = admin_client_.post(
            reverse(f"admin:firewall_{model}_delete", args=[obj.pk]), {"post": "yes"}
        )
        assert delete.status_code == 403, name
        change_url = reverse(f"admin:firewall_{model}_change", args=[obj.pk])
        page = admin_client_.get(change_url)
        assert page.status_code == 200  # still readable
        assert 'name="_save"' not in page.text
        assert admin_client_.post(change_url, {}).status_code == 403
    assert RuleSetVersion.objects.filter(pk=version.pk).exists()
    assert PushLogEntry.objects.filter(pk=entry.pk).exists()


def test_the_admins_audit_list_reads_as_sentences_in_the_readers_language(admin_client_):
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11", link_kbit=1000)
    url = reverse("admin:firewall_firewallhost_change", args=[host.pk])
    admin_client_.post(url, _form_data(admin_client_, host, link_kbit=2000))
    listing = reverse("admin:audit_auditentry_changelist")
    english = admin_client_.get(listing, HTTP_ACCEPT_LANGUAGE="en").text
    assert "Ada Byron changed the firewall host" in english
    assert "firewallhost.change" in english  # the raw action stays, for the filter
    german = admin_client_.get(listing, HTTP_ACCEPT_LANGUAGE="de").text
    assert "Ada Byron hat den Firewall-Host" in german
