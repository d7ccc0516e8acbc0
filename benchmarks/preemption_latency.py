"""Preemption latency in real Airflow: from a lender's job submission to its training job created.

One Airflow (scheduler hosting the allocator, dag processor, triggerer, api-server; LocalExecutor; SQLite,
in a temporary ``AIRFLOW_HOME``) and one moto server with our SageMaker emulator. A job queue of 2
``ml.g5.xlarge``: team-a LENDs its 1, team-b (LEND_AND_BORROW) trains on 2, one of them borrowed. Each
repetition: team-b's DAG run starts a long training job and waits deferred on its monitoring trigger
(for ``--borrower-age`` seconds, by default past the 10 s settle time, as a borrower that has been
training for a while); then team-a's job arrives (``QuotaTrainingOperator``, 1 instance), and the
allocator reclaims: it asks SageMaker to stop the borrower's training job (the emulator's ``Stopping``
lasts ``--stop-seconds``) and resumes the borrower, which waits until its job is ``Stopped`` (checking
every ``--stop-poll-interval`` seconds) and waits for quota again; the allocator, which asks after every
cycle, may find the job ``Stopped`` first and release its capacity then; team-a is granted and launches
its job.

Each phase is timed from the lender's submission (``quota_job.submitted_at``: its task deferring for
admission): the allocator's decision (audit ``PREEMPTED``), the borrower's training job seen ``Stopping``
and ``Stopped`` (DescribeTrainingJob polled every 0.1 s by the benchmark), the borrower's capacity
released (audit ``REQUEUED``: the allocator found the job stopped, or the borrower reported it), the
lender's grant (audit ``GRANTED``), and the lender's training job ``CreationTime``. The goal is two
scheduler loops plus the stop time; the scheduler's loop is measured from its
``scheduler.scheduler_loop_duration`` metric (a StatsD listener of the benchmark), its period being the
time between two loops' metrics.

Usage::

    .venv/bin/python benchmarks/preemption_latency.py              # 3 repetitions
    .venv/bin/python benchmarks/preemption_latency.py --quick      # 1 repetition (the tests run it)
    .venv/bin/python benchmarks/preemption_latency.py --borrower-age 2  # a borrower that just deferred
    .venv/bin/python benchmarks/preemption_latency.py --stop-poll-interval 10  # the operator's default
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlalchemy as sa
from airflow_overhead import Bench, LoopFigures, as_datetime, bench, scheduler_loops
from rich.console import Console
from rich.table import Table

TITLE = "Preemption latency in real Airflow (a lender reclaims from a SageMaker borrower)"
QUEUE = "gpu-training"
INSTANCE_TYPE = "ml.g5.xlarge"
BORROWER, LENDER = "preempt_borrower", "preempt_lender"

LATENCY_DAGS = '''"""Benchmark DAGs (written by benchmarks/preemption_latency.py)."""

from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator


def request(instance_count, durations):
    return {{
        "AlgorithmSpecification": {{
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
            "TrainingInputMode": "File",
        }},
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {{"S3OutputPath": "s3://models/latency"}},
        "ResourceConfig": {{
            "InstanceType": "{instance_type}", "InstanceCount": instance_count, "VolumeSizeInGB": 10
        }},
        "StoppingCondition": {{"MaxRuntimeInSeconds": 3600}},
        "HyperParameters": {{"emulator.duration_s": durations, "emulator.stop_delay_s": "{stop_seconds}"}},
    }}


COMMON = {{"job_queue": "{queue}", "poll_interval": 1.0, "stop_poll_interval": {stop_poll_interval}}}

with DAG(dag_id="{borrower}", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train", quota_share_name="team-b", training_job_config=request(2, "900,1"), **COMMON
    )

with DAG(dag_id="{lender}", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train",
        quota_share_name="team-a",
        scheduling_priority=5,
        training_job_config=request(1, "1"),
        **COMMON,
    )
'''


def quota_file(queue: str = QUEUE) -> str:
    def share(name: str, sharing: dict[str, Any]) -> dict[str, Any]:
        return {
            "quotaShareName": name,
            "capacityLimits": [{"capacityUnit": INSTANCE_TYPE, "maxCapacity": 1}],
            "resourceSharingConfiguration": sharing,
        }

    queue = {
        "jobQueueName": queue,
        "capacityLimits": [{"capacityUnit": INSTANCE_TYPE, "maxCapacity": 2}],
        "quotaShares": [
            share("team-a", {"strategy": "LEND"}),
            share("team-b", {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}),
        ],
    }
    return json.dumps({"jobQueues": [queue]})


@dataclass
class StatusWatch:
    """Polls one training job every 0.1 s and keeps when each status was first seen (epoch seconds)."""

    bench: Bench
    name: str
    first_seen: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._client: Any = self.bench.sagemaker()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set() and "Stopped" not in self.first_seen:
            try:
                status = self._client.describe_training_job(TrainingJobName=self.name)["TrainingJobStatus"]
            except Exception:  # the emulator is busy: try again
                status = None
            if status is not None:
                self.first_seen.setdefault(status, time.time())
            self._stop.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


PHASES = (
    ("preempt decision (audit PREEMPTED)", "preempted"),
    ("  (log) allocator asks SageMaker to stop the borrower's job", "allocator_stop_logged"),
    ("  (log) triggerer's on_kill asks the stop", "kill_logged"),
    ("  (log) borrower's task resumed in a worker: 'Preempted'", "preempt_logged"),
    ("borrower's job seen Stopping", "stopping"),
    ("borrower's job seen Stopped", "stopped"),
    ("borrower requeued (audit REQUEUED)", "requeued"),
    ("lender granted (audit GRANTED)", "granted"),
    ("lender's training job created (CreationTime)", "created"),
)

#: Phases read from logs, shown beside the chain (not in it): which path issued StopTrainingJob first.
LOGGED = frozenset({"allocator_stop_logged", "kill_logged", "preempt_logged"})
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")


@dataclass(frozen=True)
class Repetition:
    """One reclaim: each phase in seconds after the lender's submission."""

    number: int
    at: dict[str, float]
    stop_before_create: bool
    loops: LoopFigures
    lender_state: str
    borrower_state: str


