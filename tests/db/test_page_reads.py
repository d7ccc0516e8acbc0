"""What the GPU Quotas page reads, in process on SQLite and PostgreSQL (issue 15): the events API's filters
(share, job, DAG run, decision kind) answered by the database over the whole audit log, not by the browser
over the last events it read; and the timeline's ``truncated`` flag when more jobs touch the window than it
replays.

The REST API is the quota app itself (``create_quota_app``) under FastAPI's test client, its session the
test database's and its access check waived (the real api-server's auth is tested in tests/ui).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy.orm import Session

from airflow_quota.engine.model import JobRequest
from airflow_quota.ledger import timeline as ledger_timeline
from airflow_quota.ledger.lifecycle import TaskInstanceRef, record_stop_completed, record_submission
from airflow_quota.ledger.timeline import queue_timeline
from tests.db.test_store import BORROWER, LENDER, QUEUE, Ledger, quota_file, run
from tests.db.test_timeline import ledger as ledger

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.db


@pytest.fixture
def api(ledger: Ledger) -> Iterator[TestClient]:
    # Imported here rather than at the top: every pytest-xdist worker imports every test module to collect
    # it, and the quota app (FastAPI, Airflow's API security) costs each about a CPU-second that only the
    # worker running these tests needs.
    with warnings.catch_warnings():  # starlette's test client (which these import) prefers httpx2
        warnings.simplefilter("ignore")
        from airflow.api_fastapi.common.db.common import _get_session
        from fastapi.testclient import TestClient

        from airflow_quota.api.access import MAY_READ
        from airflow_quota.api.app import create_quota_app

    app = create_quota_app()

    def session() -> Iterator[Session]:
        with ledger.database.session() as each:
            yield each

    app.dependency_overrides[_get_session] = session
    app.dependency_overrides[MAY_READ.dependency] = lambda: None
    with TestClient(app) as client:
        yield client


def submit(ledger: Ledger, job_id: str, share_name: str, gpus: int, run_id: str = "run-1") -> str:
    """A job of task ``job_id`` in DAG ``train``'s run ``run_id``."""
    state, now = ledger.load(), ledger.tick()
    request = JobRequest(job_id, share_name, "gpu", gpus)
    task = TaskInstanceRef("train", run_id, job_id, try_number=1)
    ledger.step(lambda session: record_submission(session, state, job_id, request, task, now))
    return job_id


def events(api: TestClient, **params: Any) -> list[tuple[str, str | None, str | None]]:
    response = api.get("/api/events", params=params)
    assert response.status_code == 200, response.text
    return [(event["kind"], event["jobId"], event["relatedJobId"]) for event in response.json()["events"]]


def borrow_then_reclaim(ledger: Ledger) -> None:
    """b1 (borrower, run-1) borrows; l1 (lender, run-2) reclaims: b1 is preempted by l1, stops, l1 runs."""
    ledger.apply(quota_file(LENDER, BORROWER, capacity=4))
    submit(ledger, "b1", "borrower", 3)
    ledger.cycle()
    run(ledger, "b1")
    submit(ledger, "l1", "lender", 2, run_id="run-2")
    ledger.cycle()
    ledger.event(lambda session, state, now: record_stop_completed(session, state, "b1", now))
    ledger.cycle()


def test_the_events_api_filters_by_share_job_dag_run_and_kind(ledger: Ledger, api: TestClient) -> None:
    borrow_then_reclaim(ledger)
    everything = events(api, limit=1000)
    assert [kind for kind, _, _ in everything] == [
        *["CONFIG_CHANGED"] * 3,  # the job queue and its two shares
        "SUBMITTED",
        "GRANTED",
        "SUBMITTED",
        "PREEMPTED",
        "REQUEUED",
        "GRANTED",
    ]
    # The share: its configuration's and its jobs' events.
    assert events(api, quotaShareName="lender") == [
        ("CONFIG_CHANGED", None, None),
        ("SUBMITTED", "l1", None),
        ("GRANTED", "l1", None),
    ]
    # A job: its events, and those naming it as the other job (it preempted b1, which was requeued for it).
    assert events(api, jobId="l1") == [
        ("SUBMITTED", "l1", None),
        ("PREEMPTED", "b1", "l1"),
        ("REQUEUED", "b1", "l1"),
        ("GRANTED", "l1", None),
    ]
    # A DAG run: the events of its jobs (b1 is run-1's, l1 run-2's).
    assert {job for _, job, _ in events(api, dagId="train", runId="run-2")} == {"l1"}
    assert {job for _, job, _ in events(api, runId="run-1")} == {"b1"}
    assert len(events(api, dagId="train")) == len(everything) - 3  # all but the configuration's
    assert events(api, dagId="other") == []
    # Kinds: one, or any of several; with the other filters too.
    assert events(api, kind="PREEMPTED") == [("PREEMPTED", "b1", "l1")]
    assert [kind for kind, _, _ in events(api, kind=["GRANTED", "REQUEUED"])] == [
        "GRANTED",
        "REQUEUED",
        "GRANTED",
    ]
    assert events(api, kind="GRANTED", quotaShareName="borrower", runId="run-1") == [("GRANTED", "b1", None)]
    # The filters pick from the whole log, then page: the newest match first, after the offset.
    assert events(api, jobId="b1", limit=1) == [("REQUEUED", "b1", "l1")]
    assert events(api, jobId="b1", limit=1, offset=1) == [("PREEMPTED", "b1", "l1")]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"kind": "PREEMPTING"}, "kind"),
        ({"jobId": "b\x001"}, "jobId"),
        ({"dagId": "x" * 251}, "dagId"),
        ({"runId": "\x00"}, "runId"),
    ],
    ids=["an unknown kind", "a NUL in a job id", "a DAG id too long", "a NUL in a run id"],
)
def test_a_bad_events_filter_is_a_422_naming_it(api: TestClient, params: dict[str, str], field: str) -> None:
    response = api.get("/api/events", params=params)
    assert response.status_code == 422, response.text
    assert [error["loc"][:2] for error in response.json()["detail"]] == [["query", field]]


def test_the_timeline_says_when_it_left_older_jobs_out(
    ledger: Ledger, api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More jobs touch the window than it replays: the newest are kept, ``truncated`` says so, the API too."""
    ledger.apply(quota_file(LENDER, BORROWER, capacity=4))
    for index in range(4):
        submit(ledger, f"j{index}", "lender", 1)
    monkeypatch.setattr(ledger_timeline, "MAX_TIMELINE_JOBS", 3)
    with ledger.database.session() as session:
        cut = queue_timeline(session, QUEUE, None, ledger.now)
    assert cut.truncated is True
    assert {job.row.job_id for job in cut.jobs} == {"j1", "j2", "j3"}
    document = api.get(f"/api/jobQueues/{QUEUE}/timeline", params={"window": "all"}).json()
    assert (document["truncated"], document["jobLimit"], len(document["jobs"])) == (True, 3, 3)
    monkeypatch.setattr(ledger_timeline, "MAX_TIMELINE_JOBS", 4)
    document = api.get(f"/api/jobQueues/{QUEUE}/timeline", params={"window": "all"}).json()
    assert (document["truncated"], len(document["jobs"])) == (False, 4)
