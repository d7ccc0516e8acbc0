"""Kueue's scheduler benchmark (baseline) replayed in simulated time on several engines, side by side.

``kueue_scheduling.py`` runs the real allocator on PostgreSQL in real time: its makespan moves with the
machine's load. This replays the same workload (its ``make_jobs`` and ``quota_document``) through the
engine alone (``plan_cycle``) on a simulated clock that models the real benchmark's timing, so two
engines (or one engine with a rule turned off) differ only by their decisions:

* allocation cycles run back to back, each lasting a seeded log-normal draw around ``--cycle-ms``
  (``--cycle-sigma`` 0.55: p95 about 2.5 x the median, as the real cycles' 124 ms median and 306 to
  369 ms p95); a cycle sees what happened before its start: jobs due (created), jobs finished, stops
  ended;
* its decisions reach the runner ``--commit-fraction`` of the cycle after its start (1: when the cycle
  ends; one job queue's part of five: 0.2) plus the runner's delay (uniform, mean ``--notice-ms``); a
  granted job runs from then and its success is recorded the runner's delay after its running time;
* a victim stops at once when told (``--stop-ms``, 0 by default) and is requeued at its place once a
  cycle sees the stop; it runs its full time again once readmitted, as Kueue's runner does; a victim
  whose running time ends before it hears of its preemption finishes instead.

The defaults (140 ms, commit at the cycle's end) put ea40887 where the real benchmark put it on a quiet
machine (2026-12-06: makespan 95.6 s, running work 70.8%, time to admission 2.3 / 45.6 / 70.1 s);
``--cycle-ms`` and ``--commit-fraction`` move it as the machine's load would.

Kueue's five job queues get the same jobs in the same order and never interact, so one queue is replayed
(``cohort-0``: 6 shares of 20, 120 ``gpu``); preemptions are also given for all five, as the real
benchmark counts them. Each engine runs in its own process, each seed (``--seeds``) on the same delays:
``--engine LABEL=REV`` takes the engine at a git revision of this repository (``git archive`` of
``airflow_quota/engine`` into a temporary folder: nothing in the checkout changes), ``LABEL=PATH`` the
package under a folder (a scratch copy with a rule changed, or ``.``: this working tree), and a
``+VARIANT`` suffix turns a rule off in that process by patching the imported engine (``VARIANTS``).

Printed per engine, the mean over the seeds: makespan (min to max, and x the first engine's, seed by
seed), mean time to admission per class, preemptions (victims stopped) and promises, running work
(unit-seconds run over capacity x makespan, as the real benchmark prints it), each class's phase (as
``kueue_scheduling.py``: the capacity running completed work), where the capacity went, the engine's CPU
per cycle, and per 10 s the capacity running completed work. Two checks for decisions a cycle left
out: ``idle though a waiting job fits`` (units left idle at a cycle's end while a RUNNABLE job, not
reserving, of no more units waited) and ``cycles a second look at once decides more in`` (the state a
cycle left, planned again at the same moment, gives decisions); the first case of each is printed, with
its state.

Found with it (2026-12-06, 20 seeds a regime): issue 34's rules (ea40887 against the engine's commits up
to HEAD, and with ``no-behind`` or ``no-promise``) give the same decisions in every seed of the default
regime, and in 16 of 20 seeds with fast cycles (125 ms, commits at a fifth) where the others differ by a
few victims, makespan x1.000 either way; neither check ever fired. The engine's CPU per cycle is up to
x1.1 (about 0.3 ms a queue); the real benchmark's after-figures are the simulation's with cycles of about
180 ms instead of 140 (or the runner 20 to 30 ms slower to see each change).

Usage::

    nice .venv/bin/python benchmarks/kueue_sim.py --scale 0.2 --seeds 1   # a smoke run, half a minute
    nice .venv/bin/python benchmarks/kueue_sim.py                     # ea40887 against HEAD: 1 to 2 min
    nice .venv/bin/python benchmarks/kueue_sim.py --engine old=ea40887 --engine new=HEAD \\
        --engine "no behind=HEAD+no-behind" --engine "no promise=HEAD+no-promise"
    # also: --cycle-ms, --cycle-sigma, --commit-fraction, --notice-ms, --stop-ms, --parallel, --json
"""

