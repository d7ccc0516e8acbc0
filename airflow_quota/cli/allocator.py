"""``airflow quota allocator [--once] [--interval S]``: the allocator as its own process.

For deployments that keep the allocator apart from the scheduler (instead of, or beside, the
``QuotaAllocatorExecutor``): it starts a cycle every ``--interval`` seconds (default ``[quota]
allocation_interval``; after a long cycle, no sooner than it took) until SIGTERM or SIGINT, finishing the
cycle in progress. Several may run; on PostgreSQL one cycle runs at a time. ``--once`` runs a single
cycle and prints what it did.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from types import FrameType

from airflow_quota.allocator.cycle import CycleReport
from airflow_quota.allocator.host import (
    allocation_interval,
    freeze_startup_objects,
    initialize_metrics,
    next_cycle_start,
    run_cycle,
    run_cycles,
)
from airflow_quota.cli.common import console, fail, print_json, wants_json

#: The longest interval between two cycle starts (a longer one, or inf, overflows the wait's clock).
MAX_INTERVAL = 3600.0


def allocator(args: argparse.Namespace) -> None:
    try:
        interval = allocation_interval() if args.interval is None else float(args.interval)
    except ValueError:
        interval = -1.0
    if not 0 < interval <= MAX_INTERVAL:  # NaN too
        given = "[quota] allocation_interval" if args.interval is None else "--interval"
        fail(
            f"{given} must be a positive number of seconds, not {args.interval or interval!r} "
            f"(at most {MAX_INTERVAL:g})"
        )
    initialize_metrics()
    if args.once:
        report = run_cycle()
        if report is None:
            fail("the allocation cycle failed and was rolled back; see the log above")
        _print(report, args)
        return
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    freeze_startup_objects()  # Airflow imported and configured: its objects live as long as the process
    console().print(f"Quota allocator: a cycle every {interval:g} s (SIGTERM or Ctrl-C stops it)")
    while not stopping.is_set():
        started = time.monotonic()
        run_cycles()
        stopping.wait(max(0.0, next_cycle_start(started, time.monotonic(), interval) - time.monotonic()))
    console().print("Quota allocator stopped")


def _print(report: CycleReport, args: argparse.Namespace) -> None:
    summary = {
        "skipped": report.skipped,
        "submitted": report.submitted,
        "granted": [lease.job_id for lease in report.granted],
        "preempted": report.preempted,
        "stopped": report.stopped,
        "finished": report.finished,
        "orphans": report.orphans,
        "cleared": report.cleared,
        "rejected": report.rejected,
        "settling": report.settling,
    }
    if wants_json(args):
        print_json(summary)
        return
    if report.skipped:
        console().print("Skipped: another allocator holds the lock")
        return
    for key, value in summary.items():
        if key != "skipped" and value:
            console().print(f"{key}: {value}")
    if not any(value for key, value in summary.items() if key != "skipped"):
        console().print("Nothing to do")
