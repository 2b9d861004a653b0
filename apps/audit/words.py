"""How the apps above audit word what their entries hold, without audit importing them.

audit is on the ground floor: every app records into it, and its sentences (sentences.py) word
any entry. Where a recorded value only reads well in its owner's words, the owner registers
them here from its AppConfig.ready() (the same way up as apps/members/extensions.py):

- `profile_label_register`: network names a shaping profile ("Testzugang" for "Test access").
- `detail_words_register(action, ...)`: tickets words the detail of a `ticket.update`, one
  sentence per changed field.

Unregistered, a value reads as it was recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from django.utils.safestring import SafeString

ProfileLabel = Callable[[str], str]  # a recorded profile name -> its label
DetailWords = Callable[..., list[SafeString]]  # (detail, *, actor) -> one sentence per change

_profile_label: list[ProfileLabel] = []
_detail_words: dict[str, DetailWords] = {}


def profile_label_register(label: ProfileLabel) -> None:
    """How a recorded shaping profile name reads (network; once)."""
    _profile_label[:] = [label]


def detail_words_register(action: str, words: DetailWords) -> None:
    """How the `detail` of an entry of `action` reads (tickets: "ticket.update")."""
    _detail_words[action] = words


def profile_label(name: str) -> str | None:
    """The registered label of a profile name, or None (none registered)."""
    return _profile_label[0](name) if _profile_label else None


def detail_words(action: str) -> DetailWords | None:
    """The registered wording of an action's detail, or None."""
    return _detail_words.get(action)
