"""The demo's flow end to end on the test harness's Airflow processes on PostgreSQL, with a bad quota file
and a scheduler restart midway.

The demo DAGs (demo/dags/demo_teams.py, local backend, a CPU script that checkpoints) run under the
demo's quotas (demo/quotas.yaml) with the scheduler (hosting the allocator), dag processor, triggerer and
api-server: the Airflow the other stories share (``tests/airflow/stories.py``), the demo's job queue
``workstation`` its own, this story the last on it. ``demo_story.py`` says what is checked (the demo's queue
only); the same checks run on SQLite in ``test_demo_command.py``, on the Airflow that ``scripts/demo.sh``
starts (``airflow standalone``). Midway, a bad quota file is applied (it changes nothing) and the scheduler
is restarted (nothing is lost; a SIGKILLed scheduler on SQLite and PostgreSQL is the soak's).
"""

from __future__ import annotations

import pytest

from tests.airflow.harness import AirflowProcesses
from tests.airflow.stories import DEMO_RECLAIM_AFTER, Stories
from tests.e2e.demo_story import (
    DAGS,
    DemoRun,
    LedgerSampler,
    a_bad_quota_file_changes_nothing,
    the_finished_story_holds,
)

pytestmark = pytest.mark.airflow

RUN = "e2e-1"


@pytest.fixture(scope="module")
def airflow(stories: Stories) -> AirflowProcesses:
    """The stories' Airflow (tests/airflow/stories.py), with the demo's DAGs and login, and its job queue
    applied in place of the local reclaim's (both hand out the host's GPUs); the other stories' tasks have
    ended (the scheduler restart below waits for every running task)."""
    processes = stories.running()
    processes.wait_for("the other stories' tasks to end", lambda: not processes.task_instances_running())
    stories.swap_in_the_demo_queue()
    return processes


def test_the_demo_flow_borrow_reclaim_requeue_resume_with_a_bad_file_and_a_scheduler_restart(
    airflow: AirflowProcesses,
) -> None:
    run = DemoRun(
        engine=airflow.engine,
        base_url=airflow.env["AIRFLOW__API__BASE_URL"],
        login=("admin", "admin"),
        home=airflow.home,
        run_id=RUN,
        reclaim_after=DEMO_RECLAIM_AFTER,
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
