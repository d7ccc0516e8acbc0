"""How configuration errors are worded: paths inside a file, values as the user wrote them, unknown keys.

Shared by the quota file, job request and simulator scenario validators so every error reads the same.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence


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


def show_value(value: object) -> str:
    """A value the way the user wrote it in YAML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null (empty)"
    if isinstance(value, str):
        return f"'{value}'" if value else "an empty string"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def unknown_key_message(key: str, allowed: Sequence[str]) -> str:
    """Say a key is unknown, suggest the closest allowed one, and list them all."""
    matches = [name for name in allowed if name.lower() == key.lower()] or difflib.get_close_matches(
        key, list(allowed), n=1
    )
    hint = f" (did you mean {matches[0]}?)" if matches else ""
    return f"unknown key {key!r}{hint}: remove it; the keys allowed here are {', '.join(allowed)}"
