"""What happened to the demo's jobs (tests/aws_batch/dags/quota_batch_demo.py) on each scheduler, in one
shape: the grants in order, the preemptions, and each attempt's training job.

Our allocator's story is read from its audit log (GRANTED, PREEMPTED with the preemptor and the rule) and
AWS Batch's from DescribeServiceJob (``attempts``, ``preemptionSummary``): what a user of each would look
at. Jobs are named by their task ids, which the demo's DAGs do not repeat.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from botocore.exceptions import ClientError

from airflow_quota.backends.sagemaker import TaskIdentity, training_job_name

REPO = Path(__file__).resolve().parents[2]
RUN = "demo-1"
UNIT = "ml.g5.xlarge"
#: Scheduler -> (job queue, its ``scheduler`` line); the DAG ids end in ``_<scheduler>``.
QUEUES = {"ours": ("demo-ours", "AIRFLOW"), "aws": ("demo-aws", "AWS_BATCH")}
#: Each demo DAG (without its suffix) and its tasks.
TASKS = {
    "demo_nlp_sweep": ("trial_a", "trial_b", "trial_c"),
    "demo_vision_eval": ("evaluate",),
    "demo_research_pretrain": ("pretrain",),
    "demo_nlp_urgent": ("urgent",),
}
_PREEMPTED_BY = re.compile(r"^Preempted by (\S+) \((\w+)\)$")


def demo_queues() -> list[dict[str, Any]]:
    """demo/quotas.yaml's job queue on ``ml.g5.xlarge`` instead of the workstation's GPUs, once per
    scheduler: the two differ only in name and ``scheduler``."""
    [queue] = yaml.safe_load((REPO / "demo" / "quotas.yaml").read_text())["jobQueues"]
    on_sagemaker = yaml.safe_load(yaml.safe_dump(queue).replace("local-gpu", UNIT))
    return [{**on_sagemaker, "jobQueueName": name, "scheduler": line} for name, line in QUEUES.values()]


def dag_id(dag: str, scheduler: str) -> str:
    return f"{dag}_{scheduler}"


def identity(scheduler: str, task: str) -> TaskIdentity:
    [dag] = [dag for dag, tasks in TASKS.items() if task in tasks]
    return TaskIdentity(dag_id(dag, scheduler), RUN, task, -1, 1)


@dataclass
class Story:
    """One scheduler's run of the demo."""

    #: (task, attempt, seconds since the first grant), in the order granted.
    grants: list[tuple[str, int, float]] = field(default_factory=list)
    #: (victim, preemptor, rule).
    preemptions: set[tuple[str, str, str]] = field(default_factory=set)
    #: Each task's attempts' training job names, in order.
    training_jobs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def order(self) -> list[tuple[str, int]]:
        return [(task, attempt) for task, attempt, _ in self.grants]

    @property
    def attempts(self) -> Counter[str]:
        return Counter(task for task, _, _ in self.grants)

    def timeline(self) -> str:
        return ", ".join(f"{task}#{attempt} {at:.1f}s" for task, attempt, at in self.grants)


def granted_so_far(engine: sa.Engine, batch: Any, scheduler: str) -> Counter[str]:
    """How many times each demo task of ``scheduler`` has been granted capacity so far."""
    if scheduler == "ours":
        return Counter(task for task, _, _ in _our_grants(engine))
    return Counter({task: len(job.get("attempts") or []) for task, job in service_jobs(batch).items()})


def training_started(engine: sa.Engine, batch: Any, sagemaker: Any, scheduler: str) -> set[str]:
    """The demo tasks of ``scheduler`` whose first attempt's training job exists. On AWS Batch a job's
    attempt is its training job; on ours a grant comes first and the task then creates the job, so a task
    preempted in between (seen on the Celery installation: a reclaim 7.7 s after the grant) never trains
    its first attempt."""
    if scheduler == "aws":
        return {task for task, job in service_jobs(batch).items() if job.get("attempts")}
    started = set()
    for task in granted_so_far(engine, batch, scheduler):
        try:
            sagemaker.describe_training_job(TrainingJobName=training_job_name(_our_task(engine, task), 1))
        except ClientError:
            continue
        started.add(task)
    return started


