"""``airflow quota events [--queue Q] [--since ISO-TIME] [--limit N]``: the audit log, newest last (the
newest 50 by default, at most 1,000)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import (
    JOB_LABEL_NOTE,
    TIMES_NOTE,
    add_column,
    console,
    fitted_widths,
    iso,
    job_label,
    job_names,
    metadata_session,
    named_text,
    parse_time,
    parse_whole_number,
    print_json,
    table,
    table_time,
    wants_json,
    wants_wide,
)
from airflow_quota.ledger.views import DEFAULT_EVENTS, MAX_PAGE, audit_page


def events(args: argparse.Namespace) -> None:
    limit = DEFAULT_EVENTS if args.limit is None else parse_whole_number(args.limit, "--limit", 1, MAX_PAGE)
    since = None if args.since is None else parse_time(args.since)
    with metadata_session() as session:
        rows = audit_page(session, job_queue_name=args.queue, since=since, limit=limit)
        documents = [
            {
                "id": row.id,
                "at": iso(row.at),
                "jobQueueName": row.job_queue_name,
                "kind": row.kind,
                "quotaShareName": row.quota_share_name,
                "jobId": row.job_id,
                "relatedJobId": row.related_job_id,
                "rule": row.rule,
                "message": row.message,
                "details": row.details,
            }
            for row in rows
        ]
    if wants_json(args):
        print_json({"events": documents})
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    out.print(events_table(documents, width=out.width, wide=wide) if documents else "No events match.")


#: Below this console width an event's time takes two lines (the date above the time).
_ONE_LINE_TIMES = 120
#: The message column's least width at 80 columns (a quarter of each column more): where the columns side
#: by side would leave it less, the kind goes under the time and the share under the job.
_MESSAGE_WIDTH = 40


def events_table(documents: list[dict[str, Any]], *, width: int = 120, wide: bool = False) -> Table:
    """The audit rows (as ``--output json`` prints them), times to the second, on a console ``width``
    columns wide. The job queue is a column when the rows are of several, else the title names it.

    Jobs are named as everywhere (``job_names``: ``dag / task``, the run where two runs of a DAG are
    shown), in the Job column and inside messages, and a message does not repeat its row's job (nor its
    share) at its start. The Message column gets the room: the other columns are as narrow as their
    longest word (a time wraps between its date and time below 120 columns, a job name between its words;
    where that leaves the message too little, as at 80 columns, the kind goes under the time and the share
    under the job), so nothing is split inside a word.
    """
    queues = list(dict.fromkeys(document["jobQueueName"] for document in documents))
    several = len(queues) > 1
    title = (
        "Quota events (newest last)" if several else f"Quota events of job queue {queues[0]} (newest last)"
    )
    names = job_names(
        [document["jobId"] for document in documents], *(document["message"] for document in documents)
    )
    rows = [
        {
            "At": table_time(document["at"], wide=wide),
            "Job queue": document["jobQueueName"],
            "Kind": document["kind"],
            "Quota share": document["quotaShareName"],
            "Job": job_label(document["jobId"], wide=wide, names=names) if document["jobId"] else None,
            "Message": named_text(
                document["message"],
                names,
                wide=wide,
                subject=document["jobId"],
                share=document["quotaShareName"],
            ),
        }
        for document in documents
    ]
    headers = [header for header in _HEADERS if header != "Job queue" or several]
    widths = {} if wide else _fitted(rows, headers, width)
    if not wide and widths["Message"] < _message_width(
        width
    ):  # the kind under the time, the share under the job
        for row in rows:
            row[_AT_KIND] = f"{row['At']}\n{row['Kind']}"
            share = row["Quota share"]
            row[_JOB_SHARE] = f"{row['Job'] or '-'}" + ("" if share is None else f"\n{share}")
        headers = [_AT_KIND, *(["Job queue"] if several else []), _JOB_SHARE, "Message"]
        widths = _fitted(rows, headers, width)
    out = table(title, caption=f"{JOB_LABEL_NOTE} {TIMES_NOTE}")
    for header in headers:
        add_column(out, header, whole=header == "Kind", wide=wide, width=widths.get(header))
    for row in rows:
        out.add_row(*(escape(str(row[header] or "-")) for header in headers))
    return out


_HEADERS = ("At", "Job queue", "Kind", "Quota share", "Job", "Message")


def _message_width(width: int) -> int:
    return _MESSAGE_WIDTH + (width - 80) // 4


def _fitted(rows: list[dict[str, Any]], headers: list[str], width: int) -> dict[str, int]:
    """``fitted_widths`` of the events' columns: the Message column takes the room left."""
    return fitted_widths(
        {header: [str(row[header] or "-") for row in rows] for header in headers},
        width,
        grow=[
            header
            for header in ("Kind", "Quota share", "Job queue", "At", _JOB_SHARE, "Job")
            if header in headers and (header != "At" or width >= _ONE_LINE_TIMES)
        ],
        rest="Message",
        rest_min=_message_width(width),
    )


#: Below 100 columns: the time over the kind, the job over its share, each pair in one column.
_AT_KIND = "At\nKind"
_JOB_SHARE = "Job\nQuota share"
