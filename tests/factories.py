"""Factories for test data (factory_boy)."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    """A login; `roles=["volunteer"]` puts it into those role groups."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    first_name = factory.Faker("first_name")
    last_name = factory.Faker("last_name")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password(PASSWORD)

    @factory.post_generation
    def roles(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        if not create or not extracted:
            return
        # get_or_create: transactional tests flush the groups the migration created.
        self.groups.set([Group.objects.get_or_create(name=name)[0] for name in extracted])


# --- members and network --------------------------------------------------------------------

from django.utils import timezone  # noqa: E402

from apps.members.choices import MemberStatus  # noqa: E402
from apps.members.models import Building, Member, Room  # noqa: E402
from apps.network.models import Family, PublicPool, Subnet  # noqa: E402


class BuildingFactory(factory.django.DjangoModelFactory):
    """A building with a private /24 and an IPv6 /56 from the lab ranges (n = 1, 2, ...)."""

    class Meta:
        model = Building
        skip_postgeneration_save = True

    code = factory.Sequence(lambda n: f"B{n + 1}")
    name = factory.LazyAttribute(lambda b: f"House {b.code}")

    @factory.post_generation
    def subnets(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        if not create or extracted is False:
            return
        n = Building.objects.filter(pk__lte=self.pk).count() % 250 + 1
        ipv4, ipv6 = extracted or (f"10.100.{n}.0/24", f"2001:db8:100:{n:02x}00::/56")
        if ipv4:
            Subnet.objects.create(building=self, family=Family.IPV4, network=ipv4)
        if ipv6:
            Subnet.objects.create(building=self, family=Family.IPV6, network=ipv6)


class RoomFactory(factory.django.DjangoModelFactory):
    """A room; its /64 comes from the building's prefix as the service would assign it."""

    class Meta:
        model = Room

    building = factory.SubFactory(BuildingFactory)
    number = factory.Sequence(lambda n: f"{100 + n}")
    label = factory.LazyAttribute(lambda r: Room.make_label(r.building.code, r.number))

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Room:
        from django.db import transaction

        from apps.network.services import room_ipv6_prefix_next

        with transaction.atomic():
            kwargs.setdefault("ipv6_prefix", room_ipv6_prefix_next(building=kwargs["building"]))
            return super()._create(model_class, *args, **kwargs)


class MemberFactory(factory.django.DjangoModelFactory):
    """A member (status pending unless told); use member_active() for a checked-in one."""

    class Meta:
        model = Member

    user = factory.SubFactory(UserFactory, roles=["member"])
    room = factory.SubFactory(RoomFactory)
    status = MemberStatus.PENDING
    status_since = factory.LazyFunction(timezone.now)
    registered_at = factory.LazyFunction(timezone.now)


def pool_create(network: str = "198.51.100.0/24", name: str = "lab") -> PublicPool:
    """A public IPv4 pool."""
    return PublicPool.objects.create(name=name, network=network)


def member_active(**kwargs: Any) -> Member:
    """A member checked in through the service (needs a public pool)."""
    from apps.members.services import member_check_in

    if not PublicPool.objects.exists():
        pool_create()
    member = MemberFactory(**kwargs)
    return member_check_in(member=member, actor=None)


_mac_counter = iter(range(1, 1 << 24))


def next_mac() -> str:
    """A fresh locally administered unicast MAC."""
    n = next(_mac_counter)
    return f"02:00:00:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}"


def device_add(member: Member, name: str | None = None, mac: str | None = None) -> Any:
    """A device registered through the service."""
    from apps.network.services import device_add as add

    mac = mac or next_mac()
    return add(member=member, name=name or f"dev-{mac[-5:]}", mac=mac, actor=None)


# --- port forwards, openings, test access ------------------------------------------------------


def forward_add(
    member: Member,
    device: Any = None,
    ports: str = "8080",
    protocol: str = "tcp",
    target: str | None = None,
    **kwargs: Any,
) -> Any:
    """A port forward created through the service (a device is added when none is given)."""
    from apps.network.ports import PortRange
    from apps.network.services import port_forward_create

    device = device or device_add(member)
    return port_forward_create(
        member=member,
        device=device,
        protocol=protocol,
        public_ports=PortRange.parse(ports),
        target_ports=PortRange.parse(target) if target else None,
        actor=kwargs.pop("actor", None),
        **kwargs,
    )


def opening_add(device: Any, ports: str | None = "443", protocol: str = "tcp", **kw: Any) -> Any:
    """An IPv6 opening created through the service (`ports=None`: all ports, protocol both)."""
    from apps.network.ports import PortRange
    from apps.network.services import ipv6_opening_create

    return ipv6_opening_create(
        device=device,
        protocol=protocol if ports else "both",
        ports=PortRange.parse(ports) if ports else None,
        actor=kw.pop("actor", None),
        **kw,
    )


def member_on_test(days: int = 14, **kwargs: Any) -> Member:
    """A member with a test access until today + `days` (the default profile)."""
    import datetime as dt

    from apps.testaccess.services import member_test_access_grant

    if not PublicPool.objects.exists():
        pool_create()
    member = MemberFactory(**kwargs)
    return member_test_access_grant(
        member=member, until=timezone.localdate() + dt.timedelta(days=days), actor=None
    )


# What a host's helper read back right after it applied a bundle (any digest: tests of the
# live state only need the host to have read back something that still matches).
READ_BACK = {"total": "0" * 64, "parts": {"nft:chain forward": "0" * 64}}


# --- abuse lookup ---------------------------------------------------------------------------------

from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # noqa: E402

from apps.abuse.models import AddressHolding  # noqa: E402


def member_registered(room: Any = None, first_name: str = "Ann", last_name: str = "Lee") -> Member:
    """A member registered through the service (so with a room stay from now on), pending."""
    from apps.members.services import member_register

    n = next(_mac_counter)
    return member_register(
        first_name=first_name,
        last_name=last_name,
        email=f"{first_name.lower()}.{n}@example.org",
        room=room or RoomFactory(),
        actor=None,
    )


class AddressHoldingFactory(factory.django.DjangoModelFactory):
    """A row of the address-holder history written directly (constraint tests)."""

    class Meta:
        model = AddressHolding

    address = "198.51.100.77"
    kind = "public_ipv4"
    member_name = "Someone"
    period = factory.LazyFunction(lambda: DateTimeTZRange(timezone.now(), None))


def confirm_everywhere(after: Any, *, confirmed_after: float = 2) -> None:
    """Every host applied a version whose snapshot was taken a second after `after` and
    confirmed it `confirmed_after` seconds after `after` (the live state's "since")."""
    from datetime import timedelta

    from apps.firewall.models import FirewallHost, PushLogEntry
    from apps.firewall.versions import ruleset_version_store

    for host in FirewallHost.objects.all():
        version = ruleset_version_store(
            host=host,
            nft_text=f"{host.name} {after} {confirmed_after}",
            tc_text="",
            content_hash="a" * 64,
            counts={},
            compile_seconds=0,
            cause="t",
            snapshot_at=after + timedelta(seconds=min(1, confirmed_after)),
        )
        host.mark_applied(version, digest=READ_BACK)
        PushLogEntry.objects.create(
            host=host,
            version=version,
            step="confirm",
            ok=True,
            at=after + timedelta(seconds=confirmed_after),
        )
