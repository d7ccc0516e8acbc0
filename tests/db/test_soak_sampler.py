"""The soak's sampler (benchmarks/soak.py) finds what it is there to find, and nothing else.

Real ledger rows on each backend (the soak's starting quota file applied as the driver applies it: 4
local-gpu, team-a LEND 2, team-b LEND_AND_BORROW 1 with borrowLimit -1, team-c RESERVE 1) and real
processes that carry a training's environment (``TRAINING_JOB_NAME``, ``CUDA_VISIBLE_DEVICES``, the soak's
``AIRFLOW_HOME``); one sample each, or a story of samples around quota changes. A soak that reports 0
violations means something only if these cases are caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from airflow_quota.backends.sagemaker import TaskIdentity
from airflow_quota.config_file import load_quota_design
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import (
    AuditRow,
    ConfigRevisionRow,
    JobQueueRow,
    JobRow,
    QuotaShareRow,
    ledger_metadata,
)
from tests.db.conftest import Database
from tests.scripts import load_script

pytestmark = pytest.mark.db

LEDGER = "ledger: device held by two open jobs"
PROCESSES = "processes: two trainings on one device"
MISMATCH = "ledger/process: training on a device the ledger gives to another job"
CEILING = "ledger: share above its ceiling"
RESERVE = "ledger: RESERVE capacity held by another share"


@dataclass(frozen=True)
class Held:
    task: str
    devices: list[int]
    status: str = "RUNNING"
    #: team-b borrows without a ceiling: the device cases hold what they like within the queue.
    share: str = "team-b"
    #: PREEMPTED or TERMINATED: being stopped (it still holds its devices).
    stop_cause: str | None = None

    @property
    def job_id(self) -> str:
        return f"soak_dag/run/{self.task}/-1/1"


@dataclass(frozen=True)
class Running:
    task: str
    devices: str
    other_soak: bool = False

    @property
    def job_name(self) -> str:
        return f"{TaskIdentity('soak_dag', 'run', self.task, -1, 1).base_name}-a1"


CASES = {
    "two open jobs holding one device is a ledger violation": (
        [Held("x", [0, 1]), Held("y", [1])],
        [],
        {(LEDGER, ("soak_dag/run/x/-1/1", "soak_dag/run/y/-1/1"), (1,))},
    ),
    "a finished job's devices are not held": ([Held("x", [0], "SUCCEEDED"), Held("y", [0])], [], set()),
    "two trainings on one device is a process violation": (
        [],
        [Running("a", "0,1"), Running("b", "1")],
        {(PROCESSES, tuple(sorted([Running("a", "").job_name, Running("b", "").job_name])), (1,))},
    ),
    "a training on devices the ledger gives to another job is a mismatch": (
        [Held("x", [3])],
        [Running("z", "3")],
        {(MISMATCH, (Running("z", "").job_name, "soak_dag/run/x/-1/1"), (3,))},
    ),
    "a training on its own job's devices is fine": ([Held("x", [2, 3])], [Running("x", "2,3")], set()),
    "the processes of one training share its devices": (
        [],
        [Running("a", "0"), Running("a", "0")],
        set(),
    ),
    "another Airflow's trainings are not looked at": (
        [],
        [Running("a", "1"), Running("b", "1", other_soak=True)],
        set(),
    ),
    "a LEND share above its ceiling, counting its job being stopped, is a ledger violation": (
        [Held("x", [0, 1], share="team-a"), Held("y", [2], share="team-a", stop_cause="PREEMPTED")],
        [],
        {(CEILING, ("soak_dag/run/x/-1/1", "soak_dag/run/y/-1/1"), (0, 1, 2))},
    ),
    "a job being stopped within its share's ceiling is fine": (
        [Held("x", [0], share="team-a"), Held("y", [1], share="team-a", stop_cause="PREEMPTED")],
        [],
        set(),
    ),
    "a RESERVE share's free unit held by a borrower's job being stopped is a ledger violation": (
        [
            Held("x", [0, 1], share="team-b"),
            Held("z", [2], share="team-b", stop_cause="TERMINATED"),
            Held("y", [3], share="team-a"),
        ],
        [],
        {(RESERVE, ("soak_dag/run/x/-1/1", "soak_dag/run/z/-1/1"), (0, 1, 2))},
    ),
    "a RESERVE share's own job on its unit leaves the borrower the rest": (
        [Held("x", [0, 1, 2], share="team-b"), Held("c", [3], share="team-c")],
        [],
        set(),
    ),
    "a RESERVE share above its own limit is above its ceiling": (
        [Held("c", [0, 1], share="team-c")],
        [],
        {(CEILING, ("soak_dag/run/c/-1/1",), (0, 1))},
    ),
}


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    return load_script("benchmarks/soak.py")


@pytest.fixture
def ledger(database: Database, soak: ModuleType, tmp_path: Path) -> Iterator[Database]:
    """The ledger's tables with the soak's starting quota file applied (revision 1)."""
    ledger_metadata.create_all(database.engine)
    apply_variant(database, soak, tmp_path, "start")
    try:
        yield database
    finally:
        with database.engine.begin() as connection:
            for table in (JobRow, AuditRow, ConfigRevisionRow, QuotaShareRow, JobQueueRow):
                connection.execute(sa.delete(table))


def apply_variant(database: Database, soak: ModuleType, tmp_path: Path, variant: str) -> None:
    """One of the soak's quota files applied as its driver applies it (``airflow quota apply``'s
    transaction): the job queue's revision goes up."""
    path = tmp_path / f"quotas-{variant.replace(' ', '-')}.json"
    path.write_text(json.dumps(soak.quota_document(variant)))
    with database.session() as session:
        apply_quota_config(session, load_quota_design([path]).config, applied_by="tests", source=str(path))
        session.commit()


