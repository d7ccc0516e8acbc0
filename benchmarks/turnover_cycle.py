"""Time the cycle that turns a queue's capacity over: every granted task succeeded since the last cycle.

``kueue_scheduling.py`` found where its makespan goes: Kueue's medium jobs run in waves (a cycle grants
120 of them at once, they succeed together half a second later, and the next cycle finishes all 120 and
grants 120 more), so that cycle's length is capacity idling, and it follows the **per-job** cost of a
finish and a grant (job rows, audit rows, the task instance claimed, loaded and resumed), not the cycle's
fixed reads. This measures that cycle alone, without the benchmark's runner beside it: Kueue's queues
(``kueue_scheduling.quota_document``: 5 job queues of 120 ``gpu``, 6 LEND_AND_BORROW shares of 20 each) on
a fresh PostgreSQL database, ``--waiting`` task instances DEFERRED (the first ``--medium`` of 5 ``gpu`` at
priority 100, Kueue's medium jobs, then jobs of 1 ``gpu`` at priority 50), the burst recorded, then
``--cycles`` cycles each after every resumed task succeeded (the first ``--warm-up`` not timed).

Printed: the median and lowest ms of the timed cycles and what each one finished and granted;
``--profile`` adds cProfile's view of the timed cycles. **Goal**: none (it explains Kueue's makespan).

Usage::

    .venv/bin/python benchmarks/turnover_cycle.py                 # 13,000 waiting, 8 timed cycles (~1 min)
    .venv/bin/python benchmarks/turnover_cycle.py --profile       # where a turnover cycle goes
    .venv/bin/python benchmarks/turnover_cycle.py --waiting 2000 --medium 300 --cycles 2 --warm-up 1  # smoke

PostgreSQL is reached at ``QUOTA_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks, by module name

import allocator_cycle  # (it puts the repo root on sys.path and sets AIRFLOW_HOME)
import kueue_scheduling
from rich.console import Console

from airflow_quota.allocator.host import freeze_startup_objects
from airflow_quota.triggers.admission import QuotaAdmissionTrigger

TITLE = "Turnover cycle: every granted task succeeded since the last cycle (Kueue's queues, PostgreSQL)"


def request(number: int, units: int, priority: int) -> dict[str, object]:
    """Job ``number``'s admission kwargs: spread over the queues and their shares in turn."""
    queue = number % kueue_scheduling.JOB_QUEUES
    share = (number // kueue_scheduling.JOB_QUEUES) % kueue_scheduling.SHARES_PER_QUEUE
    return QuotaAdmissionTrigger(
        job_queue=kueue_scheduling.queue_name(queue),
        job_name=f"job-{number:07d}",
        quota_share_name=kueue_scheduling.share_name(queue, share),
        capacity_unit=kueue_scheduling.UNIT,
        instance_count=units,
        scheduling_priority=priority,
        submitted_at=allocator_cycle.START.isoformat(),
    ).serialize()[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiting", type=int, default=13_000, help="task instances deferred at the start")
    parser.add_argument("--medium", type=int, default=3_000, help="of them first: Kueue's medium jobs")
    parser.add_argument("--cycles", type=int, default=8, help="turnover cycles timed")
    parser.add_argument("--warm-up", type=int, default=4, help="turnover cycles run first, not timed")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed cycles")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    console = Console()
    requests = [
        request(number, 5, 100) if number < args.medium else request(number, 1, 50)
        for number in range(args.waiting)
    ]
    profiler = cProfile.Profile() if args.profile else None
    times: list[float] = []
    turned: list[tuple[int, int]] = []
    with allocator_cycle.postgresql_backend() as backend:
        allocator_cycle.reset(backend.engine, kueue_scheduling.quota_document())
        allocator_cycle.write_deferred(backend.engine, 0, requests, allocator_cycle.START)
        clock = allocator_cycle.Clock()
        _, report = allocator_cycle.timed_cycle(backend.engine, clock.tick())
        while report.backlog:  # the burst, one bounded batch a cycle
            _, report = allocator_cycle.timed_cycle(backend.engine, clock.tick())
        allocator_cycle.analyze(backend)
        freeze_startup_objects()  # as a host does once it has started
        rng = random.Random(args.seed)
        for number in range(args.warm_up + args.cycles):
            allocator_cycle.succeed_granted(backend.engine, rng, len(requests))  # every resumed task
            timed = number >= args.warm_up
            if timed and profiler is not None:
                profiler.enable()
            ms, report = allocator_cycle.timed_cycle(backend.engine, clock.tick())
            if timed and profiler is not None:
                profiler.disable()
            if timed:
                times.append(ms)
                turned.append((len(report.finished), len(report.granted)))
    console.print(f"[bold]{TITLE}[/bold]: {args.waiting:,} waiting, the first {args.medium:,} of 5 gpu")
    console.print(
        f"turnover cycle: median {statistics.median(times):.1f} ms, lowest {min(times):.1f} ms over "
        f"{len(times)} cycles; finished / granted per cycle: "
        + ", ".join(f"{finished}/{granted}" for finished, granted in turned),
        soft_wrap=True,  # one line, for a reader's grep
    )
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats("airflow_quota", 40)
        stats.sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
