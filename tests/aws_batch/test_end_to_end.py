"""The same DAGs on a job queue AWS Batch schedules, on real Airflow processes (CeleryExecutor with two
Celery workers, two schedulers hosting the allocator, triggerer, dag processor, api-server; PostgreSQL), AWS
Batch and SageMaker being moto's server with our emulators. The installation is the Celery stories'
(``tests/distributed/celery_airflow.py``): these tests run first on it, on job queues of their own.
PostgreSQL, as every shared installation: on SQLite, the tasks, the triggerer and the allocator writing at
once under the suite's load locked the file past five seconds, and Airflow's scheduler exited (``database
is locked`` on its own ``UPDATE dag_run``).

The quota file is tests/sagemaker's with one line more, ``scheduler: AWS_BATCH``, and the demo's job queue
twice (``demo_story.demo_queues``), beside the Celery stories' queue (``celery_airflow.job_queues``); the
design of its AWS_BATCH queues is created in the emulator as ``airflow quota export --format aws`` prints
it. The allocator hands each waiting task to AWS Batch and holds nothing for it; each task submits a service
job and follows it:

* the SageMaker end-to-end story, unchanged DAGs: team-b's job borrows team-a's idle instance, team-a's
  job reclaims it, AWS Batch (the emulator) preempts the borrower's service job and runs its second
  attempt on the same checkpoint prefix once team-a's is done; both tasks succeed in their first try;
* the demo's story (tests/aws_batch/dags/quota_batch_demo.py: demo/quotas.yaml's design, SageMaker jobs),
  the same DAGs once on a queue our allocator schedules and once on one AWS Batch schedules, side by side:
  nlp borrows research's idle instances, research reclaims them from the two lowest-priority trials, an
  urgent nlp job preempts nlp's own running trial (in-share), each victim's second attempt resumes its
  checkpoint prefix, every task succeeds in its first try; the same victims and grants order on both;
* a task marked failed while it waits on its service job terminates the job (its trigger's ``on_kill``);
* a try that fails while its service job still runs (here AWS Batch unreachable from the triggerer) is
  retried, and the retry follows the same service job instead of submitting a second one.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import boto3
import pytest
import requests
import sqlalchemy as sa

from airflow_quota.backends.sagemaker import TaskIdentity
from airflow_quota.triggers.batch_service_job import KILLED_REASON
from tests.airflow.harness import AirflowProcesses, free_port
from tests.aws_batch import demo_story
from tests.aws_batch.conftest import AnswerLog, checked, create_design
from tests.cli.in_process import run_quota
from tests.distributed.celery_airflow import CeleryAirflow, job_queues
from tests.sagemaker.moto_process import REGION

pytestmark = pytest.mark.airflow

QUEUE = "gpu-training"


@pytest.fixture(scope="module")
def batch_answers() -> AnswerLog:
    """The emulator's answers to this module's Batch client, checked against botocore's output shapes."""
    return AnswerLog()


@pytest.fixture(scope="module")
def batch(endpoint_url: str, batch_answers: AnswerLog) -> Any:
    return checked(boto3.client("batch", endpoint_url=endpoint_url, region_name=REGION), batch_answers)


@pytest.fixture(scope="module")
def sagemaker(endpoint_url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=endpoint_url, region_name=REGION)


@pytest.fixture(scope="module")
def airflow(celery_airflow: CeleryAirflow, batch: Any) -> AirflowProcesses:
    """The installation shared with the Celery stories, its AWS_BATCH job queues' design created in the
    emulator as ``airflow quota export --format aws`` prints it."""
    create_design(batch, {"jobQueues": [q for q in job_queues() if q.get("scheduler") == "AWS_BATCH"]})
    return celery_airflow.running()


def task_key(dag_id: str, run_id: str) -> str:
    """The service job's name (and its training jobs' prefix) for the DAG's ``train`` task."""
    return TaskIdentity(dag_id, run_id, "train", -1, 1).task_key


