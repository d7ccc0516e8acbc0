"""The REST API under bad input and a long history, on a real api-server over SQLite and over PostgreSQL.

Every bad input answers 4xx naming the field, never 500 (a NUL character, a time with no UTC equivalent, a
number or a string too big for the ledger's columns), and changes nothing. A history of 50,000 finished
jobs costs a page of jobs no more than a short one: the database filters, orders and cuts the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from airflow_quota.ledger.lifecycle import TERMINATION_REASON_LENGTH, record_finish, record_termination
from airflow_quota.ledger.models import AuditRow, JobRow
from tests.ui.conftest import QUEUE, START, UNIT, ApiServer, Ledger
from tests.ui.test_api import API, Seeded

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest) -> ApiServer:
    fixture = "api_server" if request.param == "sqlite" else "postgres_api_server"
    served: ApiServer = request.getfixturevalue(fixture)
    return served


@pytest.fixture
def seeded(server: ApiServer) -> Iterator[Seeded]:
    yield Seeded(Ledger(server.engine))


# --- bad input ------------------------------------------------------------------------------------------

JOB = "train/run-1/vision-b/-1/1"
NUL = "%00"  # as it arrives in a URL


class RawJson(str):
    """A request body sent as these bytes (JSON that a dict cannot hold, such as a key given twice)."""


#: Case name -> (method, path, query parameters or body, status, words the answer must hold).
BAD_INPUTS: dict[str, tuple[str, str, Any, int, list[str]]] = {
    "a NUL in a job queue filter": (
        "GET",
        "/jobs",
        {"jobQueueName": "gpu\x00"},
        422,
        ["jobQueueName", "NUL"],
    ),
    "a NUL in a share filter": ("GET", "/jobs", {"quotaShareName": "\x00"}, 422, ["quotaShareName", "NUL"]),
    "a NUL in a job id": ("GET", f"/jobs/train{NUL}/run-1/t/-1/1", None, 422, ["jobId", "NUL"]),
    "a NUL in the events' job queue": (
        "GET",
        "/events",
        {"jobQueueName": "\x00"},
        422,
        ["jobQueueName", "NUL"],
    ),
    "a NUL in the shares' job queue": (
        "GET",
        "/quotaShares",
        {"jobQueueName": "\x00"},
        422,
        ["jobQueueName", "NUL"],
    ),
    "a NUL in a share's path": ("GET", f"/quotaShares/{QUEUE}/a{NUL}", None, 422, ["quotaShareName", "NUL"]),
    "a NUL in a snapshot's path": ("GET", f"/jobQueues/a{NUL}/snapshot", None, 422, ["jobQueueName", "NUL"]),
    "a time before year 1 in UTC": (
        "GET",
        "/events",
        {"since": "0001-01-01T00:00:00+14:00"},
        422,
        ["since", "give a time from 0001-01-02 to 9999-12-30"],
    ),
    "a time after year 9999 in UTC": (
        "GET",
        "/events",
        {"since": "9999-12-31T23:59:59-14:00"},
        422,
        ["since", "9999-12-30"],
    ),
    "a page too big": ("GET", "/jobs", {"limit": 10**30}, 422, ["limit", "less than or equal to 1000"]),
    "an empty page": ("GET", "/jobs", {"limit": 0}, 422, ["limit", "greater than or equal to 1"]),
    "a negative offset": ("GET", "/jobs", {"offset": -1}, 422, ["offset", "greater than or equal to 0"]),
    "an offset past 32 bits": ("GET", "/jobs", {"offset": 2**31}, 422, ["offset", "2147483647"]),
    "an events page too big": ("GET", "/events", {"limit": 1001}, 422, ["limit", "1000"]),
    "an events offset past 32 bits": ("GET", "/events", {"offset": 2**63}, 422, ["offset"]),
    "a job queue name too long": ("GET", "/jobs", {"jobQueueName": "q" * 10_000}, 422, ["at most 128"]),
    "a job id too long": ("GET", f"/jobs/{'j' * 600}", None, 422, ["jobId", "at most 512 characters"]),
    "a priority as a string": (
        "POST",
        "/jobs/update-priority",
        {"jobId": JOB, "schedulingPriority": "5"},
        422,
        ["schedulingPriority is", "it must be a whole number from 0 to 9999"],
    ),
    "a priority as a boolean": (
        "POST",
        "/jobs/update-priority",
        {"jobId": JOB, "schedulingPriority": True},
        422,
        ["schedulingPriority is", "it must be a whole number from 0 to 9999"],
    ),
    "a priority past 64 bits": (
        "POST",
        "/jobs/update-priority",
        {"jobId": JOB, "schedulingPriority": 2**64},
        422,
        ["schedulingPriority is 18446744073709551616", "from 0 to 9999"],
    ),
    "a NUL in a priority's job id": (
        "POST",
        "/jobs/update-priority",
        {"jobId": "train\x00", "schedulingPriority": 1},
        422,
        ["jobId", "NUL"],
    ),
    "a NUL in a terminate reason": (
        "POST",
        "/jobs/terminate",
        {"jobId": JOB, "reason": "bad\x00data"},
        422,
        ["reason", "NUL"],
    ),
    "a 5 MB terminate reason": (
        "POST",
        "/jobs/terminate",
        {"jobId": JOB, "reason": "x" * 5_000_000},
        422,
        ["reason", f"at most {TERMINATION_REASON_LENGTH} characters"],
    ),
    "a job id too long to terminate": (
        "POST",
        "/jobs/terminate",
        {"jobId": "j" * 10_000, "reason": "no"},
        422,
        ["jobId", "at most 512 characters"],
    ),
    "a borrowLimit past 32 bits": (
        "PATCH",
        f"/quotaShares/{QUEUE}/vision",
        {"resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 2_147_483_648}},
        422,
        ["resourceSharingConfiguration.borrowLimit"],
    ),
    "a maxCapacity past 64 bits": (
        "PATCH",
        f"/quotaShares/{QUEUE}/vision",
        {"capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 10**20}]},
        422,
        ["maxCapacity"],
    ),
    "a NUL in a capacity unit": (
        "PATCH",
        f"/quotaShares/{QUEUE}/vision",
        {"capacityLimits": [{"capacityUnit": "ml\x00", "maxCapacity": 1}]},
        422,
        ["capacityUnit"],
    ),
    "a service-job limit of 0": ("GET", f"/jobQueues/{QUEUE}/serviceJobs", {"limit": 0}, 422, ["limit"]),
    "a NUL in a service-job queue": ("GET", f"/jobQueues/q{NUL}/serviceJobs", None, 422, ["NUL"]),
    "service jobs of a queue not applied": (
        "GET",
        "/jobQueues/nope/serviceJobs",
        None,
        404,
        ["job queue nope is not applied"],
    ),
    "service jobs of a queue our allocator schedules": (
        "GET",
        f"/jobQueues/{QUEUE}/serviceJobs",
        None,
        409,
        [f"job queue {QUEUE} is scheduled by our allocator"],
    ),
    "a NUL in the share to change": (
        "PATCH",
        f"/quotaShares/{QUEUE}/v{NUL}",
        {"state": "ENABLED"},
        422,
        ["NUL"],
    ),
    "a timeline ending in year 1 (its default hour starts before it)": (
        "GET",
        f"/jobQueues/{QUEUE}/timeline",
        {"until": "0001-01-01T00:00:00"},
        422,
        ["until", "window", "later until"],
    ),
    "a timeline's day ending on the first day of year 1": (
        "GET",
        f"/jobQueues/{QUEUE}/timeline",
        {"until": "0001-01-01T12:00:00", "window": "1d"},
        422,
        ["until", "1d"],
    ),
    "a NUL in a task instance timeline's dagId": (
        "GET",
        "/taskInstances/timeline",
        {"dagId": "\x00", "runId": "r", "taskId": "t"},
        422,
        ["dagId", "NUL"],
    ),
    "a NUL in a task instance timeline's runId": (
        "GET",
        "/taskInstances/timeline",
        {"dagId": "train", "runId": "\x00", "taskId": "t"},
        422,
        ["runId", "NUL"],
    ),
    "a NUL in a task instance timeline's taskId": (
        "GET",
        "/taskInstances/timeline",
        {"dagId": "train", "runId": "r", "taskId": "t\x00"},
        422,
        ["taskId", "NUL"],
    ),
    "a NUL in a task instance's service jobs": (
        "GET",
        "/taskInstances/serviceJobs",
        {"dagId": "train", "runId": "\x00", "taskId": "t"},
        422,
        ["runId", "NUL"],
    ),
    "a key given twice in a share change": (
        "PATCH",
        f"/quotaShares/{QUEUE}/vision",
        RawJson('{"state": "ENABLED", "state": "DISABLED"}'),
        422,
        ["'state' appears twice", "keep only one"],
    ),
    "a key given twice in a nested object": (
        "PATCH",
        f"/quotaShares/{QUEUE}/vision",
        RawJson('{"resourceSharingConfiguration": {"strategy": "LEND", "strategy": "RESERVE"}}'),
        422,
        ["'strategy' appears twice"],
    ),
    "a key given twice in a priority change": (
        "POST",
        "/jobs/update-priority",
        RawJson(f'{{"jobId": "{JOB}", "schedulingPriority": 1, "schedulingPriority": 9}}'),
        422,
        ["'schedulingPriority' appears twice"],
    ),
}

#: Bodies no JSON parser reads as a document: refused before any field is looked at.
UNREADABLE_BODIES = {
    "an integer of 5,000 digits": b'{"jobId": "x", "schedulingPriority": ' + b"9" * 5000 + b"}",
    "arrays nested 100,000 deep": b'{"jobId": "x", "schedulingPriority": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}",
}


def test_every_bad_input_answers_4xx_naming_the_field_and_changes_nothing(
    server: ApiServer, seeded: Seeded
) -> None:
    before = seeded.rows()
    wrong = []
    for case, (method, path, given, status, words) in BAD_INPUTS.items():
        if method == "GET":
            response = server.get(API + path, **(given or {}))
        elif isinstance(given, RawJson):
            response = server.send_raw(method, API + path, given.encode())
        else:
            response = server.send(method, API + path, given)
        text = response.text
        if response.status_code != status or not all(word in text for word in words):
            wrong.append(f"{case}: {response.status_code} {text[:300]}")
    for case, body in UNREADABLE_BODIES.items():
        response = server.send_raw("POST", f"{API}/jobs/update-priority", body)
        if response.status_code != 400 or "error parsing the body" not in response.text:
            wrong.append(f"{case}: {response.status_code} {response.text[:300]}")
    assert wrong == [], "\n".join(wrong)
    assert seeded.rows() == before


def test_a_long_reason_recorded_another_way_is_cut_when_stored(server: ApiServer, seeded: Seeded) -> None:
    ledger = seeded.ledger
    state, now = ledger.load(), ledger.tick()
    ledger.step(lambda session: record_termination(session, state, seeded.vision_b, now, "why " * 10_000))
    job = server.get(f"{API}/jobs/{seeded.vision_b}").json()
    assert (job["status"], len(job["statusReason"])) == ("FAILED", TERMINATION_REASON_LENGTH)
    assert job["statusReason"].startswith("why why") and job["statusReason"].endswith("…")
    (terminated, _) = server.get(f"{API}/events", limit=2).json()["events"]
    assert len(terminated["message"]) == TERMINATION_REASON_LENGTH


# --- recently finished: by finish time ------------------------------------------------------------------


def long_training_finishing_last(ledger: Ledger, batches: int = 13) -> tuple[str, list[str]]:
    """A fresh ledger: a long training submitted first, then ``batches`` x 4 short jobs (each batch's
    second one FAILED) that all finish before it does. Its id, and the short ones' in the order they
    finished."""
    ledger.empty()
    ledger.apply()
    long = ledger.submit("long-training", "research", 1)
    ledger.cycle()
    ledger.running(long)
    short = []
    for batch in range(batches):
        names = [ledger.submit(f"short-{batch:02}-{index}", "vision", 1) for index in range(4)]
        ledger.cycle()  # vision's 2 GPUs and 2 of research's idle ones
        for index, job_id in enumerate(names):
            finish(ledger, job_id, succeeded=index != 1)
        short += names
    ledger.succeeded(long)
    return long, short


def finish(ledger: Ledger, job_id: str, *, succeeded: bool) -> None:
    state, now = ledger.load(), ledger.tick()
    ledger.step(lambda session: record_finish(session, state, job_id, now, succeeded=succeeded))


def job_ids(server: ApiServer, **params: Any) -> list[str]:
    response = server.get(f"{API}/jobs", **params)
    assert response.status_code == 200, response.text
    return [job["jobId"] for job in response.json()["jobs"]]


def test_finished_jobs_by_finish_time_list_a_long_training_that_finished_last_first(
    server: ApiServer,
) -> None:
    """53 finished jobs, the earliest submitted finished last: orderBy=stoppedAt lists it first, then the
    others by when they finished, where the newest 50 by submission (what the page read before) leave it
    out."""
    long, short = long_training_finishing_last(Ledger(server.engine))
    latest = server.get(f"{API}/jobs", orderBy="stoppedAt", limit=10).json()
    assert [job["jobId"] for job in latest["jobs"]] == [long, *short[::-1][:9]]
    assert (latest["total"], latest["limit"], latest["offset"]) == (53, 10, 0)
    stopped = [job["stoppedAt"] for job in latest["jobs"]]
    assert None not in stopped and stopped == sorted(stopped, reverse=True)
    assert long not in job_ids(server, finished="true", limit=50)
    # The next page, a status, a share.
    assert job_ids(server, orderBy="stoppedAt", limit=3, offset=10) == short[::-1][9:12]
    assert job_ids(server, orderBy="stoppedAt", status="FAILED", limit=2) == [short[-3], short[-7]]
    assert job_ids(
        server, orderBy="stoppedAt", finished="true", jobQueueName=QUEUE, quotaShareName="research"
    ) == [long]
    for params, says in (
        ({"orderBy": "stoppedAt", "finished": "false"}, "orderBy=stoppedAt lists finished jobs"),
        ({"orderBy": "stoppedAt", "status": "RUNNABLE"}, "orderBy=stoppedAt lists finished jobs"),
        ({"orderBy": "finishedAt"}, "submittedAt"),
    ):
        response = server.get(f"{API}/jobs", **params)
        assert response.status_code == 422 and says in response.text, (params, response.text)


# --- a long history -------------------------------------------------------------------------------------

HISTORY = 50_000


def finished_jobs(count: int) -> Iterator[dict[str, Any]]:
    """Rows of finished jobs, submitted one a second before the seeded ledger's jobs, as the store writes."""
    for index in range(count):
        at = START - timedelta(seconds=count - index)
        job_id = f"history/run-{index}/train/-1/1"
        yield {
            "job_id": job_id,
            "job_queue_name": QUEUE,
            "quota_share_name": ("research", "vision", "urgent")[index % 3],
            "job_name": "train",
            "capacity_unit": UNIT,
            "instance_count": 1,
            "scheduling_priority": 0,
            "status": "FAILED" if index % 10 == 0 else "SUCCEEDED",
            "status_reason": "" if index % 10 else "Essential container in task exited",
            "submitted_at": at,
            "submit_seq": -count + index,
            "started_at": at,
            "start_seq": index,
            "awaiting_victims": [],
            "preempted_attempt_count": 0,
            "recent_preempted_attempts": [],
            "attempt": 1,
            "held_instance_count": 0,
            "borrowed_instance_count": 0,
            "dag_id": "history",
            "run_id": f"run-{index}",
            "task_id": "train",
            "map_index": -1,
            "try_number": 1,
            "created_at": at,
            "updated_at": at,
        }


