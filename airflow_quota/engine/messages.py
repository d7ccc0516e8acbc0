"""How configuration errors are worded: paths inside a file, values as the user wrote them, unknown keys.

Shared by the quota file, job request and simulator scenario validators so every error reads the same.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def format_loc(loc: tuple[int | str, ...]) -> str:
    """A pydantic location as a path inside the file: ``jobQueues[0].quotaShares[2].state``."""
    path = ""
    for step in loc:
        path += f"[{step}]" if isinstance(step, int) else (f".{step}" if path else step)
    return path


def join_path(prefix: str, path: str) -> str:
    if not prefix:
        return path
    if not path or path.startswith("["):
        return f"{prefix}{path}"
    return f"{prefix}.{path}"


#: Longer strings and numbers are shortened in messages (one line, whatever the file holds).
SHOWN_CHARACTERS = 40
SHOWN_DIGITS = 30


def show_value(value: object) -> str:
    """A value the way the user wrote it in YAML, for messages: control characters escaped, long ones cut."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null (empty)"
    if isinstance(value, str):
        return _show_string(value) if value else "an empty string"
    if isinstance(value, int) and abs(value) >= 10**SHOWN_DIGITS:  # str() of over 4,300 digits raises
        return f"a number of more than {SHOWN_DIGITS} digits"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, TooManyDigits):
        return f"a number of {value.digits} digits"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def _show_string(value: str) -> str:
    shown = value if len(value) <= SHOWN_CHARACTERS else value[:SHOWN_CHARACTERS] + "..."
    if not shown.isprintable():
        shown = "".join(char if char.isprintable() else repr(char)[1:-1] for char in shown)
    length = f" ({len(value)} characters)" if len(value) > SHOWN_CHARACTERS else ""
    return f"'{shown}'{length}"


#: The most digits a whole number typed or rendered as text is read with (``plain_whole_number``).
MAX_PLAIN_DIGITS = 100


def plain_whole_number(text: str, max_digits: int = MAX_PLAIN_DIGITS) -> int | None:
    """``text`` as a whole number when it is plain ASCII digits, at most ``max_digits`` of them (no sign,
    space, ``_``, fraction or other script's digits); None otherwise. Python's ``int()`` would take
    ``+5``, `` 5``, ``5_0`` and Arabic-Indic digits, and refuse more than 4,300 digits with an error."""
    if text.isascii() and text.isdigit() and len(text) <= max_digits:
        return int(text)
    return None


@dataclass(frozen=True, slots=True)
class TooManyDigits:
    """What a file reader puts in place of a number too long to be any value: validation then names its path.

    (Python refuses to convert more than 4,300 digits; no field here needs more than a few.)
    """

    digits: int

    def __str__(self) -> str:
        return f"a number of {self.digits} digits"


def unknown_key_message(key: str, allowed: Sequence[str]) -> str:
    """Say a key is unknown, suggest the closest allowed one, and list them all."""
    matches = [name for name in allowed if name.lower() == key.lower()] or difflib.get_close_matches(
        key, list(allowed), n=1
    )
    hint = f" (did you mean {matches[0]}?)" if matches else ""
    return f"unknown key {key!r}{hint}: remove it; the keys allowed here are {', '.join(allowed)}"
