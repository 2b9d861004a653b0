"""Mail claiming to be from a member, over SMTP into the listener: it reaches the member's ticket
only with the ticket's own reference or a trusted server's word; otherwise it opens a ticket
marked "sender not verified" that staff confirm."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.audit.models import AuditEntry
from apps.tickets.choices import MessageKind
from apps.tickets.mailparse import sender_authenticated
from apps.tickets.models import Ticket
from apps.tickets.services import ticket_open, ticket_reply
from tests.factories import UserFactory
from tests.integration.tickets.conftest import make_mail

MX = "mx.dorm.example"


@pytest.fixture
def trusted(settings):
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = [MX]
    settings.PORTAL_TICKET_ACKNOWLEDGE = False


@pytest.fixture
def anna(transactional_db):
    return UserFactory(
        username="anna",
        first_name="Anna",
        last_name="Meier",
        email="anna@uni.example",
        roles=["member"],
    )


@pytest.fixture
def staff(transactional_db):
    return UserFactory(username="sam", roles=["support"])


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def inbound_count(ticket: Ticket) -> int:
    """Mails received on the ticket (its first message, written in the portal, not counted)."""
    return ticket.messages.filter(kind=MessageKind.INBOUND, author__isnull=True).count()


def test_forged_mail_opens_an_unlinked_ticket_marked_for_staff(listener, trusted, anna, staff):
    listener.send(make_mail(subject="Please forward port 22 to me", sender="anna@uni.example"))
    ticket = Ticket.objects.get()
    assert ticket.requester is None
    assert ticket.sender_unverified

    # The member does not see it; staff see the badge in the inbox and the claim on the page.
    assert "Please forward port 22" not in login(anna).get(reverse("tickets:my_tickets")).text
    client = login(staff)
    inbox = client.get(reverse("tickets:inbox")).text
    assert 'data-testid="sender-unverified"' in inbox
    assert "sender not verified" in inbox
    page = client.get(reverse("tickets:ticket_detail", args=[ticket.pk])).text
    assert "the address of the member Anna Meier, but nothing shows that they wrote it" in page
    assert "It is Anna Meier: link the ticket" in page
    assert "No member account matches this address." not in page  # it does; unproven

    response = client.post(
        reverse("tickets:ticket_detail", args=[ticket.pk]), {"action": "confirm_sender"}
    )
    assert response.status_code == 302
    ticket.refresh_from_db()
    assert (ticket.requester, ticket.sender_unverified) == (anna, False)
    page = client.get(reverse("tickets:ticket_detail", args=[ticket.pk])).text
    assert 'data-testid="sender-unverified"' not in page
    assert AuditEntry.objects.filter(action="ticket.sender_confirm", actor=staff).exists()
    assert "Please forward port 22" in login(anna).get(reverse("tickets:my_tickets")).text


def test_german_staff_read_the_badge_in_german(listener, trusted, anna, staff):
    listener.send(make_mail(subject="Hallo", sender="anna@uni.example"))
    ticket = Ticket.objects.get()
    page = login(staff).get(
        reverse("tickets:ticket_detail", args=[ticket.pk]), HTTP_ACCEPT_LANGUAGE="de"
    )
    assert "Absender nicht bestätigt" in page.text


@pytest.mark.parametrize(
    ("header", "verified"),
    [
        (f"{MX}; dmarc=pass header.from=uni.example", True),
        (f"{MX} 1; spf=pass (sender SPF authorized) smtp.mailfrom=anna@uni.example", True),
        (f"{MX}; spf=pass smtp.mailfrom=bounce@lists.uni.example; dmarc=fail", True),
        (f"{MX}; dkim=pass header.d=uni.example; spf=fail smtp.mailfrom=uni.example", False),
        (f"{MX}; spf=pass smtp.mailfrom=mallory@evil.example", False),  # not aligned
        (f"{MX}; dmarc=pass header.from=evil.example", False),
        ("mx.evil.example; dmarc=pass header.from=uni.example", False),  # not our server
        (f"{MX}; dmarc=none header.from=uni.example", False),
    ],
)
def test_only_a_trusted_pass_for_the_from_domain_links_the_member(
    listener, trusted, anna, header, verified
):
    listener.send(make_mail(subject="Hi", sender="anna@uni.example", Authentication_Results=header))
    ticket = Ticket.objects.get()
    assert (ticket.requester == anna, ticket.sender_unverified) == (verified, not verified)


def test_without_trusted_servers_no_header_is_believed(listener, settings, anna):
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = []
    header = f"{MX}; dmarc=pass header.from=uni.example"
    listener.send(make_mail(sender="anna@uni.example", Authentication_Results=header))
    assert Ticket.objects.get().sender_unverified


def test_the_bare_number_threads_only_with_a_trusted_pass(listener, trusted, anna, staff):
    ticket = ticket_open(actor=anna, subject="Wifi slow", body="since Monday")
    listener.send(
        make_mail(subject=f"Re: [#{ticket.pk}] add my port 22", sender="anna@uni.example")
    )
    assert inbound_count(ticket) == 0
    forged = Ticket.objects.exclude(pk=ticket.pk).get()
    assert forged.sender_unverified
    assert forged.requester is None

    header = f"{MX}; dmarc=pass header.from=uni.example"
    listener.send(
        make_mail(
            subject=f"Re: [#{ticket.pk}] still slow",
            sender="anna@uni.example",
            Authentication_Results=header,
        )
    )
    assert inbound_count(ticket) == 1
    assert Ticket.objects.count() == 2


def test_the_tickets_own_references_thread_without_any_header(listener, trusted, anna, staff):
    ticket = ticket_open(actor=anna, subject="Wifi slow", body="since Monday")
    reply = ticket_reply(ticket=ticket, actor=staff, body="Which room?")
    answer = make_mail(subject="Re: Wifi slow", sender="anna@uni.example", body="B-204")
    answer["In-Reply-To"] = reply.message_id
    listener.send(answer)
    listener.send(make_mail(subject=f"Re: {ticket.subject_tag}", sender="a2@uni.example"))
    assert inbound_count(ticket) == 2
    assert Ticket.objects.count() == 1
    # a made-up token is no token
    listener.send(make_mail(subject=f"Re: [#{ticket.pk}:0123456789]", sender="anna@uni.example"))
    assert inbound_count(ticket) == 2
    assert Ticket.objects.get(sender_unverified=True).requester is None


def test_reply_tokens_differ_per_ticket_and_appear_in_replies(transactional_db, anna):
    one = ticket_open(actor=anna, subject="a", body="a")
    two = ticket_open(actor=anna, subject="b", body="b")
    assert one.reply_token != two.reply_token
    assert len(one.reply_token) == 10
    assert one.subject_tag == f"[#{one.pk}:{one.reply_token}]"


def test_comments_and_quoted_values_in_the_header_are_read():
    header = f'{MX} (Postfix); dmarc=pass (p=reject) header.from="uni.example"'
    assert sender_authenticated([header], from_address="a@uni.example", trusted_authserv_ids=[MX])
    assert not sender_authenticated(
        [header], from_address="a@uni.example.evil", trusted_authserv_ids=[MX]
    )


# Issue 25: without a trusted Authentication-Results the listener verifies DKIM itself.


@pytest.fixture
def dkim_key(monkeypatch):
    """A signing key of uni.example (selector "s1"); its public half is what the domain's DNS
    answers for s1._domainkey.uni.example (served to dkimpy in place of a resolver: the test
    machine has no DNS of its own)."""
    import base64

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    import apps.tickets.mailparse

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    records = {b"s1._domainkey.uni.example.": b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)}
    asked: list[bytes] = []

    def txt(name: bytes, timeout: int = 5) -> bytes | None:
        asked.append(name)
        return records.get(name if name.endswith(b".") else name + b".")

    monkeypatch.setattr(apps.tickets.mailparse, "DKIM_DNS", txt)
    return private, asked


def signed(mail, private: bytes, domain: str = "uni.example") -> bytes:
    from email.policy import SMTP

    import dkim

    raw = mail.as_bytes(policy=SMTP)
    signature = dkim.sign(
        raw, b"s1", domain.encode(), private, include_headers=[b"from", b"subject", b"to"]
    )
    return signature + raw


def test_a_valid_aligned_dkim_signature_links_the_member_without_any_header(
    listener, settings, anna, dkim_key
):
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = []
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    private, asked = dkim_key
    listener.send(signed(make_mail(subject="No internet", sender="anna@uni.example"), private))
    ticket = Ticket.objects.get()
    assert (ticket.requester, ticket.sender_unverified) == (anna, False)
    assert asked == [b"s1._domainkey.uni.example."]


def test_a_forged_or_unaligned_signature_stays_unverified_and_is_offered_to_staff(
    listener, settings, anna, staff, dkim_key
):
    settings.PORTAL_MAIL_TRUSTED_AUTHSERV_IDS = []
    settings.PORTAL_TICKET_ACKNOWLEDGE = False
    private, _asked = dkim_key
    # Signed, then changed on the way: the signature no longer verifies.
    tampered = signed(make_mail(subject="Hi", sender="anna@uni.example"), private)
    listener.send(tampered.replace(b"Subject: Hi", b"Subject: Hi!"))
    # A valid signature of another domain says nothing about anna@uni.example.
    other = make_mail(subject="Other", sender="anna@uni.example")
    listener.send(signed(other, private, domain="mail.evil.example"))
    tickets = list(Ticket.objects.order_by("pk"))
    assert [(t.requester, t.sender_unverified) for t in tickets] == [(None, True), (None, True)]
    # Staff see the matching member as a suggestion and confirm with one click.
    page = login(staff).get(reverse("tickets:ticket_detail", args=[tickets[0].pk])).content.decode()
    assert "Anna Meier" in page
    assert "sender not verified" in page.lower()