def our_story(engine: sa.Engine) -> Story:
    """The allocator's audit log of ``demo-ours``; training jobs as the SageMaker backend names them."""
    story = Story(grants=_relative(_our_grants(engine)))
    job_ids = {_job_id(task): task for tasks in TASKS.values() for task in tasks}
    for victim, preemptor, rule, _ in _audit(engine, "PREEMPTED"):
        story.preemptions.add((job_ids[victim], job_ids[preemptor], rule))
    for task, count in story.attempts.items():
        ours = _our_task(engine, task)
        story.training_jobs[task] = [training_job_name(ours, n) for n in range(1, count + 1)]
    return story


def _our_task(engine: sa.Engine, task: str) -> TaskIdentity:
    """The identity of ``task`` on our allocator's queue, with its task instance's id: the SageMaker backend's
    training job names carry a digest of it (``TaskIdentity.deployment_component``)."""
    who = identity("ours", task)
    return dataclasses.replace(who, ti_id=_ti_id(engine, who))


def _ti_id(engine: sa.Engine, who: TaskIdentity) -> str:
    """The id of the task instance ``who`` names, as the metadata DB holds it."""
    query = sa.text("SELECT id FROM task_instance WHERE dag_id = :dag AND run_id = :run AND task_id = :task")
    with engine.connect() as connection:
        found = connection.execute(query, {"dag": who.dag_id, "run": who.run_id, "task": who.task_id})
        # (SQLite holds it as 32 hex digits; the task names its jobs from the UUID's usual form.)
        return str(uuid.UUID(str(found.scalar_one())))


def aws_story(batch: Any) -> Story:
    """DescribeServiceJob of each demo job of ``demo-aws``."""
    jobs = service_jobs(batch)
    tasks = {job["jobId"]: task for task, job in jobs.items()}
    story = Story()
    grants: list[tuple[str, int, float]] = []
    for task, job in jobs.items():
        attempts = job.get("attempts") or []
        grants += [(task, n, attempt["startedAt"] / 1000) for n, attempt in enumerate(attempts, 1)]
        story.training_jobs[task] = [a["serviceResourceId"]["value"].rsplit("/", 1)[1] for a in attempts]
        for preempted in (job.get("preemptionSummary") or {}).get("recentPreemptedAttempts", []):
            match = _PREEMPTED_BY.match(preempted.get("statusReason", ""))
            assert match, preempted
            story.preemptions.add((task, tasks[match.group(1)], match.group(2)))
    story.grants = _relative(sorted(grants, key=lambda grant: (grant[2], grant[0])))
    return story


def service_jobs(batch: Any) -> dict[str, dict[str, Any]]:
    """Each demo task's service job in ``demo-aws``, described (the ones submitted so far)."""
    queue = QUEUES["aws"][0]
    jobs = {}
    for tasks in TASKS.values():
        for task in tasks:
            name = identity("aws", task).task_key
            listed = batch.list_service_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [name]}])
            for summary in listed["jobSummaryList"]:
                assert task not in jobs, f"{task} has two service jobs"
                jobs[task] = batch.describe_service_job(jobId=summary["jobId"])
    return jobs


def _job_id(task: str) -> str:
    found = identity("ours", task)
    return f"{found.dag_id}/{found.run_id}/{found.task_id}/-1/1"


def _audit(engine: sa.Engine, kind: str) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT job_id, related_job_id, rule, at FROM quota_audit_log"
                " WHERE job_queue_name = :q AND kind = :k ORDER BY id"
            ),
            {"q": QUEUES["ours"][0], "k": kind},
        )
        return [tuple(row) for row in rows]


def _our_grants(engine: sa.Engine) -> list[tuple[str, int, float]]:
    job_ids = {_job_id(task): task for tasks in TASKS.values() for task in tasks}
    seen: Counter[str] = Counter()
    grants = []
    for job_id, _, _, at in _audit(engine, "GRANTED"):
        task = job_ids[job_id]
        seen[task] += 1
        moment = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
        grants.append((task, seen[task], moment.timestamp()))
    return grants


def _relative(grants: list[tuple[str, int, float]]) -> list[tuple[str, int, float]]:
    start = grants[0][2] if grants else 0.0
    return [(task, attempt, at - start) for task, attempt, at in grants]
