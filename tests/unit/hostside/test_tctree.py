"""portal_fw.tctree: how a full tc load is read and planned (the kernel side: e2e/lab/test_tc_keep)."""

from __future__ import annotations

from portal_fw import tctree
from portal_fw.tctree import ROOT, Qdisc, Running
from workers.ruleset.ir import HtbClass, Shaper
from workers.ruleset.render import class_line, shaper_roots
from workers.ruleset.values import ShapingRoot

MEMBERS = (HtbClass(0x100, 0x10, 2000, 4000), HtbClass(0x101, 0x11, 10000, 20000))


def mq_text(classes=MEMBERS, dev: str = "dorm0") -> str:
    sh = Shaper(dev, ShapingRoot.MQ, 2, 1_000_000, classes)
    return "".join(shaper_roots(sh)) + "".join(class_line("replace", dev, c) for c in classes)


def running_mq(classes: dict, filters: dict | None = None, leaves=()) -> Running:
    qdiscs = [
        Qdisc(ROOT, (1, 0), "mq"),
        Qdisc((1, 1), (0x100, 0), "htb", 2),
        Qdisc((1, 2), (0x101, 0), "htb", 2),
        *leaves,
    ]
    return Running(qdiscs, classes, filters or {})


def test_the_compilers_tree_is_read_as_its_layout_and_classes():
    trees = tctree.parse(mq_text())
    tree = trees["dorm0"]
    assert tree.modelled
    assert tctree.layout_of(tree) == {
        (ROOT, (1, 0), "mq", 0),
        ((1, 1), (0x100, 0), "htb", 2),
        ((1, 2), (0x101, 0), "htb", 2),
    }
    assert set(tree.classes) == {(0x100, 2), (0x101, 2), (0x100, 0x10), (0x101, 0x11)}


def test_increments_after_the_tree_are_read_in_order():
    text = mq_text() + (
        "class del dev dorm0 classid 100:10\n"
        "class change dev dorm0 parent 101: classid 101:11 htb rate 3mbit\n"
        "class add dev dorm0 parent 100: classid 100:12 htb rate 1mbit\n"
    )
    tree = tctree.parse(text)["dorm0"]
    assert set(tree.classes) == {(0x100, 2), (0x101, 2), (0x101, 0x11), (0x100, 0x12)}
    assert tree.classes[(0x101, 0x11)][1].startswith("class replace dev dorm0 parent 101: ")


def test_a_root_pfifo_or_a_deleted_root_starts_the_device_anew():
    text = mq_text() + "qdisc del dev dorm0 root\n"
    assert tctree.parse(text)["dorm0"].classes == {}
    text = mq_text() + mq_text(classes=MEMBERS[:1])  # the second tree passes through pfifo
    assert (0x101, 0x11) not in tctree.parse(text)["dorm0"].classes


def test_filters_and_leaf_qdiscs_in_the_text_are_built_not_planned():
    text = mq_text() + "filter add dev dorm0 parent 100: u32 match ip dst 10.0.0.1 flowid 100:10\n"
    assert not tctree.parse(text)["dorm0"].modelled
    text = mq_text() + "qdisc add dev dorm0 parent 100:10 handle 20: pfifo\n"
    tree = tctree.parse(text)["dorm0"]
    assert not tree.modelled
    lines = tctree.build_lines("dorm0", tree)
    assert lines[0] == "qdisc replace dev dorm0 root pfifo limit 1000\n"
    assert lines[-1] == "qdisc add dev dorm0 parent 100:10 handle 20: pfifo\n"


def test_a_kept_tree_drops_filters_leaf_qdiscs_and_gone_classes_and_replaces_the_rest():
    tree = tctree.parse(mq_text())["dorm0"]
    running = running_mq(
        {
            (0x100, 2): ROOT,
            (0x101, 2): ROOT,
            (0x100, 0x10): ROOT,
            (0x100, 0x30): ROOT,  # gone, with a child that goes first
            (0x100, 0x31): (0x100, 0x30),
            (0x101, 0x11): (0x101, 0x2),  # its parent changed: made again
        },
        filters={(0x100, 0): {0}},
        leaves=[Qdisc((0x100, 0x10), (0x20, 0), "pfifo"), Qdisc((0x100, 0x30), (0x21, 0), "pfifo")],
    )
    assert tctree.running_layout(running)[0] == tctree.layout_of(tree)
    before, after = tctree.keep_lines("dorm0", tree, running)
    lines = before + after
    assert lines[:5] == [
        "filter del dev dorm0 parent 100:\n",
        "qdisc del dev dorm0 parent 100:10\n",  # the class stays; 100:30's leaf goes with it
        "class del dev dorm0 classid 100:31\n",  # children first
        "class del dev dorm0 classid 101:11\n",
        "class del dev dorm0 classid 100:30\n",
    ]
    replaced = [line for line in lines if line.startswith("class replace")]
    assert len(replaced) == 4  # every class of the tree, changed or not
    assert not [line for line in lines if "pfifo" in line or "mq" in line]


