"""Intermediate representation: tables, sets/maps, chains and HTB shapers, in canonical order.

The IR sits between the typed snapshot and the text. Rules and set elements are already in nft
syntax (built only from typed values by `build`), so rendering is a join and diffing is a set
comparison. `structure()` is everything except set elements and shaper classes: when two
rule sets have equal structure, `diff` can express the change as element and class updates.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.ruleset.values import ShapingRoot

ELEMENT_SEP = " : "  # separates key and value of a map element; never inside a key


@dataclass(frozen=True, slots=True)
class SetDef:
    """A named set (value_type None) or map; elements are rendered nft elements, canonical order."""

    name: str
    key_type: str
    value_type: str | None = None
    flags: tuple[str, ...] = ()
    elements: tuple[str, ...] = ()
    size: int | None = None  # declared capacity of a hash set (see build.capacity)
    extra: tuple[str, ...] = ()  # more declaration lines, e.g. "timeout 1h", "counter"

    @property
    def kind(self) -> str:
        """'set' or 'map', as nft spells it."""
        return "set" if self.value_type is None else "map"

    def structure(
        self,
    ) -> tuple[str, str, str | None, tuple[str, ...], int | None, tuple[str, ...]]:
        """Definition without elements."""
        return (self.name, self.key_type, self.value_type, self.flags, self.size, self.extra)


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain; base chains carry type, hook, priority and policy."""

    name: str
    rules: tuple[str, ...]
    type: str | None = None
    hook: str | None = None
    priority: str | None = None
    policy: str | None = None


@dataclass(frozen=True, slots=True)
class Flowtable:
    """A software flowtable (the fast path): its ingress hook priority and devices, counted."""

    name: str
    priority: str
    devices: tuple[str, ...]
    counter: bool = True


@dataclass(frozen=True, slots=True)
class Table:
    """One table the portal owns and replaces as a whole."""

    family: str
    name: str
    sets: tuple[SetDef, ...]
    chains: tuple[Chain, ...]
    flowtables: tuple[Flowtable, ...] = ()

    def structure(self) -> tuple[object, ...]:
        """Definition without set elements."""
        head = (self.family, self.name, tuple(s.structure() for s in self.sets), self.chains)
        return (*head, self.flowtables) if self.flowtables else head


@dataclass(frozen=True, slots=True, order=True)
class HtbClass:
    """One leaf class: classid major:minor (ints), rate and ceil in kbit/s."""

    major: int
    minor: int
    rate_kbit: int
    ceil_kbit: int

    @property
    def classid(self) -> str:
        """tc spelling, hexadecimal as tc and nft print it."""
        return f"{self.major:x}:{self.minor:x}"


@dataclass(frozen=True, slots=True)
class Shaper:
    """The qdisc tree of one interface: root layout and its leaf classes (sorted)."""

    dev: str
    root: ShapingRoot
    queues: int
    link_kbit: int
    classes: tuple[HtbClass, ...]

    def structure(self) -> tuple[object, ...]:
        """Definition without member classes."""
        return (self.dev, self.root, self.queues, self.link_kbit)


@dataclass(frozen=True, slots=True)
class Ruleset:
    """The whole compiled state of one host."""

    host: str
    tables: tuple[Table, ...]
    shapers: tuple[Shaper, ...]

    def structure(self) -> tuple[object, ...]:
        """Everything but set elements and member classes."""
        return (
            tuple(t.structure() for t in self.tables),
            tuple(s.structure() for s in self.shapers),
        )
