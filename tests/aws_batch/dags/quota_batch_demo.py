"""The demo's story (demo/dags/demo_teams.py) as SageMaker training jobs, once per job queue: the same DAGs
on ``demo-ours`` (our allocator schedules it) and on ``demo-aws`` (AWS Batch does). Both queues are the
demo's design (demo/quotas.yaml) on ``ml.g5.xlarge``; the quota file differs only in their ``scheduler``.

The demo trains on the worker's local GPUs, which AWS Batch cannot schedule; here each job is a training
job of the emulated SageMaker (``emulator.duration_s``: the first attempt's seconds, then every later
attempt's, which resumes from the checkpoint prefix the attempts share). The story:

1. ``demo_nlp_sweep_<queue>``: nlp's three one-instance trials (priorities 30, 20, 10): one on nlp's own
   instance, two borrowed from research (LEND); ``demo_vision_eval_<queue>``: vision's job on its RESERVE
   instance;
2. ``demo_research_pretrain_<queue>``: research's two-instance job (priority 50) reclaims its instances: the
   two lowest-priority trials are preempted (RECLAIM). The test triggers it once the trials run, where the
   demo relies on a 25 s data preparation;
3. ``demo_nlp_urgent_<queue>`` (not in the demo): an nlp job of priority 90 while research holds its
   instances: nlp cannot borrow, so it preempts its own lower-priority running trial (IN_SHARE_PRIORITY);
4. each preempted trial resumes (a second attempt, same checkpoint prefix) in the same Airflow try.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

#: The job queue's name, and the suffix of its DAGs' ids.
QUEUES = {"demo-ours": "ours", "demo-aws": "aws"}
UNIT = "ml.g5.xlarge"
#: Seconds of each first attempt (the trials' are preempted long before) and of later attempts.
TRIAL_SECONDS = "300,3"
#: research's job must outlast the urgent nlp job's arrival (the test triggers it when research's job
#: starts), or the resumed trials would be running again and the urgent job would preempt trial_c.
PRETRAIN_SECONDS = "30"
SHORT_SECONDS = "3"
#: The urgent job holds nlp's own instance long enough for the trial it preempted to wait for quota again
#: (its task stops the training job and defers): freed sooner, the instance would go to trial_b, already
#: waiting, and trial_a (higher priority) would then preempt it in-share, one preemption more.
URGENT_SECONDS = "12"


def instances(count: int, durations: str) -> dict[str, Any]:
    """A CreateTrainingJob request on ``count`` instances (known at parse time: the task waits for its
    admission from the triggerer, no worker run)."""
    return {
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/demo:1",
            "TrainingInputMode": "File",
        },
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {"S3OutputPath": "s3://models/demo"},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": count, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {"emulator.duration_s": durations, "emulator.stop_delay_s": "1"},
    }


def job(task_id: str, queue: str, share: str, request: dict[str, Any], priority: int = 0) -> None:
    QuotaTrainingOperator(
        task_id=task_id,
        job_queue=queue,
        quota_share_name=share,
        scheduling_priority=priority,
        training_job_config=request,
        poll_interval=1.0,
        stop_poll_interval=0.5,
    )


for queue, suffix in QUEUES.items():
    with DAG(f"demo_nlp_sweep_{suffix}", schedule=None, start_date=datetime(2026, 1, 1)):
        for trial, priority in (("trial_a", 30), ("trial_b", 20), ("trial_c", 10)):
            job(trial, queue, "nlp", instances(1, TRIAL_SECONDS), priority)

    with DAG(f"demo_vision_eval_{suffix}", schedule=None, start_date=datetime(2026, 1, 1)):
        job("evaluate", queue, "vision", instances(1, SHORT_SECONDS))

    with DAG(f"demo_research_pretrain_{suffix}", schedule=None, start_date=datetime(2026, 1, 1)):
        job("pretrain", queue, "research", instances(2, PRETRAIN_SECONDS), 50)

    with DAG(f"demo_nlp_urgent_{suffix}", schedule=None, start_date=datetime(2026, 1, 1)):
        job("urgent", queue, "nlp", instances(1, URGENT_SECONDS), 90)
