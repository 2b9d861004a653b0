"""Import buildings and rooms from a CSV file (all or nothing; again changes nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.network.errors import NetworkError
from apps.network.roomimport import IMPORT_COLUMNS, import_summary, rooms_import


class Command(BaseCommand):
    help = f"Import buildings and rooms from CSV (columns: {', '.join(IMPORT_COLUMNS)})."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args: Any, path: Path, **options: Any) -> None:
        """Import the file; any refusal is one line on stderr naming the file's line, exit 1."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc} (nothing was imported)") from None
        try:
            counts = rooms_import(data=data, actor=None)
        except NetworkError as exc:
            message = " ".join(str(exc.message).split())  # one line, whatever the file held
            raise CommandError(f"{path}: {message} (nothing was imported)") from None
        self.stdout.write(import_summary(counts))