def finished_events(count: int) -> Iterator[dict[str, Any]]:
    for index in range(count):
        yield {
            "at": START - timedelta(seconds=count - index),
            "job_queue_name": QUEUE,
            "kind": "SUCCEEDED",
            "quota_share_name": ("research", "vision", "urgent")[index % 3],
            "job_id": f"history/run-{index}/train/-1/1",
            "message": "succeeded",
        }


@pytest.fixture(scope="module")
def history(server: ApiServer) -> Seeded:
    """The seeded ledger after 50,000 finished jobs (and as many events), inserted in bulk: once per
    database, for the tests below, which only read (they come after the tests that seed their own)."""
    seeded = Seeded(Ledger(server.engine))
    with seeded.ledger.engine.begin() as connection:
        connection.execute(sa.insert(JobRow), list(finished_jobs(HISTORY)))
        connection.execute(sa.insert(AuditRow), list(finished_events(HISTORY)))
    return seeded


def page(server: ApiServer, path: str, **params: Any) -> dict[str, Any]:
    response = server.get(API + path, **params)
    assert response.status_code == 200, response.text
    assert len(response.content) < 1_500_000, (path, params, len(response.content))
    document: dict[str, Any] = response.json()
    return document


def test_the_pages_calls_stay_small_with_50000_finished_jobs(server: ApiServer, history: Seeded) -> None:
    # The React page's calls: unfinished jobs, the 10 latest finished, 200 events, per share too.
    for share_filter in ({}, {"jobQueueName": QUEUE, "quotaShareName": "vision"}):
        unfinished = page(server, "/jobs", finished="false", limit=1000, **share_filter)
        names = [job["jobName"] for job in unfinished["jobs"]]
        assert unfinished["total"] == len(names) and "train" not in names
        finished = page(server, "/jobs", finished="true", limit=10, **share_filter)
        assert len(finished["jobs"]) == 10 and finished["total"] is None  # over 10,000: not counted
        assert {job["status"] for job in finished["jobs"]} <= {"SUCCEEDED", "FAILED"}
        latest = page(server, "/jobs", orderBy="stoppedAt", limit=10, **share_filter)["jobs"]
        stopped = [job["stoppedAt"] for job in latest]
        assert len(latest) == 10 and stopped == sorted(stopped, reverse=True)
        snapshot = page(server, f"/jobQueues/{QUEUE}/snapshot", window="all")
        assert snapshot["lostWork"]["units"][0]["preemptions"] == 1  # the seed's one
        assert len(page(server, "/events", limit=200, **share_filter)["events"]) == 200
    # And the GPU timeline: the newest 500 jobs at most, saying so; the seeded story still in it.
    timeline = page(server, f"/jobQueues/{QUEUE}/timeline", window="all")
    assert timeline["truncated"] is True
    stopping = [bar for bar in timeline["units"][0]["bars"] if bar["phase"] == "STOPPING"]
    assert {bar["jobId"] for bar in stopping} == {history.urgent_low}
    assert page(server, f"/jobQueues/{QUEUE}/timeline", window="1d")["truncated"] is False
    assert [
        job["jobName"] for job in page(server, "/jobs", finished="false", quotaShareName="vision")["jobs"]
    ] == [
        "vision-a",
        "vision-b",
        "vision-c",
    ]
    # Unfiltered: the newest 100, in submission order, and the total when it is cheap to count.
    newest = page(server, "/jobs")
    assert (len(newest["jobs"]), newest["total"], newest["limit"], newest["offset"]) == (100, None, 100, 0)
    assert newest["jobs"][-1]["jobName"] == "research-big"
    assert page(server, "/jobs", status="RUNNABLE")["total"] == 4


