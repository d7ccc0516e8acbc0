"""The suite's two tiers, and how it is spread over pytest-xdist's workers.

The fast tier (``./scripts/test.sh -m "not airflow"``, under a minute) is everything that runs in the test
process: the engine, the simulator, the ledger and the allocator's cycle on SQLite and PostgreSQL, the
operator against moto's server, the local backend's real subprocesses. The slow tier, marked ``airflow``,
starts real Airflow components or ``airflow`` commands, several processes at once (two allocators, a
SIGKILL mid-cycle), the SageMaker SDK or a benchmark run.

``scripts/test.sh`` runs the files on pytest-xdist workers with ``--dist loadfile``: a worker runs a file's
tests together, so its module fixtures (a migrated database, a running Airflow) are made once. Files are
handed out in the order they are collected, so the files that start real Airflow come first: a long file
started last would leave the other workers idle while it runs. At most two Airflow installations run at
once, whatever the number of workers (``tests/airflow/harness.py``, ``AIRFLOW_SLOTS``).
"""

from __future__ import annotations

import pytest

#: What runs first: real Airflow processes, then databases, then everything else (each in file order).
_SLOWEST_FIRST = ("airflow", "db")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    for rank, marker in enumerate(_SLOWEST_FIRST):
        if item.get_closest_marker(marker):
            return rank
    return len(_SLOWEST_FIRST)
