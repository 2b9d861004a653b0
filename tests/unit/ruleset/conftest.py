"""Fixtures of the compiler's unit tests (no database, no Django)."""

from __future__ import annotations

import pytest

from tests.unit.ruleset.builders import make_snapshot
from workers.ruleset import snapshot as s


@pytest.fixture
def small_snapshot() -> s.Snapshot:
    """The snapshot behind the golden files."""
    return make_snapshot()