def test_pages_walk_the_whole_history_newest_first(server: ApiServer, history: Seeded) -> None:
    first = page(server, "/jobs", finished="true", limit=1000)["jobs"]
    second = page(server, "/jobs", finished="true", limit=1000, offset=1000)["jobs"]
    assert first[0]["jobId"] == f"history/run-{HISTORY - 1000}/train/-1/1"
    assert first[-1]["jobId"] == f"history/run-{HISTORY - 1}/train/-1/1"
    assert second[-1]["submittedAt"] < first[0]["submittedAt"]
    last = page(server, "/jobs", finished="true", limit=1000, offset=HISTORY - 10)["jobs"]
    assert [job["jobId"] for job in last] == [f"history/run-{index}/train/-1/1" for index in range(10)]
    failed = page(server, "/jobs", status="FAILED", jobQueueName=QUEUE, quotaShareName="research", limit=5)
    research_failures = [index for index in range(HISTORY) if index % 30 == 0]  # see finished_jobs
    assert [job["taskInstance"]["runId"] for job in failed["jobs"]] == [
        f"run-{index}" for index in research_failures[-5:]
    ]
    events = page(server, "/events", limit=1000, offset=1000)["events"]
    assert len(events) == 1000 and events[-1]["id"] < page(server, "/events", limit=1000)["events"][0]["id"]


