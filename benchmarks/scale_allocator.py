"""Two allocator processes against one PostgreSQL database, beside one: cycle time, grants/s, lock contention.

Stand-ins for two schedulers: each allocator process (forked, its own engine) runs ``run_allocation_cycle``
in its own transaction back to back, as the executor heartbeat or ``airflow quota allocator`` does (with
``--interval 0``; a cycle that found the other process holding the advisory lock is ``skipped`` and retried
after 10 ms). For each (processes, waiting jobs, quota shares) the database is seeded with N task instances
DEFERRED on the admission trigger (20 shares: one job queue of 20 shares of 10 GPUs; 200 shares: 10 job
queues of 20 shares each), one unmeasured cycle records the submissions, then the processes cycle for
``--seconds`` while this process plays the workers: every 0.5 s it marks every granted (resumed) task
SUCCESS and defers as many new ones, so capacity turns over and N jobs keep waiting.

Reported per row: median and p95 time of the committed cycles (all processes), grants per second (all
processes), cycles committed and skipped per process, and for the two-process rows the ratio to the
one-process row with the same jobs (grants/s and median cycle time).

Usage::

    .venv/bin/python benchmarks/scale_allocator.py                  # 1,000 and 10,000 x 20 and 200 shares
    .venv/bin/python benchmarks/scale_allocator.py --sizes 50 --shares 20 --seconds 3   # smoke run

PostgreSQL is reached at ``QUOTA_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``); the
benchmark creates its own database there and drops it at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Runnable as a plain script from a checkout: the repository root holds ``benchmarks`` and the package.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Sets a throwaway AIRFLOW_HOME before airflow is imported (never a real installation).
from benchmarks import allocator_cycle as base  # noqa: E402

# isort: split

import sqlalchemy as sa  # noqa: E402
from airflow.models.taskinstance import TaskInstance  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from airflow_quota.allocator.cycle import run_allocation_cycle  # noqa: E402
from airflow_quota.allocator.kept_state import KeptQueues  # noqa: E402
from airflow_quota.allocator.settings import CycleSettings  # noqa: E402

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

TITLE = "Allocator processes on one PostgreSQL database (run_allocation_cycle back to back)"
SHARES_PER_QUEUE = 20
GPUS_PER_SHARE = base.GPUS_PER_SHARE
#: How often the driver finishes the granted tasks and defers as many new ones.
TURNOVER_S = 0.5
#: A cycle that found the lock held is retried after this long.
SKIP_RETRY_S = 0.01
FORK = multiprocessing.get_context("fork")  # the children start at once: airflow is already imported


def queue_of(share: int) -> str:
    return f"queue-{share // SHARES_PER_QUEUE:02d}"


def quota_document(shares: int) -> dict[str, Any]:
    """``shares / 20`` job queues of 20 quota shares of 10 GPUs (a mix of the three strategies)."""
    queues: dict[str, list[dict[str, Any]]] = {}
    for index in range(shares):
        queues.setdefault(queue_of(index), []).append(base.share_document(index, f"share-{index:03d}"))
    return {
        "jobQueues": [
            {
                "jobQueueName": name,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": len(members) * GPUS_PER_SHARE}],
                "quotaShares": members,
            }
            for name, members in queues.items()
        ]
    }


def defer_many(engine: sa.Engine, rng: random.Random, first: int, count: int, shares: int) -> None:
    """Write ``count`` task instances DEFERRED on their own admission trigger, over ``shares`` shares."""
    now = datetime.now(UTC)
    requests = []
    for number in range(first, first + count):
        share = rng.randrange(shares)
        requests.append(base.job_request(rng, number, queue_of(share), f"share-{share:03d}", now))
    base.write_deferred(engine, first, requests, now)


def finish_granted(engine: sa.Engine) -> int:
    """Every resumed (granted) task ran and succeeded; returns how many."""
    ti = TaskInstance.__table__
    with engine.begin() as connection:
        result = connection.execute(
            sa.update(ti)
            .where(ti.c.state == TaskInstanceState.SCHEDULED)
            .values(state=TaskInstanceState.SUCCESS, next_kwargs=None)
        )
    return int(result.rowcount)


# --- the allocator processes --------------------------------------------------------------------------------


def allocator_process(url: str, start: Event, stop: Event, summary_path: str) -> None:
    """Run cycles back to back from ``start`` until ``stop``; write what they did (JSON)."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    summary: dict[str, Any] = {"times_ms": [], "skipped": 0, "grants": 0, "errors": []}
    kept = KeptQueues()  # the queues kept between this process's cycles, as a host keeps them
    settings = CycleSettings(kept_queues=kept)
    try:
        start.wait()
        while not stop.is_set():
            began = time.perf_counter()
            try:
                with Session(engine, expire_on_commit=False) as session:  # each queue's part commits
                    report = run_allocation_cycle(
                        session, datetime.now(UTC), settings, commit_each_queue=True
                    )
            except Exception:  # what allocator.host.run_cycle logs and counts
                kept.forget()
                summary["errors"].append(traceback.format_exc(limit=8))
                time.sleep(SKIP_RETRY_S)
                continue
            if not report.skipped:
                kept.committed()
            if report.skipped:
                summary["skipped"] += 1
                time.sleep(SKIP_RETRY_S)
            else:
                summary["times_ms"].append((time.perf_counter() - began) * 1000.0)
                summary["grants"] += len(report.granted)
    finally:
        engine.dispose()
        Path(summary_path).write_text(json.dumps(summary))


