"""One real Airflow for the four stories that need nothing but the LocalExecutor and a job queue of their
own: the scheduler's grants (``tests/airflow/test_scheduler_grants.py``), the local backend's reclaim
(``tests/local/test_end_to_end_local.py``), SageMaker's (``tests/sagemaker/test_end_to_end.py``) and the
demo's flow on PostgreSQL (``tests/e2e/test_demo_flow.py``: the demo's DAGs and job queue, its scheduler
restart last, when the others' tasks have ended).

Each story has its own job queue, DAG file and log, so they share one installation as they would a user's
Airflow, and the suite starts one Airflow for them instead of four (each start costs about 40 CPU-seconds
of the suite's two cores). They run one after the other, the grants first, the demo's flow last. The local
reclaim's and the demo's job queues both hand out the host's GPUs, which only one local unit of one job
queue may do (``airflow quota validate`` refuses a second): the installation starts with the local
reclaim's, and the demo's flow applies the quota file with the demo's queue in its place
(``Stories.swap_in_the_demo_queue``), as a user moves the GPUs to another queue once its jobs have ended. The
installation logs in as the demo's does (``admin`` / ``admin``, not everyone an admin: the demo's checks
log in to the page), and every story's REST calls send that login's token. The database is PostgreSQL, as
in production: on SQLite, the stories' tasks, the triggerer and the allocator writing at once under the
suite's load locked the file long enough for Airflow's triggerer to exit (``database is locked`` on its
trigger assignment); AWS Batch's end-to-end stories moved to PostgreSQL for the same reason (the scheduler
exited on its own ``UPDATE dag_run``). SQLite's real-Airflow runs are the demo's
(``tests/e2e/test_demo_command.py``, the README's first command) and the soak's.

A pytest plugin (``tests/conftest.py`` loads it) so that the fixture is one per worker for the four
directories; ``tests/conftest.py`` hands the four files to one worker together (``STORY_FILES``), and the
installation is stopped as soon as that worker leaves them (``tests/airflow/shared.py``). Airflow and
the harness are imported only when the fixture starts: the fast tier's workers never pay for them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.airflow.shared import SharedAirflow, stop_when_the_worker_leaves

if TYPE_CHECKING:
    from tests.sagemaker.moto_fixture import MotoServer

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
#: The story files that share the installation (paths as pytest's node ids start).
STORY_FILES = frozenset(
    {
        "tests/airflow/test_scheduler_grants.py",
        "tests/local/test_end_to_end_local.py",
        "tests/sagemaker/test_end_to_end.py",
        "tests/e2e/test_demo_flow.py",
    }
)
#: Each story's DAG file and quota file (one job queue each; the installation applies them as one file).
DAG_FILES = (
    TESTS / "airflow" / "dags" / "quota_probe.py",
    TESTS / "local" / "dags" / "quota_local_reclaim.py",
    TESTS / "sagemaker" / "dags" / "quota_sagemaker_reclaim.py",
    REPO / "demo" / "dags" / "demo_teams.py",
)
QUOTA_FILES = (
    TESTS / "airflow" / "quotas.yaml",
    TESTS / "local" / "quotas.yaml",
    TESTS / "sagemaker" / "quotas.yaml",
)
#: The quota files once the demo's flow begins: the demo's job queue in place of the local reclaim's.
DEMO_QUOTA_FILES = (
    TESTS / "airflow" / "quotas.yaml",
    TESTS / "sagemaker" / "quotas.yaml",
    REPO / "demo" / "quotas.yaml",
)
#: The local reclaim's job queue (tests/local/quotas.yaml), which the demo's takes the place of.
LOCAL_RECLAIM_QUEUE = "local-training"
#: research's data preparation in the demo's flow (``DEMO_RECLAIM_AFTER``; a user's demo waits a minute).
DEMO_RECLAIM_AFTER = 10


@dataclass
class Stories(SharedAirflow):
    """The shared installation, and SageMaker's emulator that its SageMaker story trains on."""

    moto: MotoServer

    def swap_in_the_demo_queue(self) -> None:
        """Apply the stories' quota file with the demo's job queue in place of the local reclaim's, once the
        ledger has recorded the end of the local reclaim's jobs (the apply refuses to remove a job queue
        with jobs that have not ended: the allocator records a job's end in the cycle after its task ended,
        which can come after the local reclaim's test has checked what it checks)."""
        quotas = self.airflow.home / "quotas-demo.yaml"
        quotas.write_text(merged_quota_file(DEMO_QUOTA_FILES))
        airflow = self.running()
        airflow.wait_for_ledger_to_settle(job_queue_name=LOCAL_RECLAIM_QUEUE)
        airflow.apply_quotas(quotas)


@pytest.fixture(scope="session")
def stories(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stories]:
    from tests.airflow.harness import AirflowProcesses
    from tests.databases import scratch_postgres_url
    from tests.sagemaker.moto_fixture import MotoServer
    from tests.sagemaker.moto_process import (
        OFFLINE_AWS_ENVIRONMENT,
        SAGEMAKER_ONLY,
        emulator_connection,
        moto_server_process,
    )

    home = tmp_path_factory.mktemp("airflow-home-stories")
    dags = home / "dags"
    dags.mkdir()
    for dag_file in DAG_FILES:  # each DAG file finds its neighbours by its resolved path
        (dags / dag_file.name).symlink_to(dag_file)
    quotas = home / "quotas.yaml"
    quotas.write_text(merged_quota_file(QUOTA_FILES))
    for log in ("probe.jsonl", "local.jsonl"):
        (home / log).touch()
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin"}))

    with contextlib.ExitStack() as closing:
        database_url = closing.enter_context(scratch_postgres_url("quota_stories"))
        endpoint_url = closing.enter_context(moto_server_process(SAGEMAKER_ONLY))
        processes = AirflowProcesses(
            home,
            database_url,
            # The grants' stories hold up to 8 worker slots, the local one's trainings 3, the demo's 6.
            parallelism=12,
            extra_env={
                **OFFLINE_AWS_ENVIRONMENT,
                **emulator_connection(endpoint_url),
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
                # The demo's login (the page's checks log in with it; the harness's REST calls use it too).
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                "DEMO_RECLAIM_AFTER": str(DEMO_RECLAIM_AFTER),
                "QUOTA_PROBE_LOG": str(home / "probe.jsonl"),
                "QUOTA_LOCAL_LOG": str(home / "local.jsonl"),
                "QUOTA_LOCAL_ROOT": str(home / "training"),
            },
        )
        processes.migrate()
        processes.apply_quotas(quotas)
        closing.callback(processes.stop)
        processes.start()
        shared = Stories(processes, STORY_FILES, closing.pop_all(), MotoServer(endpoint_url))
    stop_when_the_worker_leaves(shared)
    try:
        yield shared
    finally:
        shared.close()


def merged_quota_file(paths: tuple[Path, ...]) -> str:
    """Stories' quota files as one (each holds only its own job queues)."""
    import yaml

    queues = [queue for path in paths for queue in yaml.safe_load(path.read_text())["jobQueues"]]
    return yaml.safe_dump({"jobQueues": queues}, sort_keys=False)
