"""Probe DAGs for the real-scheduler tests: tasks that speak the allocator's protocol, nothing else.

``ProbeOperator`` waits for quota deferred on ``QuotaAdmissionTrigger``, "trains" for a few seconds in
the worker while it polls its ``task_state_store`` for the allocator's preemption signal, and when
preempted defers for admission again in the same try (the protocol of ``airflow_quota.protocol``,
without any training backend). Every step is appended as a JSON line to ``$QUOTA_PROBE_LOG`` so the
tests can read the timeline. Each DAG has its own job queue (tests/airflow/quotas.yaml), so the tests'
runs go on side by side without taking each other's GPUs.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_quota.operators.training import QuotaTrainingOperator
from airflow_quota.protocol import PREEMPT_KEY
from airflow_quota.triggers.admission import QuotaAdmissionTrigger


def note(task_id: str, event: str, **details: Any) -> None:
    with open(os.environ["QUOTA_PROBE_LOG"], "a") as log:
        log.write(json.dumps({"task": task_id, "event": event, "t": time.time(), **details}) + "\n")


class ProbeOperator(BaseOperator):
    def __init__(
        self, *, job_queue: str, share: str, gpus: int = 1, train_seconds: float = 3, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.job_queue = job_queue
        self.share = share
        self.gpus = gpus
        self.train_seconds = train_seconds

    def execute(self, context: Any) -> None:
        note(self.task_id, "execute")
        self._wait(datetime.now(UTC).isoformat(), attempt=0)

    def _wait(self, submitted_at: str, attempt: int, released: str | None = None) -> None:
        trigger = QuotaAdmissionTrigger(
            job_queue=self.job_queue,
            job_name=self.task_id,
            quota_share_name=self.share,
            capacity_unit="gpu",
            instance_count=self.gpus,
            submitted_at=submitted_at,
            attempt=attempt,
            released_lease_id=released,
        )
        self.defer(
            trigger=trigger,
            method_name="on_grant",
            kwargs={"submitted_at": submitted_at, "attempt": attempt},
        )

    def on_grant(self, context: Any, event: dict[str, Any], submitted_at: str, attempt: int) -> None:
        if event.get("rejected"):
            note(self.task_id, "rejected", reason=event["reason"])
            raise AirflowException(event["reason"])
        if event["ti_id"] != str(context["ti"].id):
            self._wait(submitted_at, attempt)
        store = context["task_state_store"]
        lease = event["lease_id"]
        note(self.task_id, "start", lease=lease, try_number=context["ti"].try_number)
        deadline = time.monotonic() + self.train_seconds
        while time.monotonic() < deadline and not probe_has(self.task_id, "finish"):
            signal = store.get(PREEMPT_KEY)
            if isinstance(signal, dict) and signal.get("lease_id") == lease:
                store.delete(PREEMPT_KEY)
                note(self.task_id, "stop", lease=lease, preempted_by=signal.get("preempted_by"))
                self._wait(submitted_at, attempt + 1, released=lease)
            time.sleep(0.5)
        note(self.task_id, "end", lease=lease)


def probe_has(task_id: str, event: str) -> bool:
    """Whether the probe log has ``event`` of ``task_id`` (``finish``: a test ends that task's training)."""
    with open(os.environ["QUOTA_PROBE_LOG"]) as log:
        return any(
            entry["task"] == task_id and entry["event"] == event
            for entry in map(json.loads, filter(str.strip, log))
        )


def wait_for_probe(task_id: str, event: str, timeout: float = 300) -> None:
    """Wait until the probe log has ``event`` of ``task_id`` (a task that must come after another's step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe_has(task_id, event):
            return
        time.sleep(0.5)
    raise AirflowException(f"{task_id} did not {event} within {timeout:.0f} s")


def canary() -> None:
    note("canary", "ran")


with DAG("quota_slots", schedule=None, catchup=False, max_active_tasks=16) as slots:
    # Five jobs for one GPU wait deferred; the canary still gets a worker slot (parallelism is 4).
    for index in range(5):
        ProbeOperator(
            task_id=f"probe{index}", job_queue="slots", share="team-a", train_seconds=2, priority_weight=10
        )
    PythonOperator(task_id="canary", python_callable=canary, priority_weight=1)

with DAG("quota_reclaim", schedule=None, catchup=False, max_active_tasks=16) as reclaim:
    # team-b runs on its own GPU, then borrows team-a's idle one; team-a's job arrives and takes it back.
    # (Lending is pooled: the victim is team-b's most recently started job, so b_borrow asks only once
    # b_own has started, and team-a's job only once b_borrow has. Fixed sleeps raced under CI's load: b_own
    # was once granted after b_borrow and became the victim.) b_own holds its GPU past the reclaim; the test
    # ends both trainings once the borrower trains again (their seconds are the most they would train).
    ProbeOperator(task_id="b_own", job_queue="reclaim", share="team-b", train_seconds=60)
    then = PythonOperator(task_id="b_later", python_callable=lambda: wait_for_probe("b_own", "start"))
    then >> ProbeOperator(task_id="b_borrow", job_queue="reclaim", share="team-b", train_seconds=45)
    arrive = PythonOperator(
        task_id="a_arrives_later", python_callable=lambda: wait_for_probe("b_borrow", "start")
    )
    arrive >> ProbeOperator(task_id="a_job", job_queue="reclaim", share="team-a", train_seconds=4)

with DAG("quota_bad_request", schedule=None, catchup=False) as bad_request:
    # A request the allocator can never grant fails its own task only, with the reason.
    ProbeOperator(task_id="unknown_share", job_queue="bad-request", share="team-z")
    ProbeOperator(task_id="fine", job_queue="bad-request", share="team-a", train_seconds=1)
    # A request error found when this file is parsed fails its own task when it runs, not this file.
    QuotaTrainingOperator(
        task_id="priority_out_of_range",
        job_queue="bad-request",
        quota_share_name="team-a",
        scheduling_priority=10000,
        training_job_config={
            "AlgorithmSpecification": {"TrainingImage": "train:1", "TrainingInputMode": "File"},
            "RoleArn": "arn:aws:iam::123456789012:role/training",
            "OutputDataConfig": {"S3OutputPath": "s3://models/probe"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
        },
    )

with DAG("quota_marked_failed", schedule=None, catchup=False, max_active_tasks=16) as marked_failed:
    # team-b holds both GPUs (until the test has acted, at most 180 s: the others must still wait then,
    # though every run of the module starts at once); once it holds them, two more of its jobs arrive and
    # wait; a user marks one of them failed while it waits, then ends the holder's training. (Waiting only
    # 3 s for the holder was not enough under load: its own deferral came after the waiters', they were
    # granted first, and nobody ever waited.)
    ProbeOperator(task_id="holds_both", job_queue="marked-failed", share="team-b", gpus=2, train_seconds=180)
    waiters = PythonOperator(
        task_id="waiters_arrive", python_callable=lambda: wait_for_probe("holds_both", "start")
    )
    for waiter in ("marked_failed", "granted_after"):
        waiters >> ProbeOperator(task_id=waiter, job_queue="marked-failed", share="team-b", train_seconds=1)
