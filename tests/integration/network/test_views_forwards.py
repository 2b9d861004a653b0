"""Forwards, openings and test-access screens: htmx sections, errors next to the field,
ownership (another member's objects answer 404), staff-only test-access tools."""

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import formats, timezone

from apps.members.choices import MemberStatus
from apps.network.models import Ipv6Opening, PortForward, ShapingProfile
from tests.factories import (
    MemberFactory,
    UserFactory,
    device_add,
    forward_add,
    member_active,
    member_on_test,
    opening_add,
    pool_create,
)

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def login(user):
    client = Client()
    client.force_login(user)
    return client


def staff(role="volunteer"):
    return login(UserFactory(roles=[role]))


def test_dashboard_shows_forwards_per_device_with_live_state_and_empty_states():
    member = member_active()
    client = login(member.user)
    body = client.get(reverse("members:dashboard")).content.decode()
    assert "No port forwards yet" in body
    assert "No IPv6 openings" in body
    assert "Register a device first" in body
    device = device_add(member, name="gameserver")
    forward_add(member, device, ports="27015", protocol="both", description="CS")
    opening_add(device, ports=None)
    body = client.get(reverse("members:dashboard")).content.decode()
    assert 'id="port-forwards"' in body
    assert "gameserver" in body
    assert "27015" in body
    assert 'data-testid="live-state"' in body
    assert "pending" in body
    assert "all ports" in body


def test_the_add_form_says_the_limit_and_the_blocked_ports_before_the_fields():
    from apps.network.models import BlockedPort, NetworkSettings

    NetworkSettings.objects.update_or_create(id=1, defaults={"port_forward_limit": 3})
    BlockedPort.objects.get_or_create(direction="inbound", protocol="tcp", first=135, last=139)
    member = member_active()
    device = device_add(member, name="nas")
    forward_add(member, device, ports="8080")
    body = login(member.user).get(reverse("members:dashboard")).content.decode()
    form = body.split('class="device-form add-forward"', 1)[1]
    hint = form.index('data-testid="forward-rules"')
    assert hint < form.index('name="device"')  # read before typing
    rules = form[hint : form.index("</p>", hint)]
    assert "You can add 2 more forwards (at most 3)." in rules
    assert "135-139" in rules


def test_add_forward_with_htmx_and_errors_next_to_the_field():
    member = member_active()
    device = device_add(member, name="nas")
    client = login(member.user)
    url = reverse("network:forward_add", args=[member.pk])
    ok = client.post(
        url, {"device": device.pk, "protocol": "tcp", "public_ports": "8000 - 8010"}, **HX
    )
    assert ok.status_code == 200
    assert "Forward TCP 8000-8010 → nas added." in ok.content.decode()
    forward = PortForward.objects.get()
    assert (forward.target_first, forward.target_last) == (8000, 8010)
    cases = [
        ({"public_ports": "8005"}, "public_ports", "overlap the forward TCP 8000-8010 → nas"),
        ({"public_ports": "0"}, "public_ports", "does not exist"),
        ({"public_ports": "65536"}, "public_ports", "does not exist"),
        ({"public_ports": "90-80"}, "public_ports", "reversed"),
        ({"public_ports": "100-110", "target_ports": "200"}, "target_ports", "As many ports"),
    ]
    for data, field, message in cases:
        post = {"device": device.pk, "protocol": "tcp", **data}
        body = client.post(url, post, **HX).content.decode()
        assert f'id="forward-add-{field}-error"' in body, data
        assert message in body, (data, body[body.find("field-error") :][:300])
    assert PortForward.objects.count() == 1


def test_another_members_device_is_a_field_error():
    member, other = member_active(), member_active()
    foreign = device_add(other)
    device_add(member)
    body = (
        login(member.user)
        .post(
            reverse("network:forward_add", args=[member.pk]),
            {"device": foreign.pk, "protocol": "tcp", "public_ports": "80"},
            **HX,
        )
        .content.decode()
    )
    assert 'id="forward-add-device-error"' in body
    assert "own devices" in body
    assert not PortForward.objects.exists()


def test_edit_toggle_delete_forward_with_htmx():
    member = member_active()
    device = device_add(member, name="pc")
    forward = forward_add(member, device, ports="25565")
    client = login(member.user)
    edit = client.get(reverse("network:forward_edit", args=[forward.pk]), **HX).content.decode()
    assert 'id="forward-edit-public_ports"' in edit
    client.post(
        reverse("network:forward_edit", args=[forward.pk]),
        {"device": device.pk, "protocol": "udp", "public_ports": "25566", "target_ports": ""},
        **HX,
    )
    forward.refresh_from_db()
    assert (forward.protocol, forward.public_first, forward.target_first) == ("udp", 25566, 25566)
    body = client.post(
        reverse("network:forward_toggle", args=[forward.pk]), {"enabled": "0"}, **HX
    ).content.decode()
    forward.refresh_from_db()
    assert not forward.enabled
    assert "Forward disabled." in body
    assert "disabled" in body
    client.post(reverse("network:forward_delete", args=[forward.pk]), **HX)
    assert not PortForward.objects.exists()


