"""The quota REST API on a real api-server: every endpoint's shape and numbers against a ledger seeded through
the store, the auth manager's refusals (401 anonymous, 403 viewer writing), and writes that validate, audit,
and change nothing when refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import sqlalchemy as sa
from botocore.validate import ParamValidator

from airflow_quota.aws_batch.botocore_model import batch_model
from tests.ui.conftest import QUEUE, UNIT, ApiServer, Ledger

pytestmark = pytest.mark.airflow

API = "/quota/api"


class Seeded:
    """The ledger every test starts from, and the job ids in it."""

    def __init__(self, ledger: Ledger) -> None:
        ledger.empty()
        ledger.apply()
        self.ledger = ledger
        # vision borrows 1 of research's idle GPUs; research runs 2 of its own.
        self.vision_a = ledger.submit("vision-a", "vision", 3)
        self.research_a = ledger.submit("research-a", "research", 2)
        self.urgent_low = ledger.submit("urgent-low", "urgent", 2, priority=1)
        ledger.cycle()
        for job_id in (self.vision_a, self.research_a, self.urgent_low):
            ledger.running(job_id)
        # urgent-high preempts urgent-low inside urgent (in-share preemption), which stops, then is requeued.
        self.urgent_high = ledger.submit("urgent-high", "urgent", 2, priority=9)
        self.preemption_cycle = ledger.cycle()
        ledger.stopped(self.urgent_low)
        ledger.cycle()
        # vision-b would pass vision's ceiling of 4; research-big needs more than the queue has.
        self.vision_b = ledger.submit("vision-b", "vision", 2, priority=5)
        self.vision_c = ledger.submit("vision-c", "vision", 2, priority=5, map_index=3)
        self.research_big = ledger.submit("research-big", "research", 10)
        ledger.cycle()
        ledger.training_job(self.vision_a, "vision-a-2026-03-01")  # the ledger's, and the task's record
        ledger.training_job(self.research_a, "research-a-1", region=None)  # the ledger's only
        ledger.training_job(self.vision_b, "vision-b-1", in_ledger=False)  # the task's record only
        # A record of another try of urgent-low's task (retries share the store) is not urgent-low's.
        ledger.training_job(
            self.urgent_low, "other-try", in_ledger=False, lease="train/run-1/urgent-low/-1/2#1"
        )
        ledger.devices(self.research_a, [0, 1])

    def rows(self) -> dict[str, list[str]]:
        """Every row of the ledger's tables, to show that a refused write changed nothing."""
        from airflow_quota.ledger.models import ledger_metadata

        with self.ledger.engine.connect() as connection:
            return {
                table.name: sorted(map(repr, connection.execute(sa.select(table)).all()))
                for table in ledger_metadata.sorted_tables
            }


@pytest.fixture
def seeded(api_server: ApiServer) -> Iterator[Seeded]:
    yield Seeded(Ledger(api_server.engine))


#: A quota share's fields that AWS Batch's DescribeQuotaShare answers with (the REST API's share has them).
AWS_SHARE_FIELDS = (
    "quotaShareName",
    "capacityLimits",
    "resourceSharingConfiguration",
    "preemptionConfiguration",
    "state",
)


