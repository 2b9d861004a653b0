"""Traffic per member from the hosts' totals: differences stored once, resets and epochs,
attribution to members and devices, the pair's two hosts added up, roll-up and retention."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
from django.utils import timezone

from apps.firewall.models import FirewallHost, Site
from apps.traffic.models import Span, TrafficBucket, TrafficCounter
from apps.traffic.selectors import member_traffic, top_talkers
from apps.traffic.services import Row, traffic_reply_parse, traffic_rollup, traffic_store
from tests.factories import device_add, member_active

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 20, 14, 25, tzinfo=dt.UTC)


@pytest.fixture
def pair():
    site = Site.objects.create(name="pair")
    a = FirewallHost.objects.create(name="nat1", address="10.255.255.11", site=site)
    b = FirewallHost.objects.create(name="nat2", address="10.255.255.12", site=site)
    return site, a, b


def _net64(device) -> str:
    return str(ipaddress.IPv6Network(f"{device.ipv6}/64", strict=False).network_address)


def _member_totals(member) -> tuple[int, int]:
    rows = TrafficBucket.objects.filter(member=member)
    return sum(r.bytes_in for r in rows), sum(r.bytes_out for r in rows)


def test_a_reading_stores_the_difference_once_per_member_and_device(pair):
    site, nat1, _ = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    phone = device_add(ann, "phone")
    rows = [
        Row("acct4_in", str(laptop.ipv4), 10, 5000),
        Row("acct4_out", str(laptop.ipv4), 4, 700),
        Row("acct4_in", str(phone.ipv4), 3, 1200),
    ]
    first = traffic_store(host=nat1, epoch="e1", rows=rows, now=NOW)
    assert first.octets == 6900
    assert first.unattributed == 0
    # The same totals read again add nothing.
    again = traffic_store(host=nat1, epoch="e1", rows=rows, now=NOW + dt.timedelta(minutes=5))
    assert again.octets == 0
    assert again.changed == 0
    # Then the laptop downloads 3000 more.
    rows[0] = Row("acct4_in", str(laptop.ipv4), 13, 8000)
    traffic_store(host=nat1, epoch="e1", rows=rows, now=NOW + dt.timedelta(minutes=10))
    per_device = {
        b.device_id: (b.bytes_in, b.bytes_out, b.packets_in)
        for b in TrafficBucket.objects.filter(member=ann)
    }
    assert per_device == {laptop.id: (8000, 700, 13), phone.id: (1200, 0, 3)}
    bucket = TrafficBucket.objects.filter(member=ann).first()
    assert bucket.start == NOW.replace(minute=0)
    assert bucket.span == Span.HOUR
    assert bucket.site == site


def test_a_counter_that_starts_over_or_a_new_epoch_counts_the_new_total(pair):
    _, nat1, _ = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    key = str(laptop.ipv4)
    traffic_store(host=nat1, epoch="e1", rows=[Row("acct4_in", key, 10, 10_000)], now=NOW)
    # The element was removed and added again: its counter restarted below the last total.
    traffic_store(host=nat1, epoch="e1", rows=[Row("acct4_in", key, 2, 500)], now=NOW)
    assert _member_totals(ann) == (10_500, 0)
    # The host rebooted: a new epoch, totals from zero again, even if larger than before.
    traffic_store(host=nat1, epoch="e2", rows=[Row("acct4_in", key, 20, 20_000)], now=NOW)
    assert _member_totals(ann) == (30_500, 0)
    assert TrafficCounter.objects.get(host=nat1, key=key).epoch == "e2"


def test_ipv6_per_member_network_and_the_pair_adds_up_without_double_counting(pair):
    _, nat1, nat2 = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    net = _net64(laptop)
    # IPv4 crosses nat1, IPv6 crosses nat2 (each family's primary), then nat1 fails over.
    traffic_store(host=nat1, epoch="a", rows=[Row("acct4_in", str(laptop.ipv4), 1, 1000)], now=NOW)
    traffic_store(host=nat2, epoch="b", rows=[Row("acct6n_in", net, 1, 2000)], now=NOW)
    traffic_store(
        host=nat2, epoch="b",
        rows=[Row("acct6n_in", net, 2, 2500), Row("acct4_in", str(laptop.ipv4), 1, 400)], now=NOW,
    )  # fmt: skip
    # nat1's totals are still read (it is back, its old totals unchanged): nothing new.
    traffic_store(host=nat1, epoch="a", rows=[Row("acct4_in", str(laptop.ipv4), 1, 1000)], now=NOW)
    assert _member_totals(ann) == (1000 + 2500 + 400, 0)


def test_traffic_of_an_address_nobody_holds_is_counted_as_unattributed(pair):
    _, nat1, _ = pair
    outcome = traffic_store(host=nat1, epoch="e", rows=[Row("acct4_out", "10.100.9.9", 1, 64)])
    assert outcome.octets == 64
    assert outcome.unattributed == 64
    assert not TrafficBucket.objects.exists()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([], "not an object"),
        ({"sets": {}}, "epoch"),
        ({"epoch": "x;rm", "sets": {}}, "epoch"),
        ({"epoch": "ab"}, "sets"),
    ],
)
def test_an_unusable_answer_is_refused(answer, message):
    with pytest.raises(ValueError, match=message):
        traffic_reply_parse(answer)


def test_malformed_rows_are_skipped_and_counted():
    epoch, rows, skipped = traffic_reply_parse(
        {
            "epoch": "ab12",
            "sets": {
                "acct4_in": [["10.100.1.5", 3, 300], ["2001:db8::1", 1, 1], ["10.0.0.1", -1, 5]],
                "acct6n_out": [["2001:db8:100:1::", 2, 200], ["2001:db8:100:1::5", 1, 1]],
                "acct6_in": [["2001:db8:100:1::5", True, 1], ["nope", 1, 1]],
                "evil": [["10.0.0.1", 1, 1]],
            },
        }
    )
    assert epoch == "ab12"
    assert rows == [
        Row("acct4_in", "10.100.1.5", 3, 300),
        Row("acct6n_out", "2001:db8:100:1::", 2, 200),
    ]
    assert skipped == 6


def test_member_view_of_the_month_and_the_days(pair, settings):
    settings.TIME_ZONE = "Europe/Berlin"
    _, nat1, _ = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    key = str(laptop.ipv4)
    late_oct = dt.datetime(2026, 10, 31, 22, 30, tzinfo=dt.UTC)  # 23:30 in Berlin: October
    nov = dt.datetime(2026, 10, 31, 23, 30, tzinfo=dt.UTC)  # 00:30 on 1 November in Berlin
    traffic_store(host=nat1, epoch="e", rows=[Row("acct4_in", key, 1, 100)], now=late_oct)
    traffic_store(host=nat1, epoch="e", rows=[Row("acct4_in", key, 2, 350)], now=nov)
    traffic_store(
        host=nat1, epoch="e",
        rows=[Row("acct4_in", key, 2, 350), Row("acct4_out", key, 1, 90)], now=NOW,
    )  # fmt: skip
    with timezone.override("Europe/Berlin"):
        view = member_traffic(member=ann, days=30, now=NOW)
    assert view["month"] == {"bytes_in": 250, "bytes_out": 90}
    assert view["period"] == {"bytes_in": 350, "bytes_out": 90}
    with timezone.override("Europe/Berlin"):  # a week: the month began before it
        week = member_traffic(member=ann, days=7, now=NOW)
    assert week["month"] == {"bytes_in": 250, "bytes_out": 90}
    assert week["period"] == {"bytes_in": 0, "bytes_out": 90}
    by_day = {d.day: (d.bytes_in, d.bytes_out) for d in view["series"] if d.bytes_in or d.bytes_out}
    assert by_day == {
        dt.date(2026, 10, 31): (100, 0),
        dt.date(2026, 11, 1): (250, 0),
        dt.date(2026, 11, 20): (0, 90),
    }
    assert len(view["series"]) == 30
    assert view["series"][-1].day == dt.date(2026, 11, 20)


def test_top_talkers_of_an_hour_per_site_and_building(pair):
    site, nat1, _ = pair
    other = Site.objects.create(name="other")
    far = FirewallHost.objects.create(name="far", address="10.255.255.13", site=other)
    heavy, light, elsewhere = member_active(), member_active(), member_active()
    dh, dl, de = device_add(heavy), device_add(light), device_add(elsewhere)
    rows = [Row("acct4_in", str(dh.ipv4), 9, 9_000_000), Row("acct4_out", str(dl.ipv4), 1, 1000)]
    traffic_store(host=nat1, epoch="e", rows=rows, now=NOW)
    traffic_store(host=far, epoch="f", rows=[Row("acct4_in", str(de.ipv4), 1, 10**9)], now=NOW)
    top = top_talkers(hour=NOW, site=site)
    assert [r["member_id"] for r in top["rows"]] == [heavy.pk, light.pk]
    assert top["rows"][0]["bytes_in"] == 9_000_000
    assert top["members"] == 2
    everywhere = top_talkers(hour=NOW)
    assert everywhere["rows"][0]["member_id"] == elsewhere.pk
    by_building = top_talkers(hour=NOW, building=light.room.building)
    assert {r["member_id"] for r in by_building["rows"]} <= {
        m.pk for m in (heavy, light, elsewhere) if m.room.building == light.room.building
    }
    assert top_talkers(hour=NOW - dt.timedelta(hours=1))["rows"] == []


def test_rollup_to_local_days_and_retention(pair, settings):
    settings.PORTAL_TRAFFIC_HOURLY_DAYS = 7
    settings.PORTAL_TRAFFIC_KEEP_DAYS = 90
    _, nat1, _ = pair
    ann = member_active()
    key = str(device_add(ann).ipv4)
    old = NOW - dt.timedelta(days=10)
    for hours, total in ((0, 100), (1, 300), (2, 600)):
        traffic_store(
            host=nat1, epoch="e", rows=[Row("acct4_in", key, 1, total)],
            now=old.replace(hour=5) + dt.timedelta(hours=hours),
        )  # fmt: skip
    traffic_store(host=nat1, epoch="e", rows=[Row("acct4_in", key, 1, 1000)], now=NOW)
    ancient = TrafficBucket.objects.create(
        member=ann, site=nat1.site, start=NOW - dt.timedelta(days=120), span=Span.DAY, bytes_in=5
    )
    with timezone.override("Europe/Berlin"):
        outcome = traffic_rollup(now=NOW)
    assert outcome.rolled_up == 1
    assert outcome.deleted == 1
    assert not TrafficBucket.objects.filter(pk=ancient.pk).exists()
    day = TrafficBucket.objects.get(member=ann, span=Span.DAY)
    assert day.bytes_in == 600
    assert day.start == dt.datetime(2026, 11, 10, tzinfo=dt.UTC) - dt.timedelta(
        hours=1
    )  # CET midnight
    assert TrafficBucket.objects.get(member=ann, span=Span.HOUR).bytes_in == 400
    # The day's top talkers still answer for an hour of that day, as the whole day.
    with timezone.override("Europe/Berlin"):
        top = top_talkers(hour=old.replace(hour=6))
    assert top["span"] == Span.DAY
    assert top["rows"][0]["bytes_in"] == 600
    # Rolling up again changes nothing.
    with timezone.override("Europe/Berlin"):
        assert traffic_rollup(now=NOW).rolled_up == 0
    assert TrafficBucket.objects.get(member=ann, span=Span.DAY).bytes_in == 600


def test_monthly_summary_notice_once_in_the_first_days_of_a_month(pair):
    from apps.notifications.choices import NoticeKind
    from apps.notifications.models import Notice
    from apps.traffic.services import traffic_summaries_notify

    _, nat1, _ = pair
    ann, quiet = member_active(), member_active()
    key = str(device_add(ann).ipv4)
    device_add(quiet)
    october = dt.datetime(2026, 10, 15, 12, tzinfo=dt.UTC)
    traffic_store(host=nat1, epoch="e", rows=[Row("acct4_in", key, 9, 5_000_000)], now=october)
    traffic_store(
        host=nat1, epoch="e",
        rows=[Row("acct4_in", key, 9, 5_000_000), Row("acct4_out", key, 1, 700_000)],
        now=october + dt.timedelta(days=10),
    )  # fmt: skip
    traffic_store(host=nat1, epoch="e", rows=[Row("acct4_in", key, 10, 5_100_000)], now=NOW)
    with timezone.override("Europe/Berlin"):
        assert traffic_summaries_notify(now=NOW) == 0  # the 20th: not now
        first = dt.datetime(2026, 11, 1, 7, tzinfo=dt.UTC)
        assert traffic_summaries_notify(now=first) == 1
        traffic_summaries_notify(now=first + dt.timedelta(hours=1))  # told once
    notice = Notice.objects.get(kind=NoticeKind.TRAFFIC)
    assert notice.member == ann
    assert notice.params == {"month": "2026-10", "bytes_in": 5_000_000, "bytes_out": 700_000}
    assert notice.source == "traffic:2026-10"


def test_a_second_device_and_losing_it_again_move_the_networks_traffic_without_loss(pair):
    """A member's /64 is one key whatever its device count (the rule set keeps the element, so
    its counter runs on): with one device its traffic is that device's, with several the
    member's (device 0). Across both switches every byte is counted once."""
    from apps.network.services.devices import device_remove

    _, _, nat2 = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    net = _net64(laptop)
    at = [NOW + dt.timedelta(minutes=5 * i) for i in range(4)]
    traffic_store(host=nat2, epoch="b", rows=[Row("acct6n_in", net, 10, 1000)], now=at[0])
    phone = device_add(ann, "phone")
    assert _net64(phone) == net
    traffic_store(host=nat2, epoch="b", rows=[Row("acct6n_in", net, 30, 3000)], now=at[1])
    device_remove(device=laptop, actor=None)
    traffic_store(host=nat2, epoch="b", rows=[Row("acct6n_in", net, 60, 6000)], now=at[2])
    # The same totals once more (a second collection before new traffic): nothing added.
    traffic_store(host=nat2, epoch="b", rows=[Row("acct6n_in", net, 60, 6000)], now=at[3])
    per_device = {
        b.device_id: (b.bytes_in, b.packets_in) for b in TrafficBucket.objects.filter(member=ann)
    }
    assert per_device == {laptop.id: (1000, 10), 0: (2000, 20), phone.id: (3000, 30)}
    assert _member_totals(ann) == (6000, 0)
    assert member_traffic(member=ann, days=7, now=at[3])["period"] == {
        "bytes_in": 6000,
        "bytes_out": 0,
    }


