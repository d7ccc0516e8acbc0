"""Metrics computed by hand for tiny scenarios: utilization, RUNNABLE time, p95 and preemption counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_quota.sim.metrics import WaitStats, p95
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import load_scenario
from tests.unit.sim.builders import run, share, submit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scenarios"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], None),
        ([7.0], 7.0),
        ([0.0, 30.0], 30.0),  # rank ceil(0.95 * 2) = 2
        ([float(v) for v in range(1, 21)], 19.0),  # rank ceil(0.95 * 20) = 19
        ([float(v) for v in range(100, 0, -1)], 95.0),  # order does not matter
    ],
)
def test_p95_is_the_nearest_rank_value(values: list[float], expected: float | None) -> None:
    assert p95(values) == expected


def test_utilization_and_runnable_time_of_a_tiny_scenario_match_the_hand_computation() -> None:
    # a holds 2 GPUs from 0 to 10; b waits from 5 to 10 and holds 4 GPUs from 10 to 20.
    result = run([share("s", 4)], [submit(0, "a", "s", 2, duration=10), submit(5, "b", "s", 4, duration=10)])

    metrics = result.metrics
    assert (metrics.span_start, metrics.span_end) == (0, 20)
    assert metrics.utilization == {"gpu": (2 * 10 + 4 * 10) / (4 * 20)}
    assert metrics.runnable_seconds == {"s": WaitStats(jobs=2, mean=2.5, p95=5.0)}
    assert (metrics.preemptions_total, metrics.preemptions_by_share) == (0, {"s": 0})


def test_the_span_starts_at_the_first_submission() -> None:
    result = run([share("s", 4)], [submit(10, "a", "s", 2, duration=10)])

    assert result.metrics.utilization == {"gpu": 2 * 10 / (4 * 10)}


def test_utilization_integrates_a_capacity_change() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(0, "a", "s", 2, duration=10),
            {"at": 5, "updateJobQueue": {"capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}]}},
        ],
        gpu=2,
    )

    assert result.metrics.utilization == {"gpu": pytest.approx(20 / (2 * 5 + 4 * 5))}


def test_reclaim_metrics_count_the_stopping_borrower_as_holding_and_its_wait_after_the_preemption() -> None:
    result = simulate(load_scenario(EXAMPLES / "reclaim.yaml"))

    metrics = result.metrics
    # 4 GPUs held from 0 to 120 (train-b keeps its 2 while it stops, 30-40), then train-b's 2 until 130.
    assert metrics.utilization == {"gpu": pytest.approx((4 * 120 + 2 * 10) / (4 * 130))}
    # train-a never waited, train-b waited 40-70 after its preemption; eval-nightly 30-40 for the stop.
    assert metrics.runnable_seconds["research"] == WaitStats(jobs=2, mean=15.0, p95=30.0)
    assert metrics.runnable_seconds["eval"] == WaitStats(jobs=1, mean=10.0, p95=10.0)
    assert (metrics.preemptions_total, metrics.preemptions_by_share) == (1, {"research": 1, "eval": 0})


def test_jobs_that_never_leave_runnable_count_until_the_end_and_failed_submissions_not_at_all() -> None:
    result = run(
        [share("s", 2, "RESERVE"), share("off", 1, "RESERVE", state="DISABLED")],
        [
            submit(0, "a", "s", 2, duration=10),
            submit(2, "b", "s", 2, duration=10),
            submit(3, "refused", "off", 1, duration=1),
            submit(4, "never", "s", 3, duration=1),  # more than a RESERVE share of 2 can ever hold
        ],
    )

    assert result.end == 20
    waits = sorted(job.runnable_seconds for job in result.jobs.values())
    assert waits == [0, 0, 8, 16]  # refused never waited; never waited from 4 to the end at 20
    assert result.metrics.runnable_seconds["s"] == WaitStats(jobs=3, mean=8.0, p95=16.0)
    assert result.metrics.runnable_seconds["off"] == WaitStats(jobs=0, mean=None, p95=None)


def test_jobs_still_running_at_the_end_keep_the_span_open_to_the_end() -> None:
    result = run([share("s", 4)], [submit(0, "forever", "s", 1), submit(0, "short", "s", 1, duration=10)])

    assert (result.metrics.span_end, result.metrics.utilization) == (10, {"gpu": (10 + 10) / (4 * 10)})