def job_row(bench_: Bench, job_id: str) -> dict[str, Any] | None:
    with bench_.airflow.engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT status, submitted_at, training_job FROM quota_job WHERE job_id = :j"),
            {"j": job_id},
        ).first()
    if row is None:
        return None
    record = row[2]
    if isinstance(record, str):
        record = json.loads(record)
    return {"status": row[0], "submitted_at": as_datetime(row[1]), "training_job": record}


def audit_time(bench_: Bench, kind: str, job_id: str, after: datetime) -> datetime:
    with bench_.airflow.engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT at FROM quota_audit_log WHERE kind = :k AND job_id = :j ORDER BY id"),
            {"k": kind, "j": job_id},
        ).all()
    times = [as_datetime(at) for (at,) in rows if as_datetime(at) >= after]
    if not times:
        raise RuntimeError(f"no {kind} audit row for {job_id} after {after.isoformat()}")
    return times[0]


def logged_at(
    bench_: Bench, marker: str, run_id: str, after: datetime, *, scheduler_only: bool = False
) -> float:
    """Epoch seconds of the first log line with ``marker`` at or after ``after`` (the borrower's task logs
    and the triggerer's, or the scheduler's alone; timestamps read as UTC, this machine's zone); NaN when
    none."""
    logs = bench_.airflow.home / "logs"
    folder = logs / f"dag_id={BORROWER}" / f"run_id={run_id}"
    times = []
    paths = [logs / "scheduler.log"]
    if not scheduler_only:
        paths = [logs / "triggerer.log", *folder.glob("**/*.log*")]
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            found = _TIMESTAMP.search(line) if marker in line else None
            if found:
                at = datetime.fromisoformat(f"{found[1]}T{found[2].replace(',', '.')}").replace(tzinfo=UTC)
                if at >= after:
                    times.append(at.timestamp())
    return min(times) if times else float("nan")


