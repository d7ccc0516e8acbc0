"""Beyond one machine: CeleryExecutor (Redis broker, PostgreSQL metadata DB and result backend), two
Celery workers and two schedulers at once, each scheduler hosting the allocator; SageMaker is moto's
server with our emulator. Nothing is mocked. The installation is shared with AWS Batch's end to end
(``tests/distributed/celery_airflow.py``), on a job queue of its own (``celery-training``).

- The borrow / reclaim / preempt / resume flow ends as on one machine, while a sampler checks the ledger
  and the training jobs every half second: capacity is never granted twice, and each grant launches
  exactly one training job. One scheduler is SIGKILLed in the middle; the other carries on.
- A Celery worker SIGKILLed while its task is launching a training job: the task's retry re-attaches
  to the same training job (no second one), and its capacity is not granted to anyone meanwhile.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.airflow.harness import AirflowProcesses
from tests.distributed.celery_airflow import CELERY_QUEUE, CeleryAirflow
from tests.sagemaker.moto_fixture import MotoServer

pytestmark = pytest.mark.airflow

CAPACITY = 2  # ml.g5.xlarge instances of CELERY_QUEUE in tests/distributed/quotas.yaml


@pytest.fixture(scope="module")
def airflow(celery_airflow: CeleryAirflow) -> AirflowProcesses:
    return celery_airflow.running()


@pytest.fixture(scope="module")
def moto_server(celery_airflow: CeleryAirflow) -> MotoServer:
    """The server the installation's ``aws_default`` points at (this worker's AWS Batch and SageMaker
    emulators), not the suite's SageMaker-only one."""
    return MotoServer(celery_airflow.endpoint_url)


def training_jobs(moto_server: MotoServer, prefix: str) -> dict[str, dict[str, Any]]:
    client = moto_server.client()
    jobs = {}
    # Every job whose name has the prefix (moto applies MaxResults before NameContains, and the run's other
    # tests' jobs share the server).
    for summary in client.list_training_jobs(NameContains=prefix)["TrainingJobSummaries"]:
        if summary["TrainingJobName"].startswith(prefix):
            jobs[summary["TrainingJobName"]] = client.describe_training_job(
                TrainingJobName=summary["TrainingJobName"]
            )
    return jobs


@dataclass
class CapacitySampler:
    """Samples, every half second, the units the ledger holds and the instances training jobs run on."""

    airflow: AirflowProcesses
    moto_server: MotoServer
    held: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> CapacitySampler:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            with self.airflow.engine.connect() as connection:
                held = connection.execute(
                    sa.text(
                        "SELECT coalesce(sum(held_instance_count), 0) FROM quota_job"
                        " WHERE job_queue_name = :queue"
                    ),
                    {"queue": CELERY_QUEUE},
                )
                self.held.append(int(held.scalar_one()))
            jobs = training_jobs(self.moto_server, "quota-celery")
            self.running.append(
                sum(
                    job["ResourceConfig"]["InstanceCount"]
                    for job in jobs.values()
                    if job["TrainingJobStatus"] in ("InProgress", "Stopping")
                )
            )


def finished(airflow: AirflowProcesses, dag_id: str, run_id: str) -> bool:
    return airflow.run_state(dag_id, run_id) in ("success", "failed")


def audit(airflow: AirflowProcesses, kind: str, dag_id: str) -> list[tuple[str, str | None]]:
    with airflow.engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT job_id, related_job_id FROM quota_audit_log"
                " WHERE kind = :k AND job_id LIKE :d ORDER BY id"
            ),
            {"k": kind, "d": f"{dag_id}/%"},
        )
        return [(job_id, related) for job_id, related in rows]


