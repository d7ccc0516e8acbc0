"""When a host starts its next allocation cycle (``allocator.host.next_cycle_start``)."""

from __future__ import annotations

import pytest

from airflow_quota.allocator import DEFAULT_ALLOCATION_INTERVAL
from airflow_quota.allocator.host import next_cycle_start


@pytest.mark.parametrize(
    ("started", "ended", "interval", "expected"),
    [
        pytest.param(
            10.0, 10.01, 0.25, 10.25, id="a short cycle: the next starts an interval after this one started"
        ),
        pytest.param(10.0, 10.25, 0.25, 10.5, id="a cycle as long as the interval: the next waits as long"),
        pytest.param(10.0, 12.0, 0.25, 14.0, id="a long cycle: the next waits as long as it took"),
        pytest.param(10.0, 10.3, 1.0, 11.0, id="a longer interval is kept"),
    ],
)
def test_next_cycle_start(started: float, ended: float, interval: float, expected: float) -> None:
    assert next_cycle_start(started, ended, interval) == pytest.approx(expected)


def test_cycles_take_at_most_half_the_hosts_time_whatever_their_length() -> None:
    now = 0.0
    busy = 0.0
    for duration in (0.01, 3.0, 0.5, 8.0, 0.02, 1.0):
        started, ended = now, now + duration
        busy += duration
        now = next_cycle_start(started, ended, DEFAULT_ALLOCATION_INTERVAL)
    assert busy / now <= 0.5
