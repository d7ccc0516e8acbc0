"""Allocation quality on a multi-team trace: quota management against a fixed partition and the bound.

The simulator (``airflow_quota.sim``, the engine on a simulated clock) replays one bursty trace of four
teams on 16 ``ml.p4d.24xlarge`` (``examples/traces/quotas.yaml``: prod RESERVE, eval LEND, research
LEND_AND_BORROW 100 with in-share preemption, vision LEND_AND_BORROW unlimited) several ways, side by side:

* ``quota``: the quota file as written, preempted jobs taking ``--stop-seconds`` to stop and resuming from
  a checkpoint taken every ``--checkpoint-interval`` seconds of progress;
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

# Runnable as a plain script from a checkout: make the package importable without installing it.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from airflow_quota.engine.model import JobStatus  # noqa: E402
from airflow_quota.sim.metrics import MetricsRecorder, mean, p95  # noqa: E402
from airflow_quota.sim.runner import JobOutcome, Simulation, _JobRecord  # noqa: E402
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

    def _waiting(self, record: _JobRecord) -> None:
        if record.runnable_since is None:
            self.backlog.jobs_waiting += 1
        super()._waiting(record)

    def _not_waiting(self, record: _JobRecord) -> None:
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
    jobs = []
    for event in events:
        assert isinstance(event.action, SubmitJob) and event.action.duration is not None
        jobs.append((event.at, event.action.request.instance_count * event.action.duration))
    jobs.sort()
    end = max(
        event.at + event.action.duration
        for event in events
        if isinstance(event.action, SubmitJob) and event.action.duration is not None
    )
    remaining = sum(work for _, work in jobs)
    total = remaining
    for at, work in jobs:  # t + (work submitted at or after t) / capacity, at each submission time t
        end = max(end, at + remaining / capacity)
        remaining -= work
    return Bound(jobs[0][0], end, total, capacity)


# --- the table ----------------------------------------------------------------------------------------------


def render(
    results: Sequence[RunResult], bound: Bound, job_count: int, console: Console, args: argparse.Namespace
) -> None:
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
    quota = results[0]
    ratio = (quota.span_end - quota.span_start) / bound_span
    verdict = "met" if ratio <= GOAL_RATIO else "missed"
    console.print(
        f"goal (makespan within 5% of the work-conserving bound): quota management x{ratio:.3f}: {verdict}; "
        f"GPU utilization while work is queued {_percent(quota.backlog_utilization)} against the bound's 100%"
    )
    console.print(
        f"settings: stop {args.stop_seconds:g} s, checkpoint every {args.checkpoint_interval:g} s of "
        "progress "
        f"(quota and fixed partition); load x{args.load:g}, seed {args.seed}; "
        f"work {bound.work_unit_seconds / 3600:,.0f} GPU-hours"
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
    args = parser.parse_args(argv)
    generator = load_trace_generator()
    args.seed = generator.SEED if args.seed is None else args.seed
    console = Console(width=140)
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
    render(results, work_conserving_bound(events, capacity), len(events), console, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
