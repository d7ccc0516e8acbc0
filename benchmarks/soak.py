"""Soak test: real Airflow under random submissions, clears, quota changes and SIGKILLs, checked every 0.5 s.

One Airflow (scheduler hosting the allocator, dag processor, triggerer, api-server; LocalExecutor; SQLite
or PostgreSQL, in a temporary ``AIRFLOW_HOME``; ``tests/airflow/harness.py``) runs the DAGs of
``benchmarks/soak/dags``: QuotaTrainingOperator tasks on the local backend, each training a real process
(examples/training/train_counter.py, which checkpoints every step) on the device indices of a local job
queue of 4 GPUs, shared by three quota shares (LEND with in-share preemption, LEND_AND_BORROW, RESERVE).
No GPU is needed: the devices are indices in ``CUDA_VISIBLE_DEVICES``.

For ``--duration`` seconds, and until ``--decks`` whole decks have been played, a driver, every 1 to 3 s,
takes the next action of a shuffled deck (each deck holds every kind of action, so every kind happens in
each round; a kill that finds nothing to kill is played again in the next deck):

* ``trigger``: a DAG run of a random share, priority (10 or 50) and size (1 or 2 devices; 1 in team-c,
  which RESERVEs 1), training 25 to 125 steps of 0.1 s, one in three ignoring SIGTERM (its 3 s grace
  period then ends in SIGKILL);
* ``clear``: clear the task of a random earlier run (a new try; a running one is stopped);
* ``quota``: apply another quota file variant as ``airflow quota apply`` does (``QUOTA_VARIANTS``:
  capacities, strategies and borrow limits change; one lowers the queue to 3 devices);
* ``kill training``: SIGKILL a random live training process;
* ``kill runner`` / ``kill supervisor``: SIGKILL the task process that runs a training (its parent), or
  the Airflow supervisor above it;
* ``kill scheduler``: SIGKILL the scheduler's whole process group (with its LocalExecutor workers, which
  supervise the tasks; the task processes, each in its own process group, live on), then start it again
  1 to 5 s later;
* beside the deck, for one in two jobs the allocator signals to stop (a preempted victim in its grace
  period), SIGKILL its task runner 0.5 to 2 s after the signal (``VictimHunter``).

Then the driver stops, applies the starting quotas again and waits up to ``--drain`` seconds for every run
to end. All along a sampler checks, every 0.5 s:

* ledger: no device index is held by two open jobs of one capacity unit (``quota_job.held_devices``);
* ledger: no share holds more of a unit than its ceiling, counting its jobs being stopped (SCHEDULED,
  STARTING and RUNNING jobs, ``stop_cause`` set or not: ``held_instance_count`` of ``held_capacity_unit``;
  the ceiling is the share's own limit for RESERVE and LEND, ``own * (100 + borrowLimit) // 100`` for
  LEND_AND_BORROW, none for ``borrowLimit`` -1, as ``quota_share`` has them applied);
* ledger: nobody else holds RESERVE capacity: per capacity unit, the units RESERVE shares have free within
  their own limits (the sum over them of ``max(0, own limit - what the share holds)``) stay idle, that is
  the queue's capacity (``quota_job_queue.capacity_limits``) less what all open jobs hold is at least that
  sum;
* processes: no two live trainings of different training jobs share a device (``CUDA_VISIBLE_DEVICES``
  and ``TRAINING_JOB_NAME`` in ``/proc/<pid>/environ``; only this soak's processes, by ``AIRFLOW_HOME``);
* ledger/process: no live training runs on a device the ledger gives to another task's job.

A process counts only when it was seen in two /proc scans, one before and one after the ledger read, so
it was alive across the whole sample: a process that ended meanwhile is never a false violation.

The driver applies other quota variants mid-run, and a lowered limit or a shrunk queue leaves usage above
it that only drains (README, "Borrowing and lowered limits"). So a share above its ceiling, or a RESERVE
shortfall, is a violation only when it appears or grows while the configuration (the job queue's
``revision``) is unchanged since the previous sample: the amount a sample finds just after a change is
excused, and what is excused only shrinks (to the least amount seen since) until the next change; the
first sample excuses nothing (no job holds capacity yet). A sample whose reads straddle a quota change
(the revision read again after the jobs differs) checks nothing of that queue, and the next one counts as
just after a change.

It prints the figures (kills by kind, jobs submitted, finished and preempted, samples, violations) and
every violation seen (which jobs, which devices, first and last seen, the jobs' audit rows) and each
failed allocation cycle's exception; exit code 1 when there was a violation. The kept ``AIRFLOW_HOME``
holds the logs, ``ledger-held.jsonl`` (held devices at each change) and the ledger's job and audit rows.
The driver's choices follow ``--seed`` (timings do not: processes run at their own pace).

Usage::

    .venv/bin/python benchmarks/soak.py --backend sqlite --duration 300 --seed 1
    .venv/bin/python benchmarks/soak.py --backend postgresql --duration 300  # QUOTA_TEST_POSTGRES server
    .venv/bin/python benchmarks/soak.py --duration 0 --decks 1 --summary out.json  # one deck, as tests play
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Runnable as a plain script from a checkout: the package and the test harness importable.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from airflow_quota.backends.sagemaker import TaskIdentity  # noqa: E402
from airflow_quota.engine.config import QuotaConfigError  # noqa: E402
from airflow_quota.ledger.errors import ConfigApplyError  # noqa: E402
from tests.airflow.harness import AirflowProcesses  # noqa: E402
from tests.scripts import load_script  # noqa: E402

TITLE = "Soak: random submissions, clears, quota changes and SIGKILLs on real Airflow"
DAGS = Path(__file__).resolve().parent / "soak" / "dags"
QUEUE = "soak-local"
UNIT = "local-gpu"
#: ``{(share, priority, size): dag_id}`` of the soak's DAG file, read from it.
DAG_IDS: dict[tuple[str, int, int], str] = load_script("benchmarks/soak/dags/soak_dags.py").DAG_IDS
POSTGRES_SERVER = os.environ.get("QUOTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
SAMPLE_SECONDS = 0.5
#: Runs queued or running at most: past it, a trigger waits for the backlog to shrink.
MAX_OPEN_RUNS = 10
#: One deck of actions; the driver shuffles it with the seed and plays it through, again and again.
DECK = (
    ("trigger",) * 5
    + ("clear", "quota")
    + ("kill training", "kill runner", "kill supervisor", "kill scheduler")
)
#: What the scheduler logs when a cycle, or one job queue's part of it, failed and was rolled back.
CYCLE_FAILED = ("Quota allocation cycle failed", "its part of the allocation cycle failed")
FINAL_RUN_STATES = ("success", "failed")


def share(
    name: str, capacity: int, strategy: str, borrow_limit: int | None = None, in_share: bool = False
) -> dict[str, Any]:
    """One quota share of the soak's job queue, in AWS's field names."""
    sharing: dict[str, Any] = {"strategy": strategy}
    if borrow_limit is not None:
        sharing["borrowLimit"] = borrow_limit
    document: dict[str, Any] = {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": capacity}],
        "resourceSharingConfiguration": sharing,
    }
    if in_share:
        document["preemptionConfiguration"] = {"inSharePreemption": "ENABLED"}
    return document


#: The quota files the soak applies; the first is the starting one, applied again before the drain.
QUOTA_VARIANTS: dict[str, tuple[int, list[dict[str, Any]]]] = {
    "start": (
        4,
        [
            share("team-a", 2, "LEND", in_share=True),
            share("team-b", 1, "LEND_AND_BORROW", -1, in_share=True),
            share("team-c", 1, "RESERVE"),
        ],
    ),
    "three devices": (
        3,
        [
            share("team-a", 1, "LEND", in_share=True),
            share("team-b", 1, "LEND_AND_BORROW", -1, in_share=True),
            share("team-c", 1, "RESERVE"),
        ],
    ),
    "swapped": (
        4,
        [
            share("team-a", 2, "LEND_AND_BORROW", 50, in_share=True),
            share("team-b", 1, "LEND"),
            share("team-c", 1, "LEND_AND_BORROW", 100, in_share=True),
        ],
    ),
}


def quota_document(variant: str) -> dict[str, Any]:
    capacity, shares = QUOTA_VARIANTS[variant]
    return {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": capacity}],
                "quotaShares": shares,
            }
        ]
    }


# --- this soak's processes, from /proc ----------------------------------------------------------------


@dataclass(frozen=True)
class Training:
    """A live process of a training, as /proc shows it."""

    pid: int
    #: Start time in clock ticks since boot: with the pid, it names the process even if the pid is reused.
    started: int
    ppid: int
    pgid: int
    job: str
    devices: frozenset[int]

    @property
    def task_key(self) -> str:
        return task_key_of(self.job)


def task_key_of(training_job_name: str) -> str:
    """A training job name's task part (``<task key>-t<try>-a<attempt>``): the same for every try."""
    match = re.fullmatch(r"(.*)-t\d+-a\d+", training_job_name)
    return match.group(1) if match else training_job_name


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start time) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def _environ(pid: int, *needles: bytes) -> dict[str, str]:
    """A process' environment; empty when it is gone or its raw environment lacks one of ``needles`` (a
    cheap test first: the sampler looks at every process on the machine four times a second, and parsing
    each environment was most of the soak's own CPU while the test suite's other Airflows ran)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    if not all(needle in raw for needle in needles):
        return {}
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {name.decode(errors="replace"): value.decode(errors="replace") for name, value in pairs}


def _cmdline(pid: int) -> str:
    """The process' title (Airflow's processes set theirs, which also hides their environment)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def trainings(home: Path) -> dict[tuple[int, int], Training]:
    """This soak's live training processes (zombies excluded), by (pid, start time)."""
    found = {}
    needles = (b"TRAINING_JOB_NAME=", b"AIRFLOW_HOME=" + os.fsencode(home))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        env = _environ(pid, *needles)
        if env.get("AIRFLOW_HOME") != str(home) or "TRAINING_JOB_NAME" not in env:
            continue
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        devices = frozenset(int(part) for part in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if part)
        found[(pid, stat[3])] = Training(pid, stat[3], stat[1], stat[2], env["TRAINING_JOB_NAME"], devices)
    return found


