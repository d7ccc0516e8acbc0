"""Airflow's own ways a task try ends, run on a real metadata DB with Airflow's own code.

Each function makes the change Airflow 3.3 makes, calling the function Airflow calls, so a test sees the
task instance, ``task_instance_history`` and ``log`` rows Airflow leaves:

* ``heartbeat_timed_out``: the task runner died (worker lost, runner SIGKILLed). The scheduler finds no
  heartbeat for ``task_instance_heartbeat_timeout`` and logs "heartbeat timeout"
  (``SchedulerJobRunner._purge_task_instances_without_heartbeats``); the executor's failed event then
  reaches ``process_executor_events``, which fails the try (``TaskInstance.handle_failure``: FAILED, or
  UP_FOR_RETRY with the try archived under a new task instance id when retries are left).
* ``scheduler_restarted``: the scheduler that queued the try died and a new one started:
  ``SchedulerJobRunner.adopt_or_reset_orphaned_tasks`` resets what it cannot adopt (LocalExecutor adopts
  nothing): the try is archived, the task instance gets a new id and no state.
* ``cleared_by_user``: ``clear_task_instances``, what the UI, the REST API and ``airflow tasks clear`` run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from airflow.jobs.job import Job, JobState
from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
from airflow.models.log import Log
from airflow.models.taskinstance import TaskInstance, clear_task_instances
from sqlalchemy.orm import Session


def a_scheduler_job(engine: sa.Engine) -> int:
    """A running scheduler's job row (what queues task instances), its id."""
    with Session(engine) as session, session.begin():
        job = Job()
        job.job_type = "SchedulerJob"
        job.state = JobState.RUNNING
        job.latest_heartbeat = datetime.now(UTC)
        session.add(job)
        session.flush()
        return int(job.id)


def run_in_worker(engine: sa.Engine, task_id: str, scheduler_job_id: int) -> None:
    """The scheduler queued the task and a worker runs it (state RUNNING, queued by that scheduler)."""
    with engine.begin() as connection:
        connection.execute(
            sa.update(TaskInstance.__table__)
            .where(TaskInstance.task_id == task_id)
            .values(state="running", queued_by_job_id=scheduler_job_id, trigger_id=None)
        )


def _task_instance(session: Session, task_id: str) -> TaskInstance:
    ti = session.scalar(sa.select(TaskInstance).where(TaskInstance.task_id == task_id))
    assert ti is not None, task_id
    return ti


def heartbeat_timed_out(engine: sa.Engine, task_id: str) -> None:
    """The scheduler found the try's runner silent past the heartbeat timeout and failed the try."""
    with Session(engine) as session:
        ti = _task_instance(session, task_id)
        session.add(Log(event="heartbeat timeout", task_instance=ti.key))
        session.add(Log(event="state mismatch", task_instance=ti.key))
        ti.handle_failure(error="Executor reported the task failed: no heartbeat", session=session)
        session.commit()


def scheduler_restarted(engine: sa.Engine, dead_scheduler_job_id: int) -> None:
    """The scheduler of ``dead_scheduler_job_id`` died; a new one starts and resets its tries."""
    with Session(engine) as session, session.begin():
        session.execute(
            sa.update(Job)
            .where(Job.id == dead_scheduler_job_id)
            .values(latest_heartbeat=datetime.now(UTC) - timedelta(hours=1))
        )
        SchedulerJobRunner(job=Job()).adopt_or_reset_orphaned_tasks(session=session)


def cleared_by_user(engine: sa.Engine, task_id: str) -> None:
    with Session(engine) as session, session.begin():
        clear_task_instances([_task_instance(session, task_id)], session, dag_run_state=False)
