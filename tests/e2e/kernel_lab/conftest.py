"""The kernel lab: one boot of Debian's kernel for every kernel-lab test of the run.

The boot starts in a background thread as soon as collection shows a kernel-lab test, so the
rest of the suite runs meanwhile; the first kernel-lab test waits for it. The lab needs
qemu-system-x86_64 and the kernel package (fetched with `apt-get download` into
./var/kernel-lab, never installed; `make packages` installs qemu): without them the tests are
skipped with the reason, as they are when not root (apt-get download of a missing package).
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e.kernel_lab import vm

_BACKGROUND: vm.Background | None = None


def _unavailable() -> str:
    """Why the lab cannot run here, or ''."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is missing (make packages installs qemu-system-x86)"
    lab = vm.kernel_lab_module()
    if not lab.cached_debs() and os.geteuid() != 0:
        return "the kernel package is not cached and fetching it needs root"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _BACKGROUND
    here = os.path.dirname(__file__)
    if _BACKGROUND is not None or not any(str(i.path).startswith(here) for i in items):
        return
    if _unavailable():
        return
    from tests.e2e.kernel_lab.cases import SETUP, all_cases

    _BACKGROUND = vm.Background(all_cases(), SETUP)


@pytest.fixture(scope="session")
def kernel_lab() -> vm.Run:
    """Every case's result from the one boot (fails with the lab's own message if it broke)."""
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    assert _BACKGROUND is not None
    run = _BACKGROUND.result()
    if run.error:
        pytest.fail(f"kernel lab: {run.error}", pytrace=False)
    return run


@pytest.fixture
def case(kernel_lab: vm.Run):
    """`case(name)`: that case's result; its script must have exited 0."""

    def get(name: str) -> vm.Result:
        result = kernel_lab.results.get(name)
        if result is None:
            pytest.fail(
                f"kernel lab: case {name} did not run (VM status {kernel_lab.status});"
                f" output tail:\n{kernel_lab.output[-3000:]}",
                pytrace=False,
            )
        assert result.status == 0, f"case {name} exited {result.status}:\n{result.output[-4000:]}"
        return result

    return get
