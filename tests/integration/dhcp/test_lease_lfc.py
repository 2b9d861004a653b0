"""Lease rounds across Kea's lease file cleanup (issue 26): a real kea-dhcp4 runs its LFC (the
lease file renamed to `.1`, a new one started, kea-lfc merging `.2` and `.1` into `.2` and
removing `.1` within milliseconds). The round after one LFC reads the old file's rest (through
the agent's hard link) and the new file; after two, the files Kea loads when it starts; neither
asks Kea for every lease (the answer's `from`), and after every round the history is the one a
full reading of Kea (lease4-get-all) leaves."""

from __future__ import annotations

import json
import os
import random

from django.utils import timezone

from apps.dhcp.models import LeaseCursor
from apps.dhcp.services import cursor_args, lease_round_store
from portal_fw import kea
from tests.integration.dhcp.test_lease_rounds import (
    agent_host,
    history,
    hosts,
    one_shot,
    pytestmark,
    server,
    words_as_args,
)

__all__ = ["pytestmark", "server"]


def test_rounds_across_one_and_two_lfcs_read_the_files_and_never_ask_kea(server, tmp_path):
    rng = random.Random(2026)  # noqa: S311 (reproducible changes)
    rounds, full = hosts()
    held: dict[str, str] = {}
    agent = agent_host(tmp_path, server.conf)
    sources = []

    def one_round(*, store: bool = True, fresh_agent: bool = False) -> dict:
        now = timezone.now()
        if fresh_agent:  # one agent process per round (an agent restart)
            answer = one_shot(tmp_path, server.conf, cursor_args(rounds))
        else:
            answer = kea.dhcp_leases(agent, words_as_args(cursor_args(rounds)))
        answer = json.loads(json.dumps(answer))
        sources.append(answer["from"])
        if not store:
            return answer
        lease_round_store(host=rounds, data=answer, now=now)
        every = {"full": True, "leases": kea.leases(str(server.sock)), "cursor": None}
        lease_round_store(host=full, data=every, now=now)
        assert history("rounds") == history("full")
        return answer

    def changes(count: int) -> None:
        for _ in range(count):
            server.change(rng, held)

    changes(15)
    assert one_round()["from"] == "kea"  # no cursor yet: the one reading of every lease
    for lfc in range(3):  # changes on both sides of each LFC
        changes(rng.randrange(3, 12))
        assert one_round()["from"] == "file"
        changes(rng.randrange(3, 12))
        before = LeaseCursor.objects.get(host=rounds).inode
        assert server.wait_for_lfc() == 1
        changes(rng.randrange(0, 8))
        answer = one_round(fresh_agent=lfc == 1)
        assert (answer["full"], answer["from"]) == (False, "rotated"), answer["from"]
        cursor = LeaseCursor.objects.get(host=rounds)
        assert before != cursor.inode == server.leases.stat().st_ino  # the new file's end
        assert len(answer["leases"]) + len(answer["gone"]) < len(held)  # not every lease

    changes(6)  # an LFC, then a round the portal did not store, then the one it stores
    assert server.wait_for_lfc() == 1
    changes(4)
    lost = one_round(store=False)
    assert lost["from"] == "rotated"
    changes(4)
    again = one_round()
    assert (again["from"], again["full"]) == ("rotated", False)  # from the stored cursor
    assert {r[0] for r in lost["leases"]} <= {r[0] for r in again["leases"]} | set(again["gone"])
    changes(5)
    assert one_round()["from"] == "file"

    changes(6)  # two LFCs between rounds: the first one's new file is merged away
    assert server.wait_for_lfc() == 1
    changes(6)  # only in that file, and in `.2` after the second LFC
    assert server.wait_for_lfc() == 1
    changes(5)
    answer = one_round()
    assert (answer["full"], answer["from"]) == (True, "files")
    changes(5)
    assert one_round(fresh_agent=True)["from"] == "file"

    assert sources.count("kea") == 1, sources  # only the very first round asked Kea
    # The agent keeps a link to the file it read last and to the cursor's: no more.
    links = sorted(p.name for p in server.leases.parent.glob("leases4.csv.portal-*"))
    assert links == [f"leases4.csv.portal-{server.leases.stat().st_ino}"]


def test_a_reload_while_kea_lfc_runs_is_tried_again_not_refused(server):
    """Kea 2.2 refuses config-reload while kea-lfc runs (it cannot load its lease files): that is
    no refusal of the file, so `kea-ctl reload` exits 3 (the Kea path tries again in 2 s and
    keeps the file) instead of 1 (it would put the previous file back: drift, and a warning
    that Kea refused the configuration). kea-lfc running, as Kea checks it: its pid file names
    a live process."""
    running = server.leases.with_name("leases4.csv.pid")
    running.write_text(f"{os.getpid()}\n")
    try:
        assert kea.main(["reload", str(server.conf)]) == 3
    finally:
        running.unlink()
    assert kea.main(["reload", str(server.conf)]) == 0
