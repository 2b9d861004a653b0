"""Office-hours search and resident dashboard, measured in a database seeded by seed_demo.

Run by tests/bench/run.py in a subprocess with DATABASE_URL set; prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.conf import settings
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from apps.members.models import Member
    from apps.members.selectors import member_search
    from apps.network.models import Device, NetworkSettings, PublicAddress
    from apps.network.services import device_add
    from tests.factories import UserFactory

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    actor = UserFactory(username="bench-volunteer", roles=["volunteer"])
    devices = list(Device.objects.select_related("member__room").order_by("?")[:200])
    publics = list(PublicAddress.objects.filter(member__isnull=False).order_by("?")[:200])
    members = list(
        Member.objects.select_related("user", "room").exclude(room=None).order_by("?")[:200]
    )
    import ipaddress

    def privacy(device: Device) -> str:
        net = ipaddress.IPv6Network(device.member.room.ipv6_prefix)
        return str(net.network_address + 0x1234_5678_9ABC)

    kinds = {
        "MAC aa:bb:cc:dd:ee:ff": [d.mac for d in devices],
        "MAC AABB.CCDD.EEFF": [
            d.mac.replace(":", "").upper()[0:4]
            + "."
            + d.mac.replace(":", "").upper()[4:8]
            + "."
            + d.mac.replace(":", "").upper()[8:]
            for d in devices
        ],
        "device IPv4": [d.ipv4 for d in devices],
        "member public IPv4": [p.address for p in publics],
        "device IPv6": [d.ipv6 for d in devices],
        "other IPv6 in a room's /64": [privacy(d) for d in devices],
        "room (A-101)": [m.room.label for m in members],
        "room typed as a101": [m.room.label.replace("-", "").lower() for m in members],
        "part of a MAC (last three bytes, dd:ee:ff)": [d.mac[-8:] for d in devices],
        "part of a MAC (six hex digits, ddeeff)": [d.mac.replace(":", "")[-6:] for d in devices],
        "start of a device IPv4 (three octets and a dot)": [
            d.ipv4.rsplit(".", 1)[0] + "." for d in devices
        ],
        "start of a public IPv4 (198.18.x)": [p.address.rsplit(".", 2)[0] for p in publics],
        "IPv6 prefix as typed (first four groups and a colon)": [
            ":".join(
                ipaddress.IPv6Network(d.member.room.ipv6_prefix).network_address.exploded.split(
                    ":"
                )[:4]
            )
            + ":"
            for d in devices
        ],
        "IPv6 /56 prefix": [
            str(ipaddress.IPv6Network(d.member.room.ipv6_prefix).supernet(new_prefix=56))
            for d in devices
        ],
        "part of a MAC, dotted (aabb.cc)": [
            d.mac.replace(":", "")[:4] + "." + d.mac.replace(":", "")[4:6] for d in devices
        ],
        "end of a device IPv6 (::last two groups)": [
            "::"
            + ":".join(
                g.lstrip("0") or "0" for g in ipaddress.ip_address(d.ipv6).exploded.split(":")[-2:]
            )
            for d in devices
            if d.ipv6
        ],
        "device name": [d.name for d in devices],
        "last name": [m.user.last_name for m in members],
        "first + last name": [f"{m.user.first_name} {m.user.last_name}" for m in members],
        "part of a name (4 letters)": [m.user.last_name[:4].lower() for m in members],
        "start of a last name (3 letters)": [m.user.last_name[:3].lower() for m in members],
        "start of a last name (2 letters)": [m.user.last_name[:2].lower() for m in members],
        "middle of a last name (3 letters)": [m.user.last_name[1:4].lower() for m in members],
        "e-mail address": [m.user.email for m in members],
        "no match": [f"zz{n}qx" for n in range(200)],
    }
    result: dict[str, object] = {"search": {}}
    for kind, queries in kinds.items():
        for query in queries[:20]:  # warm-up
            member_search(actor=actor, query=query)
        timings, empty = [], 0
        for query in queries:
            start = time.perf_counter()
            found = member_search(actor=actor, query=query)
            timings.append((time.perf_counter() - start) * 1000)
            empty += not found
        timings.sort()
        result["search"][kind] = {
            "p50": statistics.median(timings),
            "p95": timings[int(len(timings) * 0.95) - 1],
            "n": len(timings),
            "empty": empty,
        }

    # Dashboard queries with 1 and with 10 devices (limit raised inside a rolled-back transaction).
    counts = {}
    with transaction.atomic():
        NetworkSettings.objects.filter(pk=1).update(device_limit=20)
        member = Member.objects.filter(status="active", devices__isnull=True).first()
        if member is None:
            member = Member.objects.filter(status="active").first()
            Device.objects.filter(member=member).delete()
        client = Client()
        client.force_login(member.user)
        client.get("/me/")
        for n in range(1, 11):
            device_add(
                member=member, name=f"bench-{n}", mac=f"0a:be:00:00:00:{n:02x}", actor=member.user
            )
            if n in (1, 10):
                with CaptureQueriesContext(connection) as ctx:
                    response = client.get("/me/")
                assert response.status_code == 200
                counts[n] = len(ctx.captured_queries)
        transaction.set_rollback(True)
    result["dashboard_queries"] = counts
    UserFactory._meta.model.objects.filter(username="bench-volunteer").delete()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
