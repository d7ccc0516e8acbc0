"""The suite's two tiers, and how it is spread over pytest-xdist's workers.

The fast tier (``./scripts/test.sh -m "not airflow"``, under a minute) is everything that runs in the test
process: the engine, the simulator, the ledger and the allocator's cycle on SQLite and PostgreSQL, the
operator against moto's server, the local backend's real subprocesses. The slow tier, marked ``airflow``,
starts real Airflow components or ``airflow`` commands, several processes at once (two allocators, a
SIGKILL mid-cycle), the SageMaker SDK or a benchmark run.

``scripts/test.sh`` runs the tests on pytest-xdist workers with ``--dist loadfile``: a worker runs a file's
tests together, so its module fixtures (a migrated database, a running Airflow) are made once. Files are
handed out longest first (``LONGEST_FIRST``): a long one started last would leave the other workers idle
while it runs. At most four tests' Airflow installations run at once, whatever the number of workers
(``tests/airflow/harness.py``, ``AIRFLOW_SLOTS``; as many as the default four workers), the soak's and the
benchmark runs' too: their scripts inherit the worker's environment (``PYTEST_XDIST_WORKER``), so their
``AirflowProcesses`` wait for a slot like a test's.
The ``STORY_FILES`` (the scheduler's grants, the local and the SageMaker reclaim, the demo's flow on
PostgreSQL) share one Airflow (``tests/airflow/stories.py``) and go to one worker together, as the
``CELERY_FILES`` (Celery with two schedulers, and AWS Batch's end to end, on one Celery Airflow:
``tests/distributed/celery_airflow.py``) and the ``ONE_WORKER_FILES`` (tests/ui's, and AWS Batch's REST file
on tests/ui's api-server) do.

``QUOTA_TEST_TIMELINE=FILE`` appends one JSON line per test (worker, test, start and end in seconds since
the epoch, and the CPU seconds its worker and the worker's finished child processes used meanwhile: an
Airflow a fixture started counts when it is stopped), to see which tests ran side by side, what kept the
suite waiting and what used the cores. ``python -m tests.timeline FILE`` sums it up.
"""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

pytest.register_assert_rewrite(
    "tests.airflow.shared", "tests.airflow.stories", "tests.distributed.celery_airflow"
)
from tests import python_startup  # noqa: E402  (imports nothing but pathlib)
from tests.airflow.stories import STORY_FILES  # noqa: E402  (after its assert rewriting is registered)
from tests.distributed.celery_airflow import CELERY_FILES  # noqa: E402  (the same)

#: The fixtures of the files that share one Airflow (``stories``, ``celery_airflow``), and its stop once a
#: worker leaves them (``tests.airflow.shared``); the one moto server with our SageMaker emulator
#: (``moto_server``) of every test that asks for it.
pytest_plugins = (
    "tests.airflow.shared",
    "tests.airflow.stories",
    "tests.distributed.celery_airflow",
    "tests.sagemaker.moto_fixture",
)

# Trio (which Selenium brings) registers its random generator with Hypothesis as an entry-point plugin, and
# registering runs a full garbage collection in every worker (about a CPU-second each with Airflow loaded).
# No test runs Trio under Hypothesis. Set before any test module imports Hypothesis.
os.environ.setdefault("HYPOTHESIS_NO_PLUGINS", "1")

#: Every Python process the tests start (Airflow's included) collects its young generation less often: see
#: tests/python_startup/sitecustomize.py. Set before pytest-xdist starts its workers, who inherit it.
_python_path = os.environ.get("PYTHONPATH", "")
if python_startup.FOLDER not in _python_path.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [python_startup.FOLDER, _python_path]))