def test_without_htmx_the_forms_redirect_back():
    member = member_active()
    device = device_add(member)
    client = login(member.user)
    response = client.post(
        reverse("network:forward_add", args=[member.pk]),
        {"device": device.pk, "protocol": "tcp", "public_ports": "80"},
    )
    assert response.status_code == 302
    assert response["Location"].endswith("/me/#port-forwards")


def test_every_forward_and_opening_view_answers_404_for_another_member():
    owner = member_active()
    device = device_add(owner)
    forward = forward_add(owner, device)
    opening = opening_add(device)
    intruder = login(member_active().user)
    gets = [
        reverse("network:forward_section", args=[owner.pk]),
        reverse("network:forward_edit", args=[forward.pk]),
        reverse("network:opening_section", args=[owner.pk]),
        reverse("network:opening_edit", args=[opening.pk]),
    ]
    posts = [
        (reverse("network:forward_add", args=[owner.pk]), {"device": device.pk}),
        (reverse("network:forward_edit", args=[forward.pk]), {}),
        (reverse("network:forward_toggle", args=[forward.pk]), {"enabled": "0"}),
        (reverse("network:forward_delete", args=[forward.pk]), {}),
        (reverse("network:opening_add", args=[owner.pk]), {"device": device.pk}),
        (reverse("network:opening_edit", args=[opening.pk]), {}),
        (reverse("network:opening_toggle", args=[opening.pk]), {"enabled": "0"}),
        (reverse("network:opening_delete", args=[opening.pk]), {}),
    ]
    for url in gets:
        assert intruder.get(url, **HX).status_code == 404, url
    for url, data in posts:
        assert intruder.post(url, data, **HX).status_code == 404, url
    forward.refresh_from_db()
    assert forward.enabled
    assert Ipv6Opening.objects.filter(pk=opening.pk, enabled=True).exists()


def test_staff_manage_a_members_forwards_on_the_member_page():
    member = member_active()
    device = device_add(member, name="tv")
    client = staff()
    page = client.get(reverse("members:member_detail", args=[member.pk])).content.decode()
    assert 'id="port-forwards"' in page
    assert 'id="ipv6-openings"' in page
    client.post(
        reverse("network:forward_add", args=[member.pk]),
        {"device": device.pk, "protocol": "tcp", "public_ports": "8080"},
        **HX,
    )
    assert PortForward.objects.filter(member=member).count() == 1


def test_add_opening_with_htmx_all_ports_and_field_errors():
    member = member_active()
    device = device_add(member, name="pi")
    client = login(member.user)
    url = reverse("network:opening_add", args=[member.pk])
    body = client.post(url, {"device": device.pk, "protocol": "both", "ports": ""}, **HX)
    assert "Opening added." in body.content.decode()
    assert Ipv6Opening.objects.get().all_ports
    body = client.post(url, {"device": device.pk, "protocol": "tcp", "ports": ""}, **HX)
    assert 'id="opening-add-ports-error"' in body.content.decode()
    body = client.post(url, {"device": device.pk, "protocol": "tcp", "ports": "22"}, **HX)
    text = body.content.decode()
    assert 'id="opening-add-ports-error"' in text
    assert "all ports of pi" in text


def test_pending_member_sees_why_forwards_are_not_possible():
    pool_create()
    member = MemberFactory()
    body = login(member.user).get(reverse("members:dashboard")).content.decode()
    assert "Port forwards need an active membership or a test access." in body


# --- test access ------------------------------------------------------------------------------


