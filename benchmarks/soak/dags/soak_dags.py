"""The soak's DAGs (benchmarks/soak.py): one QuotaTrainingOperator task each, on the local backend.

One DAG per quota share, priority and size (``soak_<share>_p<priority>_n<devices>``, ``DAG_IDS``, which
the soak reads too), so each DAG run is one job the driver chose. How long it trains and whether it
ignores SIGTERM come from the run's conf (``steps``, ``ignore_sigterm``): the entry point is
examples/training/train_counter.py, which checkpoints every step and resumes. A short grace period (3 s)
keeps SIGTERM-ignoring victims quick to SIGKILL; retries let a task whose runner or training was killed
run again.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

TRAIN_COUNTER = Path(__file__).resolve().parents[3] / "examples" / "training" / "train_counter.py"
JOB_QUEUE = "soak-local"
PRIORITIES = (10, 50)
#: The sizes (devices) each share's jobs ask: what the starting quotas can always run (team-c RESERVEs 1).
SIZES = {"team-a": (1, 2), "team-b": (1, 2), "team-c": (1,)}
#: The DAG of each share, priority and size: the jobs the soak chooses from.
DAG_IDS = {
    (share, priority, size): f"soak_{share.replace('-', '_')}_p{priority}_n{size}"
    for share, sizes in SIZES.items()
    for priority in PRIORITIES
    for size in sizes
}
STEP_SECONDS = "0.1"
GRACE_SECONDS = 3.0

for (share, priority, size), dag_id in DAG_IDS.items():
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        params={"steps": 40, "ignore_sigterm": "false"},
        default_args={"retries": 3, "retry_delay": timedelta(seconds=2)},
        tags=["soak"],
    ):
        QuotaTrainingOperator(
            task_id="train",
            job_queue=JOB_QUEUE,
            quota_share_name=share,
            scheduling_priority=priority,
            training_job_config={
                "ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": size},
                "HyperParameters": {
                    "steps": "{{ params.steps }}",
                    "step_seconds": STEP_SECONDS,
                    "ignore_sigterm": "{{ params.ignore_sigterm }}",
                },
            },
            backend="local",
            entry_point=[sys.executable, str(TRAIN_COUNTER)],
            local_root_dir=os.environ.get("SOAK_TRAINING_ROOT", "/tmp/quota-soak-training"),
            stop_grace_period=GRACE_SECONDS,
            poll_interval=1.0,
            stop_poll_interval=0.5,
        )
