"""``airflow quota shares list|describe``: each quota share as applied, and its usage now, from the ledger.

Their JSON nests a share's configuration as AWS Batch's DescribeQuotaShare does (``capacityLimits`` as a
list, ``resourceSharingConfiguration``, ``preemptionConfiguration``), with the job queue's name and the
usage per unit (``units``) beside it.

Usage is the engine's own accounting of the jobs that have not finished, laid out as the GPU Quotas page
lays it out (``ledger.views.queue_usage``): ``own`` is what the share holds within its own limit,
``borrowed`` what it holds above it (idle capacity lent by other shares), ``lent`` the part of its own limit
other shares hold and ``idle`` the part nobody holds.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from rich.markup import escape
from rich.table import Table
from sqlalchemy.orm import Session

from airflow_quota.cli.common import (
    add_column,
    console,
    fail,
    metadata_session,
    print_json,
    table,
    wants_json,
    wants_wide,
)
from airflow_quota.cli.validate import share_ceilings, share_json
from airflow_quota.engine.model import UNLIMITED_BORROW, QueueState
from airflow_quota.ledger.queue_state import job_queue_names, load_queue_state
from airflow_quota.ledger.views import queue_usage

#: The job statuses counted per share and unit.
COUNTED = ("RUNNING", "RUNNABLE")
#: A share's usage of a unit, as the GPU Quotas page shows it (``ledger.views.ShareUnitUsage``'s fields).
USAGE = ("own", "borrowed", "lent", "idle")
USAGE_HEADERS = ("Limit", "Ceiling", "Own", "Borrowed", "Lent", "Idle", "Running", "Runnable")
USAGE_NOTE = (
    "Own: held within the share's limit; borrowed: held above it; lent: its own capacity other shares "
    "hold; idle: its own capacity nobody holds (limit = own + lent + idle)."
)


def shares_list(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        pairs = [
            (state, report) for state in queue_states(session, args.queue) for report in share_reports(state)
        ]
    reports = [report for _, report in pairs]
    if wants_json(args):
        print_json({"quotaShares": [aws_share_json(state, report) for state, report in pairs]})
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    if not reports:
        out.print("No quota shares are applied: apply a quota file with 'airflow quota apply -f FILE'.")
        return
    for queue_name in dict.fromkeys(report["jobQueueName"] for report in reports):
        queue_reports = [report for report in reports if report["jobQueueName"] == queue_name]
        out.print(configuration_table(f"Job queue {queue_name}: quota shares", queue_reports, wide=wide))
        for usage in usage_tables(queue_name, queue_reports, wide=wide):
            out.print(usage)


def shares_describe(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        matches = [
            (state, report)
            for state in queue_states(session, args.queue)
            for report in share_reports(state)
            if report["quotaShareName"] == args.name
        ]
    if not matches:
        where = f" in job queue {args.queue}" if args.queue else ""
        fail(f"no quota share {args.name}{where} is applied")
    if len(matches) > 1:
        queues = ", ".join(report["jobQueueName"] for _, report in matches)
        fail(f"quota share {args.name} is in several job queues ({queues}): name one with --queue")
    state, report = matches[0]
    if wants_json(args):
        print_json(aws_share_json(state, report))
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    for label, value in (
        ("Quota share", report["quotaShareName"]),
        ("Job queue", report["jobQueueName"]),
        ("Strategy", report["strategy"]),
        ("Borrow limit", borrow_limit_text(report["borrowLimit"])),
        ("In-share preemption", report["inSharePreemption"]),
        ("State", report["state"]),
    ):
        fields.add_row(label, escape(str(value)))
    out.print(fields)
    out.print(usage_table("Capacity and usage", "Capacity unit", list(report["units"].items()), wide=wide))


def queue_states(session: Session, queue: str | None) -> list[QueueState]:
    """The engine's view of one applied job queue (``queue``) or of all of them."""
    names = job_queue_names(session)
    if queue is not None:
        if queue not in names:
            fail(f"job queue {queue} is not applied (applied: {', '.join(names) or 'none'})")
        names = [queue]
    return [load_queue_state(session, name) for name in names]


