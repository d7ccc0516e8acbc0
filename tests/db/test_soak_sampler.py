"""The soak's sampler (benchmarks/soak.py) finds what it is there to find, and nothing else.

Real ledger rows on each backend and real processes that carry a training's environment
(``TRAINING_JOB_NAME``, ``CUDA_VISIBLE_DEVICES``, the soak's ``AIRFLOW_HOME``); one sample each. A soak
that reports 0 violations means something only if these cases are caught.
"""

from __future__ import annotations

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
from airflow_quota.ledger.models import JobRow, ledger_metadata
from tests.db.conftest import Database
from tests.scripts import load_script

pytestmark = pytest.mark.db

LEDGER = "ledger: device held by two open jobs"
PROCESSES = "processes: two trainings on one device"
MISMATCH = "ledger/process: training on a device the ledger gives to another job"


@dataclass(frozen=True)
class Held:
    task: str
    devices: list[int]
    status: str = "RUNNING"

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
}


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    return load_script("benchmarks/soak.py")


@pytest.fixture
def ledger(database: Database) -> Iterator[Database]:
    ledger_metadata.create_all(database.engine)
    try:
        yield database
    finally:
        with database.engine.begin() as connection:
            connection.execute(sa.delete(JobRow))


def write_jobs(database: Database, jobs: list[Held]) -> None:
    now = datetime.now(UTC)
    with database.session() as session:
        for index, job in enumerate(jobs):
            session.add(
                JobRow(
                    job_id=job.job_id,
                    job_queue_name="soak-local",
                    quota_share_name="team-a",
                    job_name=job.task,
                    capacity_unit="local-gpu",
                    instance_count=len(job.devices),
                    scheduling_priority=0,
                    status=job.status,
                    status_reason="",
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