def test_another_layout_is_not_kept():
    tree = tctree.parse(mq_text())["dorm0"]
    htb_root = Running([Qdisc(ROOT, (1, 0), "htb", 2)], {}, {})
    assert tctree.running_layout(htb_root)[0] != tctree.layout_of(tree)
    other_default = running_mq({})
    other_default.qdiscs[1] = Qdisc((1, 1), (0x100, 0), "htb", 3)
    assert tctree.running_layout(other_default)[0] != tctree.layout_of(tree)


def test_a_layout_qdisc_with_an_option_the_comparison_does_not_read_is_built():
    text = mq_text().replace("htb default 2\n", "htb default 2 r2q 5\n", 1)
    assert not tctree.parse(text)["dorm0"].modelled


def test_a_kept_tree_removes_gone_classes_after_the_rule_set_and_makes_new_ones_before():
    """Issue 26: the classes the new rule set names are made before it loads (phase one), the
    classes it no longer names removed after (phase two), children first."""
    tree = tctree.parse(mq_text())["dorm0"]
    running = running_mq(
        {
            (0x100, 2): ROOT,
            (0x101, 2): ROOT,
            (0x100, 0x30): ROOT,  # gone, with a child
            (0x100, 0x31): (0x100, 0x30),
        }
    )
    before, after = tctree.keep_lines("dorm0", tree, running)
    assert after == [
        "class del dev dorm0 classid 100:31\n",
        "class del dev dorm0 classid 100:30\n",
    ]
    assert not [line for line in before if " del " in line]
    assert len([line for line in before if line.startswith("class replace")]) == 4


def test_an_increments_deletes_run_after_the_rule_set_unless_a_later_line_needs_them():
    from portal_fw.tc import split_increment

    text = (
        "class add dev dorm0 parent 1: classid 1:14 htb rate 1mbit\n"
        "class del dev dorm0 classid 1:12\n"
        "class del dev dorm0 classid 1:16\n"  # made again under another parent: stays first
        "class add dev dorm0 parent 1:2 classid 1:16 htb rate 1mbit\n"
        "class del dev inet0 classid 1:30\n"
    )
    before, after = split_increment(text)
    assert before == (
        "class add dev dorm0 parent 1: classid 1:14 htb rate 1mbit\n"
        "class del dev dorm0 classid 1:16\n"
        "class add dev dorm0 parent 1:2 classid 1:16 htb rate 1mbit\n"
    )
    assert after == "class del dev dorm0 classid 1:12\nclass del dev inet0 classid 1:30\n"


def _classids(lines: list[str]) -> list[str]:
    return [line.split(" classid ")[1].split()[0] for line in lines if line.startswith("class ")]


def test_a_tree_makes_its_classes_grouped_by_htb_the_last_queue_first():
    # The kernel drops an mq tree queue by queue and looks each class's block up from the
    # newest: the classes of the first queue's HTB are made last (a 50,000-class teardown).
    interleaved = (
        HtbClass(0x100, 0x10, 2000, 4000),
        HtbClass(0x101, 0x11, 2000, 4000),
        HtbClass(0x100, 0x12, 2000, 4000),
        HtbClass(0x101, 0x13, 2000, 4000),
    )
    tree = tctree.parse(mq_text(classes=interleaved))["dorm0"]
    built = tctree.build_lines("dorm0", tree)
    assert _classids(built) == ["101:2", "101:11", "101:13", "100:2", "100:10", "100:12"]
    running = running_mq({(0x100, 2): ROOT, (0x101, 2): ROOT, (0x100, 0x10): ROOT})
    assert _classids(tctree.keep_lines("dorm0", tree, running)[0]) == _classids(built)


def test_a_plan_drops_the_devices_it_builds_before_building_the_last_one_first():
    build = {
        dev: tctree.build_lines(dev, tctree.parse(mq_text(dev=dev))[dev])
        for dev in ("dorm0", "inet0")
    }
    keep = ["class replace dev wan0 parent 1: classid 1:10 htb rate 1mbit\n"]
    text = tctree.assemble(
        [("dorm0", build["dorm0"]), ("inet0", build["inet0"]), ("wan0", keep)],
        ["dorm0", "inet0"],
    )
    lines = text.splitlines(keepends=True)
    assert lines[:2] == [
        "qdisc replace dev inet0 root pfifo limit 1000\n",
        "qdisc replace dev dorm0 root pfifo limit 1000\n",
    ]
    assert lines[2:] == build["dorm0"][1:] + build["inet0"][1:] + keep
