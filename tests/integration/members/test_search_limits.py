"""Office-hours search at scale: short fragments, ranking, the result cap and its notice."""

import re

import pytest
from django.urls import reverse

from apps.members.selectors import SEARCH_LIMIT, member_search
from tests.factories import UserFactory, device_add, member_active

pytestmark = pytest.mark.django_db


@pytest.fixture
def volunteer():
    return UserFactory(roles=["volunteer"])


def _member(first: str, last: str):
    return member_active(user=UserFactory(first_name=first, last_name=last, roles=["member"]))


def test_two_letters_match_the_start_of_a_name_only(volunteer):
    kowalski = _member("Anna", "Kowalski")
    _member("Marko", "Silva")  # "ko" inside a name: not a match for two letters
    assert [m.pk for m in member_search(actor=volunteer, query="ko")] == [kowalski.pk]
    assert [m.pk for m in member_search(actor=volunteer, query="KO")] == [kowalski.pk]


def test_three_letters_match_anywhere_in_a_name(volunteer):
    kowalski = _member("Anna", "Kowalski")
    assert [m.pk for m in member_search(actor=volunteer, query="wal")] == [kowalski.pk]


def test_exact_and_prefix_matches_come_first(volunteer):
    inside = _member("Ola", "Abersen")  # "ersen" inside
    starts = _member("Ben", "Ersenius")
    exact = _member("Carl", "Ersen")
    found = [m.pk for m in member_search(actor=volunteer, query="ersen")]
    assert found == [exact.pk, starts.pk, inside.pk]


def test_last_names_starting_with_the_word_come_before_first_names(volunteer):
    first = _member("Rosa", "Adams")
    last = _member("Ben", "Rossi")
    inside = _member("Ambrose", "Ng")  # "ros" inside a first name
    found = [m.pk for m in member_search(actor=volunteer, query="ros")]
    assert found == [last.pk, first.pk, inside.pk]


def test_names_are_listed_ignoring_case(volunteer):
    vogel, van_dijk = _member("Ben", "Vogel"), _member("Ana", "van Dijk")
    zoe, anna = _member("Zoe", "Okafor"), _member("Anna", "Okafor")
    assert [m.pk for m in member_search(actor=volunteer, query="v")] == [van_dijk.pk, vogel.pk]
    assert [m.pk for m in member_search(actor=volunteer, query="okafor")] == [anna.pk, zoe.pk]


def test_an_address_typed_in_full_finds_its_member_only(volunteer):
    anna = member_active(user=UserFactory(email="anna@uni.example", roles=["member"]))
    hanna = member_active(user=UserFactory(email="hanna@uni.example", roles=["member"]))
    assert [m.pk for m in member_search(actor=volunteer, query="anna@uni.example")] == [anna.pk]
    inside = member_search(actor=volunteer, query="nna@uni.example")
    assert sorted(m.pk for m in inside) == sorted([anna.pk, hanna.pk])


def test_every_word_must_match(volunteer):
    anna = _member("Anna", "Larsen")
    _member("Anna", "Silva")
    _member("Jonas", "Larsen")
    assert [m.pk for m in member_search(actor=volunteer, query="anna lars")] == [anna.pk]


def test_logins_without_membership_are_not_results(volunteer):
    UserFactory(first_name="Staffer", last_name="Kowalczyk", roles=["support"])
    member = _member("Jan", "Kowalczyk")
    assert [m.pk for m in member_search(actor=volunteer, query="kowalczyk")] == [member.pk]


def test_results_are_capped_and_the_page_says_so(volunteer, client):
    for n in range(SEARCH_LIMIT + 2):
        _member(f"Person{n:02d}", "Yilmaz")
    assert len(member_search(actor=volunteer, query="yilmaz")) == SEARCH_LIMIT
    client.force_login(volunteer)
    page = client.get(reverse("members:office_hours"), {"q": "yilmaz"}).content.decode()
    assert len(re.findall(r'href="/office-hours/members/\d+/"', page)) == SEARCH_LIMIT
    assert f"Showing {SEARCH_LIMIT} of {SEARCH_LIMIT + 2} matches." in page
    assert 'data-testid="search-show-all"' in page
    assert f"Show all {SEARCH_LIMIT + 2}" in page