# --- the sampler --------------------------------------------------------------------------------------


@dataclass
class Violation:
    """One distinct violation: what, between which jobs, on which devices; when it was seen."""

    kind: str
    jobs: tuple[str, ...]
    devices: tuple[int, ...]
    first_seen_s: float
    last_seen_s: float
    first_seen_utc: str
    samples: int = 1
    #: What the sample that first saw it measured (a quota check's amounts), or empty.
    detail: str = ""
    #: The audit rows of the jobs involved, filled in at the end.
    audit: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HeldDevices:
    job_id: str
    status: str
    task_key: str
    unit: str
    devices: tuple[int, ...]


def held_devices(connection: sa.Connection) -> list[HeldDevices]:
    """The devices every open job of the ledger holds."""
    rows = connection.execute(
        sa.text(
            "SELECT job_id, status, held_capacity_unit, held_devices, dag_id, run_id, task_id, map_index,"
            " try_number FROM quota_job WHERE held_devices IS NOT NULL"
            " AND status NOT IN ('SUCCEEDED', 'FAILED')"
        )
    )
    held = []
    for job_id, status, unit, devices, dag, run, task, map_index, try_number in rows:
        indices = json.loads(devices) if isinstance(devices, str) else devices
        if not indices:
            continue
        key = TaskIdentity(dag, run, task, map_index, try_number).task_key
        held.append(HeldDevices(job_id, status, key, str(unit), tuple(int(index) for index in indices)))
    return held


