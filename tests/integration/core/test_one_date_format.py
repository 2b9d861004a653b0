"""Issue 25: one way to write a date and time per language, on every page and in mails: the
`|when` filter (apps/core/localtime.py: the language's short date-time format, in the portal's
zone, the zone named). Before, English pages used five formats ("Nov. 28, 2026, 10:10 a.m.",
"28 Mar, 06:07", "2026-03-04 06:07:00 CET", "06:07", "03/04/2026 6:07 a.m."), one of them on
German pages too."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from apps.core import localtime
from apps.dhcp.models import Lease
from apps.firewall.models import FirewallHost
from apps.members.models import Member
from apps.notifications.choices import NoticeKind
from apps.notifications.services import notice_create
from apps.tickets.models import Message, Ticket
from apps.tickets.services.tickets import ticket_open
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db

MOMENT = dt.datetime(2026, 3, 4, 5, 7, tzinfo=dt.UTC)  # 06:07 in Berlin (CET)
# Other ways the same moment was written on some page.
OTHER_FORMATS = [
    "March 4, 2026",
    "Mar. 4, 2026",
    "4 Mar",
    "2026-03-04 06:07",
    "4. März 2026",
]


def expected(language: str) -> str:
    with translation.override(language):
        return localtime.when(MOMENT)


def pages() -> tuple[list[tuple[Client, str]], Member]:
    member = member_active()
    Member.objects.filter(pk=member.pk).update(status_since=MOMENT)
    member.status_changes.update(at=MOMENT)
    device = device_add(member, mac="02:00:00:00:aa:01")
    host = FirewallHost.objects.create(name="pl-nat1", address="10.255.255.11")
    Lease.objects.create(
        host=host, host_name="pl-nat1", mac=device.mac, address=device.ipv4,
        starts=MOMENT, ends=MOMENT + dt.timedelta(hours=1), seen_at=MOMENT,
    )  # fmt: skip
    ticket = ticket_open(actor=member.user, subject="No net", body="Since this morning.")
    Message.objects.filter(ticket=ticket).update(created_at=MOMENT)
    Ticket.objects.filter(pk=ticket.pk).update(last_message_at=MOMENT)
    notice = notice_create(
        member=member,
        kind=NoticeKind.INCIDENT,
        params={"title": "Outage", "buildings": ["A"], "started_at": MOMENT.isoformat()},
    )
    staff = Client()
    staff.force_login(UserFactory(roles=["volunteer", "support"]))
    resident = Client()
    resident.force_login(member.user)
    return [
        (staff, reverse("members:member_detail", args=[member.pk])),
        (staff, reverse("members:office_hours") + "?q=02:00:00:00:aa:01"),
        (staff, reverse("tickets:ticket_detail", args=[ticket.pk])),
        (resident, reverse("tickets:my_tickets")),
        (resident, reverse("notifications:notice_detail", args=[notice.pk])),
    ], member


@pytest.mark.parametrize("language", ["en", "de"])
def test_every_page_writes_a_moment_the_same_way(language):
    visits, _member = pages()
    written = expected(language)
    assert written.endswith("CET")
    for client, url in visits:
        response = client.get(url, HTTP_ACCEPT_LANGUAGE=language)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert written in html, url
        for other in OTHER_FORMATS:
            assert other not in html.replace("\u00a0", " "), (url, other)


def test_english_and_german_differ_and_german_pages_carry_no_english_format():
    english, german = expected("en"), expected("de")
    assert english.startswith("03/04/2026")
    assert german.startswith("04.03.2026 06:07")
    assert re.search(r"a\.m\.|p\.m\.", english.replace("\u00a0", " "))
    assert not re.search(r"a\.m\.|p\.m\.", german)


def test_a_notice_mail_writes_the_moment_as_the_pages_do():
    """The notice's text (what its mail says) uses the same helper."""
    from apps.notifications.texts import notice_text

    member = member_active()
    notice = notice_create(
        member=member,
        kind=NoticeKind.INCIDENT,
        params={"title": "Outage", "buildings": ["A"], "started_at": MOMENT.isoformat()},
    )
    for language in ("en", "de"):
        with translation.override(language):
            text = " ".join(str(part) for part in notice_text(notice))
        assert expected(language) in text, language