def by_name(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


def jobs(api_server: ApiServer, **params: Any) -> dict[str, dict[str, Any]]:
    response = api_server.get(f"{API}/jobs", **params)
    assert response.status_code == 200, response.text
    return {job["jobName"]: job for job in response.json()["jobs"]}


# --- auth -----------------------------------------------------------------------------------------------

READS = [
    "/jobQueues",
    "/quotaShares",
    f"/quotaShares/{QUEUE}/vision",
    "/jobs",
    "/jobs/train/run-1/vision-a/-1/1",
    "/events",
    f"/jobQueues/{QUEUE}/snapshot",
    f"/jobQueues/{QUEUE}/timeline",
    "/taskInstances/timeline?dagId=train&runId=run-1&taskId=vision-a",
]
WRITES = [
    ("PATCH", f"/quotaShares/{QUEUE}/research", {"state": "DISABLED"}),
    ("POST", "/jobs/update-priority", {"jobId": "train/run-1/vision-b/-1/1", "schedulingPriority": 1}),
    ("POST", "/jobs/terminate", {"jobId": "train/run-1/vision-b/-1/1", "reason": "no"}),
]


def test_anonymous_callers_get_401_and_the_page_sends_them_to_log_in(
    api_server: ApiServer, seeded: Seeded
) -> None:
    before = seeded.rows()
    for path in READS:
        response = api_server.get(API + path, user=None)
        assert (response.status_code, response.json()) == (401, {"detail": "Not authenticated"}), path
    for method, path, body in WRITES:
        assert api_server.send(method, API + path, body, user=None).status_code == 401, path
    # The page's old address leads to the page in Airflow's UI, which sends a caller without a session to
    # log in (tests/ui/test_react_page.py drives that in a browser); the redirect itself reads nothing.
    page = requests.get(
        f"{api_server.url}/quota/shares/gpu-training/vision", allow_redirects=False, timeout=30
    )
    assert page.status_code in (303, 307)
    assert page.headers["location"].endswith("/plugin/gpu-quotas/shares/gpu-training/vision")
    assert seeded.rows() == before


def test_a_viewer_reads_everything_but_gets_403_on_writes(api_server: ApiServer, seeded: Seeded) -> None:
    for path in READS:
        assert api_server.get(API + path, user="viewer").status_code == 200, path
    before = seeded.rows()
    for method, path, body in WRITES:
        response = api_server.send(method, API + path, body, user="viewer")
        assert response.status_code == 403, path
        assert response.json()["detail"] == "Forbidden: change access to pools is needed to change GPU quotas"
    assert seeded.rows() == before
    # Op has the pool permissions (SimpleAuthManager: OP and ADMIN edit pools).
    response = api_server.send("POST", API + "/jobs/update-priority", WRITES[1][2], user="op")
    assert response.status_code == 200, response.text


def test_the_openapi_document_describes_every_endpoint(api_server: ApiServer) -> None:
    document = api_server.get("/quota/openapi.json", user=None).json()
    assert set(document["paths"]) == {
        f"{API.removeprefix('/quota')}{path}"
        for path in (
            "/jobQueues",
            "/quotaShares",
            "/quotaShares/{jobQueueName}/{quotaShareName}",
            "/jobs",
            "/jobs/{jobId}",
            "/events",
            "/jobQueues/{jobQueueName}/snapshot",
            "/jobs/update-priority",
            "/jobs/terminate",
            "/jobQueues/{jobQueueName}/timeline",
            "/taskInstances/timeline",
            "/jobQueues/{jobQueueName}/serviceJobs",
            "/taskInstances/serviceJobs",
        )
    }
    share_usage = document["components"]["schemas"]["ShareUnitUsage"]["properties"]
    assert {"own", "borrowed", "borrowedFrom", "lent", "lentTo", "idle"} <= set(share_usage)
    schemas = document["components"]["schemas"]
    assert {"resourceSharingConfiguration", "preemptionConfiguration", "capacityLimits", "scheduler"} <= set(
        schemas["QuotaShare"]["properties"]
    )
    assert {"strategy", "borrowLimit", "inSharePreemption"}.isdisjoint(schemas["QuotaShare"]["properties"])
    assert set(schemas["ResourceSharingConfiguration"]["properties"]) == {"strategy", "borrowLimit"}
    assert "scheduler" in schemas["JobQueue"]["properties"]
    assert {"scheduledAt", "startedAt", "stoppedAt", "capacityUsage"} <= set(schemas["Job"]["properties"])
    assert "serviceResourceId" in schemas["PreemptedAttempt"]["properties"]
    assert "401" in document["paths"]["/api/jobs"]["get"]["responses"]
    assert "422" in document["paths"]["/api/jobs/terminate"]["post"]["responses"]


# --- reading --------------------------------------------------------------------------------------------


def test_job_queues(api_server: ApiServer, seeded: Seeded) -> None:
    (queue,) = api_server.get(f"{API}/jobQueues").json()["jobQueues"]
    assert queue["jobQueueName"] == QUEUE
    assert queue["capacityLimits"] == [{"capacityUnit": UNIT, "maxCapacity": 8}]
    assert (queue["revision"], queue["quotaShareNames"]) == (1, ["research", "vision", "urgent"])


def test_shares_split_usage_into_own_borrowed_lent_and_idle(api_server: ApiServer, seeded: Seeded) -> None:
    shares = by_name(api_server.get(f"{API}/quotaShares").json()["quotaShares"], "quotaShareName")
    research, vision, urgent = (shares[name] for name in ("research", "vision", "urgent"))
    # AWS Batch's DescribeQuotaShare nesting: borrowLimit only for LEND_AND_BORROW.
    assert {key: research[key] for key in AWS_SHARE_FIELDS} == {
        "quotaShareName": "research",
        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 4}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "ENABLED",
    }
    assert vision["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": 100}
    assert urgent["resourceSharingConfiguration"] == {"strategy": "RESERVE"}
    assert urgent["preemptionConfiguration"] == {"inSharePreemption": "ENABLED"}
    assert {share["scheduler"] for share in shares.values()} == {"AIRFLOW"}
    create_quota_share = batch_model().operation_model("CreateQuotaShare").input_shape
    for each in shares.values():  # each one, as it is, a CreateQuotaShare body botocore accepts
        body = {key: each[key] for key in AWS_SHARE_FIELDS} | {"jobQueue": QUEUE}
        report = ParamValidator().validate(body, create_quota_share)
        assert not report.has_errors(), report.generate_report()
    assert research["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 2}]
    assert vision["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 3}]  # 1 of them borrowed
    (research_usage,) = research["usage"]
    assert research_usage == {
        "quotaShareName": "research",
        "capacityUnit": UNIT,
        "limit": 4,
        "ceiling": 4,
        "used": 2,
        "own": 2,
        "borrowed": 0,
        "borrowedFrom": [],
        "lent": 1,
        "lentTo": [{"quotaShareName": "vision", "units": 1}],
        "idle": 1,
        "stopping": 0,
        "running": 1,
        "runnable": 1,
    }
    (vision_usage,) = vision["usage"]
    assert vision_usage | {"borrowedFrom": None} == {
        "quotaShareName": "vision",
        "capacityUnit": UNIT,
        "limit": 2,
        "ceiling": 4,
        "used": 3,
        "own": 2,
        "borrowed": 1,
        "borrowedFrom": None,
        "lent": 0,
        "lentTo": [],
        "idle": 0,
        "stopping": 0,
        "running": 1,
        "runnable": 2,
    }
    assert vision_usage["borrowedFrom"] == [{"quotaShareName": "research", "units": 1}]
    (urgent_usage,) = urgent["usage"]
    # urgent-high was granted (SCHEDULED, counted), urgent-low is RUNNABLE again.
    assert (urgent_usage["used"], urgent_usage["own"], urgent_usage["idle"]) == (2, 2, 0)
    assert (urgent_usage["running"], urgent_usage["runnable"]) == (0, 1)

    one = api_server.get(f"{API}/quotaShares/{QUEUE}/vision").json()
    assert one == vision
    missing = api_server.get(f"{API}/quotaShares/{QUEUE}/nobody")
    assert (missing.status_code, missing.json()["detail"]) == (
        404,
        f"job queue {QUEUE} has no quota share nobody",
    )
    assert api_server.get(f"{API}/quotaShares", jobQueueName="nope").status_code == 404


def test_jobs_with_position_lease_task_instance_and_training_job(
    api_server: ApiServer, seeded: Seeded
) -> None:
    every = jobs(api_server)
    assert list(every) == [
        "vision-a",
        "research-a",
        "urgent-low",
        "urgent-high",
        "vision-b",
        "vision-c",
        "research-big",
    ]
    vision_a = every["vision-a"]
    assert (vision_a["status"], vision_a["statusReason"], vision_a["position"]) == ("RUNNING", "", None)
    assert vision_a["lease"] == {"capacityUnit": UNIT, "instanceCount": 3, "borrowed": 1, "devices": None}
    assert every["research-a"]["lease"]["devices"] == [0, 1]
    assert vision_a["attempt"] == 1
    # AWS Batch's names: what it holds (capacityUsage), when it was granted (scheduledAt).
    assert vision_a["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 3}]
    assert vision_a["scheduledAt"] == vision_a["startedAt"] == "2026-03-01T12:00:25Z"
    assert (every["vision-b"]["capacityUsage"], every["vision-b"]["scheduledAt"]) == ([], None)
    assert vision_a["taskInstance"] == {
        "dagId": "train",
        "runId": "run-1",
        "taskId": "vision-a",
        "mapIndex": -1,
        "tryNumber": 1,
        "path": "dags/train/runs/run-1/tasks/vision-a",
    }
    assert vision_a["trainingJob"] == {
        "backend": "sagemaker",
        "name": "vision-a-2026-03-01",
        "state": "launched",
        # the task's own extra link (the amazon provider's console links), not a copy
        "consoleUrl": "https://console.aws.amazon.com/sagemaker/home?region=us-west-2#/jobs/vision-a-2026-03-01",
        "arn": None,  # the task reported none
    }
    assert every["vision-c"]["taskInstance"]["path"] == "dags/train/runs/run-1/tasks/vision-c/mapped/3"
    assert every["research-a"]["trainingJob"] == {
        "backend": "sagemaker",
        "name": "research-a-1",
        "state": "launched",
        "consoleUrl": "https://console.aws.amazon.com/sagemaker/home#/jobs/research-a-1",
        "arn": None,
    }
    assert every["vision-b"]["trainingJob"]["consoleUrl"] == (
        "https://console.aws.amazon.com/sagemaker/home?region=us-west-2#/jobs/vision-b-1"
    )
    assert every["urgent-low"]["trainingJob"] is None
    assert every["research-big"]["trainingJob"] is None
    # Waiting jobs: their place in the share and why, in plain words.
    assert (every["vision-b"]["position"], every["vision-c"]["position"]) == (1, 2)
    assert every["vision-b"]["statusReason"] == (
        f"Waiting for capacity: this job needs 2 {UNIT}, which would take quota share vision past its borrow "
        "ceiling of 4: it waits for its own jobs to finish"
    )
    assert every["research-big"]["statusReason"] == "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
    assert every["research-big"]["position"] == 1
    assert every["urgent-low"]["position"] == 1

    assert list(jobs(api_server, quotaShareName="vision")) == ["vision-a", "vision-b", "vision-c"]
    assert list(jobs(api_server, status="runnable")) == ["urgent-low", "vision-b", "vision-c", "research-big"]
    assert list(jobs(api_server, jobQueueName=QUEUE, finished="true")) == []
    assert list(jobs(api_server, finished="false", limit=2)) == ["vision-c", "research-big"]
    bad = api_server.get(f"{API}/jobs", status="DONE")
    assert bad.status_code == 422
    assert bad.json()["detail"].startswith("status 'DONE' is not a job status (one of SUBMITTED, RUNNABLE")

    one = api_server.get(f"{API}/jobs/{seeded.vision_a}")
    assert one.status_code == 200 and one.json() == vision_a
    missing = api_server.get(f"{API}/jobs/train/run-1/nobody/-1/1")
    assert (missing.status_code, missing.json()["detail"]) == (
        404,
        "no job train/run-1/nobody/-1/1 is in the quota ledger",
    )


def test_a_preempted_job_says_by_whom_and_when(api_server: ApiServer, seeded: Seeded) -> None:
    low = jobs(api_server)["urgent-low"]
    summary = low["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    (attempt,) = summary["recentPreemptedAttempts"]
    assert (attempt["attempt"], attempt["preemptedBy"], attempt["rule"]) == (
        1,
        seeded.urgent_high,
        "IN_SHARE_PRIORITY",
    )
    assert summary["beingPreemptedBy"] is None  # it has stopped
    assert (summary["lastPreemptedBy"], summary["lastPreemptionRule"]) == (
        seeded.urgent_high,
        "IN_SHARE_PRIORITY",
    )
    decided = seeded.preemption_cycle
    assert [type(decision).__name__ for decision in decided.decisions] == ["Preemption"]
    assert summary["lastPreemptedAt"] == "2026-03-01T12:00:50Z"  # the second cycle's time
    assert low["status"] == "RUNNABLE" and low["lease"]["instanceCount"] == 0


def test_a_preempted_attempt_names_its_training_job_as_aws_batch_does(
    api_server: ApiServer, seeded: Seeded
) -> None:
    ledger = seeded.ledger
    ledger.running(seeded.urgent_high)
    arn = "arn:aws:sagemaker:us-west-2:123456789012:training-job/urgent-high-t1-a1"
    ledger.training_job(seeded.urgent_high, "urgent-high-t1-a1", arn=arn)
    ledger.submit("urgent-top", "urgent", 2, priority=99)
    ledger.cycle()
    ledger.stopped(seeded.urgent_high)

    high = jobs(api_server)["urgent-high"]
    (attempt,) = high["preemptionSummary"]["recentPreemptedAttempts"]
    assert attempt["serviceResourceId"] == {"name": "TrainingJobArn", "value": arn}
    assert attempt["startedAt"] < attempt["stoppedAt"]
    assert high["trainingJob"]["arn"] == arn
    # A job whose task reported no ARN says nothing in its place (urgent-low, preempted in the seed).
    (low_attempt,) = jobs(api_server)["urgent-low"]["preemptionSummary"]["recentPreemptedAttempts"]
    assert low_attempt["serviceResourceId"] is None


def test_a_job_being_stopped_shows_its_preemptor(api_server: ApiServer, seeded: Seeded) -> None:
    ledger = seeded.ledger
    ledger.running(seeded.urgent_high)
    top = ledger.submit("urgent-top", "urgent", 2, priority=99)
    ledger.cycle()
    high = jobs(api_server)["urgent-high"]
    assert high["status"] == "RUNNING"
    assert high["preemptionSummary"]["beingPreemptedBy"] == top
    assert high["preemptionSummary"]["preemptedAttemptCount"] == 0
    (urgent,) = api_server.get(f"{API}/quotaShares/{QUEUE}/urgent").json()["usage"]
    assert (urgent["used"], urgent["stopping"]) == (2, 2)  # urgent-top counts; urgent-high still holds 2
    (unit,) = api_server.get(f"{API}/jobQueues/{QUEUE}/snapshot").json()["capacity"]
    assert (unit["stopping"], unit["free"]) == (2, 1)


def test_the_timeline_shows_the_preemption_as_a_stop_phase_then_the_preemptor(
    api_server: ApiServer, seeded: Seeded
) -> None:
    response = api_server.get(f"{API}/jobQueues/{QUEUE}/timeline", window="all")
    assert response.status_code == 200, response.text
    timeline = response.json()
    assert (timeline["since"], timeline["firstSubmittedAt"]) == (None, "2026-03-01T12:00:10Z")
    assert timeline["quotaShareNames"] == ["research", "vision", "urgent"]
    (unit,) = timeline["units"]
    assert (unit["capacityUnit"], unit["capacity"], unit["rows"]) == (UNIT, 8, 8)
    bars = [bar for bar in unit["bars"] if bar["jobId"] in (seeded.urgent_low, seeded.urgent_high)]
    phases = sorted(
        (bar["startedAt"], bar["jobId"], bar["phase"], bar["endedBy"], bar["preemptedBy"]) for bar in bars
    )
    low, high = seeded.urgent_low, seeded.urgent_high
    assert [phase[1:] for phase in phases] == [
        (low, "RUNNING", "PREEMPTED", None),
        (low, "RUNNING", "PREEMPTED", None),
        (low, "STOPPING", "REQUEUED", high),
        (low, "STOPPING", "REQUEUED", high),
        (high, "RUNNING", None, None),
        (high, "RUNNING", None, None),
    ]
    stopping = next(bar for bar in bars if bar["phase"] == "STOPPING")
    assert (stopping["startedAt"], stopping["rule"]) == ("2026-03-01T12:00:50Z", "IN_SHARE_PRIORITY")
    resumed_by = next(bar for bar in bars if bar["jobId"] == high)
    assert resumed_by["startedAt"] >= stopping["endedAt"]  # the capacity passes on only once stopped
    vision = [bar for bar in unit["bars"] if bar["jobId"] == seeded.vision_a]
    assert sorted(bar["borrowed"] for bar in vision) == [False, False, True]
    waiting = {job["jobName"]: job["waits"] for job in timeline["jobs"]}
    assert waiting["urgent-low"][1]["reason"] == (
        f"Requeued after its preemption by {high}; Waiting for capacity: this job needs 2 {UNIT}, more than "
        "quota share urgent has free of its own 2; a RESERVE share does not borrow: it waits for its own "
        "jobs to finish"
    )
    assert waiting["research-big"][-1]["endedAt"] is None
    assert waiting["research-big"][-1]["reason"].startswith("Waiting since its submission; MISCONFIGURATION")

    # The default window is the last hour up to now: this March history has only the waits still going on.
    recent = api_server.get(f"{API}/jobQueues/{QUEUE}/timeline").json()
    assert recent["units"][0]["bars"] == [bar for bar in unit["bars"] if bar["endedAt"] is None]
    since = api_server.get(f"{API}/jobQueues/{QUEUE}/timeline", since=stopping["endedAt"]).json()
    # The stop phase ends at since, so it touches the window; the RUNNING phase before it does not.
    assert {bar["phase"] for bar in since["units"][0]["bars"] if bar["jobId"] == low} == {"STOPPING"}

    # One task instance's own story.
    mine = api_server.get(f"{API}/taskInstances/timeline", dagId="train", runId="run-1", taskId="urgent-low")
    (own,) = mine.json()["timelines"]
    assert {bar["jobId"] for bar in own["units"][0]["bars"]} == {low}
    assert [job["jobId"] for job in own["jobs"]] == [low]


@pytest.mark.parametrize(
    ("path", "params", "status", "says"),
    [
        (f"/jobQueues/{QUEUE}/timeline", {"window": "2h"}, 422, "15m"),
        (f"/jobQueues/{QUEUE}/timeline", {"window": "1h", "since": "2026-03-01T12:00:00"}, 422, "not both"),
        (
            f"/jobQueues/{QUEUE}/timeline",
            {"since": "2026-03-02", "until": "2026-03-01"},
            422,
            "earlier since",
        ),
        ("/jobQueues/nope/timeline", {}, 404, "job queue nope is not applied"),
        ("/taskInstances/timeline", {"dagId": "train", "runId": "run-1", "taskId": "x"}, 404, "has no job"),
        ("/taskInstances/timeline", {"dagId": "train"}, 422, "runId"),
    ],
)
def test_a_bad_timeline_request_says_what_to_change(
    api_server: ApiServer, seeded: Seeded, path: str, params: dict[str, str], status: int, says: str
) -> None:
    response = api_server.get(f"{API}{path}", **params)
    assert response.status_code == status, response.text
    assert says in response.text


def test_events_newest_limit_and_since(api_server: ApiServer, seeded: Seeded) -> None:
    events = api_server.get(f"{API}/events", limit=1000).json()["events"]
    kinds = [event["kind"] for event in events]
    assert kinds[:4] == ["CONFIG_CHANGED"] * 4
    assert kinds.count("PREEMPTED") == 1 and kinds.count("REQUEUED") == 1
    preempted = next(event for event in events if event["kind"] == "PREEMPTED")
    assert (preempted["jobId"], preempted["relatedJobId"], preempted["rule"]) == (
        seeded.urgent_low,
        seeded.urgent_high,
        "IN_SHARE_PRIORITY",
    )
    assert preempted["message"].startswith(f"{seeded.urgent_low} (urgent) preempted by {seeded.urgent_high}")
    assert [event["id"] for event in events] == sorted(event["id"] for event in events)
    newest = api_server.get(f"{API}/events", limit=2).json()["events"]
    assert newest == events[-2:]
    since = api_server.get(f"{API}/events", since=preempted["at"], limit=1000).json()["events"]
    assert since[0]["kind"] == "PREEMPTED" and since == [e for e in events if e["at"] >= preempted["at"]]
    naive = api_server.get(f"{API}/events", since="2026-03-01T12:00:50", limit=1000).json()["events"]
    assert naive == since
    assert api_server.get(f"{API}/events", limit=0).status_code == 422
    assert api_server.get(f"{API}/events", since="yesterday").status_code == 422


def test_snapshot_like_get_job_queue_snapshot(api_server: ApiServer, seeded: Seeded) -> None:
    snapshot = api_server.get(f"{API}/jobQueues/{QUEUE}/snapshot").json()
    front = snapshot["frontOfQueue"]["jobs"]
    assert [(job["jobArn"], job["quotaShareName"], job["position"]) for job in front] == [
        (seeded.urgent_low, "urgent", 1),
        (seeded.vision_b, "vision", 1),
        (seeded.vision_c, "vision", 2),
        (seeded.research_big, "research", 1),
    ]
    shares = snapshot["frontOfQuotaShares"]["quotaShares"]
    assert {name: [job["jobArn"] for job in jobs] for name, jobs in shares.items()} == {
        "research": [seeded.research_big],
        "vision": [seeded.vision_b, seeded.vision_c],
        "urgent": [seeded.urgent_low],
    }
    utilization = snapshot["queueUtilization"]
    assert utilization["totalCapacityUsage"] == [{"capacityUnit": UNIT, "quantity": 7}]
    assert {
        share["quotaShareName"]: share["capacityUsage"][0]["quantity"]
        for share in utilization["quotaShareUtilization"]["topCapacityUtilization"]
    } == {"research": 2, "vision": 3, "urgent": 2}
    (unit,) = snapshot["capacity"]
    assert (unit["capacity"], unit["unowned"], unit["unownedIdle"], unit["overdraft"]) == (8, 0, 0, 0)
    # Laid out by owner, the shares' own + lent + idle make the queue's capacity.
    assert sum(share["own"] + share["lent"] + share["idle"] for share in unit["quotaShares"]) == 8


def test_unowned_capacity_is_lent_first(api_server: ApiServer, seeded: Seeded) -> None:
    ledger = seeded.ledger
    ledger.empty()
    document = {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 6}],
                "quotaShares": [
                    {
                        "quotaShareName": "lender",
                        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                    },
                    {
                        "quotaShareName": "borrower",
                        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 1}],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW"},
                    },
                ],
            }
        ]
    }
    ledger.apply(document)
    ledger.submit("big", "borrower", 5)
    ledger.cycle()
    (unit,) = api_server.get(f"{API}/jobQueues/{QUEUE}/snapshot").json()["capacity"]
    lender, borrower = unit["quotaShares"]
    assert (unit["unowned"], unit["unownedIdle"]) == (3, 0)
    assert unit["unownedLentTo"] == [{"quotaShareName": "borrower", "units": 3}]
    assert borrower["borrowedFrom"] == [
        {"quotaShareName": None, "units": 3},
        {"quotaShareName": "lender", "units": 1},
    ]
    assert (lender["lent"], lender["idle"], lender["lentTo"]) == (
        1,
        1,
        [{"quotaShareName": "borrower", "units": 1}],
    )


