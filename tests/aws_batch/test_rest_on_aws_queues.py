"""The REST API on a job queue AWS Batch schedules: a real ``airflow api-server`` whose Airflow connection
``aws_default`` points at the emulator shows the queue's shares, snapshot and service jobs read from AWS Batch
(marked ``scheduler: AWS_BATCH``), sends a priority change to AWS Batch, and says why when AWS Batch cannot
answer for a queue, while a queue our allocator schedules is answered from the ledger beside it.

The api-server is tests/ui's SQLite one (``tests.ui.conftest.sqlite_api_server``), started with
``aws_default`` on this worker's emulator, and the page checks use tests/ui's chromium
(``tests.ui.browser.worker_chromium``): this file runs on one worker with tests/ui's (``ONE_WORKER_FILES``
in tests/conftest.py). Each test empties the ledger before it applies its own job queues.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from airflow_quota.backends.sagemaker import TaskIdentity
from tests.aws_batch.conftest import UNIT, create_design, quota_file, share, submit
from tests.aws_batch.test_emulator import status, wait_for
from tests.sagemaker.moto_process import REGION
from tests.ui import browser as page
from tests.ui.conftest import PASSWORDS, ApiServer, Ledger, sqlite_api_server

pytestmark = pytest.mark.airflow

API = "/quota/api"
TIMES = "\u00d7"  # the multiplication sign the page writes between a unit and its count


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> ApiServer:
    """tests/ui's SQLite api-server, started with ``aws_default`` on this worker's emulator (the one
    ``endpoint_url`` gives: ``batch_emulator``)."""
    return sqlite_api_server(request)


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    """The worker's chromium for the module's page checks (``worker_chromium``: tests/ui's too; a test that
    checks the REST API first asks for it only where Chromium is installed: ``request.getfixturevalue``)."""
    driver = page.worker_chromium(request.session)
    yield driver
    page.park(driver)


@pytest.fixture
def queues(batch: Any, unique: str, server: ApiServer) -> dict[str, Any]:
    """Three queues applied: ``aws`` (AWS Batch schedules it; research runs on both instances, one borrowed
    from nlp, then nlp's two jobs: one runs, one waits), ``missing`` (AWS Batch's by the quota file, but
    never created in AWS) and ``ours`` (our allocator's)."""
    aws, missing, ours = f"gpu-{unique}", f"gone-{unique}", f"ours-{unique}"
    design = quota_file(
        aws, 2, share("research", "LEND_AND_BORROW", 1, borrow_limit=-1), share("nlp", "RESERVE", 1)
    )
    create_design(batch, design)
    document = {
        "jobQueues": [
            design["jobQueues"][0] | {"scheduler": "AWS_BATCH"},
            quota_file(missing, 1, share("solo", "RESERVE", 1))["jobQueues"][0] | {"scheduler": "AWS_BATCH"},
            quota_file(ours, 1, share("solo", "LEND", 1))["jobQueues"][0],
        ]
    }
    ledger = Ledger(server.engine)
    ledger.empty()
    ledger.apply(document)
    jobs = {"research": submit(batch, aws, "research-train", "research", 1, duration_s="120")}
    wait_for("research's job to run", lambda: status(batch, jobs["research"]) == "RUNNING")
    jobs["nlp-1"] = submit(batch, aws, "nlp-1", "nlp", 1, duration_s="120")
    wait_for("nlp's first job to run", lambda: status(batch, jobs["nlp-1"]) == "RUNNING")
    jobs["nlp-2"] = submit(batch, aws, "nlp-2", "nlp", 1, duration_s="120")
    wait_for("nlp's second job to wait", lambda: status(batch, jobs["nlp-2"]) == "RUNNABLE")
    return {"aws": aws, "missing": missing, "ours": ours, "jobs": jobs}


def get(server: ApiServer, path: str, **params: Any) -> Any:
    response = server.get(API + path, **params)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_queue_aws_batch_schedules_is_read_from_aws_batch(
    batch: Any, server: ApiServer, queues: dict[str, Any]
) -> None:
    aws, jobs = queues["aws"], queues["jobs"]
    schedulers = {q["jobQueueName"]: q["scheduler"] for q in get(server, "/jobQueues")["jobQueues"]}
    assert schedulers == {aws: "AWS_BATCH", queues["missing"]: "AWS_BATCH", queues["ours"]: "AIRFLOW"}

    shares = {s["quotaShareName"]: s for s in get(server, "/quotaShares", jobQueueName=aws)["quotaShares"]}
    assert list(shares) == ["research", "nlp"]  # quota-file order
    research = shares["research"]
    assert (research["scheduler"], research["error"], research["usage"]) == ("AWS_BATCH", None, [])
    assert research["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": -1}
    assert shares["nlp"]["preemptionConfiguration"] == {"inSharePreemption": "DISABLED"}
    assert (
        research["capacityUsage"] == shares["nlp"]["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 1}]
    )

    snapshot = get(server, f"/jobQueues/{aws}/snapshot")
    assert (snapshot["scheduler"], snapshot["error"], snapshot["capacity"]) == ("AWS_BATCH", None, [])
    assert snapshot["queueUtilization"]["totalCapacityUsage"] == [{"capacityUnit": UNIT, "quantity": 2}]
    (front,) = snapshot["frontOfQuotaShares"]["quotaShares"]["nlp"]
    assert (front["jobArn"].rsplit("/", 1)[-1], front["position"]) == (jobs["nlp-2"], 1)
    assert front["earliestTimeAtPosition"] is not None

    listed = get(server, f"/jobQueues/{aws}/serviceJobs")
    assert (listed["scheduler"], listed["error"]) == ("AWS_BATCH", None)
    by_id = {job["jobId"]: job for job in listed["jobs"]}
    assert list(by_id) == [jobs["nlp-2"], jobs["nlp-1"], jobs["research"]]  # newest first
    running = by_id[jobs["nlp-1"]]
    assert (running["status"], running["quotaShareName"]) == ("RUNNING", "nlp")
    assert running["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 1}]
    arn = running["latestAttempt"]["serviceResourceId"]["value"]
    assert running["trainingJob"]["arn"] == arn
    assert running["trainingJob"]["consoleUrl"] == (
        f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{arn.rsplit('/', 1)[-1]}"
    )
    assert by_id[jobs["nlp-2"]]["trainingJob"] is None  # it has not started
    assert get(server, f"/jobQueues/{aws}/serviceJobs", finished="true")["jobs"] == []
    assert [
        job["jobId"]
        for job in get(server, f"/jobQueues/{aws}/serviceJobs", quotaShareName="research")["jobs"]
    ] == [jobs["research"]]


def test_a_priority_change_through_the_api_reaches_aws_batch(
    batch: Any, server: ApiServer, queues: dict[str, Any]
) -> None:
    aws, waiting = queues["aws"], queues["jobs"]["nlp-2"]

    response = server.send(
        "POST", f"{API}/jobs/update-priority", {"jobId": waiting, "schedulingPriority": 70}
    )

    assert response.status_code == 200, response.text
    job = response.json()
    assert (job["jobId"], job["jobQueueName"], job["schedulingPriority"]) == (waiting, aws, 70)
    assert job["scheduledBy"] == "AWS_BATCH"
    assert batch.describe_service_job(jobId=waiting)["schedulingPriority"] == 70
    events = get(server, "/events", jobQueueName=aws)["events"]
    (event,) = [event for event in events if event["kind"] != "CONFIG_CHANGED"]
    assert (event["kind"], event["jobId"], event["quotaShareName"]) == ("PRIORITY_CHANGED", waiting, "nlp")
    assert (event["details"]["old"], event["details"]["new"]) == (0, 70)

    unknown = server.send("POST", f"{API}/jobs/update-priority", {"jobId": "nobody", "schedulingPriority": 1})
    assert unknown.status_code == 404
    assert "nor in the job queues AWS Batch schedules" in unknown.json()["detail"]
    viewer = server.send(
        "POST", f"{API}/jobs/update-priority", {"jobId": waiting, "schedulingPriority": 1}, user="viewer"
    )
    assert viewer.status_code == 403
    assert batch.describe_service_job(jobId=waiting)["schedulingPriority"] == 70


def test_a_service_job_is_terminated_through_aws_batch_and_a_finished_one_is_a_409(
    batch: Any, server: ApiServer, queues: dict[str, Any]
) -> None:
    aws, jobs = queues["aws"], queues["jobs"]
    running_arn = batch.describe_service_job(jobId=jobs["nlp-1"])["jobArn"]

    by_arn = server.send("POST", f"{API}/jobs/terminate", {"jobId": running_arn, "reason": "wrong data"})
    by_name = server.send("POST", f"{API}/jobs/terminate", {"jobId": "nlp-2", "reason": "not needed"})

    assert by_arn.status_code == 200, by_arn.text
    answer = by_arn.json()
    assert (answer["jobId"], answer["jobQueueName"], answer["scheduledBy"]) == (
        jobs["nlp-1"],
        aws,
        "AWS_BATCH",
    )
    assert answer["isTerminated"] is True
    assert by_name.status_code == 200, by_name.text
    assert by_name.json()["jobId"] == jobs["nlp-2"]
    wait_for(
        "both nlp jobs to fail",
        lambda: status(batch, jobs["nlp-1"]) == status(batch, jobs["nlp-2"]) == "FAILED",
    )
    assert "not needed" in batch.describe_service_job(jobId=jobs["nlp-2"])["statusReason"]
    assert status(batch, jobs["research"]) == "RUNNING"
    events = [
        event for event in get(server, "/events", jobQueueName=aws)["events"] if event["kind"] == "TERMINATED"
    ]
    assert [(event["jobId"], event["quotaShareName"], event["message"]) for event in events] == [
        (jobs["nlp-1"], "nlp", "wrong data"),
        (jobs["nlp-2"], "nlp", "not needed"),
    ]

    # Finished: given by its name (no unfinished job has it), by its id, to terminate or to reprioritise.
    for path, body in [
        ("/jobs/update-priority", {"jobId": "nlp-2", "schedulingPriority": 5}),
        ("/jobs/update-priority", {"jobId": jobs["nlp-2"], "schedulingPriority": 5}),
        ("/jobs/terminate", {"jobId": "nlp-2", "reason": "again"}),
    ]:
        finished = server.send("POST", API + path, body)
        assert finished.status_code == 409, (path, body, finished.text)
        assert f"service job {jobs['nlp-2']} has already finished (FAILED)" in finished.json()["detail"]
    assert get(server, "/jobs/nlp-2")["jobId"] == jobs["nlp-2"]  # read by its name, finished as it is
    viewer = server.send(
        "POST", f"{API}/jobs/terminate", {"jobId": jobs["research"], "reason": "x"}, user="viewer"
    )
    assert viewer.status_code == 403
    assert status(batch, jobs["research"]) == "RUNNING"


def test_an_arn_of_another_resource_type_is_refused_naming_what_to_give(
    batch: Any, server: ApiServer, queues: dict[str, Any]
) -> None:
    research = queues["jobs"]["research"]
    prefix = batch.describe_service_job(jobId=research)["jobArn"].rsplit(":", 1)[0]
    training_arn = batch.describe_service_job(jobId=research)["latestAttempt"]["serviceResourceId"]["value"]
    wrong = [
        f"{prefix}:job-queue/{research}",  # the right id behind the wrong resource type
        f"{prefix}:job/{research}",  # an ECS-style Batch job, not a service job
        training_arn.rsplit("/", 1)[0] + f"/{research}",  # a SageMaker training job's ARN
        "arn:aws:batch",  # not an ARN at all
    ]
    for arn in wrong:
        for method, path, body in [
            ("POST", "/jobs/update-priority", {"jobId": arn, "schedulingPriority": 9}),
            ("POST", "/jobs/terminate", {"jobId": arn, "reason": "no"}),
        ]:
            response = server.send(method, API + path, body)
            assert response.status_code == 422, (arn, path, response.text)
            detail = response.json()["detail"]
            assert f"jobId {arn} is not the ARN of an AWS Batch service job" in detail
            assert "arn:aws:batch:REGION:ACCOUNT_ID:service-job/ID" in detail
        read = server.get(f"{API}/jobs/{arn}")
        assert read.status_code == 422, (arn, read.text)
    described = batch.describe_service_job(jobId=research)
    assert (described["status"], described["schedulingPriority"], described["isTerminated"]) == (
        "RUNNING",
        0,
        False,
    )


def test_one_service_job_shows_its_preemption_as_aws_batch_reports_it(
    batch: Any, server: ApiServer, unique: str, request: pytest.FixtureRequest
) -> None:
    name = f"pre-{unique}"
    design = quota_file(
        name, 2, share("research", "LEND", 1), share("nlp", "LEND_AND_BORROW", 1, borrow_limit=-1)
    )
    create_design(batch, design)
    ledger = Ledger(server.engine)
    ledger.empty()
    ledger.apply({"jobQueues": [design["jobQueues"][0] | {"scheduler": "AWS_BATCH"}]})
    # The job's name is the task key, as the operator names it (the same for every try).
    task_key = TaskIdentity("nlp_pipeline", f"run-{unique}", "train", -1, 1).task_key
    borrower = submit(batch, name, task_key, "nlp", 2, duration_s="120")
    wait_for("nlp's job to run on both instances", lambda: status(batch, borrower) == "RUNNING")
    submit(batch, name, "research-back", "research", 1, duration_s="120")  # research takes its own back
    wait_for("nlp's job to be preempted", lambda: status(batch, borrower) == "RUNNABLE")

    job = get(server, f"/jobs/{borrower}")

    assert (job["jobId"], job["jobQueueName"], job["quotaShareName"]) == (borrower, name, "nlp")
    assert (job["status"], job["schedulingPriority"], job["scheduledBy"]) == ("RUNNABLE", 0, "AWS_BATCH")
    summary = job["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    (attempt,) = summary["recentPreemptedAttempts"]
    assert attempt["serviceResourceId"]["name"] == "TrainingJobArn"
    assert ":training-job/" in attempt["serviceResourceId"]["value"]
    assert attempt["startedAt"] < attempt["stoppedAt"]  # ISO 8601, as every time the API gives
    assert get(server, f"/jobs/{task_key}")["jobId"] == borrower  # by its job name too
    missing = server.get(f"{API}/jobs/nobody")
    assert (
        missing.status_code == 404 and f"nor in the job queues AWS Batch schedules ({name})" in missing.text
    )

    # Its task instance's service jobs, and its Quota tab in Airflow's UI ("no job in the ledger" before).
    task = {"dagId": "nlp_pipeline", "runId": f"run-{unique}", "taskId": "train"}
    found = get(server, "/taskInstances/serviceJobs", **task)
    assert ([job["jobId"] for job in found["jobs"]], found["errors"]) == ([borrower], [])
    assert found["jobs"][0]["preemptionSummary"]["preemptedAttemptCount"] == 1
    assert get(server, "/taskInstances/serviceJobs", **(task | {"taskId": "other"}))["jobs"] == []
    if page.CHROMIUM is None:
        return
    driver: WebDriver = request.getfixturevalue("browser")
    page.hold_session(driver, server.url, "viewer", PASSWORDS["viewer"])
    page.console_errors(driver)  # from here on, the tab's errors (before: Airflow's 401s at its login)
    # The old address leads to the React task view, in Airflow's page of the task instance.
    driver.get(server.url + "/quota/task-instance?" + "&".join(f"{k}={v}" for k, v in task.items()))
    section = page.wait_for(
        driver,
        lambda d: d.find_element(
            By.CSS_SELECTOR, "[data-quota-page=task] section[data-scheduler='AWS_BATCH']"
        ),
        "the task's service job",
    )
    shown = section.text
    assert driver.current_url == f"{server.url}/dags/nlp_pipeline/runs/run-{unique}/tasks/train/plugin/quota"
    driver.save_screenshot(str(page.ARTIFACTS / "gpu-quotas-aws-batch-task.png"))
    errors = page.console_errors(driver)
    assert f"Job queue {name} scheduled by AWS Batch" in shown
    assert (
        f"Service job {task_key} ({borrower}) · quota share nlp · schedulingPriority 0 · now RUNNABLE"
        in shown
    )
    assert "Preempted 1 time" in shown and "PREEMPTED" in shown
    # Expected in the console, and only these: the ledger's 404 (no job of this task in the ledger) that sends
    # the tab to AWS Batch, and Airflow's own UI asking its API for the DAG, its run, task and task instance
    # and its grid, which this api-server does not have (the service job went to AWS Batch, not from a run).
    run = f"run-{unique}"
    ledger_404 = f"quota/api/taskInstances/timeline?dagId=nlp_pipeline&runId={run}&taskId=train&mapIndex=-1"
    airflow_404s = re.compile(
        "api/v2/dags/nlp_pipeline(/details|/tasks/train"
        rf"|/dagRuns/{run}(/taskInstances/train/-1)?)?"
        r"|ui/grid/(structure|runs|ti_summaries)/nlp_pipeline(\?[^ ]*)?"
    )

    def expected(error: str) -> bool:
        address, _, message = error.partition(" - ")
        path = address.removeprefix(server.url + "/")
        return message == NOT_FOUND and (path == ledger_404 or airflow_404s.fullmatch(path) is not None)

    assert [error for error in errors if not expected(error)] == [], errors
    assert f"{server.url}/{ledger_404} - {NOT_FOUND}" in errors  # the tab asked the ledger first


#: How chromium's console logs a 404 answer.
NOT_FOUND = "Failed to load resource: the server responded with a status of 404 (Not Found)"


def test_what_aws_batch_cannot_answer_is_said_and_other_queues_go_on(
    server: ApiServer, queues: dict[str, Any]
) -> None:
    missing, ours = queues["missing"], queues["ours"]

    (solo,) = get(server, "/quotaShares", jobQueueName=missing)["quotaShares"]
    snapshot = get(server, f"/jobQueues/{missing}/snapshot")
    listed = get(server, f"/jobQueues/{missing}/serviceJobs")

    # The applied configuration, marked as AWS Batch's, with why AWS Batch did not answer.
    assert (solo["quotaShareName"], solo["scheduler"]) == ("solo", "AWS_BATCH")
    assert solo["resourceSharingConfiguration"] == {"strategy": "RESERVE"}
    for answer in (solo, snapshot, listed):
        assert answer["error"].startswith("AWS Batch refused (ClientException: "), answer["error"]
        assert f"Job queue {missing} does not exist" in answer["error"]
        assert "'airflow quota apply -f FILE --to-aws' creates it" in answer["error"]
    assert listed["jobs"] == [] and snapshot["frontOfQueue"]["jobs"] == []
    (ours_share,) = get(server, "/quotaShares", jobQueueName=ours)["quotaShares"]
    assert (ours_share["scheduler"], ours_share["error"], len(ours_share["usage"])) == ("AIRFLOW", None, 1)
    refused = server.get(f"{API}/jobQueues/{ours}/serviceJobs")
    assert refused.status_code == 409 and "scheduled by our allocator" in refused.json()["detail"]
    patch = server.send("PATCH", f"{API}/quotaShares/{missing}/solo", {"state": "DISABLED"})
    assert patch.status_code == 409 and "apply -f FILE --to-aws" in patch.json()["detail"]


#: What the page shows of each job queue's section, read in one script run (it redraws every few seconds).
SECTIONS = """
const text = (node) => (node ? node.innerText.trim() : null);
const sections = {};
for (const section of document.querySelectorAll("section.queue")) {
  sections[section.dataset.queue] = {
    scheduler: section.dataset.scheduler || "AIRFLOW",
    title: text(section.querySelector("h2")),
    errors: [...section.querySelectorAll(".error")].map(text),
    totals: [...section.querySelectorAll(".unit .queue-total")].map(text),
    shares: Object.fromEntries([...section.querySelectorAll("table.shares tr[data-share]")].map(
      (row) => [row.dataset.share, [...row.querySelectorAll("td")].map(text)])),
    jobs: Object.fromEntries([...section.querySelectorAll("table.service-jobs tr[data-job]")].map((row) => {
      const link = row.querySelector("td:last-child a");
      return [row.dataset.job, { cells: [...row.querySelectorAll("td")].map(text), href: link && link.href }];
    })),
    timeline: section.querySelector(".timeline") !== null,
  };
}
return sections;
"""


@page.NEEDS_CHROMIUM
def test_the_page_shows_a_queue_aws_batch_schedules_marked_and_read_from_aws(
    server: ApiServer, queues: dict[str, Any], browser: WebDriver
) -> None:
    aws, jobs = queues["aws"], queues["jobs"]
    page.hold_session(browser, server.url, "viewer", PASSWORDS["viewer"])
    page.console_errors(browser)  # from here on, the page's errors (before: Airflow's 401s at its login)
    browser.get(server.url + "/quota/")  # the old address: the page in Airflow's UI

    def drawn(d: WebDriver) -> dict[str, Any] | None:
        sections: dict[str, Any] = d.execute_script(SECTIONS)
        ready = aws in sections and len(sections[aws]["jobs"]) == 3 and queues["missing"] in sections
        return sections if ready else None

    sections = page.wait_for(browser, drawn, "the queue AWS Batch schedules, with its service jobs")
    browser.save_screenshot(str(page.ARTIFACTS / "gpu-quotas-aws-batch-queue.png"))
    errors = page.console_errors(browser)

    shown = sections[aws]
    assert shown["scheduler"] == "AWS_BATCH" and "scheduled by AWS Batch" in shown["title"]
    assert (shown["errors"], shown["timeline"]) == ([], False)
    assert shown["totals"] == ["2 total: 2 in use, 0 idle"]
    assert shown["shares"]["research"][1:] == [
        "LEND_AND_BORROW",
        "no limit",
        "DISABLED",
        "ENABLED",
        f"{UNIT} {TIMES} 1",
        f"{UNIT} {TIMES} 1",
    ]
    assert shown["shares"]["nlp"][1:3] == ["RESERVE", "-"]
    waiting = shown["jobs"][jobs["nlp-2"]]
    assert waiting["cells"][:2] == ["nlp", "1"] and waiting["cells"][3] == "RUNNABLE"
    running = shown["jobs"][jobs["nlp-1"]]
    assert running["cells"][3] == "RUNNING"
    assert running["href"].startswith(f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/")
    missing = sections[queues["missing"]]
    assert missing["scheduler"] == "AWS_BATCH"
    assert any(f"Job queue {queues['missing']} does not exist" in error for error in missing["errors"])
    assert missing["totals"] == []  # no usage bar drawn when AWS Batch did not say the usage
    ours = sections[queues["ours"]]
    assert (ours["scheduler"], ours["timeline"]) == ("AIRFLOW", True)
    assert errors == []
