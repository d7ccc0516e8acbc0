"""Which file the suite's scheduler (``tests.conftest.FileScheduling``) hands a worker that asks for more:
the longest waiting, unless the worker still has a long test to run, behind which any file it gets waits.

pytest-xdist's own ``_assign_work_unit`` runs; the worker is a stand-in that records what it was sent.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest

from tests.airflow.stories import STORY_FILES
from tests.conftest import LONG_FILE_SECONDS, LONGEST_FIRST, ONE_WORKER_FILES, FileScheduling
from tests.distributed.celery_airflow import CELERY_FILES

DEMO_FLOW = "tests/e2e/test_demo_flow.py::test_the_demo_flow"
SOAK = "tests/airflow/test_soak.py"
CELERY = "tests/distributed/test_celery_two_schedulers.py"
ENGINE_RULES = "tests/unit/engine/test_rules.py"


class Worker:
    """What the scheduler calls on a worker: the indexes of the tests sent to it."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)


def scheduler_for(worker: Worker, assigned: dict[str, dict[str, bool]], waiting: list[str]) -> FileScheduling:
    """The suite's scheduler with ``assigned`` (file -> its test ids -> done) handed to ``worker`` so far and
    the one-test files ``waiting`` in the queue, in that order."""
    scheduler = FileScheduling.__new__(FileScheduling)
    scheduler.workqueue = OrderedDict((file, {a_test_of(file): False}) for file in waiting)
    scheduler.assigned_work = {worker: {file: dict(tests) for file, tests in assigned.items()}}
    scheduler.registered_collections = {
        worker: [*(test for tests in assigned.values() for test in tests), *map(a_test_of, waiting)]
    }
    return scheduler


def a_test_of(file: str) -> str:
    """A test of ``file`` (a test's id already is one)."""
    return file if "::" in file else f"{file}::test_it"


def handed(still_to_run: dict[str, bool]) -> str:
    """The file handed to a worker whose tests so far are ``still_to_run`` (test id -> done), with Celery's
    file, the soak's and the engine's rules waiting, longest first."""
    worker = Worker()
    scheduler = scheduler_for(worker, {"its file so far": still_to_run}, [CELERY, SOAK, ENGINE_RULES])
    scheduler._assign_work_unit(worker)
    (file,) = set(scheduler.assigned_work[worker]) - {"its file so far"}
    return str(file)


CASES = {
    "a worker with nothing left to run gets the longest file waiting": ({}, CELERY),
    "a worker whose tests have all run gets the longest file waiting": ({DEMO_FLOW: True}, CELERY),
    "a worker with only short tests left gets the longest file waiting": (
        {f"{ENGINE_RULES}::test_another_rule": False},
        CELERY,
    ),
    "a worker with the demo's flow still to run gets the shortest file waiting": (
        {DEMO_FLOW: False},
        ENGINE_RULES,
    ),
    "a worker with the soak still to run gets the shortest file waiting": (
        {a_test_of(SOAK): False},
        ENGINE_RULES,
    ),
}


@pytest.mark.parametrize(("still_to_run", "expected"), CASES.values(), ids=CASES.keys())
def test_the_file_handed_to_a_worker(still_to_run: dict[str, bool], expected: str) -> None:
    assert handed(still_to_run) == expected


def test_the_long_files_named_in_the_cases_are_long() -> None:
    """The cases above hold only while the demo's flow and the soak count as long, and wait in the order
    the suite sorts them."""
    for path in ("tests/e2e/test_demo_flow.py", SOAK):
        assert LONGEST_FIRST[path] >= LONG_FILE_SECONDS
    assert LONGEST_FIRST[CELERY] > LONGEST_FIRST[SOAK]
    assert ENGINE_RULES not in LONGEST_FIRST


def test_the_last_file_waiting_goes_to_whoever_asks() -> None:
    worker = Worker()
    scheduler = scheduler_for(worker, {SOAK: {a_test_of(SOAK): False}}, [CELERY])
    scheduler._assign_work_unit(worker)
    assert CELERY in scheduler.assigned_work[worker] and not scheduler.workqueue
    assert worker.sent == [1]


#: The groups of files that share one installation (or api-server and Chromium) and so one worker.
SHARING = {
    "the stories on one Airflow": STORY_FILES,
    "AWS Batch's end to end and Celery's stories on one Celery Airflow": CELERY_FILES,
    "tests/ui's files and AWS Batch's REST file on one api-server": ONE_WORKER_FILES,
}


def scope_of(test: str) -> str:
    return str(FileScheduling.__new__(FileScheduling)._split_scope(test))


@pytest.mark.parametrize("files", SHARING.values(), ids=SHARING.keys())
def test_files_sharing_an_installation_go_to_one_worker_together(files: frozenset[str]) -> None:
    assert len({scope_of(a_test_of(file)) for file in files}) == 1


def test_aws_batch_s_end_to_end_runs_first_on_the_celery_airflow() -> None:
    """It restarts the triggerer and puts it back; Celery's stories then kill a scheduler and a worker
    (tests/distributed/celery_airflow.py). A worker runs its files' tests in the suite's order."""
    aws, celery = "tests/aws_batch/test_end_to_end.py", "tests/distributed/test_celery_two_schedulers.py"
    assert LONGEST_FIRST[aws] > LONGEST_FIRST[celery]


def test_each_group_and_each_other_file_has_a_scope_of_its_own() -> None:
    groups = {scope_of(a_test_of(next(iter(files)))) for files in SHARING.values()}
    assert len(groups) == len(SHARING)
    for file in (ENGINE_RULES, SOAK, "tests/airflow/test_soak_then_quick_runs.py"):
        assert scope_of(a_test_of(file)) == file
        assert file not in groups
