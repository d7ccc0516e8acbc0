"""``airflow quota events [--queue Q] [--since ISO-TIME] [--limit N]``: the audit log, newest last (the
newest 50 by default, at most 1,000)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import (
    JOB_LABEL_NOTE,
    add_column,
    console,
    iso,
    job_label,
    metadata_session,
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
    console(wide=wide).print(events_table(documents, wide=wide) if documents else "No events match.")


def events_table(documents: list[dict[str, Any]], *, wide: bool = False) -> Table:
    """The audit rows (as ``--output json`` prints them), times to the second. The job queue is a column
    when the rows are of several, else the title names it."""
    queues = list(dict.fromkeys(document["jobQueueName"] for document in documents))
    several = len(queues) > 1
    title = (
        "Quota events (newest last)" if several else f"Quota events of job queue {queues[0]} (newest last)"
    )
    out = table(title, caption=JOB_LABEL_NOTE)
    headers = ("At", "Job queue", "Kind", "Quota share", "Job", "Message")
    for header in headers:
        if header != "Job queue" or several:
            add_column(out, header, whole=header in ("Kind", "Job"), wide=wide)
    for document in documents:
        cells = {
            "At": table_time(document["at"], wide=wide),
            "Job queue": document["jobQueueName"],
            "Kind": document["kind"],
            "Quota share": document["quotaShareName"],
            "Job": job_label(document["jobId"], wide=wide) if document["jobId"] else None,
            "Message": document["message"],
        }
        out.add_row(
            *(escape(str(cells[header] or "-")) for header in headers if header != "Job queue" or several)
        )
    return out
