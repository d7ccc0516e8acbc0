"""What the ledger commands share: the output switch, JSON and rich printing, errors, and the session.

Read commands print rich tables by default and one JSON document with ``--output json``. Errors go to
stderr with exit code 1 and change nothing.

Tables fit the terminal: headers stay whole (a column is never narrower than its header), long values
(reasons, messages, names) wrap inside their cell instead of being cut, and jobs are shown by a short label
(``job_label``). ``--wide`` shows every value whole and unwrapped, job ids in full, however wide the lines.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from rich import box
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from airflow_quota.engine.messages import plain_whole_number

if TYPE_CHECKING:  # not imported at run time: the no-Airflow validator (cli.validate) needs no SQLAlchemy
    from sqlalchemy.orm import Session

#: Columns a ``--wide`` table may take: enough that no value is wrapped (the terminal wraps long lines).
WIDE_WIDTH = 1000


def console(*, wide: bool = False) -> Console:
    """Rich's console: the terminal's width (``COLUMNS`` when set; at least 160 columns when the output goes
    to a file or a pipe and ``COLUMNS`` is not set), and room for every value whole with ``wide``."""
    out = Console(highlight=False)
    if wide:
        out.width = WIDE_WIDTH
    elif not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = max(out.width, 160)
    return out


def wants_wide(args: Any) -> bool:
    return bool(getattr(args, "wide", False))


def table(title: str, *, caption: str | None = None) -> Table:
    """The CLI's table: a rule under the headers and no vertical lines, so more columns fit a terminal."""
    return Table(
        title=escape(title),
        caption=None if caption is None else escape(caption),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )


def add_column(
    out: Table, header: str, *, number: bool = False, whole: bool = False, wide: bool = False
) -> None:
    """A column never narrower than its header's longest word (a header wraps between words, never inside
    one); its values wrap (folding a long word) unless ``whole`` (a job label, a status: other columns give
    way first) or ``wide``."""
    out.add_column(
        header,
        justify="right" if number else "left",
        min_width=max(map(len, header.split())),
        overflow="fold",
        no_wrap=whole or wide,
    )


#: From this console width on, status reasons are a table's column; below it, they follow the table.
REASONS_INLINE_WIDTH = 120


def reasons_inline(width: int, *, wide: bool) -> bool:
    return wide or width >= REASONS_INLINE_WIDTH


def reasons_after(rows: list[tuple[str, str]]) -> list[RenderableType]:
    """Status reasons after a table, one paragraph per job label, at the console's full width."""
    reasons = Table.grid(padding=(0, 1))
    reasons.add_column(no_wrap=True, style="bold")
    reasons.add_column(overflow="fold")
    for label, reason in rows:
        reasons.add_row(escape(label + ":"), escape(reason or "-"))
    return [Text("Status reasons", style="bold"), reasons]


#: What a table's caption says about its job labels.
JOB_LABEL_NOTE = "Job: task[map index] #try (--wide for whole job ids). Times in UTC."


def job_label(job_id: str | None, *, wide: bool = False) -> str:
    """A job as a table shows it: ``task[map index] #try`` of a task instance's job id
    (``dag/run/task/map_index/try``), the whole id with ``wide`` or when it is not one."""
    if job_id is None:
        return "-"
    parts = job_id.rsplit("/", 3)
    if wide or len(parts) < 4 or not all(part.lstrip("-").isdigit() for part in parts[2:]):
        return job_id
    task_id, map_index, try_number = parts[1], int(parts[2]), parts[3]
    return f"{task_id}{'' if map_index < 0 else f'[{map_index}]'} #{try_number}"


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


def table_time(iso_time: str | None, *, wide: bool = False) -> str:
    """An ISO time (UTC) as a table shows it: to the second, date and time apart so it wraps between them."""
    if iso_time is None:
        return "-"
    return iso_time if wide else iso_time[:19].replace("T", " ")


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
