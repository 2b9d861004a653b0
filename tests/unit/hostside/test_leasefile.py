"""portal_fw.leasefile: a lease round across Kea's lease file cleanup, with the files as Kea 2.2
and kea-lfc leave them at each step (the real Kea: tests/integration/dhcp/test_lease_lfc.py).
No round here asks Kea."""

from __future__ import annotations

import os
import time
from pathlib import Path

from portal_fw import leasefile

HEADER = b"address,hwaddr,client_id,valid_lifetime,expire,subnet_id,fqdn_fwd,fqdn_rev,hostname,state,user_context\n"


def line(n: int, valid: int = 3600) -> bytes:
    return f"10.9.0.{n},02:00:00:00:00:{n:02x},,{valid},{5000 + n},1,0,0,,0,\n".encode()


def kea_never() -> list:
    raise AssertionError("the round asked Kea")


class Lfc:
    """Kea's rename (NAME -> NAME.1, a new NAME) and kea-lfc's merge (.2 + .1 -> .2, .1 gone)."""

    def __init__(self, tmp: Path) -> None:
        self.live = tmp / "leases4.csv"
        self.live.write_bytes(HEADER)

    def append(self, *lines: bytes) -> None:
        with self.live.open("ab") as f:
            f.write(b"".join(lines))

    def rotate(self) -> None:
        self.live.rename(self.live.with_name("leases4.csv.1"))
        self.live.write_bytes(HEADER)

    def merge(self) -> None:
        time.sleep(0.3)  # Kea starts an LFC at most every lfc-interval (whole seconds, >= 1)
        one, two = (self.live.with_name(f"leases4.csv.{n}") for n in (1, 2))
        completed = self.live.with_name("leases4.csv.completed")
        old = two.read_bytes()[len(HEADER) :] if two.exists() else b""
        completed.write_bytes(
            HEADER + old + one.read_bytes()[len(HEADER) :]
        )  # (not merged: the same leases)
        two.unlink(missing_ok=True)
        one.unlink()
        os.replace(completed, two)


def step(lfc: Lfc, since: list | None) -> dict:
    return leasefile.lease_round(lfc.live, tuple(since) if since else None, kea_never)


def test_the_old_files_rest_is_read_while_kea_lfc_runs_after_it_and_across_two_lfcs(tmp_path):
    lfc = Lfc(tmp_path)
    lfc.append(line(1), line(2))
    first = leasefile.lease_round(lfc.live, None, lambda: [["10.9.0.1"], ["10.9.0.2"]])
    assert (first["from"], len(first["leases"])) == ("kea", 2)
    lfc.append(line(3))
    lfc.rotate()  # kea-lfc still running: the old file is `.1`
    lfc.append(line(4))
    during = step(lfc, first["cursor"])
    assert (during["from"], during["full"]) == ("rotated", False)
    assert [r[0] for r in during["leases"]] == ["10.9.0.3", "10.9.0.4"]

    lfc.merge()
    lfc.append(line(5), line(1, valid=0))  # 10.9.0.1 deleted
    lfc.rotate()
    lfc.merge()
    lfc.append(line(6))
    # From the cursor before the last LFC (a round not stored): through the agent's link.
    after = step(lfc, during["cursor"])
    assert (after["from"], after["full"]) == ("rotated", False)
    assert [r[0] for r in after["leases"]] == ["10.9.0.5", "10.9.0.6"]
    assert after["gone"] == ["10.9.0.1"]

    lfc.append(line(7))  # a second LFC begins while kea-lfc merges the file in between
    lfc.rotate()
    lfc.append(line(8))
    between = step(lfc, after["cursor"])
    assert [r[0] for r in between["leases"]] == ["10.9.0.7", "10.9.0.8"]
    lfc.merge()

    lfc.append(line(9))  # two LFCs between rounds: the file in between is merged away
    lfc.rotate()
    lfc.merge()
    lfc.append(line(10))
    lfc.rotate()
    lfc.merge()
    lfc.append(line(11))
    every = step(lfc, between["cursor"])
    assert (every["from"], every["full"]) == ("files", True)  # what Kea loads at its start
    assert sorted(r[0] for r in every["leases"]) == sorted(
        f"10.9.0.{n}" for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    )
    assert every["gone"] == []
    nothing = step(lfc, every["cursor"])
    assert (nothing["from"], nothing["leases"]) == ("file", [])
    links = sorted(p.name for p in tmp_path.glob("leases4.csv.portal-*"))
    assert links == [f"leases4.csv.portal-{lfc.live.stat().st_ino}"]


def test_a_link_that_is_a_symbolic_link_or_names_other_bytes_is_not_read(tmp_path):
    lfc = Lfc(tmp_path)
    lfc.append(line(1))
    first = step(
        lfc,
        [lfc.live.stat().st_ino, len(HEADER), leasefile.check(lfc.live.open("rb"), len(HEADER))],
    )
    assert first["from"] == "file"
    lfc.append(line(2))
    lfc.rotate()
    lfc.merge()
    link = tmp_path / f"leases4.csv.portal-{first['cursor'][0]}"
    target = tmp_path / "elsewhere"
    os.replace(link, target)
    link.symlink_to(target)
    assert step(lfc, first["cursor"])["from"] == "files"  # not through the symbolic link
    os.replace(target, link)
    assert step(lfc, first["cursor"])["from"] == "rotated"
    with link.open("r+b") as f:  # other bytes before the cursor: not the cursor's file
        f.write(b"x")
    assert step(lfc, first["cursor"])["from"] == "files"
