"""Allocation quality on a multi-team trace: quota management against a fixed partition and the bound.

The simulator (``airflow_quota.sim``, the engine on a simulated clock) replays one bursty trace of four
teams on 16 ``ml.p4d.24xlarge`` (``examples/traces/quotas.yaml``: prod RESERVE, eval LEND, research
LEND_AND_BORROW 100 with in-share preemption, vision LEND_AND_BORROW unlimited) several ways, side by side:

* ``quota``: the quota file as written, preempted jobs taking ``--stop-seconds`` to stop and resuming from
  a checkpoint taken every ``--checkpoint-interval`` seconds of progress;
* ``quota, ckpt-aware``: the same with every share's ``checkpointAwareVictims`` extension on
  (docs/extensions.md): among victims of one rank, those that lose the least work since their last
  checkpoint go first; the summary compares its GPU time lost and makespan with ``quota``'s (goal: at
  most half the loss, makespan no more than 2% longer);
* ``quota, at ckpt, wait 900`` and ``quota, at ckpt, wait 300``: the same with every share's
  ``preemptAtCheckpoint`` extension on (docs/extensions.md; ``checkpointIntervalSeconds`` the trace's
  ``--checkpoint-interval``, ``maximumWaitSeconds`` 900 or 300, margin 30 s): a preemption whose victims
  reach their next checkpoint within the wait is made then instead of now, same victims; the summary
  compares each with ``quota`` against the same goal;
* ``quota, free stops``: the same with 0-second stops and exact resumption: no preemption loss at all,
  which separates the loss from the sharing policy;
* ``quota, all borrow``: every share LEND_AND_BORROW without a borrow limit (priorities, in-share
  preemption and stops as in ``quota``): the sharing mechanism without the file's RESERVE, LEND and
  borrowLimit caps, which separates the cost of those choices from the cost of the mechanism;
* ``fixed partition``: every share RESERVE (what Airflow pools give);
* ``one pool``: every job in a single share owning all 16 (no quotas, no preemption): a work-conserving
  FIFO-by-priority scheduler, the best any sharing policy over these jobs can hope to come near;
* ``bound``: the work-conserving lower bound. Its makespan ends at max(max_j(submit_j + duration_j),
  max_t(t + work submitted at or after t / capacity)) (work divisible at will); its utilization is 100%
  while work is queued.

A second bound, **the bound under the file's caps**, is the lower bound for any scheduler that keeps a
quota configuration's sharing rules (``bound_under_caps``): for every set S of shares, S's jobs can hold
at most cap(S) = min(sum of maxUsable(s) over S, capacity - RESERVE capacity of the shares outside S)
units at once (maxUsable: the share's own limit for RESERVE and LEND, own x (1 + borrowLimit/100) for a
limited LEND_AND_BORROW, everything but the other shares' RESERVE capacity when unlimited), so the
arrival bound above with S's jobs and cap(S) holds too; the bound is the largest over all S. Each column
gets the bound of the configuration it replays (``quota``: the file as written); every run is checked to
end no earlier than both bounds.

The trace is ``examples/traces/make_trace.py``'s generator with every team's job count multiplied by
``--load`` (1.5 by default: 3,000 jobs over 16 days, bursts that queue), seeded, so runs repeat exactly.

Usage::

    .venv/bin/python benchmarks/allocation_quality.py                 # 3,000 jobs, about a minute
    .venv/bin/python benchmarks/allocation_quality.py --load 0.1      # 200 jobs, a smoke run
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from types import ModuleType

# Runnable as a plain script from a checkout: make the package importable without installing it.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from airflow_quota.engine.model import Job, JobQueue, JobStatus, QuotaShare  # noqa: E402
from airflow_quota.sim.jobs import JobRecord  # noqa: E402
from airflow_quota.sim.metrics import MetricsRecorder, mean, p95  # noqa: E402
from airflow_quota.sim.result import JobOutcome  # noqa: E402
from airflow_quota.sim.runner import Simulation  # noqa: E402
from airflow_quota.sim.scenario import (  # noqa: E402
    QueueConfiguration,
    Scenario,
    ScenarioEvent,
    Settings,
    SubmitJob,
)
from airflow_quota.sim.trace import load_queue_configuration, load_trace  # noqa: E402

TITLE = "Allocation quality on a multi-team trace (simulated)"
QUOTA_FILE = ROOT / "examples" / "traces" / "quotas.yaml"
TRACE_GENERATOR = ROOT / "examples" / "traces" / "make_trace.py"
POOL_SHARE = "pool"
#: Goal: makespan within 5% of the work-conserving bound.
GOAL_RATIO = 1.05
CHECKPOINT_AWARE = "quota, ckpt-aware"
#: ``preemptAtCheckpoint`` runs: their label prefix, and the maximumWaitSeconds of each.
AT_CHECKPOINT = "quota, at ckpt, wait"
AT_CHECKPOINT_WAITS = (900, 300)
#: Goals of checkpoint-aware victims against the default victim order (issue 37).
LOST_GOAL = 0.5
MAKESPAN_GOAL = 1.02


# --- the trace ----------------------------------------------------------------------------------------------


def load_trace_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_trace", TRACE_GENERATOR)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {TRACE_GENERATOR}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write_scaled_trace(path: Path, load: float, seed: int) -> None:
    """make_trace.py's bursty teams, each team submitting ``load`` times as many jobs (same 16 days)."""
    generator = load_trace_generator()
    teams = tuple(replace(team, jobs=max(1, round(team.jobs * load))) for team in generator.TEAMS)
    vars(generator)["TEAMS"] = teams  # generate() reads the module's TEAMS
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=generator.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(generator.generate(seed))


