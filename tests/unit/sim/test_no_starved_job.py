"""No starved job (our extension, engine/extensions.py): with ``starvationLimitSeconds`` on, a stream of
small jobs cannot delay a big job of their share past the bound; without it, it can.

The bound: once the big job (the share's front job: its priority is the highest) has waited the limit, no
later job of its share starts before it, so the jobs running then end within the longest small job's
duration: it starts by its submission + the limit + that duration.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_quota.engine.model import JobRequest
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import QueueConfiguration, Scenario, ScenarioEvent, Settings, SubmitJob

CAPACITY = 4
LIMIT = 600
LONGEST_SMALL = 300
BIG_AT = 100.0


def configuration(limit: int | None) -> QueueConfiguration:
    share = {
        "quotaShareName": "a",
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": CAPACITY}],
        "resourceSharingConfiguration": {"strategy": "RESERVE"},
        **({} if limit is None else {"extensions": {"starvationLimitSeconds": limit}}),
    }
    other = {
        "quotaShareName": "b",
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW"},
    }
    queue = {"jobQueueName": "q", "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": CAPACITY + 2}]}
    return QueueConfiguration.parse(queue, [share, other], "test")


def submit(index: int, at: float, name: str, share: str, count: int, priority: int, duration: float):
    request = JobRequest(name, share, "gpu", count, priority)
    return ScenarioEvent(index, at, SubmitJob(request, duration))


#: A small job: (arrival, instances, duration, share).
small_jobs = st.lists(
    st.tuples(
        st.floats(0, 5_000, allow_nan=False).map(round),
        st.integers(1, CAPACITY - 1),
        st.floats(1, LONGEST_SMALL, allow_nan=False).map(round),
        st.sampled_from(("a", "a", "a", "b")),
    ),
    min_size=1,
    max_size=60,
)


def big_job_start(limit: int | None, smalls: list[tuple[float, int, float, str]]) -> float:
    events = [submit(0, BIG_AT, "big", "a", CAPACITY, 5, 50.0)]
    for index, (at, count, duration, share) in enumerate(smalls, start=1):
        events.append(submit(index, at, f"s{index}", share, count, 0, max(1.0, duration)))
    result = simulate(Scenario("test", configuration(limit), Settings(), tuple(events)), record_steps=False)
    started = result.jobs["big"].first_started_at
    assert started is not None
    return started


@settings(max_examples=60, deadline=None)
@given(smalls=small_jobs)
def test_a_stream_of_small_jobs_cannot_delay_a_big_one_past_the_bound(
    smalls: list[tuple[float, int, float, str]],
) -> None:
    started = big_job_start(LIMIT, smalls)

    assert started <= BIG_AT + LIMIT + LONGEST_SMALL, started


def test_without_the_option_a_stream_of_small_jobs_delays_the_big_one_past_the_bound() -> None:
    # Two overlapping 1-instance jobs at a time, one new every 100 s: the share never has 4 free.
    stream = [(float(at), 1, 150.0, "a") for at in range(0, 5_000, 100)]

    assert big_job_start(None, stream) > BIG_AT + LIMIT + LONGEST_SMALL
    assert big_job_start(LIMIT, stream) <= BIG_AT + LIMIT + LONGEST_SMALL
