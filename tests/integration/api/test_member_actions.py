"""API: every office-hours action on a member, through the same service as the member page:
the same result and the same audit rows; members 403 on their own record, 404 on others; bad
input 400 with the field and nothing changed."""

import pytest
from django.urls import reverse

from apps.audit.models import AuditEntry
from apps.members.choices import MemberStatus
from apps.members.models import Member
from apps.network.models import PublicPool
from tests.factories import MemberFactory, RoomFactory, device_add, member_active, pool_create
from tests.integration.api.helpers import login

pytestmark = pytest.mark.django_db


def trail(member: Member) -> list[tuple[str, list[str]]]:
    """The member's audit rows as (action, changed fields), oldest first: what the trail shows."""
    rows = AuditEntry.objects.filter(member=member).order_by("at", "pk")
    return [(row.action, sorted(row.changes)) for row in rows]


def fresh(kind: str) -> Member:
    """A member in the state the action needs, with a room in a building that has a subnet."""
    if kind == "pending":
        if not PublicPool.objects.exists():
            pool_create()
        return MemberFactory()
    member = member_active()
    device_add(member)
    if kind == "suspended":
        from apps.members.services import member_suspend

        member_suspend(member=member, reason="unpaid", actor=None)
    return member


# (action, state before, UI form data, API path, API data, status after)
ACTIONS = [
    (
        "check-in",
        "pending",
        {"identity_checked": "on"},
        "check-in",
        {"identity_checked": True},
        "active",
    ),
    (
        "check-in",
        "suspended",
        {"identity_checked": "on"},
        "unsuspend",
        {"identity_checked": True},
        "active",
    ),
    ("suspend", "active", {"reason": "unpaid"}, "suspend", {"reason": "unpaid"}, "suspended"),
    (
        "end",
        "active",
        {"note": "left", "confirm": "on"},
        "end",
        {"note": "left", "confirm": True},
        "ended",
    ),
]


@pytest.mark.parametrize(("ui_action", "state", "form", "path", "data", "after"), ACTIONS)
def test_an_action_through_the_api_does_and_audits_what_the_page_does(
    make_user, ui_action, state, form, path, data, after
):
    volunteer = make_user(roles=("volunteer",))
    by_page, by_api = fresh(state), fresh(state)
    before_page, before_api = len(trail(by_page)), len(trail(by_api))
    page = login(volunteer).post(
        reverse("members:member_detail", args=[by_page.pk]), {"action": ui_action, **form}
    )
    assert page.status_code == 302
    response = login(volunteer).post(
        f"/api/members/{by_api.pk}/{path}/", data, content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == after
    by_page.refresh_from_db()
    by_api.refresh_from_db()
    assert by_page.status == by_api.status == after
    assert trail(by_api)[before_api:] == trail(by_page)[before_page:]
    assert AuditEntry.objects.filter(member=by_api, actor=volunteer).exists()


def test_move_through_the_api_readdresses_and_audits_like_the_page(make_user):
    volunteer = make_user(roles=("volunteer",))
    by_page, by_api = fresh("active"), fresh("active")
    target_page = RoomFactory(building=by_page.room.building)
    target_api = RoomFactory(building=by_api.room.building)
    login(volunteer).post(
        reverse("members:member_detail", args=[by_page.pk]),
        {"action": "move", "room": target_page.label},
    )
    response = login(volunteer).post(
        f"/api/members/{by_api.pk}/move/",
        {"room": target_api.label},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["room"] == target_api.label
    actions = [a for a, _ in trail(by_api)]
    assert actions[-1] == "member.move"
    assert [a for a, _ in trail(by_api)][-3:] == [a for a, _ in trail(by_page)][-3:]


def test_register_and_contact_through_the_api(make_user):
    pool_create()
    room = RoomFactory()
    staff = login(make_user(roles=("volunteer",)))
    response = staff.post(
        "/api/members/",
        {"first_name": "Ida", "last_name": "Berg", "email": "ida@example.org", "room": room.label},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    member = Member.objects.get(pk=response.json()["id"])
    assert member.status == MemberStatus.PENDING
    assert [a for a, _ in trail(member)] == ["member.register"]
    again = staff.post(
        "/api/members/",
        {"first_name": "I", "last_name": "B", "email": "IDA@example.org", "room": room.label},
        content_type="application/json",
    )
    assert again.status_code == 400
    assert "already an account" in again.json()["email"][0]
    changed = staff.patch(
        f"/api/members/{member.pk}/",
        {"email": "ida.berg@example.org", "phone": "+49 1"},
        content_type="application/json",
    )
    assert changed.status_code == 200
    assert changed.json()["email"] == "ida.berg@example.org"
    assert trail(member)[-1] == ("member.contact", ["email", "phone"])


@pytest.mark.parametrize("path", ["check-in", "unsuspend", "suspend", "move", "end"])
def test_members_may_not_act_on_themselves_and_never_see_others(path):
    member, other = member_active(), member_active()
    client = login(member.user)
    own = client.post(f"/api/members/{member.pk}/{path}/", {}, content_type="application/json")
    assert own.status_code == 403
    assert client.post(f"/api/members/{other.pk}/{path}/", {}).status_code == 404
    assert client.post("/api/members/", {}).status_code == 403
    assert client.patch(f"/api/members/{member.pk}/", {}).status_code == 403
    member.refresh_from_db()
    assert member.status == MemberStatus.ACTIVE
    assert not AuditEntry.objects.filter(member=member, actor=member.user).exists()


@pytest.mark.parametrize(
    ("path", "data", "field"),
    [
        ("check-in", {}, "identity_checked"),
        ("check-in", {"identity_checked": False}, "identity_checked"),
        ("end", {"note": "x"}, "confirm"),
        ("suspend", {"reason": ""}, "reason"),
        ("move", {"room": "Z-999"}, "room"),
        ("unsuspend", {"identity_checked": True}, "non_field_errors"),
    ],
)
def test_bad_input_is_400_with_the_field_and_nothing_changes(make_user, path, data, field):
    member = fresh("active") if path != "check-in" else fresh("pending")
    before = (member.status, member.room_id, len(trail(member)))
    staff = login(make_user(roles=("volunteer",)))
    response = staff.post(
        f"/api/members/{member.pk}/{path}/", data, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()[field]
    member.refresh_from_db()
    assert (member.status, member.room_id, len(trail(member))) == before


def test_the_page_and_the_api_refuse_with_the_same_words(make_user):
    member = fresh("pending")
    staff = login(make_user(roles=("volunteer",)))
    api = staff.post(f"/api/members/{member.pk}/check-in/", {}, content_type="application/json")
    page = staff.post(reverse("members:member_detail", args=[member.pk]), {"action": "check-in"})
    assert api.json()["identity_checked"][0] in page.content.decode().replace("&#x27;", "'")