#: Seconds a file's tests took in a whole-suite run on a 2-core machine,
#: from ``python -m tests.timeline``: the longest start first, so the suite does not end waiting for a long
#: one that started last. Other files: 60 s if they start Airflow (``airflow``), 10 s with a database.
#: Files changed since their last whole-suite figure carry what they took alone (``-n 0``) at load 6 to 9.
LONGEST_FIRST = {
    # The soak's run on PostgreSQL: one deck of its actions and the drain (2026-12-06, -n 0, load 6 to 7:
    # 202 s; the 75 s of chaos before took 194 s). Its run on SQLite, then both benchmarks' quick runs on
    # that Airflow: their sum less an Airflow start (each with its own: 191 and 144 s, load 5 to 7).
    "tests/airflow/test_soak.py": 200,
    "tests/airflow/test_soak_then_quick_runs.py": 310,
    "tests/e2e/test_demo_command.py": 420,
    # AWS Batch's end to end, then Celery's stories, on one Celery Airflow (tests/distributed/
    # celery_airflow.py): their sum less one Airflow start, one apart so nothing sorts between (each with its
    # own Airflow, in the suite at 60a2531 under a 1.1-core quota: 323 and 237 s; unquoted 250 and 210).
    "tests/aws_batch/test_end_to_end.py": 430,
    "tests/distributed/test_celery_two_schedulers.py": 429,
    # The stories sharing one Airflow (tests/airflow/stories.py), in the order they run on their worker (the
    # grants first: a test of theirs acts while a job waits; the demo's flow last: it restarts the
    # scheduler). Their sum, one apart so nothing sorts between.
    "tests/airflow/test_scheduler_grants.py": 500,
    "tests/sagemaker/test_end_to_end.py": 499,
    "tests/local/test_end_to_end_local.py": 498,
    "tests/e2e/test_demo_flow.py": 497,
    # tests/ui's three files and AWS Batch's REST file on their one worker (ONE_WORKER_FILES): their sum, so
    # they start before the shorter Airflow files instead of ending the suite (they did, 388 to 531 s of
    # 536). In the suite at ec702be (2026-12-06): test_api_limits.py 190 s, test_react_page.py 119 (one
    # login), test_api.py 11; AWS Batch's REST file 85 s with its own api-server and chromium, about 35 on
    # theirs (alone, -n 0, load 1 to 3: 32 to 43 s -> 14 to 19). The others' figures order them on the worker.
    "tests/ui/test_api_limits.py": 355,
    "tests/aws_batch/test_rest_on_aws_queues.py": 35,
    "tests/db/test_allocator_hosts.py": 60,  # 4 of its 8 `airflow` commands now in-process (2026-12-06; 90)
    "tests/ui/test_react_page.py": 120,
    "tests/db/test_migrations.py": 60,
    "tests/cli/test_quota_cli.py": 10,  # one `airflow` process left (2026-12-06; 55 s with seven)
    # The fast tier's longest files (a file of it takes 10 s by default with a database, 0 without), from
    # its own run (``-m "not airflow"``, 4 workers; f6a5e58, 2026-12-06, load 1 to 2): the ones that mostly
    # wait (moto's emulated jobs) first. A file left out ends the tier alone if it starts late: AWS Batch's
    # backend file did (56 s then, one test waiting out a 60 s search; 5 s alone since 8f376ac).
    "tests/aws_batch/test_batch_backend.py": 8,
    "tests/unit/engine/test_properties.py": 51,
    "tests/aws_batch/test_service_jobs_fight_back.py": 24,
    "tests/db/test_allocator_kept_state.py": 21,
    "tests/db/test_finished_and_lost_work.py": 19,
    "tests/db/test_allocator_local_stop.py": 17,
    "tests/aws_batch/test_emulator.py": 16,
    "tests/aws_batch/test_apply_to_aws.py": 16,
    "tests/db/test_allocator_lifecycle.py": 14,
    "tests/sagemaker/test_operator.py": 12,
    "tests/aws_batch/test_queue_reports.py": 8,
    "tests/cli/test_cli_widths.py": 7,
    "tests/sagemaker/test_backend.py": 6,
    "tests/local/test_operator_local.py": 5,
    "tests/sagemaker/test_trigger.py": 5,
}


#: Files that share a session fixture's Airflow (tests/ui/conftest.py: one api-server per backend for the
#: session; AWS Batch's REST file uses the SQLite one, started with aws_default on the worker's AWS Batch
#: emulator) run on one worker, so each server starts once (20 to 35 CPU-seconds each), and so does the
#: chromium of their pages (tests/ui/browser.worker_chromium).
ONE_WORKER_FILES = frozenset(
    {
        "tests/ui/test_api.py",
        "tests/ui/test_api_limits.py",
        "tests/ui/test_react_page.py",
        "tests/aws_batch/test_rest_on_aws_queues.py",
    }
)


