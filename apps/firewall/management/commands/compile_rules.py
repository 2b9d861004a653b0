"""Write the rule set compiled from the current database (or the increment since a version)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.firewall.models import FirewallHost, RuleSetVersion
from apps.firewall.snapshot import firewall_snapshot_build
from workers.ruleset import SnapshotError, compile_bundle
from workers.ruleset.bundle import increment_from_stored


class Command(BaseCommand):
    help = (
        "Compile the database into the nft transaction for one firewall host (stdout unless "
        "--out); with --since VERSION, the incremental transaction from that stored version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", help="firewall host name (default: the first enabled one)")
        parser.add_argument("--out", help="write the nft text to this file")
        parser.add_argument("--tc", help="also write the tc batch (HTB set-up) to this file")
        parser.add_argument("--since", type=int, metavar="VERSION", help="a stored version number")
        parser.add_argument(
            "--hash",
            action="store_true",
            help="print '<host> <bundle version hash>' for each enabled host (or --host) and stop: "
            "after a restore, the restored database compiles the same bundles",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["hash"]:
            self._hashes(options["host"])
            return
        host = self._host(options["host"])
        try:
            snapshot = firewall_snapshot_build(host=host)
        except SnapshotError as exc:
            raise CommandError(f"the database cannot be compiled: {exc}") from None
        bundle = compile_bundle(snapshot)
        compiled = bundle.compiled
        text = compiled.nft
        if options["since"] is not None:
            text = self._increment(host, options["since"], compiled)
        if options["out"]:
            Path(options["out"]).write_text(text)
            self.stderr.write(
                f"compile_rules: {host.name}: {len(text.encode()):,} bytes to {options['out']} "
                f"(bundle {bundle.content_hash[:16]})"
            )
        else:
            self.stdout.write(text, ending="")
        if options["tc"]:
            Path(options["tc"]).write_text(compiled.tc)

    def _hashes(self, name: str | None) -> None:
        hosts = [self._host(name)] if name else list(FirewallHost.objects.filter(enabled=True))
        for host in sorted(hosts, key=lambda h: h.name):
            try:
                snapshot = firewall_snapshot_build(host=host)
            except SnapshotError as exc:
                raise CommandError(f"{host.name}: the database cannot be compiled: {exc}") from None
            self.stdout.write(f"{host.name} {compile_bundle(snapshot).content_hash}")

    def _host(self, name: str | None) -> FirewallHost:
        hosts = FirewallHost.objects.filter(enabled=True)
        if name:
            found = FirewallHost.objects.filter(name=name).first()
            if found is None:
                known = ", ".join(FirewallHost.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no firewall host {name!r} (known: {known})")
            return found
        first = hosts.first()
        if first is None:
            self.stderr.write("compile_rules: no firewall host registered; using the defaults")
            return FirewallHost(name="default", address="127.0.0.1")
        return first

    def _increment(self, host: FirewallHost, number: int, compiled: Any) -> str:
        previous = RuleSetVersion.objects.filter(pk=number, host__name=host.name).first()
        if previous is None:
            raise CommandError(f"version {number} is not a stored version of {host.name}")
        text = previous.snapshot_text()
        if text is None:
            raise CommandError(
                f"version {number} no longer keeps its snapshot (only the newest few do); "
                "apply the full rule set"
            )
        step = increment_from_stored(text, previous.content_hash, compiled)
        if step is None:
            raise CommandError(
                f"the structure changed since version {number} (or the compiler did): "
                "apply the full rule set"
            )
        return step.nft
