"""When a worker stops an Airflow installation a group of test files shares (``tests/airflow/shared.py``):
as soon as its next test is not one of the group's, and never while the group still has tests to run.

The installation is a stand-in: only its ``closing`` stack, which stops the real one, is looked at.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.airflow import shared

GROUP = frozenset({"tests/a/test_first.py", "tests/b/test_second.py"})


@dataclass
class Item:
    """What the hook reads of a pytest item."""

    nodeid: str


def stopped_after(item: str, nextitem: str | None) -> bool:
    """Whether the group's installation is stopped when ``item`` ends and ``nextitem`` comes next."""
    closing = contextlib.ExitStack()
    stopped: list[bool] = []
    closing.callback(lambda: stopped.append(True))
    installation = shared.SharedAirflow(cast(Any, None), GROUP, closing)
    shared.stop_when_the_worker_leaves(installation)
    try:
        shared.pytest_runtest_teardown(
            cast(pytest.Item, Item(item)), cast(pytest.Item, Item(nextitem)) if nextitem else None
        )
        return bool(stopped)
    finally:
        installation.close()
        with contextlib.suppress(ValueError):
            shared._started.remove(installation)


CASES = {
    "the next test is the same file's: it runs on": (
        "tests/a/test_first.py::one",
        "tests/a/test_first.py::two",
        False,
    ),
    "the next test is another file of the group's: it runs on": (
        "tests/a/test_first.py::last",
        "tests/b/test_second.py::one",
        False,
    ),
    "the next test is outside the group: it stops": (
        "tests/b/test_second.py::last",
        "tests/c/test_other.py::one",
        True,
    ),
    "the group's test was the worker's last: it stops": ("tests/b/test_second.py::last", None, True),
    "a test outside the group ends: it is left alone": (
        "tests/c/test_other.py::one",
        "tests/c/test_other.py::two",
        False,
    ),
}


@pytest.mark.parametrize(("item", "nextitem", "stops"), CASES.values(), ids=CASES.keys())
def test_a_shared_installation_stops_when_the_worker_leaves_its_files(
    item: str, nextitem: str | None, stops: bool
) -> None:
    assert stopped_after(item, nextitem) is stops


def test_a_stopped_installation_says_which_files_must_stay_together() -> None:
    @dataclass
    class Stopped:
        processes: dict[str, object]

    installation = shared.SharedAirflow(cast(Any, Stopped({})), GROUP, contextlib.ExitStack())
    files = re.escape("tests/a/test_first.py, tests/b/test_second.py")
    with pytest.raises(AssertionError, match=f"the Airflow of {files} was stopped"):
        installation.running()