def test_a_page_reads_only_its_own_rows_from_the_database(server: ApiServer, history: Seeded) -> None:
    """The routes themselves, in this process on the server's database: the job rows each call loads."""
    from airflow_quota.api.routes.events import list_events
    from airflow_quota.api.routes.jobs import JobOrder, list_jobs
    from airflow_quota.api.routes.timeline import Window, job_queue_timeline

    loaded: list[str] = []

    def count(row: JobRow, _: object) -> None:
        loaded.append(row.job_id)

    waiting = 4  # RUNNABLE jobs: a page's waiting jobs need their share's order
    sa.event.listen(JobRow, "load", count)
    try:
        with Session(server.engine) as session:
            newest = list_jobs(session)
            assert len(newest.jobs) == 100 and len(loaded) <= 100 + waiting
        loaded.clear()
        with Session(server.engine) as session:
            finished = list_jobs(session, finished=True, limit=10)
            assert len(finished.jobs) == 10 and len(loaded) == 10
            assert len(list_events(session, limit=30).events) == 30
        loaded.clear()
        with Session(server.engine) as session:  # the latest finished: the page's Recently finished
            latest = list_jobs(session, orderBy=JobOrder.STOPPED_AT, limit=10)
            assert len(latest.jobs) == 10 and len(loaded) == 10
        loaded.clear()
        with Session(server.engine) as session:  # the last day's timeline: the jobs that did not finish
            job_queue_timeline(session, QUEUE, window=Window.DAY)
            assert len(loaded) == 7
    finally:
        sa.event.remove(JobRow, "load", count)