def share_reports(state: QueueState) -> list[dict[str, Any]]:
    """One JSON-shaped report per share of the queue: configuration, ceiling and usage per unit.

    The usage figures (own, borrowed, lent, idle) are ``ledger.views.queue_usage``'s, the GPU Quotas
    page's: ``limit = own + lent + idle`` and ``own + borrowed`` is what the share uses.
    """
    queue = state.queue
    usage = {
        (entry.quota_share_name, unit.capacity_unit): entry
        for unit in queue_usage(state)
        for entry in unit.shares
    }
    counts: Counter[tuple[str, str, str]] = Counter(
        (job.share_name, job.unit, job.status.value) for job in state.jobs.values()
    )
    reports = []
    for share in queue.shares:
        units = list(dict.fromkeys([*share.capacity_limits, *(u for s, u, _ in counts if s == share.name)]))
        ceilings = share_ceilings(share, queue.capacity)
        per_unit = {}
        for unit in units:
            entry = usage.get((share.name, unit))
            per_unit[unit] = {
                "limit": share.capacity_limits.get(unit, 0),
                "ceiling": ceilings.get(unit, 0),
                **{key: 0 if entry is None else getattr(entry, key) for key in USAGE},
                **{status: counts[(share.name, unit, status)] for status in COUNTED},
            }
        reports.append(
            {
                "jobQueueName": queue.name,
                "quotaShareName": share.name,
                "strategy": share.strategy.value,
                "borrowLimit": share.borrow_limit if share.borrows else None,
                "inSharePreemption": "ENABLED" if share.in_share_preemption else "DISABLED",
                "state": share.state.value,
                "units": per_unit,
            }
        )
    return reports


def aws_share_json(state: QueueState, report: dict[str, Any]) -> dict[str, Any]:
    """A share's report in DescribeQuotaShare's nesting (``validate.share_json``), with its usage per unit."""
    share = next(share for share in state.queue.shares if share.name == report["quotaShareName"])
    return {**share_json(state.queue.name, share), "units": report["units"]}


def borrow_limit_text(borrow_limit: int | None) -> str:
    if borrow_limit is None:
        return "-"
    return "none" if borrow_limit == UNLIMITED_BORROW else f"{borrow_limit}%"


def configuration_table(title: str, reports: list[dict[str, Any]], *, wide: bool = False) -> Table:
    """One row per share: how it shares and whether it preempts within itself."""
    out = table(title)
    for header in ("Quota share", "Strategy", "Borrow limit", "In-share preemption", "State"):
        add_column(out, header, wide=wide)
    for report in reports:
        out.add_row(
            *map(
                escape,
                (
                    report["quotaShareName"],
                    report["strategy"],
                    borrow_limit_text(report["borrowLimit"]),
                    report["inSharePreemption"],
                    report["state"],
                ),
            )
        )
    return out


def usage_tables(queue_name: str, reports: list[dict[str, Any]], *, wide: bool = False) -> list[Table]:
    """One table per capacity unit of the queue (as the GPU Quotas page has one bar per unit): a row per
    share with its limit, ceiling and usage now."""
    units = dict.fromkeys(unit for report in reports for unit in report["units"])
    return [
        usage_table(
            f"Job queue {queue_name}, {unit}: usage",
            "Quota share",
            [
                (report["quotaShareName"], report["units"][unit])
                for report in reports
                if unit in report["units"]
            ],
            wide=wide,
        )
        for unit in units
    ]


def usage_table(
    title: str, first_header: str, rows: list[tuple[str, dict[str, int]]], *, wide: bool
) -> Table:
    """A row per share (or per unit): its limit and ceiling, and its usage now (own, borrowed, lent, idle)."""
    out = table(title, caption=USAGE_NOTE)
    add_column(out, first_header, wide=wide)
    for header in USAGE_HEADERS:
        add_column(out, header, number=True, wide=wide)
    for name, row in rows:
        out.add_row(escape(name), *(str(row[key]) for key in ("limit", "ceiling", *USAGE, *COUNTED)))
    return out
