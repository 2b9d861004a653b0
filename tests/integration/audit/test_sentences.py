"""The audit trail and version causes read as sentences in the reader's language, with links;
every action name the code writes has a sentence, so a new one cannot be forgotten."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse
from django.utils import formats, timezone, translation

from apps.audit.models import AuditEntry
from apps.audit.sentences import GENERIC_VERBS, SENTENCES, audit_sentence, cause_sentences
from apps.audit.services import audit_record
from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.members.choices import MemberStatus
from apps.notifications.choices import LiveOutcome
from apps.testaccess.services import member_test_access_extend
from tests.factories import UserFactory, member_on_test

ROOT = Path(__file__).resolve().parents[3]
ACTION = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+$")
# Action names built at run time, with every value they can take.
DYNAMIC = {
    "f'member.{new}'": [f"member.{status}" for status in MemberStatus.values],
    "f'notice.live_{outcome}'": [f"notice.live_{o}" for o in LiveOutcome.values],
    "f\"{name}.{('create' if created else 'change')}\"": ["policy.create", "policy.change"],
    "f'{obj._meta.model_name}.{verb}'": ["firewallhost.create", "cannedresponse.change"],
}
CAUSE_HOOKS = {"network_changed_on_commit", "firewall_change_request"}


def _call_name(node: ast.Call) -> str:
    return getattr(node.func, "id", "") or getattr(node.func, "attr", "")


def _cause_action(value: ast.expr) -> set[str]:
    """The action a cause f-string starts with (f"device.remove {pk}" -> device.remove)."""
    if not isinstance(value, ast.JoinedStr) or not isinstance(value.values[0], ast.Constant):
        return set()
    first = str(value.values[0].value).split(" ")[0]
    return {first} if ACTION.match(first) else set()


def actions_in_code() -> tuple[set[str], set[str]]:
    """(action names written as text, f-string sources) in apps/ and workers/: every `action=`
    keyword, and the action that starts each version cause given to the network hook."""
    names: set[str] = set()
    dynamic: set[str] = set()
    for path in [*ROOT.glob("apps/**/*.py"), *ROOT.glob("workers/**/*.py")]:
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg == "action":
                    if isinstance(value, ast.Constant) and ACTION.match(str(value.value)):
                        names.add(value.value)
                    elif isinstance(value, ast.JoinedStr):
                        dynamic.add(ast.unparse(value))
                elif keyword.arg == "cause" and _call_name(node) in CAUSE_HOOKS:
                    names.update(_cause_action(value))
    return names, dynamic


def has_sentence(action: str) -> bool:
    return action in SENTENCES or action.rpartition(".")[2] in GENERIC_VERBS


def test_every_action_written_in_the_code_has_a_sentence():
    names, dynamic = actions_in_code()
    assert len(names) > 40  # the scan finds them (member, device, forward, ticket...)
    for source in dynamic:
        if source.endswith(tuple(f".{verb}'" for verb in GENERIC_VERBS)) or source.endswith(
            tuple(f'.{verb}"' for verb in GENERIC_VERBS)
        ):
            continue  # "<model>.delete": read by its verb
        assert source in DYNAMIC, f"add the values of {source} to DYNAMIC"
        names.update(DYNAMIC[source])
    assert sorted(a for a in names if not has_sentence(a)) == []


def test_every_sentence_is_translated_to_german():
    templates = [t for ts in SENTENCES.values() for t in ts] + list(GENERIC_VERBS.values())
    with translation.override("en"):
        english = [str(t) for t in templates]
    with translation.override("de"):
        german = [str(t) for t in templates]
    assert [e for e, d in zip(english, german, strict=True) if e == d] == []


@pytest.mark.django_db
def test_the_member_page_says_who_extended_the_test_access_until_when():
    volunteer = UserFactory(
        username="anna", first_name="Anna", last_name="Meier", roles=["volunteer"]
    )
    member = member_on_test(days=3)
    member.user.first_name, member.user.last_name = "Ben", "Schulz"
    member.user.save()
    until = timezone.localdate() + timedelta(days=20)
    member_test_access_extend(member=member, until=until, actor=volunteer)
    client = Client()
    client.force_login(volunteer)
    url = reverse("members:member_detail", args=[member.pk])
    page = client.get(url).text
    day = formats.date_format(until, "j M" if until.year == timezone.localdate().year else "j M Y")
    link = f'<a href="{url}">Ben Schulz</a>'
    assert f"Anna Meier extended the test access of {link} until {day}" in page
    assert "member.test_access_extend" not in page

    client.cookies["django_language"] = "de"
    german = client.get(url, HTTP_ACCEPT_LANGUAGE="de").text
    with translation.override("de"):
        de_day = formats.date_format(until, "j. M")
    assert f"Anna Meier hat den Testzugang von {link} bis {de_day} verlängert" in german


@pytest.mark.django_db
def test_an_unknown_action_still_reads_as_a_sentence():
    member = member_on_test()
    entry = audit_record(actor=None, action="member.frobnicate_quota", obj=member, member=member)
    entry = AuditEntry.objects.select_related("content_type").get(pk=entry.pk)
    with translation.override("en"):
        text = str(audit_sentence(entry))
    url = reverse("members:member_detail", args=[member.pk])
    assert (
        text
        == f'The portal made a change to <a href="{url}">{member}</a> (member frobnicate quota)'
    )


@pytest.mark.django_db
def test_version_causes_read_as_sentences_with_member_links(make_user):
    member = member_on_test()
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    RuleSetVersion.objects.create(
        host=host,
        content_hash="a" * 64,
        cause=(
            f"device.remove 167, member.test_access_extend {member.pk} (by sta); "
            "push now (by ada); convergence (health check)"
        ),
    )
    client = Client()
    client.force_login(make_user(roles=("admin",)))
    page = client.get(reverse("firewall:host_detail", args=["pl-nat1"])).text
    url = reverse("members:member_detail", args=[member.pk])
    assert "sta removed the device #167" in page
    assert f'sta changed the test access of <a href="{url}">{member}</a>' in page
    assert "ada pushed the rule sets now" in page
    assert "The health check found a host running an older version" in page
    assert "device.remove 167" not in page


def test_free_text_causes_stay_readable():
    with translation.override("en"):
        assert [str(s) for s in cause_sentences("sync; something new (by x)")] == [
            "Scheduled synchronisation",
            "something new",
        ]


@pytest.mark.django_db
def test_admin_edits_read_with_article_and_case_in_german_named_or_not():
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    edit = audit_record(actor=None, action="firewallhost.change", obj=host)
    edit = AuditEntry.objects.select_related("content_type").get(pk=edit.pk)
    unnamed = AuditEntry.objects.create(
        action="accessattempt.delete",
        content_type=ContentType.objects.get(app_label="axes", model="accessattempt"),
        object_id="3",
        object_repr="",
    )
    causes = "blockedport.create 12, networksettings.save 1 (by sta)"
    link = f'<a href="{reverse("firewall:host_detail", args=["pl-nat1"])}">pl-nat1</a>'
    expected = {
        "en": [
            f"The portal changed the firewall host {link}",
            "The portal deleted an entry of the type access attempt",
            "sta added the blocked port range #12",
            "sta changed the network settings",
        ],
        "de": [
            f"Das Portal hat den Firewall-Host {link} geändert",
            "Das Portal hat einen Eintrag der Art „Zugriffsversuch“ gelöscht",
            "sta hat den gesperrten Portbereich #12 angelegt",
            "sta hat die Netzeinstellungen geändert",
        ],
    }
    for language, sentences in expected.items():
        with translation.override(language):
            read = [str(audit_sentence(edit)), str(audit_sentence(unnamed))]
            read += [str(s) for s in cause_sentences(causes)]
        assert read == sentences, language
