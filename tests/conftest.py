"""The suite's two tiers, and how it is spread over pytest-xdist's workers.

The fast tier (``./scripts/test.sh -m "not airflow"``, under a minute) is everything that runs in the test
process: the engine, the simulator, the ledger and the allocator's cycle on SQLite and PostgreSQL, the
operator against moto's server, the local backend's real subprocesses. The slow tier, marked ``airflow``,
starts real Airflow components or ``airflow`` commands, several processes at once (two allocators, a
SIGKILL mid-cycle), the SageMaker SDK or a benchmark run.

``scripts/test.sh`` runs the tests on pytest-xdist workers with ``--dist loadfile``: a worker runs a file's
tests together, so its module fixtures (a migrated database, a running Airflow) are made once. The files in
``SPREAD_FILES`` are the exception: their tests are independent (each starts its own Airflow, like the
soak's two runs) and run on whichever workers are free. Tests are handed out in the order they are
collected, so the ones that start real Airflow come first: a long one started last would leave the other
workers idle while it runs. At most two Airflow installations run at once, whatever the number of workers
(``tests/airflow/harness.py``, ``AIRFLOW_SLOTS``).

``QUOTA_TEST_TIMELINE=FILE`` appends one JSON line per test (worker, test, start and end in seconds since
the epoch, and the CPU seconds its worker and the worker's finished child processes used meanwhile: an
Airflow a fixture started counts when it is stopped), to see which tests ran side by side, what kept the
suite waiting and what used the cores. ``python -m tests.timeline FILE`` sums it up.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

#: What runs first: real Airflow processes, then databases, then everything else (each in file order).
_SLOWEST_FIRST = ("airflow", "db")


#: Files whose tests are independent and long: each test goes to whichever worker is free.
SPREAD_FILES = frozenset({"tests/airflow/test_soak.py", "tests/e2e/test_demo_flow.py"})


class FileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """pytest-xdist's ``loadfile``, except that the tests of ``SPREAD_FILES`` are scheduled one by one.

    (``--dist loadgroup`` with a group per file would say the same, but pytest-xdist 3.8 marks the groups in
    ``Item._nodeid``, which pytest 9.2's ``nodeid`` no longer reads: every test became its own group.)
    """

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return nodeid if path in SPREAD_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> FileScheduling | None:
    return FileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    for rank, marker in enumerate(_SLOWEST_FIRST):
        if item.get_closest_marker(marker):
            return rank
    return len(_SLOWEST_FIRST)


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
