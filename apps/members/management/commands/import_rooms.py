"""Import buildings and rooms from a CSV file (all or nothing; again changes nothing)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.members.admin import import_summary
from apps.members.services import IMPORT_COLUMNS, rooms_import
from apps.network.errors import NetworkError


class Command(BaseCommand):
    help = f"Import buildings and rooms from CSV (columns: {', '.join(IMPORT_COLUMNS)})."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args: Any, path: Path, **options: Any) -> None:
        try:
            with path.open(newline="", encoding="utf-8-sig") as handle:
                counts = rooms_import(rows=csv.DictReader(handle), actor=None)
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file") from None
        except NetworkError as exc:
            raise CommandError(f"{path}: {exc.message} (nothing was imported)") from None
        self.stdout.write(import_summary(counts))