# --- a simulation that also measures capacity use while work is queued -----------------------------------


class BacklogRecorder(MetricsRecorder):
    """The simulator's metrics, plus unit-seconds held and offered while at least one job was RUNNABLE."""

    def __init__(self, capacity: dict[str, int]) -> None:
        super().__init__(capacity)
        self.total_capacity = sum(capacity.values())
        self.units_held = 0
        self.jobs_waiting = 0
        self.backlog_clock = 0.0
        self.backlog_seconds = 0.0
        self.backlog_held_unit_seconds = 0.0

    def advance(self, now: float) -> None:
        elapsed = now - self.backlog_clock
        if elapsed > 0:
            if self.jobs_waiting > 0:
                self.backlog_seconds += elapsed
                self.backlog_held_unit_seconds += self.units_held * elapsed
            self.backlog_clock = now
        super().advance(now)

    def held(self, unit: str, units: int) -> None:
        self.units_held += units
        super().held(unit, units)


class BacklogSimulation(Simulation):
    """``Simulation`` counting RUNNABLE jobs for ``BacklogRecorder`` (hooks on its waiting bookkeeping)."""

    def __init__(self, scenario: Scenario, *, checkpoint_interval: float) -> None:
        super().__init__(scenario, record_steps=False, checkpoint_interval=checkpoint_interval)
        self.backlog = BacklogRecorder(dict(self.configuration.queue.capacity))
        self.metrics = self.backlog

    def _waiting(self, record: JobRecord) -> None:
        if record.runnable_since is None:
            self.backlog.jobs_waiting += 1
        super()._waiting(record)

    def _not_waiting(self, record: JobRecord) -> None:
        if record.runnable_since is not None:
            self.backlog.jobs_waiting -= 1
        super()._not_waiting(record)


# --- runs ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    label: str
    configuration: QueueConfiguration
    events: tuple[ScenarioEvent, ...]
    settings: Settings
    checkpoint_interval: float


@dataclass(frozen=True)
class RunResult:
    label: str
    span_start: float
    span_end: float
    utilization: float
    backlog_utilization: float | None
    backlog_hours: float
    #: Per team (the job's team, also in the one-pool run): (mean, p95) RUNNABLE seconds.
    waits: dict[str, tuple[float | None, float | None]]
    preemptions: int
    gpu_seconds_lost: float
    unfinished: int
    wall_seconds: float


def run(spec: RunSpec, team_of: dict[str, str]) -> RunResult:
    scenario = Scenario(f"trace ({spec.label})", spec.configuration, spec.settings, spec.events)
    started = time.perf_counter()
    simulation = BacklogSimulation(scenario, checkpoint_interval=spec.checkpoint_interval)
    result = simulation.run()
    wall = time.perf_counter() - started
    metrics = result.metrics
    unit = next(iter(result.queue.capacity))
    by_team: dict[str, list[JobOutcome]] = defaultdict(list)
    for name, outcome in result.jobs.items():
        by_team[team_of[name]].append(outcome)
    backlog = simulation.backlog
    offered = backlog.total_capacity * backlog.backlog_seconds
    return RunResult(
        label=spec.label,
        span_start=metrics.span_start or 0.0,
        span_end=metrics.span_end or 0.0,
        utilization=metrics.utilization.get(unit) or 0.0,
        backlog_utilization=backlog.backlog_held_unit_seconds / offered if offered else None,
        backlog_hours=backlog.backlog_seconds / 3600,
        waits={
            team: (
                mean(job.runnable_seconds for job in jobs),
                p95(job.runnable_seconds for job in jobs),
            )
            for team, jobs in sorted(by_team.items())
        },
        preemptions=metrics.preemptions_total,
        gpu_seconds_lost=metrics.lost_total(unit),
        unfinished=sum(1 for job in result.jobs.values() if job.status is not JobStatus.SUCCEEDED),
        wall_seconds=wall,
    )


