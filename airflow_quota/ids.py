"""Ids kept within a length: a long one keeps its beginning and ends with ``~`` and a digest of the whole.

Airflow allows 250 characters for a DAG, run or task id, and anyone who may trigger a run chooses its run
id; the ledger's job ids and the local backend's directory names have tighter limits. A bounded id stays
readable, is the same every time it is computed, and two ids that differ anywhere stay different.
"""

from __future__ import annotations

import hashlib

#: Hex digits of the SHA-256 a shortened id ends with.
DIGEST_LENGTH = 16


def bounded_id(text: str, limit: int, *, in_bytes: bool = False, digest_of: str | None = None) -> str:
    """``text`` when it fits ``limit`` (characters, or UTF-8 bytes with ``in_bytes``); else its beginning,
    ``~`` and the first ``DIGEST_LENGTH`` hex digits of the SHA-256 of ``digest_of`` (default ``text``),
    ``limit`` long at most. ``digest_of`` names the original when ``text`` is an escaped form of it."""
    size = len(text.encode()) if in_bytes else len(text)
    if size <= limit:
        return text
    digest = hashlib.sha256((text if digest_of is None else digest_of).encode()).hexdigest()[:DIGEST_LENGTH]
    room = limit - DIGEST_LENGTH - 1
    kept = text.encode()[:room].decode(errors="ignore") if in_bytes else text[:room]
    return f"{kept}~{digest}"