def test_volunteer_grants_extends_and_ends_a_test_access_from_the_member_page():
    pool_create()
    member = MemberFactory()
    client = staff()
    page = client.get(reverse("members:member_detail", args=[member.pk])).content.decode()
    assert 'id="test-access"' in page
    assert "Grant a test access" in page
    until = timezone.localdate() + dt.timedelta(days=5)
    url = reverse("testaccess:test_access_action", args=[member.pk, "grant"])
    refused = client.post(url, {"grant-until": str(timezone.localdate())}, **HX)
    assert 'id="grant-until-error"' in refused.content.decode()
    from apps.network.models import ShapingProfile

    profile = ShapingProfile.default()
    ok = client.post(url, {"grant-until": str(until), "grant-profile": profile.pk}, **HX)
    assert ok.status_code == 200
    assert 'id="test-access"' in ok.content.decode()
    member.refresh_from_db()
    assert member.status == MemberStatus.TEST
    assert member.test_access_until == until
    page = client.get(reverse("members:member_detail", args=[member.pk])).content.decode()
    assert "Extend the test access" in page
    assert profile.name in page
    client.post(
        reverse("testaccess:test_access_action", args=[member.pk, "extend"]),
        {"extend-until": str(until + dt.timedelta(days=7)), "extend-profile": profile.pk},
        **HX,
    )
    member.refresh_from_db()
    assert member.test_access_until == until + dt.timedelta(days=7)
    client.post(reverse("testaccess:test_access_action", args=[member.pk, "end"]), {}, **HX)
    member.refresh_from_db()
    assert member.status == MemberStatus.PENDING


def test_grant_and_extend_refresh_the_panel_in_place_with_the_new_date():
    """After Grant or Extend the panel comes back (htmx swap): the new last day, a confirmation,
    no old error, and the member's status, facts and audit trail swapped out of band."""
    pool_create()
    member = MemberFactory()
    client = staff()
    url = reverse("testaccess:test_access_action", args=[member.pk, "grant"])
    refused = client.post(url, {"grant-until": str(timezone.localdate())}, **HX)
    assert 'id="grant-until-error"' in refused.content.decode()
    until = timezone.localdate() + dt.timedelta(days=5)
    profile = ShapingProfile.default().pk
    response = client.post(url, {"grant-until": str(until), "grant-profile": profile}, **HX)
    assert "HX-Redirect" not in response.headers  # a redirect to "#test-access" changed nothing
    body = response.content.decode()
    shown = formats.date_format(until, "SHORT_DATE_FORMAT")
    assert f"Test access granted until {shown} (last day)." in body
    assert 'data-testid="test-access-notice"' in body
    assert "grant-until-error" not in body
    assert "Extend the test access" in body  # the panel of a running test access
    assert body.count('hx-swap-oob="true"') == 5  # status, facts, addresses, actions, audit trail
    assert 'id="member-status" hx-swap-oob="true"' in body
    assert "memberChanged" in response.headers["HX-Trigger"]  # devices, forwards, openings
    assert "Test access until" in body  # the facts, with the new date
    assert "a test access until" in body  # the audit trail has the grant, as a sentence
    later = until + dt.timedelta(days=7)
    body = client.post(
        reverse("testaccess:test_access_action", args=[member.pk, "extend"]),
        {"extend-until": str(later), "extend-profile": profile},
        **HX,
    ).content.decode()
    shown_later = formats.date_format(later, "SHORT_DATE_FORMAT")
    assert f"Test access extended until {shown_later} (last day)." in body
    facts = body.split('data-testid="test-access-facts"')[1].split("</dl>")[0]
    assert shown_later in facts
    assert shown not in facts
    # Without htmx: the member page again, with the message.
    plain = client.post(
        reverse("testaccess:test_access_action", args=[member.pk, "extend"]),
        {"extend-until": str(later + dt.timedelta(days=1)), "extend-profile": profile},
        follow=True,
    ).content.decode()
    assert "Test access extended until" in plain


def test_test_access_tools_are_404_for_members():
    member = member_on_test()
    client = login(member.user)
    for action in ("grant", "extend", "end"):
        url = reverse("testaccess:test_access_action", args=[member.pk, action])
        assert client.post(url, {}, **HX).status_code == 404
    assert client.get(reverse("testaccess:test_access_list")).status_code == 403


def test_list_of_test_accesses_ending_this_week():
    soon = member_on_test(days=2)
    later = member_on_test(days=20)
    client = staff()
    body = client.get(reverse("testaccess:test_access_list")).content.decode()
    assert str(soon) in body
    assert str(later) not in body
    body = client.get(reverse("testaccess:test_access_list") + "?days=30", **HX).content.decode()
    assert str(later) in body
    assert 'id="test-access-table"' in body
    assert "<html" not in body


def test_list_of_test_accesses_empty_state_and_pagination():
    client = staff()
    body = client.get(reverse("testaccess:test_access_list")).content.decode()
    assert "No test access ends within the next 7 days." in body
    for _ in range(51):
        member_on_test(days=3)
    body = client.get(reverse("testaccess:test_access_list")).content.decode()
    assert "Page 1 of 2" in body
    assert "?page=2&amp;days=7" in body