# --- writing --------------------------------------------------------------------------------------------


def last_event(api_server: ApiServer) -> dict[str, Any]:
    event: dict[str, Any] = api_server.get(f"{API}/events", limit=1).json()["events"][0]
    return event


def test_updating_a_share_applies_a_new_revision_audited(api_server: ApiServer, seeded: Seeded) -> None:
    response = api_server.send(
        "PATCH",
        f"{API}/quotaShares/{QUEUE}/research",
        {"capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 3}], "state": "DISABLED"},
    )
    assert response.status_code == 200, response.text
    result = response.json()
    (change,) = result["changes"]
    assert (change["quotaShareName"], change["revision"]) == ("research", 2)
    assert change["old"]["capacityLimits"] == [{"capacityUnit": UNIT, "maxCapacity": 4}]
    assert change["new"]["capacityLimits"] == [{"capacityUnit": UNIT, "maxCapacity": 3}]
    assert (change["old"]["state"], change["new"]["state"]) == ("ENABLED", "DISABLED")
    assert result["quotaShare"]["state"] == "DISABLED"
    assert result["quotaShare"]["usage"][0]["limit"] == 3
    event = last_event(api_server)
    assert (event["kind"], event["quotaShareName"]) == ("CONFIG_CHANGED", "research")
    assert event["details"]["appliedBy"] == "admin (REST API)"
    assert event["details"]["source"] == f"REST API (PATCH quotaShares/{QUEUE}/research)"
    assert event["details"]["old"] == change["old"] and event["details"]["new"] == change["new"]
    assert api_server.get(f"{API}/jobQueues").json()["jobQueues"][0]["revision"] == 2
    # The same values again: nothing to apply, no revision.
    again = api_server.send("PATCH", f"{API}/quotaShares/{QUEUE}/research", {"state": "DISABLED"})
    assert again.status_code == 200 and again.json()["changes"] == []


def test_an_invalid_share_update_lists_every_problem_and_changes_nothing(
    api_server: ApiServer, seeded: Seeded
) -> None:
    before = seeded.rows()
    response = api_server.send(
        "PATCH",
        f"{API}/quotaShares/{QUEUE}/urgent",
        {
            "resourceSharingConfiguration": {"strategy": "SHARE_ALL", "borrowLimit": 10},
            "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 5}],
        },
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail["message"].startswith("quota share urgent was not changed: ")
    paths = [error["path"] for error in detail["errors"]]
    assert "resourceSharingConfiguration.strategy" in paths
    over = [error for error in detail["errors"] if error["path"] == "jobQueues[0].quotaShares"]
    assert over[0]["message"].startswith(  # the cross-checks of a quota file, over the whole configuration
        f"the quota shares' maxCapacity for {UNIT} adds up to 11 (research 4, vision 2, urgent 5), more than "
        f"the job queue's capacity of 8 {UNIT}"
    )
    assert seeded.rows() == before

    for body, status, words in (
        ({}, 422, "nothing to change"),
        ({"color": "red"}, 422, "Extra inputs are not permitted"),
        ({"capacityLimits": [{"capacityUnit": "ml.g5", "maxCapacity": 1}]}, 422, "ml.g5"),
        ({"state": "PAUSED"}, 422, "ENABLED or DISABLED"),
    ):
        response = api_server.send("PATCH", f"{API}/quotaShares/{QUEUE}/urgent", body)
        assert response.status_code == status, (body, response.text)
        assert words in response.text, (body, response.text)
    assert (
        api_server.send("PATCH", f"{API}/quotaShares/{QUEUE}/nobody", {"state": "ENABLED"}).status_code == 404
    )
    assert (
        api_server.send("PATCH", f"{API}/quotaShares/other/urgent", {"state": "ENABLED"}).status_code == 404
    )
    assert seeded.rows() == before


def test_updating_a_job_priority_moves_it_and_is_audited(api_server: ApiServer, seeded: Seeded) -> None:
    response = api_server.send(
        "POST", f"{API}/jobs/update-priority", {"jobId": seeded.vision_c, "schedulingPriority": 50}
    )
    assert response.status_code == 200, response.text
    assert (response.json()["schedulingPriority"], response.json()["position"]) == (50, 1)
    assert jobs(api_server)["vision-b"]["position"] == 2
    event = last_event(api_server)
    assert (event["kind"], event["jobId"], event["details"]) == (
        "PRIORITY_CHANGED",
        seeded.vision_c,
        {"old": 5, "new": 50},
    )

    before = seeded.rows()
    for body, status, words in (
        (
            {"jobId": seeded.vision_c, "schedulingPriority": 10000},
            422,
            "must be a whole number from 0 to 9999",
        ),
        ({"jobId": seeded.vision_c, "schedulingPriority": "high"}, 422, "schedulingPriority is 'high'"),
        ({"jobId": seeded.vision_c}, 422, "schedulingPriority"),
        ({"jobId": "train/run-1/nobody/-1/1", "schedulingPriority": 1}, 404, "nobody"),
    ):
        response = api_server.send("POST", f"{API}/jobs/update-priority", body)
        assert response.status_code == status, (body, response.text)
        assert words in response.text, (body, response.text)
    assert seeded.rows() == before


def test_terminating_jobs_waiting_and_running(api_server: ApiServer, seeded: Seeded) -> None:
    waiting = api_server.send(
        "POST", f"{API}/jobs/terminate", {"jobId": seeded.vision_b, "reason": "wrong data"}
    )
    assert waiting.status_code == 200, waiting.text
    assert (waiting.json()["status"], waiting.json()["statusReason"]) == ("FAILED", "wrong data")
    events = api_server.get(f"{API}/events", limit=2).json()["events"]
    assert [(event["kind"], event["jobId"], event["message"]) for event in events] == [
        ("TERMINATED", seeded.vision_b, "wrong data"),
        ("FAILED", seeded.vision_b, "wrong data"),
    ]
    running = api_server.send(
        "POST", f"{API}/jobs/terminate", {"jobId": seeded.vision_a, "reason": "over budget"}
    )
    assert running.status_code == 200, running.text
    job = running.json()
    assert job["status"] == "RUNNING" and job["statusReason"].endswith("over budget")  # stopped first
    assert job["lease"]["instanceCount"] == 3
    assert last_event(api_server)["details"] == {"stopping": True}
    started = job["startedAt"]
    seeded.ledger.stopped(seeded.vision_a)  # its task reports the stop: now it is FAILED
    stopped = api_server.get(f"{API}/jobs/{seeded.vision_a}").json()
    # a finished job keeps when its attempt started, and says when it ended
    assert (stopped["status"], stopped["startedAt"]) == ("FAILED", started) and started is not None
    assert stopped["stoppedAt"] is not None and stopped["stoppedAt"] > started
    never_ran = api_server.get(f"{API}/jobs/{seeded.vision_b}").json()
    assert never_ran["startedAt"] is None and never_ran["stoppedAt"] is not None

    before = seeded.rows()
    for body, status, words in (
        (
            {"jobId": seeded.vision_b, "reason": "again"},
            409,
            "has already finished (FAILED): cannot terminate it",
        ),
        ({"jobId": seeded.vision_c, "reason": "   "}, 422, "reason must say why"),
        ({"jobId": seeded.vision_c, "reason": ""}, 422, "at least 1 character"),
        ({"jobId": seeded.vision_c}, 422, "reason"),
    ):
        response = api_server.send("POST", f"{API}/jobs/terminate", body)
        assert response.status_code == status, (body, response.text)
        assert words in response.text, (body, response.text)
    priority = api_server.send(
        "POST", f"{API}/jobs/update-priority", {"jobId": seeded.vision_b, "schedulingPriority": 1}
    )
    assert priority.status_code == 409
    assert seeded.rows() == before


def test_a_queue_applied_under_looser_rules_answers_409_with_the_fix(
    api_server: ApiServer, seeded: Seeded
) -> None:
    """A ledger applied by an older release may hold what today's rules refuse: reading that queue's
    snapshot says so and how to fix it (409), never a 500."""
    from airflow_quota.ledger.models import JobQueueRow

    with seeded.ledger.engine.begin() as connection:
        connection.execute(
            sa.update(JobQueueRow)
            .where(JobQueueRow.job_queue_name == QUEUE)
            .values(capacity_limits=[{"capacityUnit": UNIT, "maxCapacity": 200_000}])
        )
    answer = api_server.get(f"{API}/jobQueues/{QUEUE}/snapshot")
    assert answer.status_code == 409, answer.text
    assert "no longer validates" in answer.json()["detail"]
    assert "airflow quota apply" in answer.json()["detail"]
