"""Device index assignment for local GPUs, one table row per rule; the row's id states the rule."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from airflow_quota.engine.devices import assign_devices


@dataclass(frozen=True)
class Case:
    rule: str
    total: int
    held: Sequence[Sequence[int]]
    count: int
    expected: list[int] | None


CASES = [
    Case("an idle host gives the lowest indices", 8, [], 2, [0, 1]),
    Case("two jobs never share an index", 4, [[0, 1]], 2, [2, 3]),
    Case("a gap left by a finished job is filled lowest first", 8, [[0], [3, 4]], 3, [1, 2, 5]),
    Case("indices need not be contiguous", 4, [[1], [3]], 2, [0, 2]),
    Case("all or nothing: too few free gives None", 4, [[0, 1, 2]], 2, None),
    Case("a full host gives None", 2, [[0], [1]], 1, None),
    Case(
        "a preempted job still stopping keeps its indices: the preemptor waits",
        2,
        [[0, 1]],
        2,
        None,
    ),
    Case(
        "a preempted job's indices go to the preemptor once it stopped",
        4,
        [[2, 3]],  # the victim held [0, 1]; it has stopped and its lease is gone
        2,
        [0, 1],
    ),
    Case("a job without devices gets none", 2, [[0], [1]], 0, []),
    Case("a host without GPUs grants nothing", 0, [], 1, None),
    Case(
        "an index held beyond a lowered capacity stays held and is never given: new grants use 0..total-1",
        3,
        [[3]],  # capacity 4 -> 3 while a job holds index 3
        2,
        [0, 1],
    ),
    Case("an index held beyond a lowered capacity does not make room below it", 3, [[3], [0, 1]], 2, None),
    Case("indices held far beyond the capacity are only held", 2, [[7], [5, 6]], 2, [0, 1]),
    Case("a huge capacity gives the lowest free indices at once", 10**18, [[0], [2]], 3, [1, 3, 4]),
]


@pytest.mark.parametrize("case", CASES, ids=[case.rule for case in CASES])
def test_assign_devices(case: Case) -> None:
    assert assign_devices(case.total, case.held, case.count) == case.expected


def test_granting_one_job_after_another_never_gives_an_index_twice() -> None:
    held: list[list[int]] = []
    for count in (1, 3, 2, 2):
        granted = assign_devices(8, held, count)
        assert granted is not None
        held.append(granted)
    assert held == [[0], [1, 2, 3], [4, 5], [6, 7]]
    assert assign_devices(8, held, 1) is None
    released = held.pop(1)
    assert assign_devices(8, held, 3) == released


def test_an_assignment_takes_time_in_proportion_to_the_indices_held_and_asked_not_to_the_capacity() -> None:
    held = [[index] for index in range(1000)]
    started = time.perf_counter()
    assert assign_devices(10**18, held, 1000) == list(range(1000, 2000))
    assert assign_devices(2000, held, 1001) is None
    assert time.perf_counter() - started < 1.0  # a list of 10**18 indices would never finish


@pytest.mark.parametrize(
    ("total", "held", "count", "complaint"),
    [
        pytest.param(4, [[-1]], 1, r"device index -1 .* is negative", id="negative index"),
        pytest.param(4, [[0, 1], [1]], 1, r"device index 1 is held by jobs #0 and #1", id="held by two jobs"),
        pytest.param(
            4, [[2, 2]], 1, r"device index 2 is held twice by the same job", id="held twice by one job"
        ),
        pytest.param(4, [], -1, r"device count >= 0", id="negative count"),
        pytest.param(-1, [], 1, r"device count must be >= 0", id="negative host size"),
    ],
)
def test_an_inconsistent_ledger_is_an_error_not_a_double_grant(
    total: int, held: list[list[int]], count: int, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        assign_devices(total, held, count)
