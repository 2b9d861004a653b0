"""manage.py abuse_lookup ADDRESS TIME --reason "...": the abuse desk's lookup, audited."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.abuse.api import LookupOutputSerializer
from apps.abuse.inputs import LookupInvalid
from apps.abuse.selectors import LookupAnswer
from apps.abuse.services import abuse_lookup


def _when(value: Any) -> str:
    return timezone.localtime(value).isoformat() if value else "-"


class Command(BaseCommand):
    help = (
        "Who held ADDRESS at TIME (ISO 8601; without an offset read in the portal's time zone): "
        "member, device(s), room and the evidence rows. Audited with --reason."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("address")
        parser.add_argument("time", help="e.g. '2026-11-17 03:12' or 2026-11-17T02:12:00Z")
        parser.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
        parser.add_argument("--user", help="the login to record as the one who asked")
        parser.add_argument("--json", action="store_true", help="the API's answer as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = None
        if options["user"]:
            actor = get_user_model().objects.filter(username=options["user"]).first()
            if actor is None:
                raise CommandError(f"user: there is no login {options['user']!r}")
        try:
            answer = abuse_lookup(
                actor=actor,
                address=options["address"],
                at=options["time"],
                reason=options["reason"],
            )
        except LookupInvalid as exc:
            lines = [f"{field}: {msg}" for field, msgs in exc.errors.items() for msg in msgs]
            raise CommandError("\n".join(lines)) from None
        if options["json"]:
            self.stdout.write(json.dumps(LookupOutputSerializer(answer).data, indent=2))
            return
        self._print(answer)

    def _print(self, answer: LookupAnswer) -> None:
        out = self.stdout.write
        out(f"{answer.verdict.upper()}: {answer.summary}")
        out(f"  time:   {_when(answer.at)} ({answer.time_zone})")
        out(f"  member: {answer.member_name or '-'}")
        out(f"  room:   {answer.room or '-'}")
        for device in answer.devices:
            gone = "" if device.exists else " (removed since)"
            out(
                f"  device: {device.name} {device.mac} {device.ipv4 or ''} {device.ipv6 or ''}{gone}"
            )
        for note in answer.notes:
            out(f"  note:   {note}")
        out("evidence:")
        for row in answer.evidence:
            out(
                f"  {row.kind} #{row.ref} [{row.role}] {row.what} | "
                f"{_when(row.start)} .. {_when(row.end) if row.end else 'open'} | {row.source}"
            )
        out(f"lookup #{answer.lookup.pk if answer.lookup else '-'} audited")