def test_a_removed_devices_last_bytes_reach_its_member(pair):
    """Issue 26: what a device counted after the last reading reaches the host's next answer
    (the agent carries a deleted element's counter), but the device is gone by then. The key's
    counter remembers its last owner: the bytes go to the member and the device's own bucket;
    a key that never had an owner stays unattributed."""
    _site, nat1, _ = pair
    ann = member_active()
    laptop = device_add(ann, "laptop")
    laptop_id, key = laptop.id, str(laptop.ipv4)
    traffic_store(host=nat1, epoch="e1", rows=[Row("acct4_out", key, 2, 1000)], now=NOW)
    laptop.delete()
    later = NOW + dt.timedelta(minutes=5)
    rows = [Row("acct4_out", key, 7, 9000), Row("acct4_in", "10.100.250.9", 1, 400)]
    outcome = traffic_store(host=nat1, epoch="e1", rows=rows, now=later)
    assert (outcome.octets, outcome.unattributed) == (8400, 400)
    per_device = {b.device_id: b.bytes_out for b in TrafficBucket.objects.filter(member=ann)}
    assert per_device == {laptop_id: 9000}
    # A last owner who is no member any more (removed since): nobody left to give it to.
    TrafficCounter.objects.filter(key=key).update(last_member_id=ann.pk + 1000)
    rows = [Row("acct4_out", key, 9, 9500)]
    outcome = traffic_store(host=nat1, epoch="e1", rows=rows, now=later + dt.timedelta(minutes=5))
    assert (outcome.octets, outcome.unattributed) == (500, 500)