def repetition(
    bench_: Bench, number: int, timeout: float, *, borrower_age: float, await_borrower: bool = True
) -> Repetition:
    """One reclaim; ``await_borrower=False`` returns once the lender's run ended (the borrower requeued)."""
    airflow = bench_.airflow
    run_id = f"rep-{number}"
    borrower_job = f"{BORROWER}/{run_id}/train/-1/1"
    lender_job = f"{LENDER}/{run_id}/train/-1/1"
    airflow.trigger(BORROWER, run_id)

    def borrower_training() -> str | None:
        row = job_row(bench_, borrower_job)
        record = (row or {}).get("training_job") or {}
        if row is None or row["status"] != "RUNNING" or not record.get("name"):
            return None
        return str(record["name"])

    training_job = airflow.wait_for("the borrower's training job", borrower_training, timeout)
    airflow.wait_for(
        "the borrower to wait on its monitoring trigger",
        lambda: airflow.task_states(BORROWER, run_id).get("train", (None, 0))[0] == "deferred",
        timeout,
    )
    time.sleep(borrower_age)  # how long the borrower has been deferred on its monitoring trigger
    watch = StatusWatch(bench_, training_job)
    window_start = time.time()
    try:
        airflow.trigger(LENDER, run_id)
        lender_state = bench_.wait_run(LENDER, run_id, timeout)
        borrower_state = bench_.wait_run(BORROWER, run_id, timeout) if await_borrower else "not awaited"
    finally:
        watch.close()
    # The allocator records a job's end (and its training job, if it ended before a cycle saw it run) in
    # the cycle after its task ended: read the lender's row once that cycle has run.
    airflow.wait_for_ledger_to_settle(lender_job, timeout=timeout)
    lender = job_row(bench_, lender_job)
    if lender is None or not (lender.get("training_job") or {}).get("name"):
        raise RuntimeError(f"the lender {lender_job} launched no training job: {lender}")
    submitted: datetime = lender["submitted_at"]
    created = bench_.sagemaker().describe_training_job(  # type: ignore[attr-defined]
        TrainingJobName=lender["training_job"]["name"]
    )["CreationTime"]
    epoch = submitted.timestamp()
    at = {
        "preempted": audit_time(bench_, "PREEMPTED", borrower_job, submitted).timestamp() - epoch,
        "allocator_stop_logged": (
            logged_at(
                bench_,
                f"Asked SageMaker to stop training job {training_job}",
                run_id,
                submitted,
                scheduler_only=True,
            )
            - epoch
        ),
        "kill_logged": logged_at(bench_, f"stopping training job {training_job}", run_id, submitted) - epoch,
        "preempt_logged": logged_at(bench_, "Preempted (lease", run_id, submitted) - epoch,
        "stopping": watch.first_seen.get("Stopping", float("nan")) - epoch,
        "stopped": watch.first_seen.get("Stopped", float("nan")) - epoch,
        "requeued": audit_time(bench_, "REQUEUED", borrower_job, submitted).timestamp() - epoch,
        "granted": audit_time(bench_, "GRANTED", lender_job, submitted).timestamp() - epoch,
        "created": as_datetime(created).timestamp() - epoch,
    }
    stop_before_create = at["stopped"] < at["created"] and at["requeued"] <= at["granted"]
    loops = scheduler_loops(bench_.metrics, window_start, time.time())
    return Repetition(number, at, stop_before_create, loops, lender_state, borrower_state)


def _median(values: list[float]) -> float:
    known = [value for value in values if not math.isnan(value)]
    return statistics.median(known) if known else float("nan")


