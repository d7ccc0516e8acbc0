"""``airflow quota events [--queue Q] [--since ISO-TIME] [--limit N]``: the audit log, newest last (the
newest 50 by default, at most 1,000)."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import (
    console,
    iso,
    metadata_session,
    parse_time,
    parse_whole_number,
    print_json,
    wants_json,
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
    table = Table(title="Quota events (newest last)")
    for header in ("At", "Job queue", "Kind", "Quota share", "Job"):
        table.add_column(header, no_wrap=True)
    table.add_column("Message")
    for document in documents:
        table.add_row(
            *(
                escape(str(document[key] or "-"))
                for key in ("at", "jobQueueName", "kind", "quotaShareName", "jobId", "message")
            )
        )
    console().print(table if documents else "No events match.")
