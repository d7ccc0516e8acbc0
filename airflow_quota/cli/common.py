"""What the ledger commands share: the output switch, JSON and rich printing, errors, and the session.

Read commands print rich tables by default and one JSON document with ``--output json``. Errors go to
stderr with exit code 1 and change nothing.

Tables fit the terminal: headers stay whole (a column is never narrower than its header), long values
(reasons, messages, names) wrap inside their cell instead of being cut, and jobs are shown by their names
(``job_label``, ``airflow_quota.job_names``: ``dag / task``, with the run where two runs could be confused),
also inside messages and status reasons (``named_text``).
``--wide`` shows every value whole and unwrapped, job ids in full, however wide the lines.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from rich import box
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from airflow_quota.engine.messages import plain_whole_number
from airflow_quota.job_names import display_names, job_display_name, job_ids_in, name_jobs_in

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
    out: Table,
    header: str,
    *,
    number: bool = False,
    whole: bool = False,
    wide: bool = False,
    min_width: int = 0,
    width: int | None = None,
) -> None:
    """A column never narrower than its header's longest word (a header wraps between words, never inside
    one) nor ``min_width`` (a job name's longest word: names wrap between words), or exactly ``width``; its
    values wrap (folding a long word) unless ``whole`` (a status: other columns give way first) or
    ``wide``."""
    out.add_column(
        header,
        justify="right" if number else "left",
        min_width=max(*map(len, header.split()), min_width),
        width=None if wide else width,
        overflow="fold",
        no_wrap=whole or wide,
    )


#: From this console width on, status reasons are a table's column; below it, they follow the table.
REASONS_INLINE_WIDTH = 120


def reasons_inline(width: int, *, wide: bool) -> bool:
    return wide or width >= REASONS_INLINE_WIDTH


def reasons_after(rows: list[tuple[str, str]]) -> list[RenderableType]:
    """Status reasons after a table, one paragraph per job (its label in bold, then its reason), at the
    console's full width: a paragraph wraps between words."""
    reasons = Table.grid()
    reasons.add_column(overflow="fold")
    for label, reason in rows:
        reasons.add_row(Text.assemble((label + ":", "bold"), " ", reason or "-"))
    return [Text("Status reasons", style="bold"), reasons]


#: What a table's caption says about its job labels.
JOB_LABEL_NOTE = (
    "Job: DAG / task[map index] #try (a first try's left out), with its run where two runs of a DAG are "
    "shown (--wide for whole job ids)."
)
#: The caption's note of a table that shows times.
TIMES_NOTE = "Times in UTC."


def job_names(job_ids: Iterable[str | None], *texts: str | None) -> dict[str, str]:
    """The names of the jobs a table shows (``job_names.display_names``): its rows' jobs and those that
    its ``texts`` (messages, status reasons) name, so one job has one name in the whole table."""
    named = [job_id for job_id in job_ids if job_id]
    for text in texts:
        named += job_ids_in(text or "")
    return display_names(named)


def job_label(job_id: str | None, *, wide: bool = False, names: Mapping[str, str] | None = None) -> str:
    """A job as a table shows it: its name (``names``, else ``job_names.job_display_name``: ``dag /
    task[map index] #try``), the whole id with ``wide`` or when it names no task instance try."""
    if job_id is None:
        return "-"
    if wide:
        return job_id
    return (names or {}).get(job_id) or job_display_name(job_id)


def named_text(
    text: str | None,
    names: Mapping[str, str],
    *,
    wide: bool = False,
    subject: str | None = None,
    share: str | None = None,
) -> str:
    """A message or status reason as a table shows it: the jobs it names by their names, and without the
    row's own job (``subject``) at its start (``job_names.name_jobs_in``); whole with ``wide``."""
    if not text or wide:
        return text or ""
    return name_jobs_in(text, names, subject=subject, share=share)


def longest_word(values: Iterable[str]) -> int:
    """The longest blank-separated word of ``values``: a column this wide wraps them between words only."""
    return max((len(word) for value in values for word in value.split()), default=1)


def _longest_line(values: Iterable[str]) -> int:
    return max((len(line) for value in values for line in value.splitlines()), default=0)


def fitted_widths(
    cells: Mapping[str, Sequence[str]],
    width: int,
    *,
    grow: Sequence[str],
    rest: str | None = None,
    rest_min: int = 0,
) -> dict[str, int]:
    """Column widths for a table (``table``'s: two spaces between columns) on a console ``width`` wide,
    from each column's header and values (``cells``): each column at least as wide as its longest word, so
    nothing is split inside a word; the room left goes to the ``grow`` columns in that order, each up to
    its longest value, then to ``rest`` (a column of long texts), which takes all that is left and is
    kept ``rest_min`` wide before any other column grows. Headers are on one line where the room allows
    it (first of all)."""
    widths = {header: longest_word([header, *values]) for header, values in cells.items()}
    room = width - sum(widths.values()) - 2 * (len(widths) - 1)
    whole = {header: _longest_line([header]) for header in cells}
    if room >= sum(max(0, whole[header] - widths[header]) for header in cells):
        for header in cells:
            room -= max(0, whole[header] - widths[header])
            widths[header] = max(widths[header], whole[header])
    if rest is not None:
        kept = max(0, min(room, rest_min - widths[rest]))
        widths[rest] += kept
        room -= kept
    for header in grow:
        add = max(0, min(room, _longest_line(cells[header]) - widths[header]))
        widths[header] += add
        room -= add
    if rest is not None and room > 0:
        widths[rest] += room
    return widths


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