from __future__ import annotations

import argparse
import heapq
import io
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The engine is imported only in the worker processes, each from the root it is given: nothing of
# airflow_quota is imported here at module level.
ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = Path(__file__).resolve().parent

TITLE = "Kueue's scheduler benchmark (baseline) on the engine alone, simulated time"
#: The engines compared by default: the rules before issue 34, and the last commit.
DEFAULT_ENGINES = ("ea40887=ea40887", "HEAD=HEAD")
#: The queue replayed (all five are the same), and how many the real benchmark has.
QUEUE_INDEX = 0
JOB_QUEUES = 5
UNIT = "gpu"
CLASSES = ("large", "medium", "small")
#: Seconds per bin of the capacity-over-time table.
BIN_SECONDS = 10.0
MICRO = 1_000_000


# --- the workload (parent process: kueue_scheduling.py's own definitions) ---------------------------------


def workload(scale: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Queue ``QUEUE_INDEX``'s quota document and jobs, from ``kueue_scheduling.py`` (imported with a
    throw-away Airflow home: it imports Airflow)."""
    with tempfile.TemporaryDirectory(prefix="quota-kueue-sim-airflow-home-") as home:
        os.environ.setdefault("QUOTA_BENCH_AIRFLOW_HOME", home)
        sys.path.insert(0, str(BENCHMARKS))
        import kueue_scheduling as kueue

        queue_name = kueue.queue_name(QUEUE_INDEX)
        document = {
            "jobQueues": [
                queue for queue in kueue.quota_document()["jobQueues"] if queue["jobQueueName"] == queue_name
            ]
        }
        jobs = [
            {
                "name": job.name,
                "share": job.share,
                "class": job.job_class.name,
                "units": job.job_class.units,
                "runtime": job.job_class.runtime_seconds,
                "priority": job.job_class.priority,
                "due": job.due_at,
            }
            for job in kueue.make_jobs(scale)  # (in submission order: due, then name)
            if job.queue == queue_name
        ]
    return document, jobs


# --- engines: where each one's code comes from --------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    label: str
    source: str
    variants: tuple[str, ...]


def parse_engine(text: str) -> EngineSpec:
    label, _, rest = text.partition("=")
    if not rest:
        rest = label
    source, *variants = rest.split("+")
    for variant in variants:
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return EngineSpec(label, source or "HEAD", tuple(variants))


def engine_root(source: str, stack: ExitStack) -> tuple[Path, str]:
    """A folder holding ``airflow_quota/engine`` for ``source``, and what it is: a folder's path as
    given, or a git revision of this repository extracted into a temporary folder."""
    path = Path(source) if Path(source).is_absolute() else ROOT / source
    if (path / "airflow_quota" / "engine" / "planner.py").is_file():
        return path.resolve(), f"folder {path.resolve()}"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{source}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "airflow_quota/__init__.py", "airflow_quota/engine"],
        check=True,
        capture_output=True,
    ).stdout
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"quota-engine-{commit}-")))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder, f"commit {commit}"


def start_worker(spec: EngineSpec, root: Path, job_spec: dict[str, Any]) -> subprocess.Popen[str]:
    """The worker process replaying every seed on one engine (its JSON result on stdout)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(root)]
    for variant in spec.variants:
        command += ["--variant", variant]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None
    process.stdin.write(json.dumps(job_spec))
    process.stdin.close()
    return process


# --- rules turned off (worker process, patching the engine it imported) ---------------------------------


def _no_behind() -> None:
    """Step 2 without the ``behind`` set: a job that could start beyond its share's room no longer keeps
    the later jobs of its share (on its unit) out of step 2, as before issue 34."""
    from airflow_quota.engine import planner

    planner._Cycle._could_start_beyond_room = lambda self, job: False  # type: ignore[attr-defined]


def _no_promise() -> None:
    """No promises: a job that would fit with spare units of stops under way is not promised them: it
    preempts when a search finds victims (spare units still taken first), else waits for idle units."""
    from airflow_quota.engine import planner

    planner.claim_spare = lambda usage, job, spare: None  # type: ignore[attr-defined]


