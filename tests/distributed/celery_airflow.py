"""One real Airflow on Celery for the two files that run their DAGs beyond the LocalExecutor: Celery and
two schedulers (``tests/distributed/test_celery_two_schedulers.py``) and AWS Batch's end to end
(``tests/aws_batch/test_end_to_end.py``). They share it as two teams would share a user's Airflow, each with
its own job queues, DAG files and training-job names, and the suite starts one Airflow for them instead of
two (a start costs about 25 CPU-seconds on the suite's two cores, more under load).

The installation: CeleryExecutor with the allocator (a Redis broker, PostgreSQL as the metadata database and
Celery's result backend), two Celery workers and two schedulers, each hosting the allocator, a triggerer, a
dag processor and an api-server. ``aws_default`` points at this worker's moto server with our AWS Batch and
SageMaker emulators (``tests.aws_batch.conftest.batch_emulator``): AWS Batch's service jobs and the Celery
stories' training jobs run there. AWS Batch's end to end runs first: it restarts the triggerer once with an
unreachable AWS Batch, and puts it back; Celery's story then SIGKILLs one scheduler and one Celery worker.

A pytest plugin (``tests/conftest.py`` loads it) so that the fixture is one per worker for the two
directories; ``tests/conftest.py`` hands the two files to one worker together (``CELERY_FILES``), and the
installation is stopped as soon as that worker leaves them (``tests/airflow/shared.py``). Airflow and
the harness are imported only when the fixture starts: the fast tier's workers never pay for them.
"""

from __future__ import annotations

import contextlib
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.shared import SharedAirflow, stop_when_the_worker_leaves

TESTS = Path(__file__).resolve().parents[1]
#: The files that share the installation (paths as pytest's node ids start), AWS Batch's first.
CELERY_FILES = frozenset(
    {
        "tests/aws_batch/test_end_to_end.py",
        "tests/distributed/test_celery_two_schedulers.py",
    }
)
#: Each file's DAG files (copied into the installation's DAG folder).
DAG_FILES = (
    TESTS / "sagemaker" / "dags" / "quota_sagemaker_reclaim.py",  # AWS Batch's: tests/sagemaker's DAGs
    TESTS / "aws_batch" / "dags" / "quota_batch_long.py",
    TESTS / "aws_batch" / "dags" / "quota_batch_demo.py",
    TESTS / "distributed" / "dags" / "quota_celery.py",
)
#: The Celery stories' job queue (tests/distributed/quotas.yaml).
CELERY_QUEUE = "celery-training"
ALLOCATOR = "airflow_quota.allocator.executor.QuotaAllocatorExecutor"


@dataclass
class CeleryAirflow(SharedAirflow):
    """The shared installation, and the moto server its ``aws_default`` points at."""

    endpoint_url: str


@pytest.fixture(scope="session")
def celery_airflow(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryAirflow]:
    import redis
    import yaml

    from tests.airflow.harness import AirflowProcesses
    from tests.aws_batch.conftest import batch_emulator
    from tests.databases import scratch_postgres_url
    from tests.sagemaker.moto_process import emulator_connection

    home = tmp_path_factory.mktemp("airflow-home-celery")
    dags = home / "dags"
    dags.mkdir()
    for dag_file in DAG_FILES:
        shutil.copy(dag_file, dags)
    quotas = home / "quotas.yaml"
    quotas.write_text(yaml.safe_dump({"jobQueues": job_queues()}, sort_keys=False))
    endpoint_url = batch_emulator(request.session)
    broker_db = random.randint(1, 15)
    redis.Redis(host="127.0.0.1", port=6379, db=broker_db).flushdb()

    with contextlib.ExitStack() as closing:
        database_url = closing.enter_context(scratch_postgres_url("quota_celery"))
        processes = AirflowProcesses(
            home,
            database_url,
            extra_env={
                **emulator_connection(endpoint_url),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                "AIRFLOW__CORE__EXECUTOR": f"CeleryExecutor,{ALLOCATOR}",
                "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{broker_db}",
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{database_url}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
            },
        )
        processes.migrate()
        processes.apply_quotas(quotas)
        closing.callback(processes.stop)
        processes.start("api-server", "dag-processor", "triggerer")
        processes.start_process("scheduler-1", ["scheduler"])
        processes.start_process("scheduler-2", ["scheduler"])
        for index in (1, 2):
            processes.start_process(
                f"worker-{index}", ["celery", "worker", "-H", f"worker{index}@%h", "--skip-serve-logs"]
            )
        shared = CeleryAirflow(processes, CELERY_FILES, closing.pop_all(), endpoint_url)
    stop_when_the_worker_leaves(shared)
    try:
        yield shared
    finally:
        shared.close()


def job_queues() -> list[dict[str, Any]]:
    """AWS Batch's end to end's job queues (tests/sagemaker's, scheduled by AWS Batch, and the demo's on both
    schedulers) and the Celery stories' own."""
    import yaml

    from tests.aws_batch import demo_story

    [sagemaker] = yaml.safe_load((TESTS / "sagemaker" / "quotas.yaml").read_text())["jobQueues"]
    celery = yaml.safe_load((TESTS / "distributed" / "quotas.yaml").read_text())["jobQueues"]
    return [{**sagemaker, "scheduler": "AWS_BATCH"}, *demo_story.demo_queues(), *celery]