def write_jobs(database: Database, jobs: list[Held], first_seq: int = 0) -> None:
    now = datetime.now(UTC)
    with database.session() as session:
        for index, job in enumerate(jobs, start=first_seq):
            session.add(
                JobRow(
                    job_id=job.job_id,
                    job_queue_name="soak-local",
                    quota_share_name=job.share,
                    job_name=job.task,
                    capacity_unit="local-gpu",
                    instance_count=len(job.devices),
                    scheduling_priority=0,
                    status=job.status,
                    status_reason="",
                    stop_cause=job.stop_cause,
                    submitted_at=now,
                    submit_seq=index,
                    awaiting_victims=[],
                    preempted_attempt_count=0,
                    recent_preempted_attempts=[],
                    attempt=1,
                    held_capacity_unit="local-gpu",
                    held_instance_count=len(job.devices),
                    borrowed_instance_count=0,
                    held_devices=job.devices,
                    dag_id="soak_dag",
                    run_id="run",
                    task_id=job.task,
                    map_index=-1,
                    try_number=1,
                    created_at=now,
                    updated_at=now,
                )
            )
        session.commit()


def start_trainings(home: Path, trainings: list[Running]) -> list[subprocess.Popen[bytes]]:
    processes = []
    for training in trainings:
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(home / "other") if training.other_soak else str(home),
            "TRAINING_JOB_NAME": training.job_name,
            "CUDA_VISIBLE_DEVICES": training.devices,
        }
        processes.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env))
    return processes


@pytest.mark.parametrize(("held", "running", "expected"), list(CASES.values()), ids=list(CASES))
def test_one_sample_finds_exactly_the_violations_of_the_case(
    soak: ModuleType,
    ledger: Database,
    tmp_path: Path,
    held: list[Held],
    running: list[Running],
    expected: set[tuple[str, tuple[str, ...], tuple[int, ...]]],
) -> None:
    write_jobs(ledger, held)
    processes = start_trainings(tmp_path, running)
    try:
        sampler = soak.Sampler(tmp_path, ledger.url, started=0.0)
        sampler.sample()
        sampler.engine.dispose()
    finally:
        for process in processes:
            process.kill()
            process.wait()

    assert set(sampler.violations) == expected
    assert sampler.samples == 1