# --- one run ------------------------------------------------------------------------------------------------


@dataclass
class Run:
    processes: int
    waiting: int
    shares: int
    seconds: float
    times_ms: list[float] = field(default_factory=list)
    grants: int = 0
    committed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    errors: int = 0
    finished: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else float("nan")

    @property
    def p95(self) -> float:
        if len(self.times_ms) < 2:
            return self.median
        return statistics.quantiles(self.times_ms, n=20, method="inclusive")[-1]

    @property
    def grants_per_s(self) -> float:
        return self.grants / self.seconds


def measure(
    backend: base.Backend,
    processes: int,
    waiting: int,
    shares: int,
    seconds: float,
    seed: int,
    console: Console,
) -> Run:
    engine = backend.engine
    base.reset(engine, quota_document(shares))
    rng = random.Random(f"{seed}-{waiting}-{shares}")
    defer_many(engine, rng, 0, waiting, shares)
    with Session(engine) as session, session.begin():  # records the N submissions at once: not measured
        first = run_allocation_cycle(session, datetime.now(UTC), CycleSettings(max_new_requests=0))
    if len(first.submitted) != waiting:
        raise RuntimeError(f"first cycle recorded {len(first.submitted)} of {waiting} submissions")
    run = Run(processes, waiting, shares, seconds)
    start, stop = FORK.Event(), FORK.Event()
    with tempfile.TemporaryDirectory(prefix="quota-scale-") as tmp:
        paths = [str(Path(tmp) / f"allocator-{n}.json") for n in range(processes)]
        children = [
            FORK.Process(target=allocator_process, args=(backend.url, start, stop, path)) for path in paths
        ]
        for child in children:
            child.start()
        time.sleep(0.5)  # let every child open its engine and wait
        next_number = waiting
        start.set()
        began = time.monotonic()
        try:
            while (remaining := began + seconds - time.monotonic()) > 0:
                time.sleep(min(TURNOVER_S, remaining))
                done = finish_granted(engine)
                defer_many(engine, rng, next_number, done, shares)
                next_number += done
                run.finished += done
        finally:
            stop.set()
            for child in children:
                child.join(timeout=600)
        run.seconds = time.monotonic() - began  # to the end of the last cycle started in the window
        for path in paths:
            summary = json.loads(Path(path).read_text())
            run.times_ms += summary["times_ms"]
            run.grants += summary["grants"]
            run.committed.append(len(summary["times_ms"]))
            run.skipped.append(summary["skipped"])
            run.errors += len(summary["errors"])
            for error in summary["errors"][:1]:
                console.print(f"[red]cycle failed:[/red]\n{error}")
    console.print(
        f"[dim]{processes} process(es), {waiting:,} waiting, {shares} shares: "
        f"{len(run.times_ms)} cycles, median {run.median:.0f} ms, {run.grants} grants in "
        f"{run.seconds:.1f} s, {run.finished} tasks finished by the driver[/dim]"
    )
    return run


def render(runs: Sequence[Run], console: Console) -> None:
    table = Table(title=TITLE)
    columns = (
        "processes",
        "waiting jobs",
        "shares",
        "cycles committed",
        "cycles skipped",
        "median ms",
        "p95 ms",
        "grants/s",
        "grants/s vs 1",
        "median vs 1",
    )
    for column in columns:
        table.add_column(column, justify="right")
    single = {(r.waiting, r.shares): r for r in runs if r.processes == 1}
    for run in sorted(runs, key=lambda r: (r.waiting, r.shares, r.processes)):
        one = single.get((run.waiting, run.shares))
        compare = one is not None and run.processes != 1
        table.add_row(
            str(run.processes),
            f"{run.waiting:,}",
            str(run.shares),
            " / ".join(str(n) for n in run.committed),
            " / ".join(str(n) for n in run.skipped),
            f"{run.median:.0f}",
            f"{run.p95:.0f}",
            f"{run.grants_per_s:.1f}",
            f"x{run.grants_per_s / one.grants_per_s:.2f}" if compare and one and one.grants else "",
            f"x{run.median / one.median:.2f}" if compare and one and one.times_ms else "",
        )
    console.print(table)
    console.print(
        "cycles committed / skipped: per process (skipped: the other process held the lock; retried after "
        f"{SKIP_RETRY_S * 1000:.0f} ms). median / p95: committed cycles of all processes. grants/s: all "
        f"processes; the driver finishes every granted task each {TURNOVER_S} s and defers as many new ones."
    )
    errors = sum(r.errors for r in runs)
    if errors:
        console.print(f"[red]{errors} cycles failed[/red]")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000", help="waiting jobs, comma-separated (1000,10000)")
    parser.add_argument("--shares", default="20,200", help="quota shares (multiples of 20), comma-separated")
    parser.add_argument("--processes", default="1,2", help="allocator processes, comma-separated (1,2)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured wall time per run (20)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    shares = [int(n) for n in args.shares.split(",")]
    processes = [int(n) for n in args.processes.split(",")]
    if any(n <= 0 or n % SHARES_PER_QUEUE for n in shares):
        parser.error(f"--shares: multiples of {SHARES_PER_QUEUE}")
    console = Console(width=160)
    runs: list[Run] = []
    console.print("[dim]migrating a fresh postgresql database...[/dim]")
    with base.postgresql_backend() as backend:
        for size in sizes:
            for n_shares in shares:
                for n_processes in processes:
                    runs.append(
                        measure(backend, n_processes, size, n_shares, args.seconds, args.seed, console)
                    )
    render(runs, console)
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