#: Rules a run can turn off in an engine that has them, by name.
VARIANTS: dict[str, Callable[[], None]] = {"no-behind": _no_behind, "no-promise": _no_promise}


# --- the simulation (worker process) ------------------------------------------------------------------------


class Timing:
    """When things happen: each cycle's duration (log-normal around the median with ``cycle_sigma``; 0:
    all the median), the runner's delay to see a change (uniform from 0 to twice ``notice_ms``; without
    ``jitter``, ``notice_ms``), a stop's time once heard of. Every draw is seeded by the run's seed and
    what it is for (the cycle's number, the job and its attempt), so two engines replayed with one seed
    meet the same delays for the same things."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.seed = spec["seed"]
        self.median_us = spec["cycle_ms"] * 1000
        self.sigma = spec["cycle_sigma"]
        self.commit_fraction = spec["commit_fraction"]
        self.notice_us = spec["notice_ms"] * 1000
        self.jitter = spec["jitter"]
        self.stop_us = round(spec["stop_ms"] * 1000)
        self._cycles = random.Random(f"cycles:{self.seed}")

    def cycle(self) -> int:
        """The next cycle's duration (microseconds): from its start to the next one's."""
        factor = math.exp(self._cycles.gauss(0.0, self.sigma)) if self.sigma else 1.0
        return max(1, round(self.median_us * factor))

    def notice(self, key: str) -> int:
        """The runner's delay to see a change (a grant or a signal after a commit, a job's end)."""
        if not self.jitter:
            return round(self.notice_us)
        return round(random.Random(f"{self.seed}:{key}").uniform(0.0, 2 * self.notice_us))


#: Event kinds, in the order they apply at one moment.
ARRIVE, FINISH, STOPPED = 0, 1, 2
#: Where the capacity is at a cycle's end, as the engine holds it (until the next cycle).
HELD, STOPPING, RESERVED, IDLE_FITS, IDLE = (
    "held by jobs granted",
    "held by jobs being stopped",
    "set aside for reservations",
    "idle though a waiting job fits",
    "idle otherwise",
)


def simulate(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay ``spec``'s jobs once (its seed) against the imported engine; what happened, as JSON."""
    from airflow_quota.engine.config import parse_quota_config
    from airflow_quota.engine.lifecycle import complete_stop, finish_job, submit_jobs, without_final_jobs
    from airflow_quota.engine.model import Grant, JobRequest, JobStatus, Preemption, QueueState
    from airflow_quota.engine.planner import plan_cycle
    from airflow_quota.engine.usage import usage_of

    queue = parse_quota_config(spec["document"], "kueue-sim").to_job_queues()[0]
    capacity = queue.capacity[UNIT]
    timing = Timing(spec)
    jobs = [dict(job, seq=index + 1) for index, job in enumerate(spec["jobs"])]
    by_name = {job["name"]: job for job in jobs}
    for job in jobs:
        job.update(first_admitted=None, finished=None, evictions=0, ran=0.0, epoch=0, started=0, end=0)
    events: list[tuple[int, int, int, str, int]] = []  # (microseconds, kind, order, job, its epoch)

    def push(at: int, kind: int, name: str, epoch: int) -> None:
        counts["events"] += 1
        heapq.heappush(events, (at, kind, counts["events"], name, epoch))

    counts = {"events": 0, "cycles": 0, "planned": 0, "grants": 0, "preemptions": 0, "promises": 0}
    counts["undecided cycles"] = 0
    second_looks: list[dict[str, Any]] = []
    for job in jobs:
        push(round(job["due"] * MICRO), ARRIVE, job["name"], 0)
    runs: list[tuple[float, float, int, bool]] = []  # (start, end, units, completed)
    where = dict.fromkeys((HELD, STOPPING, RESERVED, IDLE_FITS, IDLE), 0.0)
    examples: list[dict[str, Any]] = []
    state = QueueState(queue, {})
    finished = now = occupancy = 0
    plan_cpu = 0.0
    decided_last = True
    while finished < len(jobs):
        # What the cycle starting now sees: every event up to now, in time order (submissions batched).
        arrivals: list[tuple[str, JobRequest, float, int]] = []
        changed = False
        while events and events[0][0] <= now:
            at, kind, _, name, epoch = heapq.heappop(events)
            job = by_name[name]
            if kind == ARRIVE:
                request = JobRequest(name, job["share"], UNIT, job["units"], job["priority"])
                arrivals.append((name, request, job["due"], job["seq"]))
                changed = True
                continue
            if epoch != job["epoch"]:
                continue  # the end of a run that was stopped
            if arrivals:
                state, arrivals = submit_jobs(state, arrivals), []
            if kind == FINISH:
                state = finish_job(state, name, succeeded=True)
                job["finished"] = at / MICRO
                job["ran"] += (at - job["started"]) / MICRO
                runs.append((job["started"] / MICRO, at / MICRO, job["units"], True))
                finished += 1
            else:
                state = complete_stop(state, name)
            job["epoch"] += 1
            changed = True
        if arrivals:
            state = submit_jobs(state, arrivals)
        if changed:
            state = without_final_jobs(state)
        counts["cycles"] += 1
        decisions: Sequence[object] = ()
        if changed or decided_last:  # (the allocator's nothing-changed shortcut)
            counts["planned"] += 1
            started = time.process_time()
            plan = plan_cycle(state, now / MICRO)
            state = plan.state
            plan_cpu += time.process_time() - started
            decisions = plan.decisions
            occupancy = usage_of(state).occupancy.get(UNIT, 0)
            if decisions:
                # A second look at the state the cycle left, at once: any decision it makes is one the
                # cycle could have made (the next cycle would).
                again = plan_cycle(state, now / MICRO).decisions
                if again:
                    counts["undecided cycles"] += 1
                    if len(second_looks) < 3:
                        second_looks.append(
                            {
                                "at": now / MICRO,
                                "cycle": list(map(repr, decisions)),
                                "again": list(map(repr, again)),
                            }
                        )
        decided_last = bool(decisions)
        duration = timing.cycle()
        told = now + round(timing.commit_fraction * duration) + timing.notice(f"cycle:{counts['cycles']}")
        for decision in decisions:
            if isinstance(decision, Grant):
                counts["grants"] += 1
                job = by_name[decision.job_id]
                job["epoch"] += 1
                job["started"] = told
                runtime = round(job["runtime"] * MICRO)
                job["end"] = told + runtime + timing.notice(f"{job['name']}:{job['epoch']}")
                if job["first_admitted"] is None:
                    job["first_admitted"] = told / MICRO
                push(job["end"], FINISH, job["name"], job["epoch"])
            elif isinstance(decision, Preemption):
                counts["preemptions"] += 1
                for victim_id in decision.victim_ids:
                    job = by_name[victim_id]
                    if job["end"] <= told:
                        continue  # its running time ends before it hears of the preemption: it finishes
                    job["epoch"] += 1
                    job["evictions"] += 1
                    job["ran"] += (told - job["started"]) / MICRO
                    runs.append((job["started"] / MICRO, told / MICRO, job["units"], False))
                    push(told + timing.stop_us, STOPPED, victim_id, job["epoch"])
            else:
                counts["promises"] += 1
        # Where the capacity is until the next cycle, as the engine holds it at this cycle's end.
        held = stopping = 0
        smallest: int | None = None
        for job_state in state.jobs.values():
            count = job_state.request.instance_count
            if job_state.status.holds_capacity:
                if job_state.stop_cause is None:
                    held += count
                else:
                    stopping += count
            elif job_state.status is JobStatus.RUNNABLE and not job_state.awaiting_victims:
                smallest = count if smallest is None else min(smallest, count)
        idle = max(0, capacity - occupancy)
        fits = smallest is not None and smallest <= idle
        seconds = duration / MICRO
        where[HELD] += held * seconds
        where[STOPPING] += stopping * seconds
        where[RESERVED] += max(0, occupancy - held - stopping) * seconds
        where[IDLE_FITS if fits else IDLE] += idle * seconds
        if fits and (not examples or examples[-1]["at"] < now / MICRO - 1) and len(examples) < 3:
            examples.append(_example(state, now / MICRO, idle))
        now += duration
    return {
        "jobs": [
            {
                key: job[key]
                for key in (
                    "class",
                    "units",
                    "runtime",
                    "due",
                    "first_admitted",
                    "finished",
                    "evictions",
                    "ran",
                )
            }
            for job in jobs
        ],
        "runs": runs,
        "counts": counts,
        "where": where,
        "examples": examples,
        "second_looks": second_looks,
        "plan_cpu_seconds": plan_cpu,
    }


