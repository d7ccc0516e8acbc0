"""Lifecycle rules between cycles: submit, stop completed, finish and terminate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_quota.engine.lifecycle import (
    LifecycleError,
    complete_stop,
    finish_job,
    hand_over,
    submit_job,
    terminate_job,
    update_priority,
)
from airflow_quota.engine.model import JobRequest, JobStatus, QueueState, StopCause
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.engine.usage import Usage
from tests.unit.engine.builders import BORROW, LEND, RESERVE, queue, running, share, state, waiting


def preempted_once(retries: int | None) -> QueueState:
    """``low`` preempted by ``high`` in one cycle, its stop now complete."""
    snapshot = state(
        queue(2, share("a", 2, RESERVE, preempt=True)),
        running("low", "a", 2, prio=0, retries=retries),
        waiting("high", "a", 2, prio=9, at=1),
    )
    return complete_stop(plan_cycle(snapshot, now=5).state, "low")


def test_a_preempted_job_returns_to_runnable_at_its_original_place_when_its_stop_completes() -> None:
    low = preempted_once(retries=None).jobs["low"]

    assert (low.status, low.preempted_attempt_count, low.submitted) == (JobStatus.RUNNABLE, 1, (0.0, 0))
    assert low.status_reason.startswith("Preempted by high")


def test_zero_preemption_retries_fails_the_job_on_its_first_preemption() -> None:
    low = preempted_once(retries=0).jobs["low"]

    assert (low.status, low.preempted_attempt_count) == (JobStatus.FAILED, 1)
    assert "preemptionRetriesBeforeTermination=0" in low.status_reason


def test_a_job_fails_when_preempted_more_than_its_preemption_retries() -> None:
    q = queue(2, share("a", 2, RESERVE))
    first = complete_stop(state(q, running("j", "a", 2, retries=1, stopping_for="p")), "j").jobs["j"]
    assert (first.status, first.preempted_attempt_count) == (JobStatus.RUNNABLE, 1)

    preempted_again = replace(running("j", "a", 2, retries=1, stopping_for="p2"), preempted_attempt_count=1)
    second = complete_stop(state(q, preempted_again), "j").jobs["j"]

    assert (second.status, second.preempted_attempt_count) == (JobStatus.FAILED, 2)


def test_unset_preemption_retries_requeue_without_limit() -> None:
    q = queue(2, share("a", 2, RESERVE))
    for earlier_preemptions in range(10):
        job = replace(running("j", "a", 2, stopping_for="p"), preempted_attempt_count=earlier_preemptions)

        requeued = complete_stop(state(q, job), "j").jobs["j"]

        assert (requeued.status, requeued.preempted_attempt_count) == (
            JobStatus.RUNNABLE,
            earlier_preemptions + 1,
        )


def test_a_job_that_finishes_while_being_stopped_succeeds_and_is_not_counted_as_preempted() -> None:
    snapshot = state(queue(2, share("a", 2, RESERVE)), running("j", "a", 2, stopping_for="p"))

    job = finish_job(snapshot, "j", succeeded=True).jobs["j"]

    assert (job.status, job.preempted_attempt_count, job.stop_cause) == (JobStatus.SUCCEEDED, 0, None)


def test_submitting_to_a_disabled_share_records_a_failed_job_with_the_reason() -> None:
    snapshot = state(queue(2, share("off", 2, LEND, disabled=True)))

    job = submit_job(snapshot, "j", JobRequest("j", "off", "gpu", 1), at=0).jobs["j"]

    assert job.status is JobStatus.FAILED
    assert "DISABLED" in job.status_reason


def test_submitting_to_an_unknown_share_records_a_failed_job_naming_the_shares() -> None:
    snapshot = state(queue(2, share("a", 2)))

    job = submit_job(snapshot, "j", JobRequest("j", "nope", "gpu", 1), at=0).jobs["j"]

    assert job.status is JobStatus.FAILED
    assert "'nope' does not exist" in job.status_reason and "a" in job.status_reason


def test_submitting_the_same_job_twice_is_refused() -> None:
    snapshot = submit_job(state(queue(2, share("a", 2))), "j", JobRequest("j", "a", "gpu", 1), at=0)

    with pytest.raises(LifecycleError, match="already submitted"):
        submit_job(snapshot, "j", JobRequest("j", "a", "gpu", 1), at=1)


def test_submissions_at_the_same_time_keep_their_order() -> None:
    snapshot = state(queue(2, share("a", 2)))
    for name in ("first", "second", "third"):
        snapshot = submit_job(snapshot, name, JobRequest(name, "a", "gpu", 1), at=3.0)

    order = sorted(snapshot.jobs.values(), key=lambda job: job.submitted)
    assert [job.job_id for job in order] == ["first", "second", "third"]


def test_terminating_a_waiting_preemptor_fails_it_at_once_and_its_victims_finish_stopping_unclaimed() -> None:
    snapshot = state(
        queue(2, share("a", 2, RESERVE, preempt=True)),
        running("low", "a", 2, prio=0),
        waiting("high", "a", 2, prio=9, at=1),
    )
    preempting = plan_cycle(snapshot, now=1).state

    terminated = terminate_job(preempting, "high", reason="user asked")

    assert terminated.jobs["high"].status is JobStatus.FAILED
    assert terminated.jobs["high"].status_reason == "user asked"
    assert terminated.jobs["low"].stop_cause is StopCause.PREEMPTED
    usage = Usage(terminated.queue, terminated.jobs.values())
    assert usage.spare("gpu") == [(terminated.jobs["low"], 2)], "nobody awaits its units now"
    assert usage.usage("a", "gpu") == 2, "a job being stopped counts in its share until it has stopped"
    assert usage.future("a", "gpu") == 0


def test_a_terminated_job_counts_in_its_share_until_it_has_stopped() -> None:
    snapshot = terminate_job(state(queue(4, share("a", 2, RESERVE)), running("j", "a", 2)), "j")

    usage = Usage(snapshot.queue, snapshot.jobs.values())

    assert (usage.usage("a", "gpu"), usage.spare("gpu")) == (2, [(snapshot.jobs["j"], 2)])


def test_terminating_a_running_job_stops_it_first_then_marks_it_failed() -> None:
    snapshot = state(queue(2, share("a", 2, RESERVE)), running("j", "a", 2))

    stopping = terminate_job(snapshot, "j")
    assert (stopping.jobs["j"].status, stopping.jobs["j"].stop_cause) == (
        JobStatus.RUNNING,
        StopCause.TERMINATED,
    )

    stopped = complete_stop(stopping, "j").jobs["j"]
    assert (stopped.status, stopped.preempted_attempt_count) == (JobStatus.FAILED, 0)


def test_terminating_a_finished_job_changes_nothing() -> None:
    snapshot = finish_job(state(queue(2, share("a", 2)), running("j", "a", 1)), "j", succeeded=True)

    assert terminate_job(snapshot, "j") == snapshot


def test_a_raised_priority_lets_a_waiting_job_preempt_in_its_share() -> None:
    snapshot = state(
        queue(2, share("a", 2, RESERVE, preempt=True)),
        running("r", "a", 2, prio=5),
        waiting("w", "a", 2, prio=1, at=1),
    )
    assert plan_cycle(snapshot, now=2).decisions == ()

    raised = update_priority(snapshot, "w", 9)

    assert [d.victim_ids for d in plan_cycle(raised, now=3).decisions] == [("r",)]  # type: ignore[union-attr]


def test_a_lowered_priority_makes_a_running_job_the_preferred_victim() -> None:
    snapshot = state(
        queue(2, share("a", 2, BORROW, preempt=True)),
        running("keep", "a", 1, prio=3, started=1),
        running("demote", "a", 1, prio=3, started=0),
        waiting("w", "a", 1, prio=5, at=2),
    )

    lowered = update_priority(snapshot, "demote", 0)

    assert [d.victim_ids for d in plan_cycle(lowered, now=3).decisions] == [("demote",)]  # type: ignore[union-attr]


def test_a_retry_takes_over_its_previous_trys_capacity_and_place_and_usage_is_unchanged() -> None:
    q = queue(4, share("a", 2, LEND), share("b", 2, BORROW))
    before = state(q, running("b-try1", "b", 3, at=2, started=5))
    retry_request = replace(before.jobs["b-try1"].request, job_name="b")

    after = hand_over(before, "b-try1", "b-try2", retry_request)

    retry, old = after.jobs["b-try2"], after.jobs["b-try1"]
    assert (retry.status, retry.submitted, retry.started) == (JobStatus.RUNNING, (2.0, 0), (5.0, 0))
    assert (old.status, old.started) == (JobStatus.FAILED, None)
    assert "passed to its retry b-try2" in old.status_reason
    assert Usage(q, after.jobs.values()).usage("b", "gpu") == Usage(q, before.jobs.values()).usage("b", "gpu")


@pytest.mark.parametrize(
    ("case", "stopping", "count"),
    [
        ("a job being stopped hands nothing over", True, 3),
        ("a retry asking for other capacity takes nothing over", False, 1),
    ],
)
def test_hand_over_is_refused(case: str, stopping: bool, count: int) -> None:
    q = queue(4, share("b", 4, RESERVE))
    before = state(q, running("b-try1", "b", 3, stopping_for="p" if stopping else None))
    request = replace(before.jobs["b-try1"].request, instance_count=count)

    with pytest.raises(LifecycleError):
        hand_over(before, "b-try1", "b-try2", request)


def test_a_grant_withdrawn_before_its_task_started_is_requeued_without_counting_a_preemption() -> None:
    q = queue(2, share("a", 2, RESERVE))
    job = replace(running("j", "a", 2, retries=0, stopping_for="p"), status=JobStatus.SCHEDULED)

    requeued = complete_stop(state(q, job), "j", started=False).jobs["j"]

    assert (requeued.status, requeued.preempted_attempt_count) == (JobStatus.RUNNABLE, 0)
    assert requeued.status_reason == "Preempted by p before it started; requeued at its original position"
