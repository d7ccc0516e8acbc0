"""The demo's flow end to end on the test harness's Airflow processes on PostgreSQL, with a bad quota file
and a scheduler restart midway.

The demo DAGs (demo/dags/demo_teams.py, local backend, a CPU script that checkpoints) run under the
demo's quotas (demo/quotas.yaml) with the scheduler (hosting the allocator), dag processor, triggerer and
api-server. ``demo_story.py`` says what is checked; the same checks run on SQLite in
``test_demo_command.py``, on the Airflow that ``scripts/demo.sh`` starts (``airflow standalone``). Midway, a
bad quota file is applied (it changes nothing) and the scheduler is restarted (nothing is lost; a
SIGKILLed scheduler on SQLite and PostgreSQL is the soak's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.airflow.harness import AirflowProcesses
from tests.databases import postgres_admin, postgres_server_or_skip
from tests.e2e.demo_story import (
    DAGS,
    REPO,
    DemoRun,
    LedgerSampler,
    a_bad_quota_file_changes_nothing,
    the_finished_story_holds,
)

pytestmark = pytest.mark.airflow

RUN = "e2e-1"
#: research's data preparation (DEMO_RECLAIM_AFTER; a user's demo waits a minute).
RECLAIM_AFTER = 10


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowProcesses]:
    home = tmp_path_factory.mktemp("airflow-home-demo-postgresql")
    server = postgres_server_or_skip()
    name = f"quota_e2e_{home.name.replace('-', '_')[-20:]}"
    postgres_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    postgres_admin(server, f'CREATE DATABASE "{name}"')
    url = server.set(database=name).render_as_string(hide_password=False)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin"}))
    processes = AirflowProcesses(
        home,
        url,
        parallelism=8,
        extra_env={
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "demo" / "dags"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "DEMO_RECLAIM_AFTER": str(RECLAIM_AFTER),
        },
    )
    processes.migrate()
    processes.apply_quotas(REPO / "demo" / "quotas.yaml")
    processes.start()
    try:
        yield processes
    finally:
        processes.stop()
        postgres_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_demo_flow_borrow_reclaim_requeue_resume_with_a_bad_file_and_a_scheduler_restart(
    airflow: AirflowProcesses,
) -> None:
    run = DemoRun(
        engine=airflow.engine,
        base_url=airflow.env["AIRFLOW__API__BASE_URL"],
        login=("admin", "admin"),
        home=airflow.home,
        run_id=RUN,
        reclaim_after=RECLAIM_AFTER,
    )
    for dag_id in DAGS:
        airflow.wait_for_dag(dag_id, timeout=180)
    with LedgerSampler(airflow.engine) as sampler:
        for dag_id in DAGS:
            airflow.trigger(dag_id, RUN)
        airflow.wait_for(
            "research to reclaim its GPUs",
            lambda: [event for event in run.audit() if event["kind"] == "PREEMPTED"],
            240,
        )
        a_bad_quota_file_changes_nothing(run, lambda path: airflow.airflow("quota", "apply", "-f", str(path)))
        # A scheduler restart mid-flow: SIGTERM (its LocalExecutor lets running tasks finish), then a
        # new scheduler carries on. (A SIGKILLed scheduler is tests/distributed's and the soak's: with
        # LocalExecutor it takes its workers' tasks with it, and Airflow retries them.)
        airflow.stop_gracefully("scheduler")
        airflow.start("scheduler")
        airflow.wait_for("the demo's runs to finish", run.finished, 360)
    airflow.wait_for_ledger_to_settle()
    the_finished_story_holds(run, sampler)
