"""The demo: three teams train on one workstation's GPUs under quotas (demo/quotas.yaml).

No GPU or AWS account is needed: every job runs examples/training/train_counter.py on the local backend,
a CPU "training" that checkpoints every step and resumes where it stopped. What happens (scripts/demo.sh
prints the page's address, then triggers the three DAGs together):

1. ``demo_nlp_sweep``: nlp starts three one-GPU trials. One runs on nlp's own GPU, two on research's
   idle GPUs (borrowed). ``demo_vision_eval``: vision's job runs on its reserved GPU.
2. ``demo_research_pretrain``: research prepares its data for ``DEMO_RECLAIM_AFTER`` seconds (default 60),
   then its two-GPU pretraining asks for its GPUs back. The two borrowing nlp trials are preempted:
   SIGTERM, they checkpoint and exit, and wait again at their place in the queue (same Airflow try).
3. research's job runs on the GPUs it got back; when it ends, the nlp trials resume from their
   checkpoints and finish.

The trials last ``DEMO_RECLAIM_AFTER`` + 60 seconds uninterrupted, so they are still running when research
comes back for its GPUs, however long it prepares (the tests set a short ``DEMO_RECLAIM_AFTER``) and however
busy the machine (research's second task starts after its first ends: on a loaded 2-core machine that took
45 s, and with a 30 s margin a trial finished its training while it was being preempted).

Watch it on the GPU Quotas page (/quota/), or with ``airflow quota snapshot`` and ``airflow quota events``.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "training" / "train_counter.py"
QUEUE = "workstation"
#: How long research prepares its data (its GPUs are lent meanwhile) before it asks for them back.
RECLAIM_AFTER = float(os.environ.get("DEMO_RECLAIM_AFTER", "60"))
STEP_SECONDS = 0.2


def trial_steps(reclaim_after: float) -> int:
    """An nlp trial's steps: a minute longer than research's data preparation, so it still runs when
    research comes back for the GPUs it borrowed."""
    return round((reclaim_after + 60) / STEP_SECONDS)


def gpus(count: int, steps: int, step_seconds: float = STEP_SECONDS) -> dict[str, Any]:
    """A training request: ``count`` local GPUs, ``steps`` checkpointed steps of ``step_seconds``."""
    return {
        "ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": count},
        "HyperParameters": {"steps": str(steps), "step_seconds": str(step_seconds)},
    }


def local_job(task_id: str, share: str, request: dict[str, Any], **kwargs: Any) -> QuotaTrainingOperator:
    return QuotaTrainingOperator(
        task_id=task_id,
        job_queue=QUEUE,
        quota_share_name=share,
        backend="local",
        entry_point=[sys.executable, str(TRAIN)],
        training_job_config=request,
        stop_grace_period=30,
        **kwargs,
    )


def prepare_data() -> None:
    time.sleep(RECLAIM_AFTER)  # research's data preparation: its GPUs are idle (and lent) meanwhile


with DAG(
    "demo_nlp_sweep",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota demo"],
    doc_md="nlp (LEND_AND_BORROW): three one-GPU trials; two run on research's idle GPUs.",
):
    for trial, priority in (("trial_a", 30), ("trial_b", 20), ("trial_c", 10)):
        local_job(trial, "nlp", gpus(1, steps=trial_steps(RECLAIM_AFTER)), scheduling_priority=priority)

with DAG(
    "demo_vision_eval",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota demo"],
    doc_md="vision (RESERVE): its one GPU is never lent, so it never waits for it.",
):
    local_job("evaluate", "vision", gpus(1, steps=150))

with DAG(
    "demo_research_pretrain",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota demo"],
    doc_md="research (LEND): its two GPUs are lent while it prepares data, then taken back.",
):
    PythonOperator(task_id="prepare_data", python_callable=prepare_data) >> local_job(
        "pretrain", "research", gpus(2, steps=100), scheduling_priority=50
    )
