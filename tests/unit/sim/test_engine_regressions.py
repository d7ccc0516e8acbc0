"""Engine behaviour first found through the simulator, kept as regression tests seen from a scenario."""

from __future__ import annotations

import pytest

from airflow_quota.engine.config import parse_queue_with_shares
from airflow_quota.sim.result import ChangeKind
from tests.unit.sim.builders import run, share, status_at, submit, when


def test_a_waiting_reason_does_not_offer_the_shares_own_idle_units_as_borrowable_from_other_shares() -> None:
    # lender uses all of its 2 GPUs; borrower's own 2 are idle; borrower's 4-GPU job cannot start, and
    # nothing can be borrowed from other shares.
    result = run(
        [share("lender", 2, "LEND"), share("borrower", 2, "LEND_AND_BORROW")],
        [submit(0, "l", "lender", 2, duration=100), submit(1, "b", "borrower", 4, duration=10)],
    )

    status, reason = status_at(result, 1, "b")

    assert status == "RUNNABLE"
    assert "; 0 can be borrowed now. " in reason, reason
    assert "idle: 2 of borrower" in reason, reason  # its own idle units are named as its own


def test_the_reason_given_to_terminate_a_running_job_is_kept_when_it_has_stopped() -> None:
    result = run(
        [share("s", 2)],
        [
            submit(0, "a", "s", 2, duration=100),
            {"at": 5, "terminateJob": {"jobName": "a", "reason": "budget cut"}},
        ],
        stop=3,
    )

    assert status_at(result, 5, "a") == ("RUNNING", "Stopping: budget cut")
    assert result.jobs["a"].status == "FAILED"
    assert "budget cut" in result.jobs["a"].status_reason


def test_a_job_being_terminated_is_not_described_as_preempted_when_a_waiting_job_takes_its_capacity() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(0, "a", "s", 2, duration=100),
            submit(1, "b", "s", 2, duration=5),
            {"at": 5, "terminateJob": {"jobName": "a"}},
        ],
        stop=10,
        gpu=2,
    )

    assert when(result, ChangeKind.FAILED, "a") == [15]
    assert not status_at(result, 5, "a")[1].startswith("Being stopped: preempted by b")


def test_a_reserve_share_never_holds_more_than_its_max_capacity_while_a_terminated_job_stops() -> None:
    # 4 GPUs in the queue, 2 of them owned by nobody. s is RESERVE with 2.
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(0, "a", "s", 2, duration=100),
            submit(1, "b", "s", 2, duration=5),
            {"at": 5, "terminateJob": {"jobName": "a"}},
        ],
        stop=10,
        gpu=4,
    )

    holding = [step.at for step in result.steps if "b" in step.jobs and step.jobs["b"].status == "RUNNING"]
    a_stopped_at = when(result, ChangeKind.FAILED, "a")[0]
    assert all(at >= a_stopped_at for at in holding), (
        f"b held GPUs at {holding} while a stopped until {a_stopped_at}"
    )


def test_shares_given_as_a_tuple_are_checked_against_the_queue_capacity_like_a_list() -> None:
    queue = {"jobQueueName": "q", "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 3}]}

    with pytest.raises(ValueError, match="adds up to 4"):
        parse_queue_with_shares(queue, (share("a", 2), share("b", 2)), "test")
