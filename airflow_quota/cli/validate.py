"""``airflow quota validate FILE... [--json]``: check a quota design, summarized in one table per job queue.

The design is a quota file, or AWS Batch documents in one or more files (``aws_batch.design``). Exit code 0
when it is valid (warnings about what AWS Batch treats differently, and what an import did not keep, do not
fail it), 1 with every error listed when it is not. ``--json`` prints the same report as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import ConfigIssue, QuotaConfigError
from airflow_quota.engine.model import UNLIMITED_BORROW, JobQueue, QuotaShare


def validate(args: argparse.Namespace) -> None:
    sys.exit(run_validate(args.files, as_json=args.json))


def run_validate(paths: str | Sequence[str], *, as_json: bool = False, console: Console | None = None) -> int:
    """Check the quota file (or AWS documents) at ``paths``, print the report, and return the exit code."""
    console = console or _console()
    paths = [paths] if isinstance(paths, str) else list(paths)
    path = ", ".join(paths)
    try:
        design = load_quota_design(paths)
    except QuotaConfigError as error:
        if as_json:
            _print_json(
                {"source": path, "valid": False, "errors": _issues_json(error.issues), "warnings": []}
            )
        else:
            print_errors(console, error)
        return 1

    queues = design.config.to_job_queues()
    warnings = design.warnings()
    if as_json:
        _print_json(
            {
                "source": path,
                "valid": True,
                "errors": [],
                "warnings": _issues_json(warnings),
                "jobQueues": [_queue_json(queue) for queue in queues],
            }
        )
        return 0
    for queue in queues:
        console.print(queue_table(queue))
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(str(warning))}", soft_wrap=True)
    counts = [
        _plural(len(queues), "job queue"),
        _plural(sum(len(queue.shares) for queue in queues), "quota share"),
    ]
    if warnings:
        counts.append(_plural(len(warnings), "AWS Batch warning"))
    console.print(f"[green]{escape(path)} is valid:[/] {', '.join(counts)}", soft_wrap=True)
    return 0


def queue_table(queue: JobQueue) -> Table:
    """One row per quota share and unit: strategy, own limit, ceiling, in-share preemption, state."""
    capacity = ", ".join(f"{unit} {count}" for unit, count in queue.capacity.items())
    table = Table(
        title=escape(f"Job queue {queue.name} (capacity: {capacity})"),
        caption="Ceiling: the most of a unit the share can hold, borrowing included.",
    )
    for header in ("Quota share", "Strategy", "Borrow limit", "Capacity unit"):
        table.add_column(header, no_wrap=True)
    for header in ("Limit", "Ceiling"):
        table.add_column(header, justify="right")
    table.add_column("In-share preemption")
    table.add_column("State")
    for share in queue.shares:
        ceilings = share_ceilings(share, queue.capacity)
        first_row = [
            share.name,
            share.strategy.value,
            _borrow_limit_text(share),
            "ENABLED" if share.in_share_preemption else "DISABLED",
            share.state.value,
        ]
        for row_index, (unit, limit) in enumerate(share.capacity_limits.items()):
            name, strategy, borrow_limit, in_share, state = first_row if row_index == 0 else [""] * 5
            table.add_row(
                name,
                strategy,
                borrow_limit,
                escape(unit),
                str(limit),
                str(ceilings[unit]),
                in_share,
                state,
                end_section=row_index == len(share.capacity_limits) - 1,
            )
    return table


def share_ceilings(share: QuotaShare, queue_capacity: dict[str, int]) -> dict[str, int]:
    """Most of each of its units the share can hold, borrowing included (never above the queue's capacity)."""
    ceilings: dict[str, int] = {}
    for unit in share.capacity_limits:
        ceiling = share.ceiling(unit)
        total = queue_capacity.get(unit, 0)
        ceilings[unit] = total if ceiling is None else min(ceiling, total)
    return ceilings


def _borrow_limit_text(share: QuotaShare) -> str:
    if not share.borrows:
        return "-"
    return "none" if share.borrow_limit == UNLIMITED_BORROW else f"{share.borrow_limit}%"


def _queue_json(queue: JobQueue) -> dict[str, Any]:
    return {
        "jobQueueName": queue.name,
        "capacity": dict(queue.capacity),
        "quotaShares": [
            {
                "quotaShareName": share.name,
                "strategy": share.strategy.value,
                "borrowLimit": share.borrow_limit if share.borrows else None,
                "capacityLimits": dict(share.capacity_limits),
                "ceiling": share_ceilings(share, queue.capacity),
                "inSharePreemption": "ENABLED" if share.in_share_preemption else "DISABLED",
                "state": share.state.value,
            }
            for share in queue.shares
        ],
    }


def _console() -> Console:
    """Rich's console, at least 120 columns wide when the output goes to a file or a pipe, not a terminal."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)
    return console


def print_errors(console: Console, error: QuotaConfigError) -> None:
    console.print(
        f"[red]{escape(error.source)} is invalid:[/] {_plural(len(error.issues), 'error')}", soft_wrap=True
    )
    for issue in error.issues:
        where = f"[bold]{escape(issue.path)}[/]: " if issue.path else ""
        console.print(f"  {where}{escape(issue.message)}", soft_wrap=True)


def _issues_json(issues: list[ConfigIssue]) -> list[dict[str, str]]:
    return [{"path": issue.path, "message": issue.message} for issue in issues]


def _print_json(report: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
