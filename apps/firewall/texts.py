"""The texts writer: a rollout's new versions get their texts (16 MB per host at 20,000
members) written beside the pushes, off the path from a change to the hosts."""

from __future__ import annotations

import threading

from apps.firewall.models import RuleSetVersion
from apps.firewall.versions import version_texts_write


class TextsWriter:
    """Writes the texts of a rollout's new versions beside its pushes: in a thread with its
    own database connection (the row is committed already), or at once inside a transaction
    (where another connection would not see the row)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.failed: list[str] = []
        self.started: set[int] = set()

    def start(self, version: RuleSetVersion) -> None:
        from django.db import connection

        if not getattr(version, "texts_unwritten", False) or version.pk in self.started:
            return
        self.started.add(version.pk)
        if connection.in_atomic_block:
            version_texts_write(version)
            return

        def work() -> None:
            try:
                version_texts_write(version)
            except Exception as exc:  # the row stays pending: it is never pushed
                self.failed.append(f"#{version.pk}: {exc}")
            finally:
                connection.close()

        thread = threading.Thread(target=work, name="version-texts", daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=120)
        self.threads = []
