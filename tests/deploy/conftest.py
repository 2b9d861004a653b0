"""Fixtures of the deploy tests."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def scratch():
    """A prefix (a pretend /srv and /etc) that nginx's unprivileged workers can enter: pytest's
    tmp_path is 0700 to root, and a root nginx master runs its workers as www-data."""
    path = Path(tempfile.mkdtemp(prefix="portal-deploy-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
