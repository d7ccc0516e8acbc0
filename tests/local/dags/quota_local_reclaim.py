"""End-to-end DAGs: QuotaTrainingOperator with ``backend="local"`` on real Airflow processes.

``quota_local_borrower`` (team-b) runs two one-GPU trainings of train_counter.py: ``own`` on team-b's GPU
and ``borrow`` (lower priority, so the one a reclaim picks) on team-a's idle one. ``quota_local_owner``
(team-a) then asks for its GPU back. The entry point notes what each process saw in ``$QUOTA_LOCAL_LOG``
(tests/local/train_and_note.py); directories go under ``$QUOTA_LOCAL_ROOT``.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

ENTRY_POINT = [sys.executable, str(Path(__file__).resolve().parents[1] / "train_and_note.py")]


def request(steps: int, step_seconds: float) -> dict[str, Any]:
    return {
        "ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": 1},
        "HyperParameters": {"steps": str(steps), "step_seconds": str(step_seconds)},
    }


COMMON: dict[str, Any] = {
    "job_queue": "local-training",
    "backend": "local",
    "entry_point": ENTRY_POINT,
    "local_root_dir": os.environ.get("QUOTA_LOCAL_ROOT", "/tmp/quota-local-e2e"),
    "stop_grace_period": 30,
}

with DAG(dag_id="quota_local_borrower", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="own",
        quota_share_name="team-b",
        scheduling_priority=10,
        training_job_config=request(steps=400, step_seconds=0.1),
        **COMMON,
    )
    QuotaTrainingOperator(
        task_id="borrow",
        quota_share_name="team-b",
        scheduling_priority=1,
        training_job_config=request(steps=150, step_seconds=0.1),
        **COMMON,
    )

with DAG(dag_id="quota_local_owner", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train",
        quota_share_name="team-a",
        training_job_config=request(steps=20, step_seconds=0.1),
        **COMMON,
    )