def _example(state: Any, at: float, idle: int) -> dict[str, Any]:
    """A cycle's end state, compactly: per share its jobs holding units, being stopped, reserving, and
    its first waiting jobs in share order with their statusReasons."""
    shares: dict[str, dict[str, Any]] = {}
    for job in state.jobs.values():
        entry = shares.setdefault(
            job.request.quota_share_name, {"holding": [], "stopping": [], "reserving": [], "waiting": []}
        )
        label = f"{job.job_id} ({job.request.instance_count}, p{job.request.scheduling_priority})"
        if job.status.holds_capacity:
            entry["stopping" if job.stop_cause is not None else "holding"].append(label)
        elif job.awaiting_victims:
            entry["reserving"].append(f"{label} <- {sorted(job.awaiting_victims)}")
        else:
            entry["waiting"].append(
                (-job.request.scheduling_priority, job.submitted, label, job.status_reason)
            )
    for entry in shares.values():
        waiting = sorted(entry["waiting"])
        entry["waiting"] = [f"{label}: {reason}" for _, _, label, reason in waiting[:3]]
        entry["waiting"] += [f"... {len(waiting) - 3} more"] if len(waiting) > 3 else []
    return {"at": round(at, 3), "idle": idle, "shares": dict(sorted(shares.items()))}


