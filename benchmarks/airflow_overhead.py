"""What QuotaTrainingOperator costs in real Airflow, against a pool-gated SageMakerTrainingOperator.

One Airflow (scheduler hosting the allocator, dag processor, triggerer, api-server; LocalExecutor; SQLite,
in a temporary ``AIRFLOW_HOME``) and one moto server with our SageMaker emulator
(``tests/sagemaker/moto_sagemaker.py``) run two DAGs of the same N training tasks, each training job
lasting ``--job-seconds`` in the emulator:

* ``overhead_quota``: N ``QuotaTrainingOperator`` tasks of one quota share of K instances (RESERVE, the
  queue's whole capacity), polling every second;
* ``overhead_pool``: N of the amazon provider's ``SageMakerTrainingOperator`` in an Airflow pool of K
  slots, ``wait_for_completion=True``, ``check_interval=1``, ``print_log=False``, **not deferrable**: the
  provider's deferrable mode needs ``aiobotocore``, which is not installed here (our monitoring trigger
  avoids it), so each pool task holds a worker slot while its job trains.

One DAG run after the other, on the same processes, alternating which goes first from round to round,
after one unmeasured warm-up run of each (the first run on fresh processes pays imports and client
builds; ``--no-warm-up`` measures it).
Per run: wall time from the run being queued to its end (``dag_run.queued_at`` -> ``end_date``) and the
CPU seconds of each component's process tree (``/proc/<pid>/stat`` utime + stime + cutime + cstime of
every live process under it, before and after: the scheduler's tree holds the LocalExecutor workers and
the task processes), the worker runs (``running`` events in Airflow's log table: a quota task whose
request is known at parse time waits from the triggerer, and runs in a worker once for ``on_grant`` when
its job ends within the launching run's ``follow_seconds`` (5 s), twice with ``on_monitor`` when it outlives
it) and the allocator's cycle time (its ``quota.cycle.duration`` metric, received by a StatsD listener of
the benchmark). ``--what-if-settle S ...`` adds, after the headline rounds, one quota run per S with
``[quota] settle_time`` and the operator's ``settle_seconds`` both at S (the scheduler restarted for it):
what-ifs, not the default. ``--allocation-interval S`` sets ``[quota] allocation_interval`` for every run
(default: the allocator's default, 0.25 s).

Usage::

    .venv/bin/python benchmarks/airflow_overhead.py                   # N=20, K=4, 2 rounds
    .venv/bin/python benchmarks/airflow_overhead.py --job-seconds 15  # jobs that outlive the settle time
    .venv/bin/python benchmarks/airflow_overhead.py --what-if-settle 5 2  # and two lowered-guard runs
    .venv/bin/python benchmarks/airflow_overhead.py --allocation-interval 0.25  # cycles 4x as often
    .venv/bin/python benchmarks/airflow_overhead.py --quick           # N=2, K=2, 1 round (the tests run it)
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

# Runnable as a plain script from a checkout: the package and the test harness importable.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from airflow_quota.allocator import DEFAULT_ALLOCATION_INTERVAL  # noqa: E402
from tests.airflow.harness import AirflowProcesses  # noqa: E402
from tests.sagemaker.moto_process import (  # noqa: E402
    OFFLINE_AWS_ENVIRONMENT,
    REGION,
    emulator_connection,
    moto_server_process,
)

TITLE = "QuotaTrainingOperator vs SageMakerTrainingOperator in a pool, real Airflow"
QUEUE = "gpu-training"
INSTANCE_TYPE = "ml.g5.xlarge"
POOL = "overhead_pool"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
COMPONENTS = ("scheduler", "triggerer", "api-server", "dag-processor")

# The DAG file the benchmark writes into its temporary DAGs folder; {placeholders} are filled in.
OVERHEAD_DAGS = '''"""Benchmark DAGs (written by benchmarks/airflow_overhead.py)."""

from datetime import datetime

from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator
from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

TASKS = {tasks}


def request(name=None):
    document = {{
        "AlgorithmSpecification": {{
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
            "TrainingInputMode": "File",
        }},
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {{"S3OutputPath": "s3://models/overhead"}},
        "ResourceConfig": {{"InstanceType": "{instance_type}", "InstanceCount": 1, "VolumeSizeInGB": 10}},
        "StoppingCondition": {{"MaxRuntimeInSeconds": 3600}},
        "HyperParameters": {{"emulator.duration_s": "{job_seconds}", "emulator.stop_delay_s": "0.5"}},
    }}
    if name is not None:
        document["TrainingJobName"] = name
    return document


def quota_dag(dag_id, settle_seconds):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=TASKS):
        for index in range(TASKS):
            QuotaTrainingOperator(
                task_id=f"train_{{index}}",
                job_queue="{queue}",
                quota_share_name="bench",
                training_job_config=request(),
                poll_interval=1.0,
                stop_poll_interval=0.5,
                settle_seconds=settle_seconds,
            )


quota_dag("overhead_quota", 10.0)
{what_if_dags}
with DAG(dag_id="overhead_pool", schedule=None, start_date=datetime(2026, 1, 1), max_active_tasks=TASKS):
    for index in range(TASKS):
        SageMakerTrainingOperator(
            task_id=f"train_{{index}}",
            pool="{pool}",
            config=request(f"pool-{{{{{{{{ run_id }}}}}}}}-{{index}}"),
            wait_for_completion=True,
            check_interval=1,
            print_log=False,
            check_if_job_exists=False,
            deferrable=False,
        )
'''


def quota_file(capacity: int) -> str:
    return json.dumps(
        {
            "jobQueues": [
                {
                    "jobQueueName": QUEUE,
                    "capacityLimits": [{"capacityUnit": INSTANCE_TYPE, "maxCapacity": capacity}],
                    "quotaShares": [
                        {
                            "quotaShareName": "bench",
                            "capacityLimits": [{"capacityUnit": INSTANCE_TYPE, "maxCapacity": capacity}],
                            "resourceSharingConfiguration": {"strategy": "RESERVE"},
                        }
                    ],
                }
            ]
        }
    )


# --- processes: CPU of a process tree ------------------------------------------------------------------


def _process_table() -> dict[int, tuple[int, float]]:
    """``{pid: (ppid, cpu seconds)}`` of every live process; cpu = utime + stime + cutime + cstime."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
        ppid = int(fields[1])
        ticks = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
        table[int(entry)] = (ppid, ticks / CLOCK_TICKS)
    return table