#: A test of a file expected to take this long (``LONGEST_FIRST``) is a long one for ``FileScheduling``.
LONG_FILE_SECONDS = 150


class FileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """pytest-xdist's ``loadfile``, except that the files sharing an installation are scheduled together,
    and a worker with a long test still to run gets the shortest file waiting.

    pytest-xdist hands a worker its next file when two of its tests are left, and the worker holds its last
    test back until that file arrives, so the file waits behind whatever the worker still runs. Behind the
    stories' last test (the demo's flow, three minutes) the next of the longest files, a soak run, waited
    from 140 s to 355 s while other workers went free, and ended the suite alone (2026-12-07, a6201b2). A
    file of the fast tier waits there instead, and the longest go to workers about to be free.

    (``--dist loadgroup`` with a group per file would say the same as the scopes, but pytest-xdist 3.8 marks
    the groups in ``Item._nodeid``, which pytest 9.2's ``nodeid`` no longer reads: every test became its own
    group.)
    """

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path in ONE_WORKER_FILES:
            return "tests/ui: one api-server"
        if path in STORY_FILES:
            return "tests/airflow/stories.py: one Airflow"
        if path in CELERY_FILES:
            return "tests/distributed/celery_airflow.py: one Celery Airflow"
        return path

    def _assign_work_unit(self, node: object) -> None:
        if self._has_a_long_test_to_run(node) and len(self.workqueue) > 1:
            shortest = next(reversed(self.workqueue))  # the queue is sorted longest first
            self.workqueue.move_to_end(shortest, last=False)
        super()._assign_work_unit(node)

    def _has_a_long_test_to_run(self, node: object) -> bool:
        return any(
            LONGEST_FIRST.get(nodeid.split("::", 1)[0], 0) >= LONG_FILE_SECONDS
            for unit in self.assigned_work.get(node, {}).values()
            for nodeid, done in unit.items()
            if not done
        )


#: A test module all of whose tests are in the slow tier says so at its top (``pytestmark`` with ``airflow``).
_WHOLE_MODULE_AIRFLOW = re.compile(r"^pytestmark = [^\n]*\bpytest\.mark\.airflow\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier (exactly ``-m "not airflow"``) does not import the modules whose tests are all marked
    ``airflow``: they would all be deselected, and every worker imported them (Selenium, the Airflow
    harness, the demo's story: 1.5 to 2 of the 7 to 8 CPU-s a worker spends collecting). The same tests
    run; an import error in such a module shows in the whole suite instead."""
    if config.getoption("markexpr") != "not airflow":
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if _WHOLE_MODULE_AIRFLOW.search(collection_path.read_text()) else None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> FileScheduling | None:
    return FileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_finish(session: pytest.Session) -> None:
    # What importing and collecting made (Airflow, botocore's models, the test modules) lives to the end of
    # the session: frozen, the garbage collector stops walking it at every full collection (about a sixth
    # of the fast tier's CPU went there).
    gc.freeze()
    # And the young generation is collected every 20,000 new objects instead of every 700: the tests make
    # objects by the thousand (ORM rows, botocore answers), and collecting so often promoted them to the
    # older generations, whose full collections were two thirds of the garbage collector's time. Measured
    # on the ledger, operator and engine tests: 3.1 CPU-s of 33 in the collector before, 1.8 after.
    gc.set_threshold(20_000, 10, 10)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A stable sort: a file's tests stay together and in order. scripts/test.sh passes
    # --no-loadscope-reorder, or pytest-xdist would hand out the files with the most tests first instead.
    items.sort(key=_expected_seconds, reverse=True)


def _expected_seconds(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in LONGEST_FIRST:
        return LONGEST_FIRST[path]
    if item.get_closest_marker("airflow"):
        return 60
    return 10 if item.get_closest_marker("db") else 0


def _cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(usage.ru_utime + usage.ru_stime for usage in used)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    timeline = os.environ.get("QUOTA_TEST_TIMELINE")
    start, cpu = time.time(), _cpu_seconds()
    try:
        return (yield)
    finally:
        if timeline:
            entry = {
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "test": item.nodeid,
                "start": round(start, 2),
                "end": round(time.time(), 2),
                "cpu": round(_cpu_seconds() - cpu, 2),
            }
            with open(timeline, "a") as out:
                out.write(json.dumps(entry) + "\n")