#: The statuses of the jobs that hold capacity (those being stopped included).
HOLDING_STATUSES = ("SCHEDULED", "STARTING", "RUNNING")


@dataclass(frozen=True)
class HeldUnits:
    """The units an open job holds, and whether it is being stopped (preempted or terminated)."""

    job_id: str
    queue: str
    share: str
    unit: str
    count: int
    devices: tuple[int, ...]
    stopping: bool


@dataclass(frozen=True)
class ShareQuota:
    """A quota share as applied (``quota_share``)."""

    strategy: str
    limits: dict[str, int]
    #: NULL in the ledger when the file leaves it out, which means -1 (no limit).
    borrow_limit: int | None

    def own(self, unit: str) -> int:
        return self.limits.get(unit, 0)

    def ceiling(self, unit: str) -> int | None:
        """The most the share may hold of ``unit``, borrowing included; None: no ceiling."""
        own = self.own(unit)
        if self.strategy != "LEND_AND_BORROW":
            return own
        if self.borrow_limit is None or self.borrow_limit == -1:
            return None
        return own * (100 + self.borrow_limit) // 100


#: What a share removed from the quota file still holding units may hold: nothing.
NO_SHARE = ShareQuota("", {}, None)


@dataclass(frozen=True)
class QueueQuota:
    """A job queue as applied (``quota_job_queue``) with its shares."""

    revision: int
    capacity: dict[str, int]
    shares: dict[str, ShareQuota]


def _limits(value: Any) -> dict[str, int]:
    """AWS's ``capacityLimits`` (a JSON column: text on some drivers) as ``{unit: maxCapacity}``."""
    limits = json.loads(value) if isinstance(value, str) else value
    return {str(limit["capacityUnit"]): int(limit["maxCapacity"]) for limit in limits or []}


def queue_revisions(connection: sa.Connection) -> dict[str, int]:
    rows = connection.execute(sa.text("SELECT job_queue_name, revision FROM quota_job_queue"))
    return {str(queue): int(revision) for queue, revision in rows}


def quota_design(connection: sa.Connection) -> dict[str, QueueQuota]:
    """The applied quota design of every job queue."""
    queues = {
        str(queue): QueueQuota(int(revision), _limits(limits), {})
        for queue, limits, revision in connection.execute(
            sa.text("SELECT job_queue_name, capacity_limits, revision FROM quota_job_queue")
        )
    }
    rows = connection.execute(
        sa.text(
            "SELECT job_queue_name, quota_share_name, capacity_limits, strategy, borrow_limit"
            " FROM quota_share"
        )
    )
    for queue, name, limits, strategy, borrow_limit in rows:
        if queue in queues:
            queues[queue].shares[str(name)] = ShareQuota(
                str(strategy), _limits(limits), None if borrow_limit is None else int(borrow_limit)
            )
    return queues


def held_units(connection: sa.Connection) -> list[HeldUnits]:
    """The units every job that holds capacity holds (SCHEDULED, STARTING, RUNNING; being stopped or not)."""
    rows = connection.execute(
        sa.text(
            "SELECT job_id, job_queue_name, quota_share_name, held_capacity_unit, held_instance_count,"
            " held_devices, stop_cause FROM quota_job WHERE status IN :statuses"
            " AND held_capacity_unit IS NOT NULL AND held_instance_count > 0"
        ).bindparams(sa.bindparam("statuses", expanding=True)),
        {"statuses": list(HOLDING_STATUSES)},
    )
    held = []
    for job_id, queue, share_name, unit, count, devices, stop_cause in rows:
        indices = json.loads(devices) if isinstance(devices, str) else devices
        held.append(
            HeldUnits(
                str(job_id),
                str(queue),
                str(share_name),
                str(unit),
                int(count),
                tuple(sorted(int(index) for index in indices or [])),
                stop_cause is not None,
            )
        )
    return held


@dataclass
class QuotaWatch:
    """A job queue's revision at the previous sample (None: unknown, a change straddled that sample's
    reads) and the amounts above a ceiling or short of RESERVE capacity that a quota change excused."""

    revision: int | None
    excused: dict[tuple[str, ...], int] = field(default_factory=dict)


@dataclass(frozen=True)
class QuotaFinding:
    """An amount one quota check measured: above a share's ceiling, or short of RESERVE shares' free units."""

    kind: str
    amount: int
    jobs: tuple[HeldUnits, ...]
    detail: str


SHARE_ABOVE_CEILING = "ledger: share above its ceiling"
RESERVE_HELD = "ledger: RESERVE capacity held by another share"


