"""Time one allocation cycle of the quota engine (``plan_cycle``) on large, full job queues.

The state is built directly from the engine's dataclasses, seeded, so every run times the same work:

* a job queue with 5 capacity units (GPU instance types) and 20 or 200 quota shares: a mix of RESERVE,
  LEND and LEND_AND_BORROW shares (borrow limits -1, 50, 100, 200), half of them with in-share
  preemption, each with limits on one to three units and capacity at least the sum of the limits;
* 1,000 RUNNING jobs that fill the queue (lenders below their limits, borrowers using what they lent);
* N RUNNABLE jobs (1,000, 10,000, 100,000): sizes 1-8 instances, priorities from a realistic mix, some
  from lenders below their limits (they reclaim: cross-share preemption) and some of high priority in
  shares with in-share preemption, so victim searches really happen; most can never start this cycle.

Three cycles are timed per configuration:

* ``decide``: the cycle on the state above, which grants and preempts;
* ``steady``: a cycle where nothing changes (the state after the decision cycles settled; the same
  RUNNABLE jobs are all looked at again and none can start);
* ``churn``: the settled state after 20 running jobs finished, the cycle a scheduler loop typically
  runs: a few grants, and statusReasons that are already there and mostly unchanged.

The goals reported against (issue 16): at 10,000 RUNNABLE, the first cycle (``decide``) under 40 ms and a
typical one (``churn``) within 20 ms, with 20 and with 200 shares; and growth from 10,000 to 100,000
RUNNABLE within x11 on every row (n log n would be x12.5).

Usage::

    .venv/bin/python benchmarks/engine_cycle.py            # full run (a few minutes at 100k)
    .venv/bin/python benchmarks/engine_cycle.py --quick    # smoke run, a few seconds
    .venv/bin/python benchmarks/engine_cycle.py --profile  # also cProfile one 10k decision cycle
    .venv/bin/python benchmarks/engine_cycle.py --shares 20 --runnable 10000 --json out.json  # one row
    .venv/bin/python benchmarks/engine_cycle.py --clock cpu  # CPU time: on a machine others load
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import pstats
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Runnable as a plain script from a checkout: make the package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from airflow_quota.engine.lifecycle import finish_job, without_final_jobs
from airflow_quota.engine.model import (
    CyclePlan,
    Grant,
    Job,
    JobQueue,
    JobRequest,
    JobStatus,
    Preemption,
    QueueState,
    QuotaShare,
    SharingStrategy,
)
from airflow_quota.engine.planner import plan_cycle

UNITS = ("ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.g5.12xlarge", "ml.g6e.xlarge", "ml.trn1.32xlarge")
SIZES = (1, 2, 4, 8)
SIZE_WEIGHTS = (45, 30, 17, 8)
#: schedulingPriority mix: most jobs at the default, some urgent, a few very urgent.
PRIORITIES = (0, 10, 50, 100, 500, 1000)
PRIORITY_WEIGHTS = (55, 15, 12, 10, 5, 3)
RUNNING = 1_000
TITLE = "Engine allocation cycle (plan_cycle)"
FINISHED_PER_CYCLE = 20
#: Goals at 10,000 RUNNABLE, per cycle: decide under 40 ms, churn within 20 ms; growth 10k -> 100k <= x11.
GOAL_MS = {"decide": 40.0, "churn": 20.0}
GOAL_GROWTH = 11.0


def draw_priority(rng: random.Random) -> int:
    return rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0]


# -- building the state ----------------------------------------------------------------------------------


def build_queue(rng: random.Random, n_shares: int, per_unit: float) -> JobQueue:
    """Shares whose limits split 97% of ``per_unit`` per unit, unevenly; the rest no share owns."""
    units_of = [tuple(sorted(rng.sample(UNITS, rng.choice((1, 2, 2, 3))))) for _ in range(n_shares)]
    limits: list[dict[str, int]] = [{} for _ in range(n_shares)]
    for unit in UNITS:
        holders = [index for index, units in enumerate(units_of) if unit in units]
        weights = [rng.uniform(0.3, 1.7) for _ in holders]
        for index, weight in zip(holders, weights, strict=True):
            limits[index][unit] = max(1, round(per_unit * 0.97 * weight / sum(weights)))
    shares: list[QuotaShare] = []
    for index in range(n_shares):
        strategy = rng.choices(
            (SharingStrategy.RESERVE, SharingStrategy.LEND, SharingStrategy.LEND_AND_BORROW), (25, 35, 40)
        )[0]
        borrows = strategy is SharingStrategy.LEND_AND_BORROW
        shares.append(
            QuotaShare(
                name=f"team-{index:03d}",
                capacity_limits=limits[index],
                strategy=strategy,
                borrow_limit=rng.choice((-1, 50, 100, 200)) if borrows else -1,
                in_share_preemption=rng.random() < 0.5,
            )
        )
    capacity = {unit: max(round(per_unit), sum(share.own_limit(unit) for share in shares)) for unit in UNITS}
    return JobQueue("gpu-training", capacity, tuple(shares))


@dataclass
class Ledger:
    """The fit rule, kept incrementally while the running jobs are placed (the engine is not used)."""

    queue: JobQueue
    usage: Counter[tuple[str, str]]
    held: Counter[str]

    def fits(self, share: QuotaShare, unit: str, count: int) -> bool:
        if self.held[unit] + count > self.queue.capacity[unit]:
            return False
        new = self.usage[(share.name, unit)] + count
        own = share.own_limit(unit)
        if new <= own:
            return self._overdraft(unit, share, count) <= 0
        ceiling = share.ceiling(unit)
        if not share.borrows or (ceiling is not None and new > ceiling):
            return False
        return self._overdraft(unit, share, count) <= 0

    def _overdraft(self, unit: str, changed: QuotaShare, delta: int) -> int:
        borrowed = lent = owned = 0
        for share in self.queue.shares:
            own = share.own_limit(unit)
            used = self.usage[(share.name, unit)] + (delta if share is changed else 0)
            owned += own
            borrowed += max(0, used - own)
            lent += max(0, own - used) if share.lends else 0
        return borrowed - lent - max(0, self.queue.capacity[unit] - owned)

    def add(self, share: QuotaShare, unit: str, count: int) -> None:
        self.usage[(share.name, unit)] += count
        self.held[unit] += count


def build_state(seed: str, n_shares: int, n_runnable: int, running: int = RUNNING) -> QueueState:
    """``running`` jobs that fill the queue, then ``n_runnable`` waiting ones.

    The queue is sized so that the running jobs fill it: the first guess assumes the mean job size, and
    is corrected (same seed) until ``running`` jobs fit and leave it nearly full.
    """
    mean_size = sum(s * w for s, w in zip(SIZES, SIZE_WEIGHTS, strict=True)) / sum(SIZE_WEIGHTS)
    per_unit = running * mean_size / len(UNITS)
    best: QueueState | None = None
    for _ in range(8):
        rng = random.Random(seed)
        state = _fill(rng, build_queue(rng, n_shares, per_unit), running)
        placed, full = len(state.jobs), occupancy(state)
        if placed == running and (best is None or full > occupancy(best)):
            best = state
        if placed < running:
            per_unit *= 1 + 0.5 * (running - placed) / running
        elif full < 0.985:
            per_unit *= full
        else:
            break
    if best is None:
        raise RuntimeError(f"could not place {running} running jobs in {n_shares} shares")
    # The waiting jobs come from their own generator: the first 1,000 of 10,000 are the 1,000.
    return _add_runnable(random.Random(f"{seed}-runnable"), best, n_runnable)


def _fill(rng: random.Random, queue: JobQueue, running: int) -> QueueState:
    """Place up to ``running`` jobs by the fit rule: first in turns, lenders keeping 0-50% of their
    limits idle (lent out), then anywhere they fit."""
    ledger = Ledger(queue, Counter(), Counter())
    jobs: dict[str, Job] = {}
    target = {
        share.name: rng.uniform(0.5, 1.0) if share.strategy is SharingStrategy.LEND else 1.0
        for share in queue.shares
    }
    for attempt in range(60 * running):
        if len(jobs) == running:
            break
        in_turns = attempt < 30 * running
        share = queue.shares[attempt % len(queue.shares)] if in_turns else rng.choice(queue.shares)
        unit = rng.choice(sorted(share.capacity_limits))
        count = rng.choices(SIZES, SIZE_WEIGHTS)[0]
        within_target = ledger.usage[(share.name, unit)] + count <= share.own_limit(unit) * target[share.name]
        if in_turns and not (within_target or share.borrows):
            continue
        if not ledger.fits(share, unit, count):
            continue
        ledger.add(share, unit, count)
        seq = len(jobs) + 1
        job_id = f"run-{seq:06d}"
        jobs[job_id] = Job(
            job_id=job_id,
            # Running jobs were admitted first: their priorities run higher than the waiting ones'.
            request=JobRequest(job_id, share.name, unit, count, max(draw_priority(rng), draw_priority(rng))),
            submitted=(float(seq), seq),
            status=rng.choice(
                (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RUNNING)
            ),
            started=(float(seq), seq),
        )
    return QueueState(queue, jobs)


def _add_runnable(rng: random.Random, state: QueueState, n_runnable: int) -> QueueState:
    queue, jobs = state.queue, dict(state.jobs)
    seq = len(jobs)
    for index in range(n_runnable):
        seq += 1
        share = rng.choice(queue.shares)
        limited = sorted(share.capacity_limits)
        unit = rng.choice(limited) if rng.random() < 0.97 else rng.choice(UNITS)
        job_id = f"wait-{index:06d}"
        request = JobRequest(
            job_id,
            share.name,
            unit,
            rng.choices(SIZES, SIZE_WEIGHTS)[0],
            draw_priority(rng),
            rng.choice((None, 3)),
        )
        jobs[job_id] = Job(job_id=job_id, request=request, submitted=(float(seq), seq))
    return QueueState(queue, jobs)


def settle(state: QueueState, now: float, limit: int = 20) -> tuple[QueueState, int]:
    """Plan cycles with nothing happening in between until one makes no decision (a steady state)."""
    for cycles in range(1, limit + 1):
        plan = plan_cycle(state, now)
        if not plan.decisions:
            return plan.state, cycles
        state = plan.state
    raise RuntimeError(f"no steady state after {limit} cycles")


# -- timing ----------------------------------------------------------------------------------------------


@dataclass
class Timing:
    shares: int
    runnable: int
    cycle: str
    times_ms: list[float]
    grants: int
    preemptions: int
    queue_full: float

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p90(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


#: What a cycle's time is read from: the wall clock, or this process's CPU time (``--clock cpu``: less
#: sensitive to other work on a loaded machine, which stretches the wall clock but not the CPU time).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def time_cycle(state: QueueState, repeats: int) -> tuple[list[float], CyclePlan]:
    times: list[float] = []
    plan = plan_cycle(state, 1e9)  # warm-up, and the decisions to report
    for _ in range(repeats):
        gc.collect()
        start = clock()
        plan_cycle(state, 1e9)
        times.append((clock() - start) * 1000)
    return times, plan


def occupancy(state: QueueState) -> float:
    held = sum(job.count for job in state.jobs.values() if job.status.holds_capacity)
    return held / sum(state.queue.capacity.values())


def measure(n_shares: int, n_runnable: int, repeats: int, seed: int) -> list[Timing]:
    state = build_state(f"{seed}-{n_shares}", n_shares, n_runnable)
    full = occupancy(state)
    results: list[Timing] = []
    times, plan = time_cycle(state, repeats)
    grants = sum(isinstance(d, Grant) for d in plan.decisions)
    preemptions = sum(isinstance(d, Preemption) for d in plan.decisions)
    results.append(Timing(n_shares, n_runnable, "decide", times, grants, preemptions, full))
    steady, _ = settle(plan.state, 1e9)
    times, plan = time_cycle(steady, repeats)
    assert not plan.decisions
    results.append(Timing(n_shares, n_runnable, "steady", times, 0, 0, occupancy(steady)))
    churned = finish_some(steady, FINISHED_PER_CYCLE)
    times, plan = time_cycle(churned, repeats)
    grants = sum(isinstance(d, Grant) for d in plan.decisions)
    preemptions = sum(isinstance(d, Preemption) for d in plan.decisions)
    results.append(Timing(n_shares, n_runnable, "churn", times, grants, preemptions, occupancy(churned)))
    return results


def finish_some(state: QueueState, count: int) -> QueueState:
    """The settled state after the ``count`` earliest-started running jobs finished (a typical loop)."""
    running = sorted(
        (job for job in state.jobs.values() if job.status.holds_capacity and not job.is_stopping),
        key=lambda job: (job.started or (0.0, 0), job.job_id),
    )
    for job in running[:count]:
        state = finish_job(state, job.job_id, succeeded=True)
    return without_final_jobs(state)


def n_log_n_ratio(small: int, large: int) -> float:
    return (large * math.log(large)) / (small * math.log(small))


def render(results: Sequence[Timing], console: Console) -> bool:
    table = Table(title=f"{TITLE}, {'CPU time' if clock is time.process_time else 'wall clock'}")
    for column in ("shares", "RUNNABLE", "cycle", "runs", "median ms", "p90 ms", "decisions"):
        table.add_column(column, justify="right")
    table.add_column("growth", justify="right")
    table.add_column("n log n growth", justify="right")
    table.add_column("queue full", justify="right")
    previous: dict[tuple[int, str], Timing] = {}
    growth_ok = True
    for timing in results:
        before = previous.get((timing.shares, timing.cycle))
        growth = expected = ""
        if before is not None:
            ratio = timing.median / before.median
            bound = n_log_n_ratio(before.runnable, timing.runnable)
            growth, expected = f"x{ratio:.1f}", f"x{bound:.1f}"
            growth_ok &= ratio <= bound
        previous[(timing.shares, timing.cycle)] = timing
        decisions = (
            f"{timing.grants + timing.preemptions} ({timing.grants} G, {timing.preemptions} P)"
            if timing.cycle != "steady"
            else "0"
        )
        table.add_row(
            str(timing.shares),
            f"{timing.runnable:,}",
            timing.cycle,
            str(len(timing.times_ms)),
            f"{timing.median:.1f}",
            f"{timing.p90:.1f}",
            decisions,
            growth,
            expected,
            f"{timing.queue_full:.1%}",
        )
    console.print(table)
    goal_rows = [t for t in results if t.runnable == 10_000 and t.cycle in GOAL_MS]
    met = True
    for timing in goal_rows:
        goal = GOAL_MS[timing.cycle]
        within = timing.median < goal if timing.cycle == "decide" else timing.median <= goal
        met &= within
        console.print(
            f"Goal: 10,000 RUNNABLE, {timing.shares} shares, {timing.cycle} cycle within {goal:.0f} ms: "
            f"{timing.median:.1f} ms median, {'met' if within else 'MISSED'}"
        )
    by_row = {(t.shares, t.cycle, t.runnable): t for t in results}
    growth_rows = [
        (key, by_row[(key[0], key[1], 100_000)].median / by_row[key].median)
        for key in by_row
        if key[2] == 10_000 and (key[0], key[1], 100_000) in by_row
    ]
    for (shares, cycle, _), growth in growth_rows:
        console.print(
            f"Goal: growth 10k -> 100k within x{GOAL_GROWTH:.0f}, {shares} shares, {cycle}: x{growth:.1f}, "
            f"{'met' if growth <= GOAL_GROWTH else 'MISSED'}"
        )
    growth_met = all(growth <= GOAL_GROWTH for _, growth in growth_rows)
    console.print(f"Goal: growth no worse than n log n: {'met' if growth_ok else 'MISSED'}")
    return met and growth_met


def profile(n_shares: int, n_runnable: int, seed: int, console: Console) -> None:
    state = build_state(f"{seed}-{n_shares}", n_shares, n_runnable)
    profiler = cProfile.Profile()
    profiler.enable()
    plan_cycle(state, 1e9)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(15)
    console.print(f"cProfile, one decision cycle, {n_shares} shares, {n_runnable:,} RUNNABLE (by own time):")
    console.print(out.getvalue(), markup=False, highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats: a smoke run")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile a 10k decision cycle per share count"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shares", default="20,200", help="share counts, comma-separated")
    parser.add_argument("--runnable", default="1000,10000,100000", help="RUNNABLE counts, comma-separated")
    parser.add_argument("--json", type=Path, help="also write each row's median and p90 ms to this file")
    parser.add_argument(
        "--check-goal", action="store_true", help="exit 1 when the goal is missed (default: report only)"
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="time cycles by the wall clock or CPU time"
    )
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    console = Console(width=140)
    if args.quick:
        plan = [(20, 200, 3), (20, 1_000, 3)]
    else:
        repeats_at = {1_000: 21, 10_000: 11, 100_000: 3}
        plan = [
            (shares, runnable, repeats_at.get(runnable, 5))
            for shares in (int(each) for each in args.shares.split(","))
            for runnable in (int(each) for each in args.runnable.split(","))
        ]
    results: list[Timing] = []
    for shares, runnable, repeats in plan:
        console.print(f"[dim]timing {shares} shares, {runnable:,} RUNNABLE, {repeats} runs...[/dim]")
        results.extend(measure(shares, runnable, repeats, args.seed))
    met = render(results, console)
    if args.json:
        rows = [
            {
                "shares": t.shares,
                "runnable": t.runnable,
                "cycle": t.cycle,
                "median_ms": t.median,
                "p90_ms": t.p90,
            }
            for t in results
        ]
        args.json.write_text(json.dumps(rows, indent=1))
    if args.profile:
        for shares in (20, 200):
            profile(shares, 10_000, args.seed, console)
    return 0 if met or not args.check_goal else 1


if __name__ == "__main__":
    sys.exit(main())