def print_phases(console: Console, reps: list[Repetition], stop_seconds: float) -> None:
    table = Table(title=f"{TITLE}: seconds after the lender's submission (delta from the previous phase)")
    table.add_column("phase")
    for rep in reps:
        table.add_column(f"rep {rep.number}", justify="right")
    table.add_column("median", justify="right")
    previous: list[float] = [0.0] * len(reps)
    previous_median = 0.0
    for label, key in PHASES:
        cells = []
        for index, rep in enumerate(reps):
            value = rep.at[key]
            chained = key not in LOGGED and not math.isnan(value)
            cells.append(f"{value:.2f} (+{value - previous[index]:.2f})" if chained else f"{value:.2f}")
            if chained:
                previous[index] = value
        median = _median([rep.at[key] for rep in reps])
        chained = key not in LOGGED and not math.isnan(median)
        cells.append(f"{median:.2f}" + (f" (+{median - previous_median:.2f})" if chained else ""))
        if chained:
            previous_median = median
        table.add_row(label, *cells)
    table.add_row(
        "borrower Stopped before lender created, REQUEUED before GRANTED",
        *("yes" if rep.stop_before_create else "NO" for rep in reps),
        "",
    )
    table.add_row(
        "DAG runs (lender / borrower)", *(f"{r.lender_state} / {r.borrower_state}" for r in reps), ""
    )
    console.print(table)

    loop_period = statistics.median(rep.loops.period_ms for rep in reps) / 1000
    loop_duration = statistics.median(rep.loops.duration_ms for rep in reps) / 1000
    stop_measured = _median([rep.at["stopped"] - rep.at["stopping"] for rep in reps])
    total = statistics.median(rep.at["created"] for rep in reps)
    goal = 2 * loop_period + stop_seconds
    summary = Table(title="Against the goal: two scheduler loops plus the stop time")
    summary.add_column("figure")
    summary.add_column("seconds", justify="right")
    for name, value in (
        ("scheduler loop, median duration (scheduler.scheduler_loop_duration)", loop_duration),
        ("scheduler loop, median period (metric to metric, idle sleep included)", loop_period),
        (
            f"emulator stop time (emulator.stop_delay_s; seen Stopping -> Stopped: {stop_measured:.2f})",
            stop_seconds,
        ),
        ("goal: 2 loop periods + stop time", goal),
        ("measured: submission -> lender's training job created (median)", total),
        (
            "of which the lender's launch: GRANTED -> its training job created (median)",
            statistics.median(rep.at["created"] - rep.at["granted"] for rep in reps),
        ),
        (
            "submission -> borrower requeued (median): the preemption itself",
            statistics.median(rep.at["requeued"] for rep in reps),
        ),
    ):
        summary.add_row(name, f"{value:.2f}")
    console.print(summary)
    verdict = "met" if total <= goal else f"missed ({total / goal:.1f}x the goal)"
    console.print(f"goal {verdict}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--stop-seconds", type=float, default=2.0, help="the emulator's Stopping time")
    parser.add_argument(
        "--stop-poll-interval",
        type=float,
        default=0.5,
        help="the operators' stop_poll_interval: how often a victim's task checks its job stopped "
        "(the operator's default is 10 s)",
    )
    parser.add_argument(
        "--borrower-age",
        type=float,
        default=12.0,
        help="seconds the borrower waits on its monitoring trigger before the lender arrives (below the "
        "10 s settle time, its preempt event and its trigger's Stopped event wait for the settle guard)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repetitions = 1
    return args


def dag_file(args: argparse.Namespace, queue: str = QUEUE) -> str:
    """The benchmark's DAG file for these arguments, its jobs on job queue ``queue``."""
    return LATENCY_DAGS.format(
        instance_type=INSTANCE_TYPE,
        stop_seconds=args.stop_seconds,
        stop_poll_interval=args.stop_poll_interval,
        queue=queue,
        borrower=BORROWER,
        lender=LENDER,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with bench(dag_file(args), quota_file(), parallelism=4) as b:
        return run(b, args, Console(width=160))


def run(b: Bench, args: argparse.Namespace, console: Console) -> int:
    """The repetitions on a bench with ``dag_file(args)``; print the phases; 1 when one went wrong."""
    reps: list[Repetition] = []
    for dag_id in (BORROWER, LENDER):
        b.airflow.wait_for_dag(dag_id, timeout=180)
    for number in range(1, args.repetitions + 1):
        console.print(f"[dim]{time.strftime('%H:%M:%S')} repetition {number}[/dim]")
        # --quick does not wait for the last borrower to train again and finish (~25 s).
        last = number == args.repetitions
        reps.append(
            repetition(
                b,
                number,
                timeout=240,
                borrower_age=args.borrower_age,
                await_borrower=not (args.quick and last),
            )
        )
    print_phases(console, reps, args.stop_seconds)
    ok = all(
        rep.stop_before_create
        and rep.lender_state == "success"
        and rep.borrower_state in ("success", "not awaited")
        for rep in reps
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
