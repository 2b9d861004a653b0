"""The typed refusal every service raises: a message a volunteer can act on, and its field."""

from __future__ import annotations


class NetworkError(Exception):
    """A refused change; nothing was written. `field` names the form field it belongs to."""

    field: str | None = None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if field is not None:
            self.field = field

    def __str__(self) -> str:
        return str(self.message)