def quota_findings(quota: QueueQuota, jobs: list[HeldUnits]) -> dict[tuple[str, ...], QuotaFinding]:
    """Per (share, unit), how far the share is above its ceiling; per unit, how many of the units RESERVE
    shares have free are not idle. Only the amounts above 0."""
    by_share: dict[tuple[str, str], list[HeldUnits]] = {}
    for job in jobs:
        by_share.setdefault((job.share, job.unit), []).append(job)
    held = {key: sum(job.count for job in holders) for key, holders in by_share.items()}
    findings: dict[tuple[str, ...], QuotaFinding] = {}
    for (name, unit), holders in sorted(by_share.items()):
        ceiling = quota.shares.get(name, NO_SHARE).ceiling(unit)
        if ceiling is not None and held[name, unit] > ceiling:
            stopping = sum(job.count for job in holders if job.stopping)
            findings["ceiling", name, unit] = QuotaFinding(
                SHARE_ABOVE_CEILING,
                held[name, unit] - ceiling,
                tuple(holders),
                f"{name} holds {held[name, unit]} {unit} ({stopping} of them being stopped), its ceiling"
                f" is {ceiling} (revision {quota.revision})",
            )
    reserves = {name: share for name, share in quota.shares.items() if share.strategy == "RESERVE"}
    units = {unit for share in reserves.values() for unit in share.limits}
    for unit in sorted(units):
        free = {name: max(0, share.own(unit) - held.get((name, unit), 0)) for name, share in reserves.items()}
        on_unit = [job for job in jobs if job.unit == unit]
        idle = quota.capacity.get(unit, 0) - sum(job.count for job in on_unit)
        shortfall = sum(free.values()) - idle
        if shortfall <= 0:
            continue
        # Who holds it: the shares above their own limit there (borrowing), else every non-RESERVE share.
        above = {
            name
            for (name, held_unit), count in held.items()
            if held_unit == unit and count > quota.shares.get(name, NO_SHARE).own(unit)
        }
        takers = [job for job in on_unit if job.share in above] or [
            job for job in on_unit if job.share not in reserves
        ]
        free_text = ", ".join(f"{name} {count}" for name, count in sorted(free.items()) if count)
        findings["reserve", unit] = QuotaFinding(
            RESERVE_HELD,
            shortfall,
            tuple(takers),
            f"RESERVE shares have {sum(free.values())} {unit} free ({free_text}) but only {idle} of"
            f" {quota.capacity.get(unit, 0)} are idle (revision {quota.revision})",
        )
    return findings