def test_reclaim_with_celery_and_two_schedulers_one_killed_midway(
    airflow: AirflowProcesses, moto_server: MotoServer
) -> None:
    for dag_id in ("quota_celery_borrower", "quota_celery_owner"):
        airflow.wait_for_dag(dag_id, timeout=180)
    with CapacitySampler(airflow, moto_server) as sampler:
        airflow.trigger("quota_celery_borrower", "flow-1")
        airflow.wait_for(
            "the borrower's training job to run",
            lambda: any(
                job["TrainingJobStatus"] == "InProgress"
                for job in training_jobs(moto_server, "quota-celery-borrower").values()
            ),
            180,
        )
        airflow.trigger("quota_celery_owner", "flow-1")
        airflow.wait_for(
            "the borrower to be preempted",
            lambda: audit(airflow, "PREEMPTED", "quota_celery_borrower"),
            120,
        )
        airflow.kill("scheduler-1")  # SIGKILL, mid-flow: scheduler-2 allocates from now on
        for dag_id in ("quota_celery_owner", "quota_celery_borrower"):
            airflow.wait_for(f"{dag_id} to finish", lambda d=dag_id: finished(airflow, d, "flow-1"), 300)

    assert airflow.task_states("quota_celery_owner", "flow-1") == {"train": ("success", 1)}, (
        airflow.log_tails()
    )
    assert airflow.task_states("quota_celery_borrower", "flow-1") == {"train": ("success", 1)}, (
        airflow.log_tails()
    )
    # Never granted twice: at no sampled moment more held or running than the queue has.
    assert sampler.held and max(sampler.held) <= CAPACITY
    assert sampler.running and max(sampler.running) <= CAPACITY
    # Each grant launched exactly one training job: borrower a1 (stopped) and a2, owner a1.
    borrower_jobs = training_jobs(moto_server, "quota-celery-borrower")
    owner_jobs = training_jobs(moto_server, "quota-celery-owner")
    assert sorted(job["TrainingJobStatus"] for job in borrower_jobs.values()) == ["Completed", "Stopped"]
    assert [job["TrainingJobStatus"] for job in owner_jobs.values()] == ["Completed"]
    grants = audit(airflow, "GRANTED", "quota_celery_borrower") + audit(
        airflow, "GRANTED", "quota_celery_owner"
    )
    assert len(grants) == len(borrower_jobs) + len(owner_jobs) == 3
    owner_id = "quota_celery_owner/flow-1/train/-1/1"
    assert audit(airflow, "PREEMPTED", "quota_celery_borrower") == [
        ("quota_celery_borrower/flow-1/train/-1/1", owner_id)
    ]


def worker_running(airflow: AirflowProcesses, pid: int) -> str | None:
    """The Celery worker (our process name) whose process tree holds ``pid``."""
    workers = {process.pid: name for name, process in airflow.processes.items() if name.startswith("worker")}
    while pid > 1:
        if pid in workers:
            return workers[pid]
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, IndexError, ValueError):
            return None
    return None


def test_a_killed_celery_worker_s_retry_re_attaches_to_the_same_training_job(
    airflow: AirflowProcesses, moto_server: MotoServer
) -> None:
    airflow.wait_for_dag("quota_celery_crash", timeout=180)
    airflow.trigger("quota_celery_crash", "crash-1")
    launched = airflow.wait_for(
        "the crash job's training job to exist",
        lambda: list(training_jobs(moto_server, "quota-celery-crash")),
        180,
    )
    with airflow.engine.connect() as connection:
        pid = connection.execute(
            sa.text(
                "SELECT pid FROM task_instance WHERE dag_id = 'quota_celery_crash' AND run_id = 'crash-1'"
            )
        ).scalar_one()
    worker = worker_running(airflow, int(pid))
    assert worker is not None, f"no worker runs task pid {pid}"
    airflow.kill(worker)  # SIGKILL while CreateTrainingJob has not answered yet
    airflow.trigger("quota_celery_owner", "after-crash")  # team-a's next job: it must wait, not take over
    airflow.start_process(worker, ["celery", "worker", "-H", f"{worker}-restarted@%h", "--skip-serve-logs"])

    airflow.wait_for(
        "the crash run to finish", lambda: finished(airflow, "quota_celery_crash", "crash-1"), 300
    )
    airflow.wait_for(
        "the next owner run", lambda: finished(airflow, "quota_celery_owner", "after-crash"), 300
    )

    assert airflow.task_states("quota_celery_crash", "crash-1") == {"train": ("success", 2)}, (
        airflow.log_tails()
    )
    crash_jobs = training_jobs(moto_server, "quota-celery-crash")
    assert list(crash_jobs) == launched  # re-attached: no second training job
    assert crash_jobs[launched[0]]["TrainingJobStatus"] == "Completed"
    handed = audit(airflow, "HANDED_OVER", "quota_celery_crash")
    assert handed == [("quota_celery_crash/crash-1/train/-1/2", "quota_celery_crash/crash-1/train/-1/1")]
    # team-a's instance went to nobody else meanwhile: team-a's next job, waiting since the crash, was
    # granted only when the retry's job ended.
    with airflow.engine.connect() as connection:
        timeline = {
            (kind, job_id): at
            for at, kind, job_id in connection.execute(
                sa.text("SELECT at, kind, job_id FROM quota_audit_log")
            )
        }
    next_owner = "quota_celery_owner/after-crash/train/-1/1"
    retried = "quota_celery_crash/crash-1/train/-1/2"
    assert timeline[("SUBMITTED", next_owner)] < timeline[("HANDED_OVER", retried)], events_of(airflow)
    assert timeline[("GRANTED", next_owner)] >= timeline[("SUCCEEDED", retried)], events_of(airflow)


def events_of(airflow: AirflowProcesses) -> str:
    """The audit log, for a failure message."""
    with airflow.engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT at, kind, job_id, message FROM quota_audit_log ORDER BY id")
        )
        return "\n".join(" | ".join(str(value) for value in row) for row in rows)