def worker(root: str, variants: Sequence[str]) -> int:
    """Replay every seed of the spec on stdin against the engine under ``root``."""
    sys.path.insert(0, root)
    import airflow_quota

    imported = Path(airflow_quota.__file__).resolve()
    if Path(root).resolve() not in imported.parents:
        raise RuntimeError(f"imported {imported}, not the engine under {root}")
    for variant in variants:
        VARIANTS[variant]()
    spec = json.load(sys.stdin)
    runs = [simulate(dict(spec, seed=seed)) for seed in spec["seeds"]]
    json.dump(runs, sys.stdout)
    return 0


# --- figures (parent process) -------------------------------------------------------------------------------


@dataclass
class Figures:
    """One replay's figures."""

    makespan: float
    admission: dict[str, float]
    victims: int
    preemptions: int
    promises: int
    running_work: float
    phases: dict[str, float]
    #: Shares of capacity x makespan: completed and lost work as the runner ran it, then the engine's view.
    where: dict[str, float]
    bins: list[float]
    plan_ms: float
    planned: int
    undecided: int


def figures(result: dict[str, Any], capacity: int) -> Figures:
    jobs, runs = result["jobs"], result["runs"]
    makespan = max(job["finished"] for job in jobs)
    admission = {
        name: statistics.mean(job["first_admitted"] - job["due"] for job in jobs if job["class"] == name)
        for name in CLASSES
    }
    phases: dict[str, float] = {}
    for name in CLASSES:
        # As kueue_scheduling.py's phases: from the start of the class's 50th in 1,000 to its last end.
        own = [job for job in jobs if job["class"] == name]
        starts = sorted(job["finished"] - job["runtime"] for job in own)
        start, end = starts[len(starts) // 50], max(job["finished"] for job in own)
        completed = sum(
            units * max(0.0, min(end, until) - max(start, since))
            for since, until, units, done in runs
            if done
        )
        phases[name] = completed / (capacity * (end - start)) if end > start else 0.0
    total = capacity * makespan
    completed = sum(units * (until - since) for since, until, units, done in runs if done)
    lost = sum(units * (until - since) for since, until, units, done in runs if not done)
    where = {
        "runner: running work that completed": completed / total,
        "runner: running work then preempted": lost / total,
    }
    engine_total = sum(result["where"].values())
    where |= {f"engine: {name}": seconds / engine_total for name, seconds in result["where"].items()}
    bins = [0.0] * (int(makespan // BIN_SECONDS) + 1)
    for since, until, units, done in runs:
        if done:
            for index in range(int(since // BIN_SECONDS), int(until // BIN_SECONDS) + 1):
                low, high = index * BIN_SECONDS, (index + 1) * BIN_SECONDS
                bins[index] += units * max(0.0, min(until, high) - max(since, low)) / (capacity * BIN_SECONDS)
    counts = result["counts"]
    return Figures(
        makespan=makespan,
        admission=admission,
        victims=sum(job["evictions"] for job in jobs),
        preemptions=counts["preemptions"],
        promises=counts["promises"],
        running_work=sum(job["units"] * job["ran"] for job in jobs) / total,
        phases=phases,
        where=where,
        bins=bins,
        plan_ms=1000 * result["plan_cpu_seconds"] / max(1, counts["planned"]),
        planned=counts["planned"],
        undecided=counts["undecided cycles"],
    )


def _mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else math.nan


def render(
    labels: Sequence[str],
    all_runs: Sequence[Sequence[Figures]],
    differing: Sequence[int],
    args: argparse.Namespace,
    jobs: int,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(110, 44 + 22 * len(labels)))
    seeds = len(all_runs[0])
    table = Table(
        title=(
            f"{TITLE}: {jobs:,} jobs in one of {JOB_QUEUES} queues (scale {args.scale:g}), mean of "
            f"{seeds} seed(s); cycles {args.cycle_ms:g} ms median (sigma {args.cycle_sigma:g}), decisions "
            f"seen {args.commit_fraction:g} cycle + {args.notice_ms:g} ms later, stops {args.stop_ms:g} ms"
        )
    )
    table.add_column("metric")
    for label in labels:
        table.add_column(label, justify="right")
    base = all_runs[0]

    def mean_of(get: Callable[[Figures], float]) -> list[float]:
        return [_mean([get(each) for each in runs]) for runs in all_runs]

    def row(name: str, values: Sequence[float], fmt: str) -> None:
        table.add_row(name, *(format(value, fmt) for value in values))

    row("makespan (s)", mean_of(lambda f: f.makespan), ".2f")
    table.add_row(
        "  min to max over the seeds",
        *(f"{min(f.makespan for f in runs):.1f} to {max(f.makespan for f in runs):.1f}" for runs in all_runs),
    )
    table.add_row(
        f"  x {labels[0]}, seed by seed (mean)",
        *(
            f"x{_mean([f.makespan / b.makespan for f, b in zip(runs, base, strict=True)]):.3f}"
            for runs in all_runs
        ),
    )
    table.add_row(
        f"  seeds where any job ran otherwise than with {labels[0]}",
        *(f"{count} of {len(runs)}" for count, runs in zip(differing, all_runs, strict=True)),
    )
    for name in CLASSES:
        row(f"mean time to admission, {name} (s)", mean_of(lambda f, name=name: f.admission[name]), ".2f")
    row("preemptions (victims stopped), this queue", mean_of(lambda f: f.victims), ".1f")
    row(
        f"  x {JOB_QUEUES} queues (the real benchmark's count)",
        mean_of(lambda f: JOB_QUEUES * f.victims),
        ".0f",
    )
    row("  preemption decisions, this queue", mean_of(lambda f: f.preemptions), ".1f")
    row("promises, this queue", mean_of(lambda f: f.promises), ".1f")
    row("running work (%)", mean_of(lambda f: 100 * f.running_work), ".1f")
    for name in CLASSES:
        row(
            f"phase {name}: capacity running completed work (%)",
            mean_of(lambda f, n=name: 100 * f.phases[n]),
            ".1f",
        )
    for name in base[0].where:
        row(f"capacity, {name} (%)", mean_of(lambda f, n=name: 100 * f.where[n]), ".2f")
    row("cycles a second look at once decides more in", mean_of(lambda f: f.undecided), ".1f")
    row("engine CPU per planned cycle (ms)", mean_of(lambda f: f.plan_ms), ".2f")
    row("planned cycles", mean_of(lambda f: f.planned), ".0f")
    console.print(table)

    bins = Table(title="capacity running completed work per 10 s (%), mean over the seeds")
    bins.add_column("from (s)", justify="right")
    for label in labels:
        bins.add_column(label, justify="right")
    longest = max(len(f.bins) for runs in all_runs for f in runs)
    for index in range(longest):
        cells = []
        for runs in all_runs:
            values = [f.bins[index] if index < len(f.bins) else 0.0 for f in runs]
            cells.append(f"{100 * _mean(values):.1f}")
        bins.add_row(f"{index * BIN_SECONDS:.0f}", *cells)
    console.print(bins)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of each workload set (1: Kueue's)")
    parser.add_argument(
        "--engine",
        action="append",
        metavar="LABEL=REV|PATH[+VARIANT]",
        help=f"an engine to replay (repeatable; default: {' '.join(DEFAULT_ENGINES)}); variants: "
        f"{', '.join(VARIANTS)}",
    )
    parser.add_argument("--cycle-ms", type=float, default=140.0, help="a cycle's median duration")
    parser.add_argument(
        "--cycle-sigma", type=float, default=0.55, help="log-normal spread of cycle durations (0: fixed)"
    )
    parser.add_argument(
        "--commit-fraction",
        type=float,
        default=1.0,
        help="part of its cycle after which a decision is committed (one queue's part of five: 0.2)",
    )
    parser.add_argument(
        "--notice-ms", type=float, default=10.0, help="the runner's mean delay to see a change"
    )
    parser.add_argument("--no-jitter", action="store_true", help="the runner's delay always --notice-ms")
    parser.add_argument("--stop-ms", type=float, default=0.0, help="a victim's stop once it heard of it")
    parser.add_argument("--seeds", type=int, default=5, help="replays per engine: seeds 1 to N")
    parser.add_argument("--parallel", type=int, default=1, help="engines replayed at once (processes)")
    parser.add_argument("--json", metavar="FILE", help="also write every replay's raw results here")
    parser.add_argument("--worker", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--variant", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.variant)
    if not 0 < args.scale <= 1:
        parser.error("--scale must be in (0, 1]")
    specs = [parse_engine(text) for text in (args.engine or DEFAULT_ENGINES)]
    document, jobs = workload(args.scale)
    job_spec = {
        "document": document,
        "jobs": jobs,
        "cycle_ms": args.cycle_ms,
        "cycle_sigma": args.cycle_sigma,
        "commit_fraction": args.commit_fraction,
        "notice_ms": args.notice_ms,
        "jitter": not args.no_jitter,
        "stop_ms": args.stop_ms,
        "seeds": list(range(1, args.seeds + 1)),
    }
    results: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        pending = []
        for spec in specs:
            root, what = engine_root(spec.source, stack)
            print(f"{spec.label}: the engine of {what}{''.join(f' +{v}' for v in spec.variants)}", flush=True)
            pending.append((spec, root))
        started: list[tuple[EngineSpec, subprocess.Popen[str]]] = []
        while pending or started:
            while pending and len(started) < max(1, args.parallel):
                spec, root = pending.pop(0)
                started.append((spec, start_worker(spec, root, job_spec)))
            spec, process = started.pop(0)
            assert process.stdout is not None
            output = process.stdout.read()
            if process.wait() != 0:
                raise SystemExit(f"engine {spec.label!r} failed")
            results[spec.label] = json.loads(output)
    if args.json:
        Path(args.json).write_text(json.dumps(results), encoding="utf-8")
    capacity = document["jobQueues"][0]["capacityLimits"][0]["maxCapacity"]
    labels = [spec.label for spec in specs]
    all_runs = [[figures(run, capacity) for run in results[label]] for label in labels]
    base = results[labels[0]]
    differing = [
        sum(run["jobs"] != first["jobs"] for run, first in zip(results[label], base, strict=True))
        for label in labels
    ]
    render(labels, all_runs, differing, args, len(jobs))
    for label in labels:
        for run in results[label][:1]:
            for example in run["examples"][:1]:
                print(f"{label}, seed 1: the first cycle ending with idle units a waiting job fits:")
                print(json.dumps(example, indent=1))
            for look in run["second_looks"][:1]:
                print(f"{label}, seed 1: the first cycle a second look at once decides more in:")
                print(json.dumps(look, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
