"""Online sign-up: a resident registers themselves with their room and waits for check-in.

The membership is made by `member_register`, like at the desk; this adds the resident's own
password and a per-IP throttle kept in the cache (a public form without login is a spam target).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from apps.audit.services import audit_record
from apps.members.extensions import member_extensions
from apps.members.models import Member, Room
from apps.members.services import member_register

# Defaults, overridable in settings: attempts (POSTs) and accounts per client address and window.
SIGNUP_ATTEMPTS_PER_WINDOW = 20
SIGNUP_ACCOUNTS_PER_WINDOW = 5
SIGNUP_WINDOW_SECONDS = 3600


@transaction.atomic
def member_sign_up(
    *,
    first_name: str,
    last_name: str,
    email: str,
    room: Room,
    password: str,
    phone: str = "",
) -> Member:
    """A pending member made by the resident themselves, with the password they chose."""
    member = member_register(
        first_name=first_name,
        last_name=last_name,
        email=email,
        room=room,
        phone=phone,
        actor=None,
    )
    user = member.user
    user.set_password(password)
    user.save(update_fields=["password"])
    audit_record(actor=user, action="member.sign_up", obj=member, member=member)
    return member


def room_accepts_sign_up(*, room: Room) -> bool:
    """Whether a new member can live on the network in this room (network: its building has a
    private IPv4 subnet)."""
    return all(extension.room_usable(room=room) for extension in member_extensions())


def _limit(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def _keys(ip: str) -> tuple[str, str]:
    return f"signup:attempts:{ip}", f"signup:accounts:{ip}"


def _count(key: str) -> int:
    """Add one to a counter that starts its window at the first hit (fixed window)."""
    window = _limit("SIGNUP_WINDOW_SECONDS", SIGNUP_WINDOW_SECONDS)
    cache.add(key, 0, timeout=window)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window)
        return 1


def signup_throttled(*, ip: str) -> bool:
    """Count one sign-up attempt from `ip`; True when it has sent or made too many."""
    attempts_key, accounts_key = _keys(ip)
    attempts = _count(attempts_key)
    accounts: Any = cache.get(accounts_key, 0)
    return attempts > _limit("SIGNUP_ATTEMPTS_PER_WINDOW", SIGNUP_ATTEMPTS_PER_WINDOW) or int(
        accounts
    ) >= _limit("SIGNUP_ACCOUNTS_PER_WINDOW", SIGNUP_ACCOUNTS_PER_WINDOW)


def signup_succeeded(*, ip: str) -> None:
    """Count one account made from `ip`."""
    _count(_keys(ip)[1])


def signup_throttle_reset(*, ip: str) -> None:
    """Forget the counters of `ip` (tests, and an admin who lets a house sign up together)."""
    cache.delete_many(list(_keys(ip)))