def tree_cpu_seconds(root_pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each named root process and all its live descendants (reaped children included)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    result = {}
    for name, root in root_pids.items():
        total, stack = 0.0, [root]
        while stack:
            pid = stack.pop()
            if pid in table:
                total += table[pid][1]
                stack.extend(children.get(pid, ()))
        result[name] = total
    return result


# --- metrics: a StatsD listener ------------------------------------------------------------------------


@dataclass
class StatsdListener:
    """Receives Airflow's StatsD packets on 127.0.0.1 and keeps ``(time, name, value)`` of each timer."""

    prefix: str = "airflow"
    timings: list[tuple[float, str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.5)
        self.port = int(self.socket.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.socket.recv(65535)
            except TimeoutError:
                continue
            now = time.time()
            for line in packet.decode(errors="replace").splitlines():
                name, _, rest = line.partition(":")
                value, _, kind = rest.partition("|")
                if kind.startswith("ms") and name.startswith(f"{self.prefix}."):
                    with contextlib.suppress(ValueError):
                        self.timings.append((now, name[len(self.prefix) + 1 :], float(value)))

    def between(self, name: str, start: float, end: float) -> list[tuple[float, float]]:
        """``(arrival time, ms)`` of the timer ``name`` received between ``start`` and ``end``."""
        return [(at, ms) for at, metric, ms in list(self.timings) if metric == name and start <= at <= end]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.socket.close()


@dataclass(frozen=True)
class LoopFigures:
    """The scheduler's loop over a time window: median duration (the loop's work) and median period."""

    loops: int
    duration_ms: float
    period_ms: float


def scheduler_loops(metrics: StatsdListener, start: float, end: float) -> LoopFigures:
    samples = metrics.between("scheduler.scheduler_loop_duration", start, end)
    if len(samples) < 2:
        return LoopFigures(len(samples), float("nan"), float("nan"))
    arrivals = [at for at, _ in samples]
    periods = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
    return LoopFigures(len(samples), statistics.median(ms for _, ms in samples), statistics.median(periods))


# --- the bench: moto, Airflow, teardown ----------------------------------------------------------------


@dataclass
class Bench:
    """A running Airflow with the emulator and a StatsD listener."""

    airflow: AirflowProcesses
    endpoint_url: str
    metrics: StatsdListener

    def sagemaker(self) -> object:
        import boto3

        return boto3.client(
            "sagemaker",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def cpu(self) -> dict[str, float]:
        return tree_cpu_seconds({name: self.airflow.processes[name].pid for name in COMPONENTS})

    def restart_scheduler(self, **env: str) -> None:
        """Restart the scheduler with ``env``; return once it runs loops again (its start-up not measured)."""
        self.airflow.kill("scheduler", signal.SIGTERM)
        restarted = time.time()
        self.airflow.start_process("scheduler", ["scheduler"], **env)
        self.airflow.wait_for(
            "the restarted scheduler's loops",
            lambda: (
                len(self.metrics.between("scheduler.scheduler_loop_duration", restarted, time.time())) > 3
            ),
            180,
        )

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        state = self.airflow.wait_for(
            f"{dag_id} {run_id} to finish",
            lambda: (s := self.airflow.run_state(dag_id, run_id)) in ("success", "failed") and s,
            timeout,
        )
        return str(state)


@dataclass
class BenchServices:
    """What a bench's Airflow talks to: a moto server with the SageMaker emulator and a StatsD listener."""

    endpoint_url: str
    metrics: StatsdListener
    allocation_interval: float

    def airflow_env(self) -> dict[str, str]:
        """The settings that point Airflow's components at them (for every component, from its start)."""
        return {
            **OFFLINE_AWS_ENVIRONMENT,
            **emulator_connection(self.endpoint_url),
            # Airflow's and the allocator's defaults (the test harness runs them faster), unless
            # --allocation-interval says otherwise.
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
            "AIRFLOW__QUOTA__ALLOCATION_INTERVAL": f"{self.allocation_interval:g}",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.metrics.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": self.metrics.prefix,
        }

    def bench(self, airflow: AirflowProcesses) -> Bench:
        return Bench(airflow, self.endpoint_url, self.metrics)


@contextlib.contextmanager
def bench_services(allocation_interval: float = DEFAULT_ALLOCATION_INTERVAL) -> Iterator[BenchServices]:
    """Start the emulator and the StatsD listener; stop both after."""
    metrics = StatsdListener()
    try:
        with moto_server_process() as endpoint_url:
            yield BenchServices(endpoint_url, metrics, allocation_interval)
    finally:
        metrics.close()


def write_dag_files(folder: Path, dags_text: str | Mapping[str, str]) -> Path:
    """Write the DAGs (a DAG file's text, or ``{file name: text}``) into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ({"bench_dags.py": dags_text} if isinstance(dags_text, str) else dags_text).items():
        (folder / name).write_text(text)
    return folder


def ready_for_runs(airflow: AirflowProcesses, quotas_text: str, pools: Sequence[tuple[str, int]]) -> None:
    """Apply the quota file and set the pools on the installation's database."""
    quotas = airflow.home / "bench-quotas.json"
    quotas.write_text(quotas_text)
    # As `airflow quota apply -f` does, in this process (the command would cost an Airflow start).
    airflow.apply_quotas(quotas)
    for name, slots in pools:
        command = ["pools", "set", name, str(slots), "benchmark pool"]
        result = airflow.airflow(*command)
        if result.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(command)} failed:\n{result.stdout}{result.stderr}")


@contextlib.contextmanager
def bench(
    dags_text: str | Mapping[str, str],
    quotas_text: str,
    *,
    parallelism: int,
    pools: Sequence[tuple[str, int]] = (),
    allocation_interval: float = DEFAULT_ALLOCATION_INTERVAL,
) -> Iterator[Bench]:
    """Start the emulator and Airflow with these DAGs (a DAG file's text, or ``{file name: text}``) and
    quotas; stop everything and clean up after."""
    home = Path(tempfile.mkdtemp(prefix="quota-bench-airflow-"))
    try:
        with bench_services(allocation_interval) as services:
            airflow = AirflowProcesses(
                home / "airflow",
                f"sqlite:///{home}/airflow/airflow.db",
                parallelism=parallelism,
                extra_env={
                    **services.airflow_env(),
                    "AIRFLOW__CORE__DAGS_FOLDER": str(write_dag_files(home / "dags", dags_text)),
                },
            )
            try:
                airflow.migrate()
                ready_for_runs(airflow, quotas_text, pools)
                airflow.start()
                yield services.bench(airflow)
            except BaseException:
                print(airflow.log_tails(60), file=sys.stderr)
                raise
            finally:
                airflow.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


# --- the overhead runs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFigures:
    label: str
    dag_id: str
    state: str
    succeeded: int
    tasks: int
    wall_s: float
    cpu_s: dict[str, float]
    loops: LoopFigures
    #: Wall seconds of the allocator's cycles in the run (its ``quota.cycle.duration`` metric, summed).
    allocator_s: float
    #: Worker runs of the DAG run's tasks (task instance history, including the deferrals' resumptions).
    worker_runs: int
    #: A failed task's last error line, by task id.
    failures: dict[str, str]

    @property
    def total_cpu_s(self) -> float:
        return sum(self.cpu_s.values())


def run_once(bench_: Bench, label: str, dag_id: str, run_id: str, tasks: int, timeout: float) -> RunFigures:
    airflow = bench_.airflow
    before = bench_.cpu()
    started = time.time()
    airflow.trigger(dag_id, run_id)
    state = bench_.wait_run(dag_id, run_id, timeout)
    time.sleep(1.5)  # the worker reports its last task and the scheduler reaps it
    after = bench_.cpu()
    ended = time.time()
    with airflow.engine.connect() as connection:
        queued_at, end_date = connection.execute(
            sa.text("SELECT queued_at, end_date FROM dag_run WHERE dag_id = :d AND run_id = :r"),
            {"d": dag_id, "r": run_id},
        ).one()
    wall = (as_datetime(end_date) - as_datetime(queued_at)).total_seconds()
    states = airflow.task_states(dag_id, run_id)
    succeeded = sum(s == "success" for s, _ in states.values())
    cpu = {name: after[name] - before[name] for name in COMPONENTS}
    loops = scheduler_loops(bench_.metrics, started, ended)
    allocator_ms = sum(ms for _, ms in bench_.metrics.between("quota.cycle.duration", started, ended))
    failures = {
        task: last_error(bench_, dag_id, run_id, task) for task, (s, _) in states.items() if s != "success"
    }
    return RunFigures(
        label,
        dag_id,
        state,
        succeeded,
        tasks,
        wall,
        cpu,
        loops,
        allocator_ms / 1000,
        worker_runs(bench_, dag_id, run_id),
        failures,
    )


def worker_runs(bench_: Bench, dag_id: str, run_id: str) -> int:
    """How many times the run's tasks started in a worker: the ``running`` task instance log events."""
    with bench_.airflow.engine.connect() as connection:
        count = connection.execute(
            sa.text("SELECT count(*) FROM log WHERE dag_id = :d AND run_id = :r AND event = 'running'"),
            {"d": dag_id, "r": run_id},
        ).scalar()
    return int(count or 0)


def last_error(bench_: Bench, dag_id: str, run_id: str, task_id: str) -> str:
    """Why a task failed: the scheduler's last line about it that says failed, else its log's last error."""
    logs = bench_.airflow.home / "logs"
    scheduler_lines = [
        line
        for line in (logs / "scheduler.log").read_text(errors="replace").splitlines()
        if f"task_id={task_id}" in line and run_id in line and "fail" in line.lower()
    ]
    folder = logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    task_lines = [
        line
        for path in sorted(folder.glob("**/*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if "error" in line.lower() or "exception" in line.lower()
    ]
    lines = scheduler_lines or task_lines
    return lines[-1][-400:] if lines else "(no error line in the scheduler or task log)"


def as_datetime(value: object) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def print_table(
    console: Console, runs: list[RunFigures], tasks: int, capacity: int, job_seconds: float
) -> None:
    table = Table(title=f"{TITLE}: {tasks} tasks, capacity {capacity}, training jobs of {job_seconds:g} s")
    for column in (
        "run",
        "DAG run",
        "tasks ok",
        "wall s",
        "scheduler CPU s",
        "triggerer CPU s",
        "api-server CPU s",
        "all Airflow CPU s",
        "worker runs",
        "allocator cycles s",
        "loop ms",
    ):
        table.add_column(column, justify="left" if column in ("run", "DAG run") else "right")
    for run in runs:
        table.add_row(
            run.label,
            run.state,
            f"{run.succeeded}/{run.tasks}",
            f"{run.wall_s:.1f}",
            f"{run.cpu_s['scheduler']:.1f}",
            f"{run.cpu_s['triggerer']:.1f}",
            f"{run.cpu_s['api-server']:.1f}",
            f"{run.total_cpu_s:.1f}",
            str(run.worker_runs),
            f"{run.allocator_s:.1f}",
            f"{run.loops.duration_ms:.0f}",
        )
    console.print(table)
    for run in runs:
        for task, error in sorted(run.failures.items()):
            console.print(f"{run.label}: {task} failed: {error}", markup=False, highlight=False)


def print_ratios(console: Console, runs: list[RunFigures], goal: float) -> None:
    def mean(selected: list[RunFigures], figure: str) -> float:
        values = [
            run.cpu_s["scheduler"] if figure == "scheduler" else getattr(run, figure) for run in selected
        ]
        return statistics.fmean(values)

    pool = [run for run in runs if run.label.startswith("pool")]
    rows = [("default settle 10 s (headline)", [run for run in runs if run.label.startswith("quota #")])]
    rows += [(f"{run.label} (not the default)", [run]) for run in runs if run.label.startswith("what-if")]
    table = Table(title=f"Ratios quota / pool, means over the rounds (goal: within {goal:g}x of the pool)")
    for column in ("quota run", "wall", "scheduler CPU", "all Airflow CPU", "goal met"):
        table.add_column(column, justify="left" if column == "quota run" else "right")
    for name, selected in rows:
        ratios = [
            mean(selected, figure) / mean(pool, figure) for figure in ("wall_s", "scheduler", "total_cpu_s")
        ]
        met = "yes" if max(ratios[:2]) <= goal else "no"
        if any(run.state != "success" for run in selected):
            met += " (tasks failed)"
        table.add_row(name, *(f"{ratio:.2f}x" for ratio in ratios), met)
    console.print(table)


def what_if_dag_id(settle: float) -> str:
    return "overhead_quota_settle_" + f"{settle:g}".replace(".", "_")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=2, K=2, 1 round, no what-if")
    parser.add_argument("--tasks", type=int, default=20, help="training tasks per DAG run (N)")
    parser.add_argument("--capacity", type=int, default=4, help="quota share instances = pool slots (K)")
    parser.add_argument("--job-seconds", type=float, default=2.0, help="each training job in the emulator")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of one quota and one pool run")
    parser.add_argument(
        "--allocation-interval",
        type=float,
        default=DEFAULT_ALLOCATION_INTERVAL,
        help="[quota] allocation_interval for every run (default: the allocator's default, "
        f"{DEFAULT_ALLOCATION_INTERVAL:g} s)",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="measure from the first run (by default one unmeasured run of each DAG goes first)",
    )
    parser.add_argument(
        "--what-if-settle",
        type=float,
        nargs="*",
        default=[],
        help="after the rounds, a labelled quota run at each of these settle times (none: no what-if)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.capacity, args.rounds, args.what_if_settle, args.warm_up = 2, 2, 1, [], False
    return args


def dag_file(args: argparse.Namespace) -> str:
    """The benchmark's DAG file for these arguments."""
    what_if_dags = "".join(
        f"quota_dag({what_if_dag_id(settle)!r}, {settle!r})\n" for settle in args.what_if_settle
    )
    return OVERHEAD_DAGS.format(
        tasks=args.tasks,
        instance_type=INSTANCE_TYPE,
        job_seconds=args.job_seconds,
        queue=QUEUE,
        pool=POOL,
        what_if_dags=what_if_dags,
    )


def parallelism(args: argparse.Namespace) -> int:
    """Enough worker slots that the pool, not the executor, limits the pool run (its tasks hold a slot)."""
    return 2 * int(args.capacity)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with bench(
        dag_file(args),
        quota_file(args.capacity),
        parallelism=parallelism(args),
        pools=[(POOL, args.capacity)],
        allocation_interval=args.allocation_interval,
    ) as b:
        return run(b, args, Console(width=170))


def run(b: Bench, args: argparse.Namespace, console: Console) -> int:
    """The warm-up, the rounds and the what-ifs on a bench with ``dag_file(args)``; print the tables; 1 when
    a run did not succeed."""
    timeout = 120 + 30 * args.tasks
    runs: list[RunFigures] = []
    for dag_id in ("overhead_quota", "overhead_pool", *map(what_if_dag_id, args.what_if_settle)):
        b.airflow.wait_for_dag(dag_id, timeout=180)
    if args.warm_up:  # the first run on fresh processes pays imports and client builds: not measured
        for kind, dag_id in (("quota", "overhead_quota"), ("pool", "overhead_pool")):
            console.print(f"[dim]{time.strftime('%H:%M:%S')} warm-up run of {dag_id} (not measured)[/dim]")
            run_once(b, f"warm-up {kind}", dag_id, f"overhead-warm-up-{kind}", args.tasks, timeout)
    for round_number in range(1, args.rounds + 1):
        order = [("quota", "overhead_quota"), ("pool", "overhead_pool")]
        if round_number % 2 == 0:
            order.reverse()
        for kind, dag_id in order:
            label = f"{kind} #{round_number}"
            console.print(f"[dim]{time.strftime('%H:%M:%S')} running {label}[/dim]")
            runs.append(run_once(b, label, dag_id, f"overhead-{kind}-{round_number}", args.tasks, timeout))
    for settle in args.what_if_settle:
        now = time.strftime("%H:%M:%S")
        console.print(f"[dim]{now} restarting the scheduler, settle_time {settle:g}[/dim]")
        b.restart_scheduler(AIRFLOW__QUOTA__SETTLE_TIME=f"{settle:g}")
        label = f"what-if settle {settle:g} s"
        dag_id = what_if_dag_id(settle)
        run_id = "overhead-what-if-" + f"{settle:g}".replace(".", "-")
        runs.append(run_once(b, label, dag_id, run_id, args.tasks, timeout))
    print_table(console, runs, args.tasks, args.capacity, args.job_seconds)
    print_ratios(console, runs, goal=1.2)
    console.print(
        f"pool: SageMakerTrainingOperator, not deferrable (no aiobotocore), pool of {args.capacity} slots; "
        f"parallelism {parallelism(args)}. CPU: process trees, utime+stime+cutime+cstime. Wall: dag_run "
        "queued_at -> end_date. what-if: \\[quota] settle_time and settle_seconds both lowered, scheduler "
        "restarted."
    )
    failed = [run.label for run in runs if run.state != "success" and not run.label.startswith("what-if")]
    if failed:
        console.print(f"[red]runs that did not succeed: {', '.join(failed)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
