"""What a user sees in a simulation's timeline: grants, preemptions, stops, starts, finishes, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_quota.sim.result import ChangeKind, SimulationError
from airflow_quota.sim.runner import Simulation, simulate
from airflow_quota.sim.scenario import load_scenario
from tests.unit.sim.builders import run, scenario, share, status_at, submit, when

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scenarios"

GRANTED, PREEMPTED, REQUEUED = ChangeKind.GRANTED, ChangeKind.PREEMPTED, ChangeKind.REQUEUED
FINISHED, FAILED, RUNNING = ChangeKind.FINISHED, ChangeKind.FAILED, ChangeKind.RUNNING

LENDER_AND_BORROWER = [share("lender", 2, "LEND"), share("borrower", 2, "LEND_AND_BORROW")]


def test_reclaim_example_borrower_preempted_when_the_lender_submits_then_resumes_its_remaining_work() -> None:
    result = simulate(load_scenario(EXAMPLES / "reclaim.yaml"))

    borrowed_grant = next(c for c in result.steps[0].changes if c.kind is GRANTED and c.subject == "train-b")
    assert (result.steps[0].at, borrowed_grant.units, borrowed_grant.borrowed) == (0, 2, 2)
    preemption = next(c for c in result.steps[1].changes if c.kind is PREEMPTED)
    assert (result.steps[1].at, preemption.subject, preemption.by, preemption.rule) == (
        30,
        "train-b",
        "eval-nightly",
        "RECLAIM",
    )
    # Being stopped: still RUNNING (and holding its GPUs) until the stop completes 10 s later.
    assert status_at(result, 30, "train-b") == (
        "RUNNING",
        "Being stopped: preempted by eval-nightly (RECLAIM)",
    )
    assert status_at(result, 30, "eval-nightly") == (
        "RUNNABLE",
        "Waiting for 1 preempted job(s) to stop: train-b",
    )
    assert when(result, REQUEUED, "train-b") == [40]
    assert when(result, GRANTED, "eval-nightly") == [40]
    # eval-nightly runs 30 s; train-b did 40 s of 100 (stop time counts), so it needs 60 more from t=70.
    assert when(result, GRANTED, "train-b") == [0, 70]
    assert when(result, FINISHED, "train-b") == [130]
    train_b = result.jobs["train-b"]
    assert (train_b.status, train_b.preempted_attempt_count, train_b.started_at, train_b.stopped_at) == (
        "SUCCEEDED",
        1,
        70,
        130,
    )


def test_with_start_seconds_a_granted_job_is_starting_then_running_and_its_duration_counts_from_running() -> (
    None
):
    result = run([share("s", 4)], [submit(0, "a", "s", 2, duration=10)], start=5)

    assert status_at(result, 0, "a") == ("STARTING", "")
    assert status_at(result, 5, "a") == ("RUNNING", "")
    assert when(result, RUNNING, "a") == [5]
    assert when(result, FINISHED, "a") == [15]
    assert (result.jobs["a"].started_at, result.jobs["a"].stopped_at) == (0, 15)


def test_without_start_seconds_a_granted_job_is_running_at_once() -> None:
    result = run([share("s", 4)], [submit(0, "a", "s", 2, duration=10)])

    assert status_at(result, 0, "a") == ("RUNNING", "")
    assert when(result, FINISHED, "a") == [10]


def test_a_job_whose_work_ends_while_it_is_being_stopped_succeeds_and_is_not_counted_as_preempted() -> None:
    result = run(
        LENDER_AND_BORROWER,
        [submit(0, "b", "borrower", 4, duration=35), submit(30, "l", "lender", 2, duration=5)],
        stop=10,
    )

    assert when(result, PREEMPTED, "b") == [30]
    assert when(result, FINISHED, "b") == [35]  # before its stop would have completed at 40
    assert when(result, REQUEUED, "b") == []
    assert (result.jobs["b"].status, result.jobs["b"].preempted_attempt_count) == ("SUCCEEDED", 0)
    assert result.jobs["b"].status_reason == "Finished while being stopped; not counted as a preemption"
    assert when(result, GRANTED, "l") == [35]
    assert result.metrics.preemptions_total == 0


def test_work_that_runs_out_at_the_moment_the_stop_completes_finishes_the_job() -> None:
    result = run(
        LENDER_AND_BORROWER,
        [submit(0, "b", "borrower", 4, duration=40), submit(30, "l", "lender", 2, duration=5)],
        stop=10,
    )

    assert when(result, FINISHED, "b") == [40]
    assert (result.jobs["b"].status, result.jobs["b"].preempted_attempt_count) == ("SUCCEEDED", 0)


def test_a_job_preempted_while_starting_does_no_work_and_stays_starting_until_its_stop_completes() -> None:
    result = run(
        LENDER_AND_BORROWER,
        [submit(0, "b", "borrower", 4, duration=10), submit(2, "l", "lender", 2, duration=5)],
        stop=10,
        start=5,
    )

    assert status_at(result, 2, "b")[0] == "STARTING"
    assert 5 not in [step.at for step in result.steps]  # its start would have completed at 5: nothing happens
    assert when(result, RUNNING, "b") == [22 + 5]  # requeued at 12, granted again when l is done at 22
    assert when(result, FINISHED, "b") == [27 + 10]  # all 10 s of work still to do


def test_a_job_with_zero_preemption_retries_fails_on_its_first_preemption() -> None:
    result = run(
        LENDER_AND_BORROWER,
        [submit(0, "b", "borrower", 4, duration=100, retries=0), submit(10, "l", "lender", 2, duration=5)],
        stop=3,
    )

    assert when(result, FAILED, "b") == [13]
    b = result.jobs["b"]
    assert (b.status, b.preempted_attempt_count, b.stopped_at) == ("FAILED", 1, 13)
    assert "preemptionRetriesBeforeTermination=0" in b.status_reason
    assert result.metrics.preemptions_by_share == {"lender": 0, "borrower": 1}


def test_terminating_a_waiting_job_fails_it_at_once() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(0, "running", "s", 2, duration=50),
            submit(1, "waiting", "s", 2, duration=5),
            {"at": 5, "terminateJob": {"jobName": "waiting"}},
        ],
        stop=10,
    )

    assert when(result, FAILED, "waiting") == [5]
    waiting = result.jobs["waiting"]
    assert (waiting.status, waiting.status_reason, waiting.started_at, waiting.stopped_at) == (
        "FAILED",
        "Terminated by request",
        None,
        None,
    )
    assert waiting.runnable_seconds == 4


def test_terminating_a_running_job_stops_it_first_and_its_capacity_goes_on_only_after_the_stop() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(0, "running", "s", 2, duration=50),
            submit(1, "next", "s", 2, duration=5),
            {"at": 5, "terminateJob": {"jobName": "running"}},
        ],
        stop=10,
        gpu=2,
    )

    assert status_at(result, 5, "running")[0] == "RUNNING"  # being stopped: keeps its status and its GPUs
    assert status_at(result, 5, "next")[0] == "RUNNABLE"
    assert when(result, FAILED, "running") == [15]
    assert when(result, GRANTED, "next") == [15]
    assert (result.jobs["running"].status, result.jobs["running"].stopped_at) == ("FAILED", 15)
    assert result.metrics.preemptions_total == 0


def test_raising_a_waiting_jobs_priority_makes_it_preempt_a_lower_priority_job_of_its_share() -> None:
    result = run(
        [share("s", 2, "RESERVE", preempt=True)],
        [
            submit(0, "low", "s", 2, prio=5, duration=100),
            submit(1, "later", "s", 2, prio=5, duration=10),
            {"at": 5, "updateJob": {"jobName": "later", "schedulingPriority": 9}},
        ],
    )

    assert when(result, GRANTED, "later") == [5]  # equal priority waited; outranking preempts
    preemption = next(c for c in result.steps[2].changes if c.kind is PREEMPTED)
    assert (result.steps[2].at, preemption.subject, preemption.by, preemption.rule) == (
        5,
        "low",
        "later",
        "IN_SHARE_PRIORITY",
    )
    # stopSeconds 0: the stop completes within the same moment and the preemptor starts in the next cycle.
    assert when(result, REQUEUED, "low") == [5]
    assert when(result, GRANTED, "low") == [0, 15]
    assert when(result, FINISHED, "low") == [110]  # 5 s done before the preemption, 95 s from t=15


def test_a_disabled_share_refuses_new_jobs_with_a_reason_but_still_lends_its_idle_capacity() -> None:
    result = run(
        LENDER_AND_BORROWER,
        [
            {"at": 0, "updateQuotaShare": {"quotaShareName": "lender", "state": "DISABLED"}},
            submit(1, "refused", "lender", 1, duration=5),
            submit(2, "borrowing", "borrower", 4, duration=5),
        ],
    )

    refused = result.jobs["refused"]
    assert (refused.status, refused.started_at) == ("FAILED", None)
    assert "DISABLED" in refused.status_reason
    grant = next(c for c in result.steps[2].changes if c.kind is GRANTED)
    assert (result.steps[2].at, grant.subject, grant.borrowed) == (2, "borrowing", 2)


def test_updating_the_queue_capacity_lets_a_waiting_job_start() -> None:
    result = run(
        [share("s", 2, "LEND_AND_BORROW")],
        [
            submit(0, "big", "s", 4, duration=10),
            {"at": 5, "updateJobQueue": {"capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}]}},
        ],
        gpu=2,
    )

    assert status_at(result, 0, "big")[1] == "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
    assert when(result, GRANTED, "big") == [5]


def test_events_apply_in_time_order_and_in_file_order_among_equal_times() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [
            submit(5, "late", "s", 2, duration=1),
            submit(0, "first", "s", 2, duration=10),
            submit(0, "second", "s", 2, duration=10),
        ],
    )

    assert [step.at for step in result.steps] == [0, 5, 10, 20, 21]
    assert when(result, GRANTED, "first") == [0]
    assert when(result, GRANTED, "second") == [10]
    assert when(result, GRANTED, "late") == [20]


def test_the_simulation_ends_with_jobs_that_run_forever_or_can_never_start() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [submit(0, "forever", "s", 2), submit(0, "too-big", "s", 8, duration=1)],
    )

    assert result.end == 0
    assert (result.jobs["forever"].status, result.jobs["forever"].stopped_at) == ("RUNNING", None)
    assert result.jobs["too-big"].status == "RUNNABLE"
    assert result.jobs["too-big"].status_reason == "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"


def test_every_step_lists_every_job_known_so_far() -> None:
    result = run([share("s", 4)], [submit(0, "a", "s", 1, duration=10), submit(5, "b", "s", 1, duration=1)])

    assert [(step.at, list(step.jobs)) for step in result.steps] == [
        (0, ["a"]),
        (5, ["a", "b"]),
        (6, ["a", "b"]),
        (10, ["a", "b"]),
    ]
    assert status_at(result, 10, "b") == ("SUCCEEDED", "")


# -- events that do not apply stop the simulation, naming the event ----------------------------------------


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (
            [
                submit(0, "a", "borrower", 1),
                {
                    "at": 7,
                    "updateQuotaShare": {
                        "quotaShareName": "lender",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 3}],
                    },
                },
            ],
            "test.yaml: event events[1] (at 7, updateQuotaShare): the configuration after this event "
            "would be invalid: quotaShares: the quota shares' maxCapacity for gpu adds up to 5",
        ),
        (
            [{"at": 6, "terminateJob": {"jobName": "ghost"}}],
            "test.yaml: event events[0] (at 6, terminateJob): no job named 'ghost' has been submitted",
        ),
        (
            [{"at": 2.5, "updateJob": {"jobName": "ghost", "schedulingPriority": 1}}],
            "test.yaml: event events[0] (at 2.5, updateJob): no job named 'ghost'",
        ),
        (
            [submit(1, "a", "nobody", 1)],
            "test.yaml: event events[0] (at 1, submitJob): quota share 'nobody' does not exist in job "
            "queue 'q'; use one of: lender, borrower",
        ),
        (
            [submit(0, "a", "lender", 1), submit(3, "a", "borrower", 1)],
            "test.yaml: event events[1] (at 3, submitJob): a job named 'a' was already submitted",
        ),
        (
            [{"at": 4, "updateQuotaShare": {"quotaShareName": "nobody", "state": "DISABLED"}}],
            "test.yaml: event events[0] (at 4, updateQuotaShare): quota share 'nobody' does not exist",
        ),
        (
            [{"at": 8, "updateJobQueue": {"capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 3}]}}],
            "test.yaml: event events[0] (at 8, updateJobQueue): the configuration after this event would be "
            "invalid: quotaShares: the quota shares' maxCapacity for gpu adds up to 4",
        ),
        (
            [{"at": 1, "updateQuotaShare": {"quotaShareName": "lender", "state": "PAUSED"}}],
            "test.yaml: event events[0] (at 1, updateQuotaShare): the configuration after this event "
            "would be invalid: quotaShares[0].state: state is 'PAUSED': it must be ENABLED or DISABLED",
        ),
    ],
    ids=[
        "share_limits_above_queue",
        "terminate_unknown_job",
        "update_unknown_job",
        "submit_to_unknown_share",
        "duplicate_job_name",
        "update_unknown_share",
        "queue_below_shares",
        "bad_share_state",
    ],
)
def test_an_event_that_does_not_apply_stops_the_simulation_with_an_error_naming_it(
    events: list[dict[str, object]], expected: str
) -> None:
    with pytest.raises(SimulationError) as raised:
        run(LENDER_AND_BORROWER, events)

    assert str(raised.value).startswith(expected)


def test_events_on_finished_jobs_are_noted_and_change_nothing() -> None:
    result = run(
        [share("s", 2)],
        [
            submit(0, "a", "s", 1, duration=1),
            {"at": 5, "updateJob": {"jobName": "a", "schedulingPriority": 9}},
            {"at": 6, "terminateJob": {"jobName": "a"}},
        ],
    )

    assert when(result, ChangeKind.IGNORED, "a") == [5, 6]
    assert result.jobs["a"].status == "SUCCEEDED"


def test_a_simulation_that_never_settles_stops_with_an_error() -> None:
    simulation = Simulation(
        scenario([share("s", 2)], [submit(t, f"j{t}", "s", 1, duration=1) for t in range(5)])
    )
    simulation._max_moments = 3

    with pytest.raises(SimulationError, match="did not settle after 3 moments"):
        simulation.run()


def test_in_share_priority_example_story() -> None:
    result = simulate(load_scenario(EXAMPLES / "in_share_priority.yaml"))

    assert when(result, PREEMPTED, "sweep-2") == [50]
    assert when(result, FAILED, "sweep-2") == [55]  # preemptionRetriesBeforeTermination: 0
    assert when(result, GRANTED, "experiment") == [55, 135]
    assert when(result, PREEMPTED, "sweep-1") == when(result, PREEMPTED, "experiment") == [100]
    assert when(result, GRANTED, "urgent-fix") == [105]
    # experiment: 50 s done (55-105), 70 left from 135; sweep-1: 105 s done, 195 left from 135.
    assert when(result, FINISHED, "experiment") == [205]
    assert when(result, FINISHED, "sweep-1") == [330]


def test_three_teams_example_story() -> None:
    result = simulate(load_scenario(EXAMPLES / "three_teams.yaml"))

    r3_grants = [c for step in result.steps for c in step.changes if c.kind is GRANTED and c.subject == "r3"]
    assert [grant.borrowed for grant in r3_grants] == [2, 2]
    assert status_at(result, 0, "r4")[1].endswith(
        "which would take quota share research past its borrow ceiling of 6: it waits for its own jobs to "
        "finish"
    )
    assert when(result, RUNNING, "r1") == [20]  # startSeconds 20
    assert when(result, GRANTED, "p1") == [100]  # RESERVE: its GPUs were kept for it
    assert [c.rule for step in result.steps for c in step.changes if c.kind is PREEMPTED] == ["RECLAIM"]
    assert when(result, PREEMPTED, "r3") == [200]
    assert when(result, GRANTED, "e1") == [230]  # stopSeconds 30
    assert "DISABLED" in result.jobs["e2"].status_reason and result.jobs["e2"].status == "FAILED"
    assert when(result, GRANTED, "r3")[-1] == 370  # a DISABLED share still lends
    assert when(result, GRANTED, "r4") == [620]
    assert when(result, FINISHED, "r3") == [780]
    assert when(result, FINISHED, "r4") == [1240]