def service_jobs(batch: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every service job of the DAG run's ``train`` task, described."""
    listed = batch.list_service_jobs(
        jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": [task_key(dag_id, run_id)]}]
    )
    return [batch.describe_service_job(jobId=job["jobId"]) for job in listed["jobSummaryList"]]


def training_job(sagemaker: Any, name: str) -> tuple[str, str]:
    described = sagemaker.describe_training_job(TrainingJobName=name)
    return described["TrainingJobStatus"], described["CheckpointConfig"]["S3Uri"]


def following(airflow: AirflowProcesses, dag_id: str, run_id: str) -> bool:
    """The task waits deferred on its service job's trigger."""
    with airflow.engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT state, next_method FROM task_instance WHERE dag_id = :d AND run_id = :r"),
            {"d": dag_id, "r": run_id},
        ).first()
    return row is not None and tuple(row) == ("deferred", "on_service_job")


def running_job(airflow: AirflowProcesses, batch: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        jobs = service_jobs(batch, dag_id, run_id)
        if len(jobs) == 1 and jobs[0]["status"] == "RUNNING" and following(airflow, dag_id, run_id):
            return jobs[0]
        return None

    return airflow.wait_for(f"{dag_id}'s service job to run, its task following it", probe, 180)


def trigger_log(airflow: AirflowProcesses, dag_id: str, run_id: str, attempt: int = 1) -> str:
    """What the task's triggers wrote (the triggerer's own file beside the try's log)."""
    files = airflow.task_log_folder(dag_id, run_id, "train").glob(f"attempt={attempt}.log.trigger.*")
    return "".join(path.read_text(errors="replace") for path in files)


def finished(airflow: AirflowProcesses, dag_id: str, run_id: str, timeout: float = 300) -> None:
    airflow.wait_for(
        f"{dag_id} to finish", lambda: airflow.run_state(dag_id, run_id) in ("success", "failed"), timeout
    )


def return_value(
    airflow: AirflowProcesses, dag_id: str, run_id: str, task_id: str = "train"
) -> dict[str, Any]:
    with airflow.engine.connect() as connection:
        value = connection.execute(
            sa.text(
                "SELECT value FROM xcom WHERE dag_id = :d AND run_id = :r AND task_id = :t"
                " AND key = 'return_value'"
            ),
            {"d": dag_id, "r": run_id, "t": task_id},
        ).scalar_one()
    return dict(json.loads(value) if isinstance(value, str) else value)


def test_the_owner_reclaims_its_instance_from_a_borrower_aws_batch_preempted(
    airflow: AirflowProcesses, batch: Any, sagemaker: Any
) -> None:
    airflow.wait_for_dag("quota_sm_borrower")
    airflow.wait_for_dag("quota_sm_owner")
    airflow.trigger("quota_sm_borrower", "e2e-1")
    borrowing = running_job(airflow, batch, "quota_sm_borrower", "e2e-1")
    assert borrowing["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}]  # one borrowed
    airflow.trigger("quota_sm_owner", "e2e-1")

    for dag_id in ("quota_sm_owner", "quota_sm_borrower"):
        finished(airflow, dag_id, "e2e-1")

    assert airflow.task_states("quota_sm_owner", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    # Preempted and resumed by AWS Batch in the same try: no Airflow retry used.
    assert airflow.task_states("quota_sm_borrower", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    [borrower] = service_jobs(batch, "quota_sm_borrower", "e2e-1")
    [owner] = service_jobs(batch, "quota_sm_owner", "e2e-1")
    assert (borrower["status"], owner["status"]) == ("SUCCEEDED", "SUCCEEDED")
    assert borrower["jobId"] == borrowing["jobId"]  # one service job for the task, two attempts
    [preempted] = borrower["preemptionSummary"]["recentPreemptedAttempts"]
    assert preempted["statusReason"] == f"Preempted by {owner['jobId']} (RECLAIM)"
    first, second = (f"{task_key('quota_sm_borrower', 'e2e-1')}-a{attempt}" for attempt in (1, 2))
    assert preempted["serviceResourceId"]["value"].endswith(f"training-job/{first}")
    assert training_job(sagemaker, first)[0] == "Stopped"
    assert training_job(sagemaker, second)[0] == "Completed"
    assert training_job(sagemaker, first)[1] == training_job(sagemaker, second)[1]  # the same checkpoint
    result = return_value(airflow, "quota_sm_borrower", "e2e-1")
    assert (result["service_job_id"], result["attempts"]) == (borrower["jobId"], 2)
    assert [each["status_reason"] for each in result["preemptions"]] == [preempted["statusReason"]]
    assert result["training_job_arn"].endswith(f"training-job/{second}")
    # The allocator held nothing: AWS Batch scheduled both jobs.
    with airflow.engine.connect() as connection:
        held = connection.execute(
            sa.text("SELECT count(*) FROM quota_job WHERE job_queue_name = :queue"), {"queue": QUEUE}
        )
        assert held.scalar_one() == 0
    # The CLI shows them, read from AWS Batch (``airflow quota`` through Airflow's CLI parser in this process,
    # on this Airflow's database, ``aws_default`` on the emulator: tests/cli/in_process.py).
    listed = quota_cli(airflow, "jobs", "list", "--queue", QUEUE, "--output", "json")
    assert {(job["jobId"], job["status"], job["scheduledBy"]) for job in listed["serviceJobs"][QUEUE]} == {
        (borrower["jobId"], "SUCCEEDED", "AWS_BATCH"),
        (owner["jobId"], "SUCCEEDED", "AWS_BATCH"),
    }
    [snapshot] = quota_cli(airflow, "snapshot", "--queue", QUEUE, "--output", "json")["jobQueues"]
    assert (snapshot["scheduledBy"], snapshot["capacityUsage"]) == ("AWS_BATCH", [])  # both have ended
    assert [share["quotaShareName"] for share in snapshot["quotaShares"]] == ["team-a", "team-b"]
    table = run_quota(["jobs", "list", "--queue", QUEUE], airflow.engine)
    assert f"Service jobs of job queue {QUEUE} (scheduled by AWS Batch)" in table.stdout, table.stderr


#: The demo's preemptions on both schedulers: research reclaims its two instances from nlp's two lowest
#: priority trials; nlp's urgent job, unable to borrow, preempts nlp's own running trial.
DEMO_PREEMPTIONS = {
    ("trial_c", "pretrain", "RECLAIM"),
    ("trial_b", "pretrain", "RECLAIM"),
    ("trial_a", "urgent", "IN_SHARE_PRIORITY"),
}
SCHEDULERS = tuple(demo_story.QUEUES)


def test_the_demo_story_on_aws_batch_matches_our_allocator(
    airflow: AirflowProcesses, batch: Any, sagemaker: Any, batch_answers: AnswerLog
) -> None:
    """The same DAGs on the demo's design, one queue per scheduler, side by side in one Airflow: the same
    borrowers, the same reclaim and in-share victims, every victim resumed from its checkpoint in its
    first Airflow try."""
    run = demo_story.RUN
    dag_ids = [demo_story.dag_id(dag, s) for dag in demo_story.TASKS for s in SCHEDULERS]
    for dag_id in dag_ids:
        airflow.wait_for_dag(dag_id)

    def granted(scheduler: str) -> Counter[str]:
        return demo_story.granted_so_far(airflow.engine, batch, scheduler)

    for scheduler in SCHEDULERS:
        for dag in ("demo_nlp_sweep", "demo_vision_eval"):
            airflow.trigger(demo_story.dag_id(dag, scheduler), run)
    first = ("trial_a", "trial_b", "trial_c", "evaluate")
    airflow.wait_for(  # nlp borrows research's two idle instances on both queues, and they train
        "nlp's trials and vision's job to start training on both queues",
        lambda: all(
            demo_story.training_started(airflow.engine, batch, sagemaker, s) >= set(first) for s in SCHEDULERS
        ),
        180,
    )
    for scheduler in SCHEDULERS:
        airflow.trigger(demo_story.dag_id("demo_research_pretrain", scheduler), run)
    urgent: set[str] = set()

    def urgent_once_research_trains() -> bool:
        for scheduler in set(SCHEDULERS) - urgent:
            if granted(scheduler)["pretrain"]:
                airflow.trigger(demo_story.dag_id("demo_nlp_urgent", scheduler), run)
                urgent.add(scheduler)
        return len(urgent) == len(SCHEDULERS)

    airflow.wait_for("research to reclaim its instances on both queues", urgent_once_research_trains, 180)
    for dag_id in dag_ids:
        finished(airflow, dag_id, run)

    for dag_id in dag_ids:  # preempted and resumed in the same try: no Airflow retry used
        states = airflow.task_states(dag_id, run)
        assert set(states.values()) == {("success", 1)}, (dag_id, states, airflow.log_tails())
    airflow.wait_for_ledger_to_settle()
    stories = {"ours": demo_story.our_story(airflow.engine), "aws": demo_story.aws_story(batch)}
    for scheduler, story in stories.items():
        print(f"{scheduler}: {story.timeline()}; preempted: {sorted(story.preemptions)}")
    for scheduler, story in stories.items():
        assert story.preemptions == DEMO_PREEMPTIONS, scheduler
        assert story.attempts == {
            "trial_a": 2,
            "trial_b": 2,
            "trial_c": 2,
            "evaluate": 1,
            "pretrain": 1,
            "urgent": 1,
        }, scheduler
        # Borrowers first, then research's reclaim, then the urgent job; the victims' second attempts last
        # (among themselves, in the order each scheduler saw the jobs before them end: timing, not policy).
        assert {grant for grant in story.order[:4]} == {(task, 1) for task in first}, story.order
        assert story.order[4:6] == [("pretrain", 1), ("urgent", 1)], story.order
        assert {grant for grant in story.order[6:]} == {(t, 2) for t in ("trial_a", "trial_b", "trial_c")}
        for trial in ("trial_a", "trial_b", "trial_c"):  # the second attempt resumes the first's checkpoint
            (status_1, uri_1), (status_2, uri_2) = (
                training_job(sagemaker, name) for name in story.training_jobs[trial]
            )
            assert (status_1, status_2) == ("Stopped", "Completed"), (scheduler, trial)
            assert uri_1 == uri_2
            assert uri_1.endswith(f"/checkpoints/{demo_story.identity(scheduler, trial).task_key}/")
    # What a user of each sees: the task's XCom (AWS Batch's preemption, in its words) and the REST API.
    aws_jobs = demo_story.service_jobs(batch)
    result = return_value(airflow, demo_story.dag_id("demo_nlp_sweep", "aws"), run, "trial_a")
    assert result["attempts"] == 2
    assert [each["status_reason"] for each in result["preemptions"]] == [
        f"Preempted by {aws_jobs['urgent']['jobId']} (IN_SHARE_PRIORITY)"
    ]
    # The REST API (what the GPU Quotas page shows): each queue says who schedules it; the allocator's jobs
    # come from the ledger, AWS Batch's from AWS Batch.
    queues = {q["jobQueueName"]: q["scheduler"] for q in quota_api(airflow, "/jobQueues")["jobQueues"]}
    assert {name: queues[name] for name, _ in demo_story.QUEUES.values()} == dict(demo_story.QUEUES.values())
    ours = quota_api(airflow, "/jobs", jobQueueName="demo-ours", finished="true")["jobs"]
    assert {
        (
            job["jobId"].split("/")[2],
            job["status"],
            job["preemptionSummary"]["preemptedAttemptCount"],
        )
        for job in ours
    } == {
        (task, "SUCCEEDED", 1 if task.startswith("trial") else 0)
        for tasks in demo_story.TASKS.values()
        for task in tasks
    }
    served = quota_api(airflow, "/jobQueues/demo-aws/serviceJobs", finished="true")
    assert (served["scheduler"], served["error"]) == ("AWS_BATCH", None)
    assert {(job["jobId"], job["status"], job["scheduledBy"]) for job in served["jobs"]} == {
        (job["jobId"], "SUCCEEDED", "AWS_BATCH") for job in aws_jobs.values()
    }
    snapshot = quota_api(airflow, "/jobQueues/demo-aws/snapshot")
    assert (snapshot["scheduler"], snapshot["error"]) == ("AWS_BATCH", None)
    assert snapshot["queueUtilization"]["totalCapacityUsage"] == []  # every job has ended
    # Every answer the emulator gave this module's client so far had botocore's output shape.
    assert batch_answers.checked["DescribeServiceJob"] > 0
    assert batch_answers.problems == []


def quota_api(airflow: AirflowProcesses, path: str, **params: str) -> Any:
    """GET the quota plugin's REST API (``/quota/api``) as an admin."""
    answer = requests.get(
        f"{airflow.base_url}/quota/api{path}",
        params=params,
        headers={"Authorization": f"Bearer {airflow.api_token()}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def quota_cli(airflow: AirflowProcesses, *args: str) -> Any:
    result = run_quota(list(args), airflow.engine)
    assert result.returncode == 0, result.stdout + result.stderr
    # In this process the provider's connection log line comes before the document on stdout (the ``airflow``
    # process sends it to stderr: ``cli.aws_queues.logs_to_stderr``).
    stdout = result.stdout
    return json.loads(stdout if stdout.startswith("{") else stdout[stdout.index("\n{") + 1 :])


def test_a_task_marked_failed_while_it_follows_its_service_job_terminates_it(
    airflow: AirflowProcesses, batch: Any
) -> None:
    airflow.wait_for_dag("quota_batch_kill")
    airflow.trigger("quota_batch_kill", "kill-1")
    job = running_job(airflow, batch, "quota_batch_kill", "kill-1")
    airflow.wait_for(  # the triggerer runs the trigger (only a running trigger is told it was killed)
        "the trigger to follow the service job",
        lambda: f"Service job {job['jobId']}: RUNNING" in trigger_log(airflow, "quota_batch_kill", "kill-1"),
        120,
    )

    marked = requests.patch(
        f"{airflow.base_url}/api/v2/dags/quota_batch_kill/dagRuns/kill-1/taskInstances/train",
        json={"new_state": "failed"},
        headers={"Authorization": f"Bearer {airflow.api_token()}"},
        timeout=60,
    )
    assert marked.status_code == 200, marked.text

    ended = airflow.wait_for(
        "the service job to be terminated",
        lambda: (
            (described := batch.describe_service_job(jobId=job["jobId"]))["status"] == "FAILED" and described
        ),
        120,
    )
    assert ended["isTerminated"] is True
    assert KILLED_REASON in ended["statusReason"]
    assert airflow.task_states("quota_batch_kill", "kill-1") == {"train": ("failed", 1)}


def test_a_retried_try_follows_the_service_job_of_the_try_that_failed(
    airflow: AirflowProcesses, batch: Any
) -> None:
    """The triggerer cannot reach AWS Batch: each try's trigger gives up and the try fails, while the
    service job runs on. The retry re-attaches to it: one service job, never terminated."""
    unreachable = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {
            "region_name": REGION,
            "endpoint_url": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        },
    }
    airflow.kill("triggerer")
    airflow.start_process("triggerer", ["triggerer"], AIRFLOW_CONN_AWS_DEFAULT=json.dumps(unreachable))
    try:
        airflow.wait_for_dag("quota_batch_retry")
        airflow.trigger("quota_batch_retry", "retry-1")
        finished(airflow, "quota_batch_retry", "retry-1")
    finally:  # the Celery stories run next on this installation, their triggers on the emulator
        airflow.kill("triggerer")
        airflow.start_process("triggerer", ["triggerer"])

    states = airflow.task_states("quota_batch_retry", "retry-1")
    assert states == {"train": ("failed", 2)}, airflow.log_tails()
    [job] = service_jobs(batch, "quota_batch_retry", "retry-1")
    assert (job["status"], job["isTerminated"]) == ("RUNNING", False)
    logs = {
        attempt: path.read_text(errors="replace")
        for attempt in (1, 2)
        for path in (airflow.home / "logs").glob(f"dag_id=quota_batch_retry/**/attempt={attempt}.log")
    }
    assert f"Submitted service job {job['jobId']}" in logs[1]
    assert f"Re-attaching to service job {job['jobId']} (RUNNING)" in logs[2]
    batch.terminate_service_job(jobId=job["jobId"], reason="the test is over")