def every_share_borrowing(configuration: QueueConfiguration) -> QueueConfiguration:
    """The same shares, each LEND_AND_BORROW without a borrow limit (in-share preemption kept)."""
    shares = [
        {**share, "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}}
        for share in configuration.shares_raw
    ]
    return QueueConfiguration.parse(configuration.queue_raw, shares, "every share LEND_AND_BORROW")


def with_extensions(configuration: QueueConfiguration, extensions: dict[str, object]) -> QueueConfiguration:
    """The same shares, each with ``extensions`` (our extensions block, docs/extensions.md)."""
    shares = [{**share, "extensions": extensions} for share in configuration.shares_raw]
    return QueueConfiguration.parse(configuration.queue_raw, shares, f"every share with {extensions}")


def one_pool(configuration: QueueConfiguration, events: Sequence[ScenarioEvent]) -> RunSpec:
    """Every job in one RESERVE share that owns the whole queue: work-conserving, no preemption."""
    queue_raw = dict(configuration.queue_raw)
    pool_share = {
        "quotaShareName": POOL_SHARE,
        "capacityLimits": queue_raw["capacityLimits"],
        "resourceSharingConfiguration": {"strategy": "RESERVE"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
    }
    pooled = QueueConfiguration.parse(queue_raw, [pool_share], "one pool")
    pooled_events = []
    for event in events:
        assert isinstance(event.action, SubmitJob)
        request = replace(event.action.request, quota_share_name=POOL_SHARE)
        pooled_events.append(replace(event, action=replace(event.action, request=request)))
    return RunSpec("one pool", pooled, tuple(pooled_events), Settings(), 0.0)


@dataclass(frozen=True)
class Bound:
    span_start: float
    span_end: float
    work_unit_seconds: float
    capacity: int


def work_conserving_bound(events: Sequence[ScenarioEvent], capacity: int) -> Bound:
    """The earliest any scheduler could finish: arrivals and total work, with work divisible at will."""
    jobs = _submitted_jobs(events)
    arrivals = sorted((job.at, job.work) for job in jobs)
    end = max(_longest_job_end(jobs), _arrival_end(arrivals, capacity))
    return Bound(arrivals[0][0], end, sum(work for _, work in arrivals), capacity)


@dataclass(frozen=True)
class CappedBound:
    """The bound under a quota configuration's caps, and what sets it."""

    span_start: float
    span_end: float
    #: The shares whose jobs set it, sorted, and the most units of ``unit`` they can hold together;
    #: () and None when the longest job (submission + duration) sets it.
    shares: tuple[str, ...]
    unit: str | None
    cap: int


@dataclass(frozen=True)
class _TraceJob:
    at: float
    duration: float
    count: int
    share: str
    unit: str

    @property
    def work(self) -> float:
        return self.count * self.duration


def _submitted_jobs(events: Sequence[ScenarioEvent]) -> list[_TraceJob]:
    jobs = []
    for event in events:
        assert isinstance(event.action, SubmitJob) and event.action.duration is not None
        request = event.action.request
        jobs.append(
            _TraceJob(
                event.at,
                event.action.duration,
                request.instance_count,
                request.quota_share_name,
                request.capacity_unit,
            )
        )
    return jobs


def _longest_job_end(jobs: Sequence[_TraceJob]) -> float:
    return max(job.at + job.duration for job in jobs)


def _arrival_end(arrivals: Sequence[tuple[float, float]], capacity: int) -> float:
    """max over submission times t of t + (work submitted at or after t) / capacity; arrivals sorted."""
    return _binding_arrival(arrivals, capacity)[0]


def _binding_arrival(arrivals: Sequence[tuple[float, float]], capacity: int) -> tuple[float, float, float]:
    """``_arrival_end``, with the submission time t that sets it and the work submitted at or after t."""
    remaining = sum(work for _, work in arrivals)
    best = (float("-inf"), arrivals[0][0], remaining)
    for at, work in arrivals:
        if at + remaining / capacity > best[0]:
            best = (at + remaining / capacity, at, remaining)
        remaining -= work
    return best


def max_usable(queue: JobQueue, share: QuotaShare, unit: str) -> int:
    """The most units of ``unit`` ``share``'s jobs can hold at once under the queue's sharing rules.

    Its own limit for RESERVE and LEND, own x (1 + borrowLimit/100) for LEND_AND_BORROW with a limit
    (the engine's ``QuotaShare.ceiling``); never more than the queue less what the other shares keep
    for themselves (RESERVE: capacity that is never lent); 0 without a limit for ``unit``.
    """
    if not share.has_limit_for(unit):
        return 0
    capacity = queue.capacity.get(unit, 0)
    reserved_by_others = sum(
        other.own_limit(unit) for other in queue.shares if other.name != share.name and not other.lends
    )
    ceiling = share.ceiling(unit)
    return max(0, min(capacity - reserved_by_others, capacity if ceiling is None else ceiling))


def subset_capacity(queue: JobQueue, share_names: Collection[str], unit: str) -> int:
    """cap(S): the most units of ``unit`` the jobs of ``share_names`` can hold together at any moment.

    The sum of their ``max_usable``, and never more than the queue less the RESERVE capacity of the
    shares outside the set (borrowing only ever takes lenders' idle capacity and capacity no share owns).
    """
    capacity = queue.capacity.get(unit, 0)
    reserved_outside = sum(
        share.own_limit(unit) for share in queue.shares if share.name not in share_names and not share.lends
    )
    usable = sum(max_usable(queue, queue.share(name), unit) for name in share_names)
    return max(0, min(usable, capacity - reserved_outside))


def bound_under_caps(events: Sequence[ScenarioEvent], queue: JobQueue) -> CappedBound:
    """The earliest any scheduler that keeps ``queue``'s sharing rules could finish (work divisible).

    For every non-empty set S of the shares that have jobs (per capacity unit), S's jobs never hold more
    than ``subset_capacity`` units at once, so the arrival bound with S's jobs and that capacity holds;
    the largest over all S, and the longest job's submission + duration. Raises ``ValueError`` for a job
    that asks for more instances than its share can ever hold (it would never run). Exponential in the
    number of shares with jobs (2^n sets): meant for the handful a benchmark queue has.
    """
    jobs = _submitted_jobs(events)
    by_unit: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for job in jobs:
        cap = subset_capacity(queue, [job.share], job.unit)
        if job.count > cap:
            raise ValueError(
                f"a job of share {job.share!r} asks for {job.count} x {job.unit}, more than the "
                f"{cap} the share can ever hold: it never runs, and no makespan bounds it"
            )
        by_unit[job.unit][job.share].append((job.at, job.work))
    best = CappedBound(min(job.at for job in jobs), _longest_job_end(jobs), (), None, 0)
    for unit, by_share in sorted(by_unit.items()):
        names = sorted(by_share)
        for size in range(1, len(names) + 1):
            for subset in combinations(names, size):
                cap = subset_capacity(queue, subset, unit)
                arrivals = sorted(arrival for name in subset for arrival in by_share[name])
                end = _arrival_end(arrivals, cap)
                if end > best.span_end:
                    best = replace(best, span_end=end, shares=subset, unit=unit, cap=cap)
    return best


def check_bounds(results: Sequence[RunResult], bound: Bound, capped: Sequence[CappedBound]) -> None:
    """Every run ends no earlier than the plain bound and than the bound under its own configuration's caps.

    Raises ``RuntimeError`` otherwise: a bound a run beats is not a lower bound (or the run broke a cap).
    """
    tolerance = 1e-6
    for result, capped_bound in zip(results, capped, strict=True):
        makespan = result.span_end - result.span_start
        for name, span in (
            ("the work-conserving bound", bound.span_end - bound.span_start),
            ("the bound under its file's caps", capped_bound.span_end - capped_bound.span_start),
        ):
            if makespan < span - tolerance:
                raise RuntimeError(
                    f"{result.label}: makespan {makespan:.3f} s is below {name} ({span:.3f} s)"
                )


# --- --diagnose: why capacity was idle, moment by moment -------------------------------------------------


#: The categories of ``idle_partition``, in the order they are assigned (each unit-second gets one).
HELD_RUNNING = "held by jobs running"
HELD_STOPPING = "held by jobs being stopped"
PROMISED = "idle, promised to a preemptor waiting for its victims"
STARTABLE = "idle, a waiting job could legally start now"
BLOCKED_RESERVE = "idle, waiting jobs kept out only by RESERVE"
BLOCKED_CEILING = "idle, waiting jobs kept out only by ceilings"
BLOCKED_SIZE = "idle, waiting work too big only by job sizes"
NO_WORK = "idle, no waiting work"
HELD_OUTSIDE = "held by shares outside the set"
IDLE_CATEGORIES = (
    HELD_RUNNING,
    HELD_STOPPING,
    PROMISED,
    STARTABLE,
    BLOCKED_RESERVE,
    BLOCKED_CEILING,
    BLOCKED_SIZE,
    NO_WORK,
    HELD_OUTSIDE,
)


def _subset_sums(sizes: dict[int, int], limit: int) -> list[int]:
    """Every total up to ``limit`` that some of the jobs (``sizes``: instance count -> jobs) add up to."""
    reach = [True] + [False] * limit
    for size, jobs in sizes.items():
        for _ in range(min(jobs, limit // size)):
            for total in range(limit, size - 1, -1):
                reach[total] = reach[total] or reach[total - size]
    return [total for total, reachable in enumerate(reach) if reachable]


def _most_startable(
    free: int, pool_room: int, shares: Sequence[tuple[int | None, bool, dict[int, int]]]
) -> int:
    """The most units waiting jobs could take at once, whole jobs only.

    ``shares``: per share, (units it may still add under its ceiling or None, whether it draws on the
    lending pool, its waiting jobs as instance count -> jobs). At most ``free`` units in all, and at most
    ``pool_room`` by the shares that draw on the pool.
    """
    reachable = {(0, 0)}
    for room, pooled, sizes in shares:
        options = _subset_sums(sizes, max(0, free if room is None else min(free, room)))
        reachable = {
            (units + add, pool + (add if pooled else 0))
            for units, pool in reachable
            for add in options
            if units + add <= free and pool + (add if pooled else 0) <= pool_room
        }
    return max(units for units, _ in reachable)


def idle_partition(
    queue: JobQueue,
    jobs: Collection[Job],
    shares_in: Collection[str] | None = None,
    capacity: int | None = None,
) -> dict[str, int]:
    """Split ``capacity`` units of a settled queue (one capacity unit) into ``IDLE_CATEGORIES``.

    An oracle written from the README's rules, not from the engine's code: a waiting job may start now on
    idle units when its share stays within its ceiling, the shares that lend (LEND, LEND_AND_BORROW)
    together stay within what they own plus the unowned capacity (borrowing takes only lenders' idle
    units, never RESERVE ones) and the units are idle and promised to nobody. Share usage counts a
    preemptor waiting for its victims instead of them (two-phase preemption). ``STARTABLE`` is the most
    units whole waiting jobs could take under those rules: after an allocation cycle that decided
    nothing it is 0 for an engine with no head-of-line blocking. The next categories are what relaxing
    one more rule would make usable: RESERVE capacity lendable, then no ceilings, then divisible jobs.

    With ``shares_in`` (and its ``capacity``, cap(S) of the bound under the caps), the same for that set
    of shares only: units held by its jobs, promised to its preemptors, and what its waiting jobs could
    use of min(cap(S) - those, units idle in the queue); the rest is ``HELD_OUTSIDE`` (or, for victims
    that hold more than their preemptor needs, ``HELD_STOPPING``).
    """
    (unit,) = queue.capacity
    shares = {share.name: share for share in queue.shares}
    inside = set(shares) if shares_in is None else set(shares_in)
    total = queue.capacity[unit]
    capacity = total if capacity is None else capacity
    by_id = {job.job_id: job for job in jobs}
    usage: dict[str, int] = defaultdict(int)
    victims_held: dict[str, int] = defaultdict(int)
    waiting: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    counts = dict.fromkeys(IDLE_CATEGORIES, 0)
    held_all = 0
    for job in jobs:
        if job.status.holds_capacity:
            held_all += job.count
            preemptor = by_id.get(job.preempted_by) if job.preempted_by else None
            if job.stop_cause is None:
                usage[job.share_name] += job.count
                counts[HELD_RUNNING] += job.count if job.share_name in inside else 0
            elif preemptor is not None and job.job_id in preemptor.awaiting_victims:
                victims_held[preemptor.job_id] += job.count
            else:  # being terminated, or its preemptor is gone: it counts in its share until it stops
                usage[job.share_name] += job.count
                counts[HELD_STOPPING] += job.count if job.share_name in inside else 0
        elif job.status is JobStatus.RUNNABLE and not job.awaiting_victims and job.share_name in inside:
            waiting[job.share_name][job.count] += 1
    promised_all = surplus = 0
    for job in jobs:
        if job.status is JobStatus.RUNNABLE and job.awaiting_victims:
            usage[job.share_name] += job.count
            held_for_it = min(job.count, victims_held[job.job_id])
            surplus += victims_held[job.job_id] - held_for_it
            promised_all += job.count - held_for_it
            if job.share_name in inside:
                counts[HELD_STOPPING] += held_for_it
                counts[PROMISED] += job.count - held_for_it
    used_inside = counts[HELD_RUNNING] + counts[HELD_STOPPING] + counts[PROMISED]
    free = max(0, min(capacity - used_inside, total - held_all - promised_all))
    lending = [name for name, share in shares.items() if share.lends]
    owned = sum(share.own_limit(unit) for share in shares.values())
    pool = sum(shares[name].own_limit(unit) for name in lending) + max(0, total - owned)

    def startable(*, reserve_lends: bool, ceilings: bool) -> int:
        rows = []
        for name in sorted(inside):
            ceiling = shares[name].ceiling(unit) if ceilings else None
            room = None if ceiling is None else ceiling - usage[name]
            rows.append((room, reserve_lends or shares[name].lends, dict(waiting[name])))
        if reserve_lends:
            room_in_pool = total - sum(usage.values())
        else:
            room_in_pool = pool - sum(usage[name] for name in lending)
        return _most_startable(free, max(0, room_in_pool), rows)

    legal = startable(reserve_lends=False, ceilings=True)
    lending_reserve = startable(reserve_lends=True, ceilings=True)
    no_ceilings = startable(reserve_lends=True, ceilings=False)
    divisible = min(free, sum(size * jobs for sizes in waiting.values() for size, jobs in sizes.items()))
    counts[STARTABLE] = legal
    counts[BLOCKED_RESERVE] = lending_reserve - legal
    counts[BLOCKED_CEILING] = no_ceilings - lending_reserve
    counts[BLOCKED_SIZE] = divisible - no_ceilings
    counts[NO_WORK] = free - divisible
    rest = capacity - sum(counts.values())
    counts[HELD_STOPPING] += min(rest, surplus)
    counts[HELD_OUTSIDE] = rest - min(rest, surplus)
    return counts


@dataclass
class IdlePartition:
    """Unit-seconds per ``IDLE_CATEGORIES`` entry of a set of shares (None: the queue) from ``since``."""

    label: str
    shares: frozenset[str] | None
    capacity: int
    since: float
    unit_seconds: dict[str, float]
    #: The first moments at which a waiting job could legally have started (STARTABLE > 0), and the state.
    startable_moments: list[tuple[float, dict[str, Job]]]


class DiagnosedSimulation(BacklogSimulation):
    """``BacklogSimulation`` partitioning capacity-time with ``idle_partition`` once each moment settles."""

    def __init__(
        self, scenario: Scenario, *, checkpoint_interval: float, partitions: list[IdlePartition]
    ) -> None:
        super().__init__(scenario, checkpoint_interval=checkpoint_interval)
        self.partitions = partitions
        self._settled: list[dict[str, int]] | None = None
        self._settled_at = 0.0

    def _begin(self, now: float) -> None:
        if self._settled is not None:
            for partition, counts in zip(self.partitions, self._settled, strict=True):
                elapsed = now - max(self._settled_at, partition.since)
                if elapsed > 0:
                    for category, units in counts.items():
                        partition.unit_seconds[category] += units * elapsed
        super()._begin(now)

    def _end(self) -> None:
        jobs = list(self.state.jobs.values())
        self._settled = []
        for partition in self.partitions:
            counts = idle_partition(self.state.queue, jobs, partition.shares, partition.capacity)
            if counts[STARTABLE] and len(partition.startable_moments) < 5:
                partition.startable_moments.append((self._now, dict(self.state.jobs)))
            self._settled.append(counts)
        self._settled_at = self._now
        super()._end()


def binding_submission(events: Sequence[ScenarioEvent], capped: CappedBound) -> tuple[float, float]:
    """(t, work of the binding shares submitted at or after t) for the t that sets ``capped``."""
    jobs = [job for job in _submitted_jobs(events) if job.share in capped.shares and job.unit == capped.unit]
    _, at, remaining = _binding_arrival(sorted((job.at, job.work) for job in jobs), capped.cap)
    return at, remaining


@dataclass(frozen=True)
class Diagnosis:
    label: str
    span_start: float
    span_end: float
    partitions: list[IdlePartition]
    #: The binding set's work submitted from its binding time on (unit-seconds); 0 without a binding set.
    binding_work: float


def diagnose(spec: RunSpec, capped: CappedBound) -> Diagnosis:
    """Replay ``spec`` partitioning capacity-time: the whole queue, the set that binds the bound under the
    caps, and that set from the submission time that binds it (where the makespan's excess over that
    bound accrues: cap(S) x (end - t) = S's work submitted from t + everything else in that partition)."""
    capacity = sum(spec.configuration.queue.capacity.values())
    partitions = [IdlePartition("whole queue", None, capacity, float("-inf"), defaultdict(float), [])]
    binding_work = 0.0
    if capped.shares:
        since, binding_work = binding_submission(spec.events, capped)
        names = frozenset(capped.shares)
        partitions.append(
            IdlePartition(", ".join(capped.shares), names, capped.cap, float("-inf"), defaultdict(float), [])
        )
        partitions.append(
            IdlePartition(
                f"{', '.join(capped.shares)} from t*", names, capped.cap, since, defaultdict(float), []
            )
        )
    scenario = Scenario(f"trace ({spec.label})", spec.configuration, spec.settings, spec.events)
    simulation = DiagnosedSimulation(
        scenario, checkpoint_interval=spec.checkpoint_interval, partitions=partitions
    )
    metrics = simulation.run().metrics
    return Diagnosis(spec.label, metrics.span_start or 0.0, metrics.span_end or 0.0, partitions, binding_work)


def render_diagnosis(diagnosis: Diagnosis, capped: CappedBound, console: Console) -> None:
    span = diagnosis.span_end - diagnosis.span_start
    table = Table(
        title=f"--diagnose {diagnosis.label}: where capacity-time went (GPU-hours, % of cap x span)"
    )
    table.add_column("category")
    for partition in diagnosis.partitions:
        since = max(partition.since, diagnosis.span_start)
        title = f"{partition.label} ({partition.capacity})"
        if partition.since > float("-inf"):
            title += f", t* = {(since - diagnosis.span_start) / 3600:,.1f} h"
        table.add_column(title, justify="right")
    for category in IDLE_CATEGORIES:
        cells = []
        for partition in diagnosis.partitions:
            offered = partition.capacity * (diagnosis.span_end - max(partition.since, diagnosis.span_start))
            value = partition.unit_seconds[category]
            cells.append(f"{value / 3600:,.1f} ({_percent(value / offered)})")
        table.add_row(category, *cells)
    console.print(table)
    for partition in diagnosis.partitions:
        for at, _ in partition.startable_moments:
            console.print(f"[red]{partition.label}: a waiting job could legally start at {at:.0f} s[/red]")
    if capped.shares:
        since_partition = diagnosis.partitions[-1]
        held = since_partition.unit_seconds[HELD_RUNNING]
        excess = capped.cap * (diagnosis.span_end - capped.span_end)
        console.print(
            f"excess over the bound under the caps: {excess / 3600:,.1f} GPU-h of {since_partition.label}'s "
            f"{capped.cap} GPUs = running beyond the work submitted from t* (carried over from before t*, "
            f"redone after preemptions) {(held - diagnosis.binding_work) / 3600:,.1f} + every other row of "
            f"its column; makespan {span / 3600:,.1f} h"
        )


# --- the table ----------------------------------------------------------------------------------------------


def render(
    results: Sequence[RunResult],
    bound: Bound,
    capped: Sequence[CappedBound],
    job_count: int,
    console: Console,
    args: argparse.Namespace,
) -> None:
    every_run = results
    # The preemptAtCheckpoint runs get a table of their own (below): the main one would not fit.
    kept = [(r, c) for r, c in zip(results, capped, strict=True) if not r.label.startswith(AT_CHECKPOINT)]
    results, capped = [r for r, _ in kept], [c for _, c in kept]
    table = Table(title=f"{TITLE}: {job_count:,} jobs, 4 teams, {bound.capacity} GPUs (instances)")
    table.add_column("metric")
    for result in results:
        table.add_column(result.label, justify="right")
    table.add_column("bound", justify="right")
    bound_span = bound.span_end - bound.span_start

    def row(label: str, values: Sequence[str], bound_value: str = "-") -> None:
        table.add_row(label, *values, bound_value)

    row(
        "makespan (h)",
        [f"{(r.span_end - r.span_start) / 3600:,.1f}" for r in results],
        f"{bound_span / 3600:,.1f}",
    )
    row(
        "makespan / bound",
        [f"x{(r.span_end - r.span_start) / bound_span:.3f}" for r in results],
        "x1.000",
    )
    capped_spans = [c.span_end - c.span_start for c in capped]
    row("bound under the file's caps (h)", [f"{span / 3600:,.1f}" for span in capped_spans])
    row(
        "makespan / bound under the file's caps",
        [f"x{(r.span_end - r.span_start) / span:.3f}" for r, span in zip(results, capped_spans, strict=True)],
    )
    row(
        "GPU utilization over the makespan",
        [_percent(r.utilization) for r in results],
        _percent(bound.work_unit_seconds / (bound.capacity * bound_span)),
    )
    row("GPU utilization while work is queued", [_percent(r.backlog_utilization) for r in results], "100.0%")
    row("hours with work queued", [f"{r.backlog_hours:,.1f}" for r in results])
    teams = list(results[0].waits)
    for team in teams:
        row(f"wait {team}: mean (min)", [_minutes(r.waits.get(team, (None, None))[0]) for r in results])
        row(f"wait {team}: p95 (min)", [_minutes(r.waits.get(team, (None, None))[1]) for r in results])
    row("preemptions", [str(r.preemptions) for r in results], "0")
    row("GPU-seconds lost to preemption", [f"{r.gpu_seconds_lost:,.0f}" for r in results], "0")
    row(
        "  in % of the work",
        [_percent(r.gpu_seconds_lost / bound.work_unit_seconds) for r in results],
        "0.0%",
    )
    row("jobs not SUCCEEDED", [str(r.unfinished) for r in results])
    row("simulation wall time (s)", [f"{r.wall_seconds:.1f}" for r in results])
    console.print(table)
    console.print(
        "bound under the file's caps: the lower bound for any scheduler that keeps the caps of the "
        "configuration the column replays (quota, free stops: the file as written; all borrow, fixed "
        "partition, one pool: their own); for every set of shares, its jobs' work from each submission on "
        "over the most GPUs those shares can hold together"
    )
    quota = results[0]
    quota_span = quota.span_end - quota.span_start
    ratio = quota_span / bound_span
    verdict = "met" if ratio <= GOAL_RATIO else "missed"
    console.print(
        f"goal (makespan within 5% of the work-conserving bound): quota management x{ratio:.3f}: {verdict}; "
        f"GPU utilization while work is queued {_percent(quota.backlog_utilization)} against the bound's 100%"
    )
    sharing = next(result for result in results if result.label == "quota, all borrow")
    sharing_ratio = (sharing.span_end - sharing.span_start) / bound_span
    console.print(
        f"the same goal for the sharing mechanism without the file's RESERVE, LEND and borrowLimit caps "
        f"(quota, all borrow): x{sharing_ratio:.3f}: {'met' if sharing_ratio <= GOAL_RATIO else 'missed'}"
    )
    render_lost_work(every_run, console)
    for result in every_run:
        if result.label == CHECKPOINT_AWARE:
            what = "checkpoint-aware victims (extension) against the default victim order"
        elif result.label.startswith(AT_CHECKPOINT):
            wait = result.label.removeprefix(AT_CHECKPOINT).strip()
            what = f"preemptAtCheckpoint, maximumWaitSeconds {wait} (extension) against preempting at once"
        else:
            continue
        console.print(f"{what}: {_against_default(result, quota)}")
    file_bound = capped[0]
    file_span = file_bound.span_end - file_bound.span_start
    file_ratio = quota_span / file_span
    if file_bound.shares:
        setter = f"set by {', '.join(file_bound.shares)}: at most {file_bound.cap} GPUs together"
    else:
        setter = "set by the longest job"
    within = "within 5% of it" if file_ratio <= GOAL_RATIO else "more than 5% above it"
    console.print(
        f"what the file allows: bound under the file's caps {file_span / 3600:,.1f} h ({setter}), "
        f"x{file_span / bound_span:.3f} of the work-conserving bound; quota management x{file_ratio:.3f} "
        f"of it: {within}"
    )
    console.print(
        f"settings: stop {args.stop_seconds:g} s, checkpoint every {args.checkpoint_interval:g} s of "
        "progress "
        f"(quota and fixed partition); load x{args.load:g}, seed {args.seed}; "
        f"work {bound.work_unit_seconds / 3600:,.0f} GPU-hours"
    )


def render_lost_work(results: Sequence[RunResult], console: Console) -> None:
    """The extensions' runs beside ``quota`` (the first): GPU time lost to preemption and makespan, each
    as a ratio to ``quota``'s, against issue 37's goal."""
    quota = results[0]
    table = Table(
        title=f"Lost work: our extensions against quota (goal: lost at most x{LOST_GOAL}, "
        f"makespan at most x{MAKESPAN_GOAL})"
    )
    for column in (
        "run",
        "GPU-seconds lost",
        "lost / quota",
        "preemptions",
        "makespan (h)",
        "makespan / quota",
    ):
        table.add_column(column, justify="left" if column == "run" else "right")
    table.add_column("goal")
    quota_span = quota.span_end - quota.span_start
    for result in results:
        if (
            result is not quota
            and result.label != CHECKPOINT_AWARE
            and not result.label.startswith(AT_CHECKPOINT)
        ):
            continue
        span = result.span_end - result.span_start
        lost = result.gpu_seconds_lost / quota.gpu_seconds_lost if quota.gpu_seconds_lost else None
        met = lost is not None and lost <= LOST_GOAL and span / quota_span <= MAKESPAN_GOAL
        table.add_row(
            result.label,
            f"{result.gpu_seconds_lost:,.0f}",
            "-" if lost is None else f"x{lost:.3f}",
            str(result.preemptions),
            f"{span / 3600:,.1f}",
            f"x{span / quota_span:.4f}",
            "-" if result is quota else "met" if met else "missed",
        )
    console.print(table)


def _against_default(result: RunResult, quota: RunResult) -> str:
    """``result``'s GPU time lost and makespan beside ``quota``'s, and the goal of issue 37 (at most half
    the loss, makespan at most 2% longer)."""
    lost_ratio = result.gpu_seconds_lost / quota.gpu_seconds_lost if quota.gpu_seconds_lost else None
    span, quota_span = result.span_end - result.span_start, quota.span_end - quota.span_start
    span_ratio = span / quota_span
    met = lost_ratio is not None and lost_ratio <= LOST_GOAL and span_ratio <= MAKESPAN_GOAL
    lost_text = "-" if lost_ratio is None else f"x{lost_ratio:.3f}"
    return (
        f"GPU-seconds lost {result.gpu_seconds_lost:,.0f} vs {quota.gpu_seconds_lost:,.0f} ({lost_text}), "
        f"preemptions {result.preemptions} vs {quota.preemptions}, makespan "
        f"{span / 3600:,.1f} h vs {quota_span / 3600:,.1f} h "
        f"(x{span_ratio:.4f}); goal (lost at most x{LOST_GOAL}, makespan at most x{MAKESPAN_GOAL}): "
        f"{'met' if met else 'missed'}"
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _minutes(value: float | None) -> str:
    return "-" if value is None else f"{value / 60:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--load", type=float, default=1.5, help="jobs per team x this (1 = bursty_teams.csv)")
    parser.add_argument("--seed", type=int, default=None, help="trace seed (default: make_trace.py's)")
    parser.add_argument("--stop-seconds", type=float, default=60.0)
    parser.add_argument("--checkpoint-interval", type=float, default=900.0)
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="also replay quota and quota, free stops, splitting capacity-time by why GPUs were idle",
    )
    args = parser.parse_args(argv)
    generator = load_trace_generator()
    args.seed = generator.SEED if args.seed is None else args.seed
    console = Console(width=160)
    with tempfile.TemporaryDirectory(prefix="quota-quality-") as folder:
        trace_path = Path(folder) / "trace.csv"
        write_scaled_trace(trace_path, args.load, args.seed)
        configuration = load_queue_configuration(QUOTA_FILE)
        events = load_trace(trace_path, configuration)
    team_of = {}
    for event in events:
        assert isinstance(event.action, SubmitJob)
        team_of[event.action.request.job_name] = event.action.request.quota_share_name
    lossy = Settings(stop_seconds=args.stop_seconds)
    specs = [
        RunSpec("quota", configuration, events, lossy, args.checkpoint_interval),
        RunSpec(
            CHECKPOINT_AWARE,
            with_extensions(configuration, {"checkpointAwareVictims": "ENABLED"}),
            events,
            lossy,
            args.checkpoint_interval,
        ),
        *(
            RunSpec(
                f"{AT_CHECKPOINT} {wait}",
                with_extensions(
                    configuration,
                    {
                        "preemptAtCheckpoint": {
                            "checkpointIntervalSeconds": round(args.checkpoint_interval),
                            "maximumWaitSeconds": wait,
                        }
                    },
                ),
                events,
                lossy,
                args.checkpoint_interval,
            )
            for wait in AT_CHECKPOINT_WAITS
        ),
        RunSpec("quota, free stops", configuration, events, Settings(), 0.0),
        RunSpec(
            "quota, all borrow",
            every_share_borrowing(configuration),
            events,
            lossy,
            args.checkpoint_interval,
        ),
        RunSpec(
            "fixed partition",
            configuration.with_every_share_reserved(str(QUOTA_FILE)),
            events,
            lossy,
            args.checkpoint_interval,
        ),
        one_pool(configuration, events),
    ]
    results = []
    for spec in specs:
        console.print(f"[dim]simulating {spec.label}...[/dim]")
        results.append(run(spec, team_of))
    capacity = sum(configuration.queue.capacity.values())
    bound = work_conserving_bound(events, capacity)
    capped = [bound_under_caps(spec.events, spec.configuration.queue) for spec in specs]
    check_bounds(results, bound, capped)
    render(results, bound, capped, len(events), console, args)
    if args.diagnose:
        for spec, capped_bound in zip(specs[:2], capped[:2], strict=True):
            console.print(f"[dim]diagnosing {spec.label}...[/dim]")
            render_diagnosis(diagnose(spec, capped_bound), capped_bound, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