@dataclass
class Sampler:
    """Every SAMPLE_SECONDS: the ledger's held devices and units against each other and the applied quotas,
    and the live trainings' devices, checked."""

    home: Path
    database_url: str
    started: float
    samples: int = 0
    skipped: int = 0
    violations: dict[tuple[str, tuple[str, ...], tuple[int, ...]], Violation] = field(default_factory=dict)
    most_trainings: int = 0
    last_held: list[list[Any]] = field(default_factory=list)
    #: Per job queue: its revision at the previous sample and what a quota change excused since.
    quota_watch: dict[str, QuotaWatch] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.engine = sa.create_engine(self.database_url, poolclass=sa.NullPool)

    def __enter__(self) -> Sampler:
        self.thread = threading.Thread(target=self._run, name="soak sampler", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(30)
        self.engine.dispose()

    def _run(self) -> None:
        while not self.stop_event.wait(SAMPLE_SECONDS):
            try:
                self.sample()
            except sa.exc.OperationalError:  # SQLite busy, a restarting server: this sample is lost
                self.skipped += 1

    def sample(self) -> None:
        before = trainings(self.home)
        with self.engine.connect() as connection:
            held = held_devices(connection)
            # The design, then the jobs, then the revisions again: equal revisions mean no quota change
            # committed in between, so the jobs were read under that design.
            design = quota_design(connection)
            holding = held_units(connection)
            revisions = queue_revisions(connection)
        after = trainings(self.home)
        live = [training for key, training in sorted(before.items()) if key in after]
        self.samples += 1
        self.most_trainings = max(self.most_trainings, len({training.job for training in live}))
        now = time.monotonic() - self.started
        self._journal(held, now)
        self._check_ledger(held, now)
        self._check_quotas(design, holding, revisions, now)
        self._check_processes(live, now)
        self._check_processes_against_ledger(live, held, now)

    def _journal(self, held: list[HeldDevices], now: float) -> None:
        """Append the ledger's held devices to ``<home>/ledger-held.jsonl`` whenever they change: what a
        failed cycle or a violation found, to read afterwards."""
        snapshot = sorted([job.job_id, job.status, list(job.devices)] for job in held)
        if snapshot == self.last_held:
            return
        self.last_held = snapshot
        line = {
            "utc": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "t": round(now, 1),
            "held": snapshot,
        }
        with (self.home / "ledger-held.jsonl").open("a") as journal:
            journal.write(json.dumps(line) + "\n")

    def _check_ledger(self, held: list[HeldDevices], now: float) -> None:
        holders: dict[tuple[str, int], list[str]] = {}
        for job in held:
            for device in job.devices:
                holders.setdefault((job.unit, device), []).append(job.job_id)
        for (_, device), jobs in sorted(holders.items()):
            if len(jobs) > 1:
                self._note("ledger: device held by two open jobs", tuple(sorted(jobs)), (device,), now)

    def _check_quotas(
        self, design: dict[str, QueueQuota], holding: list[HeldUnits], revisions: dict[str, int], now: float
    ) -> None:
        """Shares within their ceilings and RESERVE shares' free units idle, but for what a quota change
        left (it only drains): an amount counts where it is above what the last change excused."""
        for queue, quota in sorted(design.items()):
            if revisions.get(queue) != quota.revision:  # a change committed while the sample read
                self.quota_watch[queue] = QuotaWatch(None)
                continue
            watch = self.quota_watch.get(queue)
            changed = watch is not None and watch.revision != quota.revision
            excused = {} if watch is None else watch.excused
            findings = quota_findings(quota, [job for job in holding if job.queue == queue])
            still_excused = {}
            for key, finding in findings.items():
                allowed = finding.amount if changed else min(excused.get(key, 0), finding.amount)
                if allowed:
                    still_excused[key] = allowed
                if finding.amount > allowed:
                    jobs = tuple(sorted(job.job_id for job in finding.jobs))
                    devices = tuple(sorted({device for job in finding.jobs for device in job.devices}))
                    self._note(finding.kind, jobs, devices, now, finding.detail)
            self.quota_watch[queue] = QuotaWatch(quota.revision, still_excused)

    def _check_processes(self, live: list[Training], now: float) -> None:
        users: dict[int, set[str]] = {}
        for training in live:
            for device in training.devices:
                users.setdefault(device, set()).add(training.job)
        for device, jobs in sorted(users.items()):
            if len(jobs) > 1:
                self._note("processes: two trainings on one device", tuple(sorted(jobs)), (device,), now)

    def _check_processes_against_ledger(
        self, live: list[Training], held: list[HeldDevices], now: float
    ) -> None:
        holder = {device: job for job in held if job.unit == UNIT for device in job.devices}
        for training in live:
            for device in sorted(training.devices):
                job = holder.get(device)
                if job is not None and job.task_key != training.task_key:
                    self._note(
                        "ledger/process: training on a device the ledger gives to another job",
                        (training.job, job.job_id),
                        (device,),
                        now,
                    )

    def _note(
        self, kind: str, jobs: tuple[str, ...], devices: tuple[int, ...], now: float, detail: str = ""
    ) -> None:
        key = (kind, jobs, devices)
        seen = self.violations.get(key)
        if seen is None:
            utc = datetime.now(UTC).isoformat(timespec="milliseconds")
            self.violations[key] = Violation(kind, jobs, devices, now, now, utc, detail=detail)
            print(
                f"  [{now:7.1f} s] VIOLATION {kind}: {', '.join(jobs)} on device(s) {list(devices)}"
                + (f": {detail}" if detail else ""),
                flush=True,
            )
        else:
            seen.last_seen_s = now
            seen.samples += 1


# --- the driver ---------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What the driver did."""

    actions: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    quota_applied: Counter[str] = field(default_factory=Counter)
    quota_refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    runs: list[tuple[str, str]] = field(default_factory=list)


class Driver:
    """Plays the shuffled deck of actions against one Airflow, with the seed's random choices."""

    def __init__(self, airflow: AirflowProcesses, rng: random.Random, started: float) -> None:
        self.airflow = airflow
        self.rng = rng
        self.started = started
        self.figures = Figures()
        self.base_url = airflow.env["AIRFLOW__API__BASE_URL"]
        self.http = requests.Session()
        self.variant = "start"
        self.deck: list[str] = []
        #: Decks dealt so far (the one being played included).
        self.dealt = 0
        self.carried: set[str] = set()
        self.applying: threading.Thread | None = None

    def log(self, message: str) -> None:
        print(f"  [{time.monotonic() - self.started:7.1f} s] {message}", flush=True)

    def error(self, message: str) -> None:
        self.figures.errors.append(message)
        self.log(f"error: {message}")

    def login(self) -> None:
        token = self.http.post(
            f"{self.base_url}/auth/token", json={"username": "admin", "password": "admin"}, timeout=60
        )
        token.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def next_action(self) -> str:
        if not self.deck:
            self.deck = list(DECK) + sorted(self.carried)
            self.carried.clear()
            self.rng.shuffle(self.deck)
            self.dealt += 1
        return self.deck.pop()

    @property
    def decks_played(self) -> int:
        """Decks played through: every kind of action was played that many times at least."""
        return self.dealt - 1 if self.deck else self.dealt

    def step(self) -> None:
        action = self.next_action()
        began = time.monotonic()
        done = getattr(self, "_" + action.replace(" ", "_"))()
        took = time.monotonic() - began
        if not done or took > 5:
            self.log(f"{action}: {'done' if done else 'skipped'} in {took:.1f} s")
        (self.figures.actions if done else self.figures.skipped)[action] += 1
        if not done and action.startswith("kill"):  # no target now: once more in the next deck
            self.carried.add(action)

    def open_runs(self) -> int:
        with self.airflow.engine.connect() as connection:
            query = "SELECT count(*) FROM dag_run WHERE dag_id LIKE 'soak%'"
            query += " AND state NOT IN ('success', 'failed')"
            return int(connection.execute(sa.text(query)).scalar_one())

    def _trigger(self) -> bool:
        dag = DAG_IDS[self.rng.choice(sorted(DAG_IDS))]
        conf = {
            "steps": self.rng.randint(25, 125),
            "ignore_sigterm": "true" if self.rng.random() < 1 / 3 else "false",
        }
        run_id = f"soak-{len(self.figures.runs) + 1:04d}"
        if self.open_runs() >= MAX_OPEN_RUNS:
            return False
        response = self.http.post(
            f"{self.base_url}/api/v2/dags/{dag}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None, "conf": conf},
            timeout=60,
        )
        if response.status_code != 200:
            self.error(f"trigger {dag} {run_id}: {response.status_code} {response.text[:300]}")
            return False
        self.figures.runs.append((dag, run_id))
        self.log(f"trigger {dag} {run_id} {conf}")
        return True

    def _clear(self) -> bool:
        if not self.figures.runs:
            return False
        dag, run_id = self.rng.choice(self.figures.runs)
        response = self.http.post(
            f"{self.base_url}/api/v2/dags/{dag}/clearTaskInstances",
            json={
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": ["train"],
                "only_failed": False,
                "reset_dag_runs": True,
            },
            timeout=60,
        )
        if response.status_code != 200:
            self.error(f"clear {dag} {run_id}: {response.status_code} {response.text[:300]}")
            return False
        self.log(f"clear {dag} {run_id}")
        return True

    def _quota(self) -> bool:
        """Apply another quota variant from a thread, so the chaos goes on meanwhile."""
        variant = self.rng.choice(sorted(set(QUOTA_VARIANTS) - {self.variant}))
        if self.applying is not None and self.applying.is_alive():
            return False
        self.variant = variant
        self.log(f"quota apply {variant!r} (from a thread)")
        self.applying = threading.Thread(target=self.apply_quota, args=(variant,), name="quota apply")
        self.applying.start()
        return True

    def wait_for_quota_apply(self) -> None:
        if self.applying is not None:
            self.applying.join()

    def apply_quota(self, variant: str) -> bool:
        path = self.airflow.home / f"quotas-{variant.replace(' ', '-')}.json"
        path.write_text(json.dumps(quota_document(variant), indent=2))
        # The transaction `airflow quota apply -f` runs (apply_quota_config), in this process: the command
        # would add an Airflow start (about 5 CPU-seconds) to each change; it is tested on its own.
        try:
            self.airflow.apply_quotas(path)
        except (QuotaConfigError, ConfigApplyError, sa.exc.OperationalError) as error:
            message = str(error).strip().splitlines()[:1] or ["?"]
            self.figures.quota_refused.append(f"{variant}: {message[0][:300]}")
            self.log(f"quota apply {variant!r} refused: {message[0][:200]}")
            return False
        self.figures.quota_applied[variant] += 1
        self.log(f"quota {variant!r} applied")
        return True

    def _kill_training(self) -> bool:
        target = self._random_training_leader()
        return target is not None and self.kill(target.pid, "training", target.job)

    def _kill_runner(self) -> bool:
        """SIGKILL the task process that runs a random training (the training's parent)."""
        target = self._random_training_leader()
        if target is None or not _cmdline(target.ppid).startswith("airflow"):
            return False
        return self.kill(target.ppid, "task runner", target.job)

    def _kill_supervisor(self) -> bool:
        """SIGKILL the supervisor of a random training's task: the task process' parent, a LocalExecutor
        worker of this soak's scheduler."""
        target = self._random_training_leader()
        runner = None if target is None else _stat(target.ppid)
        scheduler = self.airflow.processes.get("scheduler")
        if target is None or runner is None or scheduler is None:
            return False
        supervisor = _stat(runner[1])
        if supervisor is None or supervisor[1] != scheduler.pid:
            return False
        return self.kill(runner[1], "task supervisor", target.job)

    def _random_training_leader(self) -> Training | None:
        leaders = sorted(
            (training for training in trainings(self.airflow.home).values() if training.pid == training.pgid),
            key=lambda training: (training.job, training.pid),
        )
        return self.rng.choice(leaders) if leaders else None

    def kill(self, pid: int, kind: str, job: str) -> bool:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.figures.kills[kind] += 1
        self.log(f"SIGKILL {kind} {pid} of {job}")
        return True

    def _kill_scheduler(self) -> bool:
        pause = self.rng.uniform(1, 5)
        self.airflow.kill("scheduler")
        self.figures.kills["scheduler"] += 1
        self.log(f"SIGKILL scheduler (process group); restart in {pause:.1f} s")
        time.sleep(pause)
        self.airflow.start("scheduler")
        return True


class VictimHunter:
    """While the chaos runs, every 0.5 s: for one in two jobs the allocator has just signalled to stop (a
    preempted victim in its grace period), SIGKILL the task runner of its training, 0.5 to 2 s after the
    signal: the watchdog then stops the training, on its own clock (issue 18, item 1)."""

    KIND = "task runner of a stopping victim"

    def __init__(self, driver: Driver, seed: int) -> None:
        self.driver = driver
        self.rng = random.Random(seed)
        self.seen: set[tuple[str, str]] = set()
        self.stop_event = threading.Event()

    def __enter__(self) -> VictimHunter:
        self.thread = threading.Thread(target=self._run, name="soak victim hunter", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(30)

    def _run(self) -> None:
        while not self.stop_event.wait(SAMPLE_SECONDS):
            with contextlib.suppress(sa.exc.OperationalError):  # SQLite busy: next time
                self.hunt()

    def hunt(self) -> None:
        query = (
            "SELECT job_id, stop_signalled_at, training_job FROM quota_job"
            " WHERE stop_signalled_at IS NOT NULL AND status NOT IN ('SUCCEEDED', 'FAILED') ORDER BY job_id"
        )
        with self.driver.airflow.engine.connect() as connection:
            stopping = connection.execute(sa.text(query)).all()
        for job_id, signalled_at, training_job in stopping:
            if (job_id, str(signalled_at)) in self.seen:
                continue
            self.seen.add((job_id, str(signalled_at)))
            record = json.loads(training_job) if isinstance(training_job, str) else training_job
            if not record or self.rng.random() < 0.5:
                continue
            time.sleep(self.rng.uniform(0.5, 2))
            leaders = [
                training
                for training in trainings(self.driver.airflow.home).values()
                if training.pid == training.pgid and training.job == record.get("name")
            ]
            if leaders and _cmdline(leaders[0].ppid).startswith("airflow"):
                self.driver.kill(leaders[0].ppid, self.KIND, leaders[0].job)


# --- one soak -----------------------------------------------------------------------------------------


@dataclass
class Result:
    backend: str
    seed: int
    duration_s: float
    #: Whole decks played in the chaos (every kind of action at least that many times, played or skipped).
    decks_played: int
    drain_s: float
    kills: dict[str, int]
    actions: dict[str, int]
    skipped_actions: dict[str, int]
    quota_applied: dict[str, int]
    quota_refused: list[str]
    runs_triggered: int
    runs_succeeded: int
    runs_failed: int
    runs_open_after_drain: int
    jobs_submitted: int
    jobs_succeeded: int
    jobs_failed: int
    preemptions: int
    failed_cycles: int
    #: ``{exception line: count}`` of the failed cycles, from their tracebacks.
    cycle_errors: dict[str, int]
    samples: int
    samples_skipped: int
    most_trainings_at_once: int
    ledger_violations: int
    process_violations: int
    ledger_process_violations: int
    violations: list[dict[str, Any]]
    errors: list[str]
    home: str

    @property
    def violation_count(self) -> int:
        return self.ledger_violations + self.process_violations + self.ledger_process_violations


@contextlib.contextmanager
def database(backend: str, home: Path) -> Iterator[str]:
    """A fresh database URL: a SQLite file in ``home``, or a PostgreSQL database dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{home / 'airflow.db'}"
        return
    server = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
    name = f"quota_soak_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def soak_airflow(
    backend: str, home: Path, extra_env: Mapping[str, str] | None = None
) -> Iterator[AirflowProcesses]:
    """The soak's Airflow on a fresh database, not started yet (``play`` starts it), in ``home``; stopped
    after, and its trainings with it. ``extra_env`` adds settings (a DAG folder holding the soak's DAG
    file and more, say)."""
    with database(backend, home) as url:
        airflow = AirflowProcesses(
            home,
            url,
            parallelism=8,
            extra_env={
                "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
                "SOAK_TRAINING_ROOT": str(home / "training"),
                # A task whose runner died is failed (and retried) within seconds, not 5 minutes.
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
                **(extra_env or {}),
            },
        )
        try:
            yield airflow
        finally:
            airflow.stop()
            _stop_leftover_trainings(home)


def soak(backend: str, duration: float, seed: int, drain: float, home: Path, decks: int = 0) -> Result:
    with soak_airflow(backend, home) as airflow:
        return play(airflow, backend, duration, seed, drain, decks)


def _stop_leftover_trainings(home: Path) -> None:
    """SIGKILL this soak's trainings still alive once Airflow is stopped (their watchdogs may be gone)."""
    for training in trainings(home).values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(training.pid, signal.SIGKILL)


def play(
    airflow: AirflowProcesses, backend: str, duration: float, seed: int, drain: float, decks: int = 0
) -> Result:
    """Migrate the soak's database, apply its starting quotas, start Airflow, play the chaos for
    ``duration`` seconds and ``decks`` whole decks at least, then drain; the figures."""
    rng = random.Random(seed)
    print(
        f"{TITLE}\nbackend {backend}, seed {seed}, {duration:.0f} s of chaos, AIRFLOW_HOME {airflow.home}",
        flush=True,
    )
    airflow.migrate()
    started = time.monotonic()
    driver = Driver(airflow, rng, started)
    assert driver.apply_quota("start"), driver.figures.quota_refused
    driver.figures.quota_applied.clear()
    airflow.start()
    for dag in DAG_IDS.values():
        airflow.wait_for_dag(dag, 300)
    airflow.wait_for("the api-server", lambda: _healthy(driver.base_url), 180)
    driver.login()
    driver.log("Airflow is up: its DAGs parsed and the api-server answering")
    started = driver.started = time.monotonic()
    with Sampler(airflow.home, airflow.database_url, started) as sampler:
        print(f"chaos for {duration:.0f} s" + (f", {decks} deck(s) at least" if decks else ""), flush=True)
        with VictimHunter(driver, seed + 1):
            while time.monotonic() - started < duration or driver.decks_played < decks:
                try:
                    driver.step()
                except (requests.RequestException, sa.exc.OperationalError) as error:
                    driver.error(f"{type(error).__name__}: {str(error)[:300]}")
                time.sleep(rng.uniform(1, 3))
        chaos_s = time.monotonic() - started
        driver.log("chaos over: the starting quotas again, then drain")
        driver.wait_for_quota_apply()
        driver.apply_quota("start")
        drain_started = time.monotonic()
        while time.monotonic() - drain_started < drain and driver.open_runs() > 0:
            time.sleep(2)
        drain_s = time.monotonic() - drain_started
        driver.log(f"drained in {drain_s:.0f} s; {driver.open_runs()} run(s) still open")
        if driver.open_runs() == 0:  # the ledger records the last ends a cycle later
            with contextlib.suppress(AssertionError):
                airflow.wait_for_ledger_to_settle(timeout=30)
    return _result(airflow, backend, seed, chaos_s, drain_s, driver, sampler)


def _healthy(base_url: str) -> bool:
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{base_url}/api/v2/monitor/health", timeout=5).status_code == 200
    return False


def _result(
    airflow: AirflowProcesses,
    backend: str,
    seed: int,
    chaos_s: float,
    drain_s: float,
    driver: Driver,
    sampler: Sampler,
) -> Result:
    with airflow.engine.connect() as connection:
        run_states = Counter(
            str(state)
            for (state,) in connection.execute(sa.text("SELECT state FROM dag_run WHERE dag_id LIKE 'soak%'"))
        )
        job_states = Counter(
            str(status) for (status,) in connection.execute(sa.text("SELECT status FROM quota_job"))
        )
        preemptions = int(
            connection.execute(
                sa.text("SELECT count(*) FROM quota_audit_log WHERE kind = 'PREEMPTED'")
            ).scalar_one()
        )
        for violation in sampler.violations.values():
            violation.audit = audit_trail(connection, violation.jobs)
        for table in ("quota_job", "quota_audit_log"):  # kept with the logs (PostgreSQL's is dropped)
            rows = connection.execute(sa.text(f"SELECT * FROM {table}")).mappings()
            with (airflow.home / f"{table}.jsonl").open("w") as dump:
                dump.writelines(json.dumps(dict(row), default=str) + "\n" for row in rows)
    log = airflow.home / "logs" / "scheduler.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    failed_cycles = sum(text.count(marker) for marker in CYCLE_FAILED)
    # Each failure's exception line: the first "<name>Error: ..." line after the failure's message.
    exception_after_failure = (
        "(?:" + "|".join(CYCLE_FAILED) + r")[\s\S]*?\n(\w[\w.]*(?:Error|Exception): [^\n]*)"
    )
    cycle_errors = Counter(match.group(1)[:300] for match in re.finditer(exception_after_failure, text))
    kinds = Counter(violation.kind.split(":")[0] for violation in sampler.violations.values())
    figures = driver.figures
    return Result(
        backend=backend,
        seed=seed,
        duration_s=round(chaos_s, 1),
        decks_played=driver.decks_played,
        drain_s=round(drain_s, 1),
        kills=dict(figures.kills),
        actions=dict(figures.actions),
        skipped_actions=dict(figures.skipped),
        quota_applied=dict(figures.quota_applied),
        quota_refused=figures.quota_refused,
        runs_triggered=len(figures.runs),
        runs_succeeded=run_states["success"],
        runs_failed=run_states["failed"],
        runs_open_after_drain=sum(
            count for state, count in run_states.items() if state not in FINAL_RUN_STATES
        ),
        jobs_submitted=sum(job_states.values()),
        jobs_succeeded=job_states["SUCCEEDED"],
        jobs_failed=job_states["FAILED"],
        preemptions=preemptions,
        failed_cycles=failed_cycles,
        cycle_errors=dict(cycle_errors),
        samples=sampler.samples,
        samples_skipped=sampler.skipped,
        most_trainings_at_once=sampler.most_trainings,
        ledger_violations=kinds["ledger"],
        process_violations=kinds["processes"],
        ledger_process_violations=kinds["ledger/process"],
        violations=[asdict(violation) for violation in sampler.violations.values()],
        errors=figures.errors,
        home=str(airflow.home),
    )


def audit_trail(connection: sa.Connection, names: tuple[str, ...]) -> list[str]:
    """The audit rows, in order, of the jobs a violation names (ledger job ids or training job names)."""
    keys = {task_key_of(name) for name in names}
    jobs = connection.execute(
        sa.text("SELECT job_id, dag_id, run_id, task_id, map_index, try_number FROM quota_job")
    ).all()
    job_ids = [
        job_id
        for job_id, *task in jobs
        if job_id in names or TaskIdentity(*task).task_key in keys  # every try of a named training's task
    ]
    if not job_ids:
        return []
    rows = connection.execute(
        sa.text(
            "SELECT at, kind, job_id, related_job_id, message FROM quota_audit_log WHERE job_id IN :ids"
            " ORDER BY id"
        ).bindparams(sa.bindparam("ids", expanding=True)),
        {"ids": job_ids},
    )
    return [
        f"{at} {kind} {job_id}" + (f" (by {related})" if related else "") + f": {message}"
        for at, kind, job_id, related, message in rows
    ]


def print_result(result: Result, console: Console) -> None:
    console.print(f"{TITLE} ({result.backend}, seed {result.seed})")
    table = Table()
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows: list[tuple[str, object]] = [
        ("chaos duration s", result.duration_s),
        ("decks played through", result.decks_played),
        ("drain s", result.drain_s),
        *(
            (f"kills survived: {kind}", result.kills.get(kind, 0))
            for kind in ("training", "task runner", VictimHunter.KIND, "task supervisor", "scheduler")
        ),
        ("kills survived: total", sum(result.kills.values())),
        ("DAG runs triggered", result.runs_triggered),
        ("clears", result.actions.get("clear", 0)),
        ("quota changes applied", sum(result.quota_applied.values())),
        ("quota changes refused", len(result.quota_refused)),
        ("DAG runs succeeded / failed", f"{result.runs_succeeded} / {result.runs_failed}"),
        ("DAG runs still open after drain", result.runs_open_after_drain),
        ("jobs submitted (ledger, one per try)", result.jobs_submitted),
        ("jobs finished: SUCCEEDED / FAILED", f"{result.jobs_succeeded} / {result.jobs_failed}"),
        ("preemptions (audit PREEMPTED)", result.preemptions),
        ("failed allocation cycles", result.failed_cycles),
        ("samples taken (skipped)", f"{result.samples} ({result.samples_skipped})"),
        ("most trainings at once", result.most_trainings_at_once),
        ("ledger violations", result.ledger_violations),
        ("process violations", result.process_violations),
        ("ledger/process violations", result.ledger_process_violations),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    for violation in result.violations:
        console.print(
            f"VIOLATION {violation['kind']}: {', '.join(violation['jobs'])} "
            f"on device(s) {violation['devices']}, "
            f"seen {violation['first_seen_s']:.1f} .. {violation['last_seen_s']:.1f} s "
            f"({violation['samples']} samples), first at {violation['first_seen_utc']}"
            + (f": {violation['detail']}" if violation.get("detail") else ""),
            markup=False,
        )
        for line in violation["audit"]:
            console.print(f"    {line}", markup=False)
    for error, count in result.cycle_errors.items():
        console.print(f"FAILED CYCLES ({count}): {error}", markup=False)
    for refused in result.quota_refused:
        console.print(f"quota change refused: {refused}", markup=False)
    for error in result.errors:
        console.print(f"driver error: {error}", markup=False)


def write_summary(result: Result, path: Path) -> None:
    """The figures as JSON (``--summary``), with the violations' count."""
    path.write_text(json.dumps({**asdict(result), "violation_count": result.violation_count}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--duration", type=float, default=300, help="seconds of chaos (default 300)")
    parser.add_argument(
        "--decks",
        type=int,
        default=0,
        help="play on past --duration until this many whole decks were played (every kind of action in each)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drain", type=float, default=240, help="seconds to wait for the runs to end")
    parser.add_argument("--summary", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--keep", action="store_true", help="keep AIRFLOW_HOME (logs) even without violations"
    )
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix=f"quota-soak-{args.backend}-"))
    result = soak(args.backend, args.duration, args.seed, args.drain, home, args.decks)
    print_result(result, Console(width=120))
    if args.summary:
        write_summary(result, args.summary)
    if result.violation_count or args.keep:
        print(f"logs kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 1 if result.violation_count else 0


if __name__ == "__main__":
    sys.exit(main())
