"""``airflow quota validate FILE... [--json]``: check a quota design, summarized in one table per job queue.

The design is a quota file, or AWS Batch documents in one or more files (``aws_batch.design``). Exit code 0
when it is valid (warnings about what AWS Batch treats differently, and what an import did not keep, do not
fail it), 1 with every error listed when it is not. ``--json`` prints the same report as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import WIDE_WIDTH, add_column
from airflow_quota.cli.common import table as cli_table
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.config import DEFAULT_SCHEDULER, ConfigIssue, QuotaConfig, QuotaConfigError
from airflow_quota.engine.devices import is_local_unit
from airflow_quota.engine.model import UNLIMITED_BORROW, JobQueue, QuotaShare


def validate(args: argparse.Namespace) -> None:
    sys.exit(run_validate(args.files, as_json=args.json, wide=getattr(args, "wide", False)))


def main(argv: Sequence[str] | None = None) -> int:
    """``airflow-quota-validate FILE... [--json] [--wide]``: the same check without Airflow.

    Also ``python -m airflow_quota.cli.validate``. ``airflow quota validate`` runs inside Airflow's CLI,
    and Airflow writes ``airflow.cfg`` and ``logs/`` under AIRFLOW_HOME (``~/airflow`` when unset) when it
    starts, before any command runs. This entry imports no Airflow module and writes no file.
    """
    parser = argparse.ArgumentParser(
        prog="airflow-quota-validate",
        description="Check a quota file, or AWS Batch documents, without Airflow (writes no file).",
    )
    parser.add_argument("files", metavar="FILE", nargs="+", help="A quota file, or AWS Batch documents")
    parser.add_argument("--json", action="store_true", help="Print the result as JSON")
    parser.add_argument("--wide", action="store_true", help="Every value whole, however wide the lines")
    args = parser.parse_args(argv)
    return run_validate(args.files, as_json=args.json, wide=args.wide)


def run_validate(
    paths: str | Sequence[str], *, as_json: bool = False, wide: bool = False, console: Console | None = None
) -> int:
    """Check the quota file (or AWS documents) at ``paths``, print the report, and return the exit code."""
    console = console or _console(wide=wide)
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
        for table in queue_tables(queue, wide=wide):
            console.print(table)
    notes = [warning for warning in warnings if _local_unit_of_our_queue(design.config, warning)]
    warnings = [warning for warning in warnings if warning not in notes]
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(str(warning))}", soft_wrap=True)
    for note in notes:
        console.print(f"note: {escape(str(note))} ({LOCAL_QUEUE_NOTE})", soft_wrap=True)
    counts = [
        _plural(len(queues), "job queue"),
        _plural(sum(len(queue.shares) for queue in queues), "quota share"),
    ]
    if warnings:
        counts.append(_plural(len(warnings), "AWS Batch warning"))
    if notes:
        counts.append(f"{_plural(len(notes), 'AWS Batch note')} (harmless here)")
    console.print(f"[green]{escape(path)} is valid:[/] {', '.join(counts)}", soft_wrap=True)
    return 0


#: What a note about a job queue of the worker's own GPUs adds: why it is harmless for it.
LOCAL_QUEUE_NOTE = (
    "harmless for this job queue: our allocator schedules it on this machine's GPUs; it matters only to "
    "export the design to AWS Batch"
)
_UNIT_PATH = re.compile(r"^jobQueues\[(\d+)\]\.capacityLimits\[(\d+)\]\.capacityUnit$")


def _local_unit_of_our_queue(config: QuotaConfig, warning: ConfigIssue) -> bool:
    """Whether ``warning`` is AWS Batch's about a ``local-*`` capacity unit of a job queue our allocator
    schedules: true of every such queue, and no problem for it (AWS Batch never sees it)."""
    match = _UNIT_PATH.match(warning.path)
    if match is None:
        return False
    queue = config.job_queues[int(match[1])]
    unit = queue.capacity_limits[int(match[2])].capacity_unit
    return is_local_unit(unit) and (queue.scheduler or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER


def queue_tables(queue: JobQueue, *, wide: bool = False) -> list[Table]:
    """Two tables: one row per quota share (strategy, borrow limit, in-share preemption, state), then one
    row per share and unit (limit and ceiling)."""
    capacity = ", ".join(f"{unit} {count}" for unit, count in queue.capacity.items())
    shares = cli_table(f"Job queue {queue.name} (capacity: {capacity}): quota shares")
    for header in ("Quota share", "Strategy", "Borrow limit", "In-share preemption", "State"):
        add_column(shares, header, wide=wide)
    limits = cli_table(
        f"Job queue {queue.name}: capacity limits",
        caption="Ceiling: the most of a unit the share can hold, borrowing included.",
    )
    for header in ("Quota share", "Capacity unit", "Limit", "Ceiling"):
        add_column(limits, header, number=header in ("Limit", "Ceiling"), wide=wide)
    for share in queue.shares:
        shares.add_row(
            escape(share.name),
            share.strategy.value,
            _borrow_limit_text(share),
            "ENABLED" if share.in_share_preemption else "DISABLED",
            share.state.value,
        )
        ceilings = share_ceilings(share, queue.capacity)
        for index, (unit, limit) in enumerate(share.capacity_limits.items()):
            limits.add_row(
                escape(share.name) if index == 0 else "",
                escape(unit),
                str(limit),
                str(ceilings[unit]),
                end_section=index == len(share.capacity_limits) - 1,
            )
    return [shares, limits]


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
    """The queue and its shares, each in DescribeQuotaShare's nesting (``share_json``, as ``shares list``
    and ``shares describe`` print them) with its ``ceiling`` per unit beside it."""
    return {
        "jobQueueName": queue.name,
        "capacity": dict(queue.capacity),
        "quotaShares": [
            {**share_json(queue.name, share), "ceiling": share_ceilings(share, queue.capacity)}
            for share in queue.shares
        ],
    }


def share_json(job_queue_name: str, share: QuotaShare) -> dict[str, Any]:
    """A share's configuration in AWS Batch's DescribeQuotaShare nesting (``capacityLimits`` a list,
    ``resourceSharingConfiguration`` with ``borrowLimit`` for LEND_AND_BORROW only,
    ``preemptionConfiguration``), with its job queue's name. The one builder of this JSON for the CLI:
    ``validate --json`` and ``shares list|describe -o json`` (which add usage) print it."""
    sharing: dict[str, Any] = {"strategy": share.strategy.value}
    if share.borrows:
        sharing["borrowLimit"] = share.borrow_limit
    return {
        "quotaShareName": share.name,
        "jobQueueName": job_queue_name,
        "capacityLimits": [
            {"capacityUnit": unit, "maxCapacity": limit} for unit, limit in share.capacity_limits.items()
        ],
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {
            "inSharePreemption": "ENABLED" if share.in_share_preemption else "DISABLED"
        },
        "state": share.state.value,
    }


def _console(*, wide: bool = False) -> Console:
    """Rich's console: the terminal's width (``COLUMNS`` when set; at least 120 columns in a file or a pipe
    when it is not), all values whole with ``wide``."""
    console = Console(highlight=False)
    if wide:
        console.width = WIDE_WIDTH
    elif not console.is_terminal and "COLUMNS" not in os.environ:
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


if __name__ == "__main__":
    sys.exit(main())
