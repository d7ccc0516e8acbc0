"""What the ledger commands share: the output switch, JSON and rich printing, errors, and the session.

Read commands print rich tables by default and one JSON document with ``--output json``. Errors go to
stderr with exit code 1 and change nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape
from sqlalchemy.orm import Session

from airflow_quota.engine.messages import plain_whole_number


def console() -> Console:
    """Rich's console, at least 160 columns wide when the output goes to a file or a pipe, not a terminal."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 160)
    return out


def wants_json(args: Any) -> bool:
    return getattr(args, "output", "table") == "json"


def print_json(document: object) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def fail(message: str) -> NoReturn:
    """Print ``message`` to stderr and exit 1."""
    Console(stderr=True, highlight=False).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(1)


@contextmanager
def metadata_session() -> Iterator[Session]:
    """A session on the Airflow metadata DB; committed when the block ends without an error."""
    from airflow.utils.session import create_session

    with create_session() as session:
        yield session


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def parse_time(text: str, flag: str = "--since") -> datetime:
    """An ISO-8601 time, in UTC; without a zone it is UTC."""
    from airflow_quota.ledger.views import utc_time

    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{flag} {text!r} is not an ISO-8601 time (for example 2026-03-01T12:00:00Z)")
    try:
        return utc_time(at)
    except ValueError as error:
        fail(f"{flag} {error}")


def parse_whole_number(text: str, flag: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high``, written in digits only (no sign, space, '_' or fraction)."""
    number = plain_whole_number(text)
    if number is None or not low <= number <= high:
        fail(f"{flag} must be a whole number from {low} to {high}, not {text[:20]!r}")
    return number


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
