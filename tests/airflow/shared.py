"""What the groups of test files that share one Airflow installation have in common: the installation, the
files it serves, and its stop as soon as the worker leaves them.

``tests/airflow/stories.py`` (the four stories) and ``tests/distributed/celery_airflow.py`` (Celery's stories
and AWS Batch's end to end) each start one from a session fixture; ``tests/conftest.py`` hands each group's
files to one worker together. A pytest plugin (``tests/conftest.py`` loads it) for the stop. The harness is
imported only for its type: the fast tier's workers never import Airflow for this.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.airflow.harness import AirflowProcesses


@dataclass
class SharedAirflow:
    """An installation a group of test files shares (their paths as pytest's node ids start), stopped by
    closing ``closing``."""

    airflow: AirflowProcesses
    files: frozenset[str]
    closing: contextlib.ExitStack

    def running(self) -> AirflowProcesses:
        """The installation, which must not have been stopped: a test of these files that ran after the
        worker left them would otherwise fail on a dead Airflow, far from the cause."""
        assert self.airflow.processes, (
            f"the Airflow of {', '.join(sorted(self.files))} was stopped: tests/conftest.py must keep these "
            "files together"
        )
        return self.airflow

    def close(self) -> None:
        self.closing.close()


#: The installations started on this worker and not stopped yet.
_started: list[SharedAirflow] = []


def stop_when_the_worker_leaves(shared: SharedAirflow) -> None:
    """Stop ``shared`` once this worker's next test is not one of its files'."""
    _started.append(shared)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop an installation once this worker's next test is not one of its files': it would idle to the
    session's end and hold one of the suite's Airflow slots."""
    for shared in list(_started):
        if path_of(item) in shared.files and (nextitem is None or path_of(nextitem) not in shared.files):
            _started.remove(shared)
            shared.close()


def path_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