def finish(database: Database, job: Held) -> None:
    """The job's stop ended: it holds nothing more."""
    with database.engine.begin() as connection:
        connection.execute(
            sa.update(JobRow)
            .where(JobRow.job_id == job.job_id)
            .values(status="RUNNABLE", stop_cause=None, held_capacity_unit=None, held_instance_count=0)
        )


def test_what_a_lowered_quota_leaves_only_counts_when_it_grows_again(
    soak: ModuleType, ledger: Database, tmp_path: Path
) -> None:
    """The amounts the one-sample cases catch, left by a quota change that lowered the limits, are no
    violation; growth of them under the same revision is, and what is excused only shrinks."""
    x, y = Held("x", [0], share="team-a"), Held("y", [1], share="team-a", stop_cause="PREEMPTED")
    b = Held("b", [2], share="team-b")
    sampler = soak.Sampler(tmp_path, ledger.url, started=0.0)
    try:
        write_jobs(ledger, [x, y, b])
        sampler.sample()  # team-a 2 of its 2, team-c's free unit idle
        assert set(sampler.violations) == set()

        # The queue shrinks to 3 and team-a to 1: team-a 1 above its ceiling, team-c's free unit held.
        apply_variant(ledger, soak, tmp_path, "three devices")
        sampler.sample()
        sampler.sample()
        assert set(sampler.violations) == set()

        z = Held("z", [3], share="team-b")  # one more of team-c's free units taken: the shortfall grows
        write_jobs(ledger, [z], first_seq=3)
        sampler.sample()
        reserve_taken = (RESERVE, ids(b, x, y, z), (0, 1, 2, 3))
        assert set(sampler.violations) == {reserve_taken}

        finish(ledger, y)  # team-a within its ceiling again: none of its excess is excused any more
        sampler.sample()
        assert set(sampler.violations) == {reserve_taken}  # the shortfall back to what the change left
        w = Held("w", [1], share="team-a")
        write_jobs(ledger, [w], first_seq=4)
        sampler.sample()
        assert set(sampler.violations) == {
            reserve_taken,
            (CEILING, ids(w, x), (0, 1)),
            (RESERVE, ids(b, w, x, z), (0, 1, 2, 3)),
        }

        # Another change excuses what it finds: the same amounts are seen again, and noted no more.
        apply_variant(ledger, soak, tmp_path, "start")
        apply_variant(ledger, soak, tmp_path, "three devices")
        sampler.sample()
        assert [violation.samples for violation in sampler.violations.values()] == [1, 1, 1]
    finally:
        sampler.engine.dispose()
    assert sampler.samples == 7


def ids(*jobs: Held) -> tuple[str, ...]:
    return tuple(sorted(job.job_id for job in jobs))


def test_a_sample_across_a_quota_change_checks_nothing_and_the_next_counts_as_after_it(
    soak: ModuleType,
) -> None:
    quota = soak.QueueQuota(1, {"local-gpu": 4}, {"team-a": soak.ShareQuota("LEND", {"local-gpu": 2}, None)})
    holding = [soak.HeldUnits("x", "soak-local", "team-a", "local-gpu", 3, (0, 1, 2), False)]
    sampler = soak.Sampler(Path("/nonexistent"), "sqlite://", started=0.0)

    sampler._check_quotas({"soak-local": quota}, holding, {"soak-local": 2}, 1.0)  # revision moved
    assert sampler.violations == {}
    raised = soak.QueueQuota(2, quota.capacity, quota.shares)
    sampler._check_quotas({"soak-local": raised}, holding, {"soak-local": 2}, 1.5)
    assert sampler.violations == {}

    grown = [soak.HeldUnits("x", "soak-local", "team-a", "local-gpu", 4, (0, 1, 2, 3), False)]
    sampler._check_quotas({"soak-local": raised}, grown, {"soak-local": 2}, 2.0)
    assert set(sampler.violations) == {(CEILING, ("x",), (0, 1, 2, 3))}
    assert "team-a holds 4 local-gpu (0 of them being stopped), its ceiling is 2" in (
        sampler.violations[CEILING, ("x",), (0, 1, 2, 3)].detail
    )
    sampler.engine.dispose()