def test_a_cut_partial_address_search_says_how_many_matched_and_shows_all(volunteer, client):
    """Issue 25: "10.100.1" showed the first results without saying how many there were: the
    page says "Showing 25 of 38 matches" with a link that shows all 38 (en + de)."""
    from tests.factories import device_add

    members = [member_active() for _ in range(SEARCH_LIMIT + 13)]
    for member in members:
        device_add(member)
    for _ in range(3):  # one member's several devices are one match, not several
        device_add(members[0])
    client.force_login(volunteer)
    prefix = ".".join(str(members[0].devices.first().ipv4).split(".")[:2]) + "."
    page = client.get(reverse("members:office_hours"), {"q": prefix}).content.decode()
    assert f"Showing {SEARCH_LIMIT} of {SEARCH_LIMIT + 13} matches." in page
    link = re.search(r'href="([^"]+)" data-testid="search-show-all"', page).group(1)
    assert "all=1" in link
    everything = client.get(reverse("members:office_hours") + link.replace("&amp;", "&"))
    html = everything.content.decode()
    assert len(re.findall(r'href="/office-hours/members/\d+/"', html)) == SEARCH_LIMIT + 13
    assert f"All {SEARCH_LIMIT + 13} matches." in html
    german = client.get(
        reverse("members:office_hours"), {"q": prefix}, HTTP_ACCEPT_LANGUAGE="de"
    ).content.decode()
    assert f"{SEARCH_LIMIT} von {SEARCH_LIMIT + 13} Treffern" in german
    assert f"Alle {SEARCH_LIMIT + 13} anzeigen" in german


def test_no_cap_notice_when_everything_is_shown(volunteer, client):
    for n in range(SEARCH_LIMIT):
        _member(f"Person{n:02d}", "Yilmaz")
    client.force_login(volunteer)
    page = client.get(
        reverse("members:office_hours"), {"q": "yilmaz"}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert page.count('href="/office-hours/members/') == SEARCH_LIMIT
    assert "Showing the first" not in page


def test_search_takes_four_queries_at_most(volunteer, django_assert_max_num_queries):
    for n in range(5):
        _member(f"Person{n}", "Ivanova")
    # The actor's roles, the room lookup, the matching logins, devices whose name starts with
    # the word, devices whose name holds it, the members with what a row shows.
    with django_assert_max_num_queries(6):
        results = member_search(actor=volunteer, query="ivanova")
        rows = [
            (str(m), m.room.label, m.status, m.user.email, m.public_ipv4.address) for m in results
        ]
    assert len(rows) == 5


def test_device_names_two_letters_match_the_start_of_a_word_only(volunteer):
    tv = member_active()
    device_add(tv, mac="02:00:00:00:10:01", name="Living room TV")
    other = member_active()
    device_add(other, mac="02:00:00:00:10:02", name="Living room")  # "iv" inside a word
    assert [m.pk for m in member_search(actor=volunteer, query="tv")] == [tv.pk]
    assert [m.pk for m in member_search(actor=volunteer, query="iv")] == []
    assert {m.pk for m in member_search(actor=volunteer, query="ivi")} == {tv.pk, other.pk}


def test_names_starting_with_the_words_come_first_then_names_holding_them(volunteer):
    holds = member_active()
    device_add(holds, mac="02:00:00:00:20:01", name="Old phone")
    starts = member_active()
    device_add(starts, mac="02:00:00:00:20:02", name="phone 2")
    found = member_search(actor=volunteer, query="phone")
    assert [m.pk for m in found] == [starts.pk, holds.pk]
    assert found[0].search_match == "name of device phone 2"


def test_a_vendor_prefix_shared_by_many_lists_the_first_members_in_mac_order(volunteer):
    owners = []
    for n in range(SEARCH_LIMIT + 5):
        owner = member_active()
        # Created in reverse MAC order, so that the order found is the MAC's, not the rows'.
        device_add(owner, mac=f"02:00:5e:00:01:{SEARCH_LIMIT + 5 - n:02x}")
        owners.append(owner)
    device_add(member_active(), mac="02:00:5f:00:00:01")  # another vendor
    found = member_search(actor=volunteer, query="0200.5e")
    assert [m.pk for m in found] == [o.pk for o in reversed(owners)][:SEARCH_LIMIT]
    assert found[0].search_match.endswith("(02:00:5e:00:01:01)")
