"""``airflow quota apply -f FILE --to-aws`` against the AWS Batch emulator, through Airflow's own CLI parser
in this process (``run_quota``; no database: the command does not touch the ledger) and once as the real
``airflow`` process.

The command reaches the emulator through the Airflow connection ``aws_default`` (``conftest``), with the
client it builds (the provider's Batch hook's) wrapped by ``checked``: every answer the command reads
(Describe*, List*, Create*, UpdateQuotaShare, TagResource) is checked against botocore's output shape, as is
every answer of the plain boto3 client that reads back what AWS then holds.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_quota.aws_batch.apply_to_aws import batch_client
from tests.aws_batch.conftest import UNIT, AnswerLog, checked, emulator_behaviour, quota_file, share
from tests.cli.in_process import run_quota
from tests.cli.test_quota_cli import AIRFLOW


def write(tmp_path: Path, document: dict[str, Any], name: str = "quotas.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


def apply_to_aws(path: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_quota(["apply", "-f", path, "--to-aws", *flags])


def shares_in_aws(batch: Any, queue: str) -> dict[str, dict[str, Any]]:
    return {s["quotaShareName"]: s for s in batch.list_quota_shares(jobQueue=queue)["quotaShares"]}


def limit_of(share_answer: dict[str, Any]) -> int:
    return int(share_answer["capacityLimits"][0]["maxCapacity"])


def design(queue: str, research: int = 2) -> dict[str, Any]:
    return quota_file(
        queue,
        6,
        share("research", "LEND", research),
        share("nlp", "LEND_AND_BORROW", 2, borrow_limit=100, inSharePreemption="ENABLED"),
    )


@pytest.fixture
def queue(unique: str) -> str:
    return f"apply-{unique}"


@pytest.fixture(autouse=True)
def command_answers_checked(answers: AnswerLog, monkeypatch: pytest.MonkeyPatch) -> AnswerLog:
    """The command's own Batch client (``batch_client``, the provider's hook) with every answer it parses
    going through ``answers`` (whose fixture fails the test on any answer outside botocore's shape)."""

    def checked_client(aws_conn_id: str, region_name: str | None) -> Any:
        return checked(batch_client(aws_conn_id, region_name), answers)

    monkeypatch.setattr("airflow_quota.cli.apply_to_aws.batch_client", checked_client)
    return answers


def test_first_apply_creates_all_four_kinds_in_dependency_order(
    tmp_path: Path, batch: Any, queue: str, answers: AnswerLog
) -> None:
    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 0, result.stderr
    # Every operation the command called answered within botocore's shape (the answers fixture's check).
    assert {
        "DescribeServiceEnvironments",
        "DescribeJobQueues",
        "CreateServiceEnvironment",
        "CreateSchedulingPolicy",
        "CreateJobQueue",
        "CreateQuotaShare",
    } <= set(answers.checked)
    for title in (
        f"added: service environment {queue}",
        f"added: scheduling policy {queue}",
        f"added: job queue {queue}",
        f"added: quota share research (job queue {queue})",
        f"added: quota share nlp (job queue {queue})",
    ):
        assert title in result.stdout
    assert f"capacityLimits.{UNIT}: 6" in result.stdout
    assert "Applied to AWS Batch: created service environment" in result.stdout
    environment = batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"]
    assert environment[0]["capacityLimits"] == [{"capacityUnit": UNIT, "maxCapacity": 6}]
    job_queue = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]
    policy = batch.describe_scheduling_policies(arns=[job_queue["schedulingPolicyArn"]])
    assert policy["schedulingPolicies"][0]["quotaSharePolicy"] == {"idleResourceAssignmentStrategy": "FIFO"}
    shares = shares_in_aws(batch, queue)
    assert {name: limit_of(s) for name, s in shares.items()} == {"research": 2, "nlp": 2}
    assert shares["nlp"]["resourceSharingConfiguration"] == {
        "strategy": "LEND_AND_BORROW",
        "borrowLimit": 100,
    }
    assert shares["nlp"]["preemptionConfiguration"] == {"inSharePreemption": "ENABLED"}


def test_second_apply_updates_only_the_changed_share_and_prints_its_diff(
    tmp_path: Path, batch: Any, queue: str, answers: AnswerLog
) -> None:
    assert apply_to_aws(write(tmp_path, design(queue))).returncode == 0
    arns_before = {name: s["quotaShareArn"] for name, s in shares_in_aws(batch, queue).items()}

    result = apply_to_aws(write(tmp_path, design(queue, research=3)))

    assert result.returncode == 0, result.stderr
    assert f"changed: quota share research (job queue {queue})\n    capacityLimits.{UNIT}: 2 -> 3" in (
        result.stdout
    )
    for title in (
        f"unchanged: service environment {queue}",
        f"unchanged: scheduling policy {queue}",
        f"unchanged: job queue {queue}",
        f"unchanged: quota share nlp (job queue {queue})",
    ):
        assert title in result.stdout
    assert f"Applied to AWS Batch: updated quota share research (job queue {queue})." in result.stdout
    shares = shares_in_aws(batch, queue)
    assert {name: limit_of(s) for name, s in shares.items()} == {"research": 3, "nlp": 2}
    assert {name: s["quotaShareArn"] for name, s in shares.items()} == arns_before  # updated, not recreated
    assert answers.checked.get("UpdateQuotaShare") == 1  # the command's answer, checked against its shape

    again = apply_to_aws(write(tmp_path, design(queue, research=3)))
    assert again.returncode == 0 and "Nothing to apply: AWS Batch already matches the file." in again.stdout


def test_dry_run_prints_the_diff_and_changes_nothing(tmp_path: Path, batch: Any, queue: str) -> None:
    new = apply_to_aws(write(tmp_path, design(queue)), "--dry-run")

    assert new.returncode == 0, new.stderr
    assert f"added: job queue {queue}" in new.stdout
    assert "Dry run: 5 resources to create, 0 resources to change" in new.stdout
    assert batch.describe_job_queues(jobQueues=[queue])["jobQueues"] == []

    assert apply_to_aws(write(tmp_path, design(queue))).returncode == 0
    changed = apply_to_aws(write(tmp_path, design(queue, research=3)), "--dry-run")

    assert changed.returncode == 0, changed.stderr
    assert f"capacityLimits.{UNIT}: 2 -> 3" in changed.stdout
    assert "Dry run: 0 resources to create, 1 resource to change" in changed.stdout
    assert limit_of(shares_in_aws(batch, queue)["research"]) == 2


def test_a_queue_moved_to_aws_batch_in_the_file_gets_its_scheduler_tag(
    tmp_path: Path, batch: Any, queue: str, answers: AnswerLog
) -> None:
    assert apply_to_aws(write(tmp_path, design(queue))).returncode == 0
    moved = design(queue)
    moved["jobQueues"][0]["scheduler"] = "AWS_BATCH"

    result = apply_to_aws(write(tmp_path, moved))

    assert result.returncode == 0, result.stderr
    assert f"changed: job queue {queue}\n    tags.airflow-quota:scheduler: - -> AWS_BATCH" in result.stdout
    assert f"tagged job queue {queue} (airflow-quota:scheduler=AWS_BATCH)" in result.stdout
    job_queue = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]
    assert job_queue["tags"] == {"airflow-quota:scheduler": "AWS_BATCH"}
    assert batch.list_tags_for_resource(resourceArn=job_queue["jobQueueArn"])["tags"] == job_queue["tags"]
    assert "Nothing to apply" in apply_to_aws(write(tmp_path, moved)).stdout
    assert answers.checked.get("TagResource") == 1  # the command's answer, checked against its shape


def test_a_share_aws_has_but_the_file_lacks_is_reported_and_kept(
    tmp_path: Path, batch: Any, queue: str
) -> None:
    assert apply_to_aws(write(tmp_path, design(queue))).returncode == 0
    batch.create_quota_share(jobQueue=queue, **share("legacy", "RESERVE", 1))

    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 0, result.stderr
    assert (
        f"in AWS, not in the file (kept): quota share legacy (job queue {queue}); apply never deletes"
        in result.stdout
    )
    assert set(shares_in_aws(batch, queue)) == {"research", "nlp", "legacy"}


def six_limit_document(queue: str) -> dict[str, Any]:
    """Six capacity units in one quota share: our allocator takes them (validate warns), AWS Batch five."""
    units = [f"ml.g5.{size}xlarge" for size in ("", "2", "4", "8", "12", "16")]
    limits = [{"capacityUnit": unit, "maxCapacity": 1} for unit in units]
    return {
        "jobQueues": [
            {
                "jobQueueName": queue,
                "capacityLimits": copy.deepcopy(limits),
                "quotaShares": [{**share("wide", "RESERVE", 1), "capacityLimits": limits}],
            }
        ]
    }


def test_what_aws_refuses_is_refused_before_the_first_call(
    tmp_path: Path, batch: Any, queue: str, answers: AnswerLog
) -> None:
    """Issue 35 item 2: six limits in a share used to create the service environment, scheduling policy and
    job queue, then fail at CreateQuotaShare, leaving half a design behind."""
    document = six_limit_document(queue)
    document["jobQueues"][0]["capacityLimits"].append({"capacityUnit": "local-gpu", "maxCapacity": 0})
    many = quota_file(f"{queue}-many", 21, *(share(f"s{i}", "LEND", 1) for i in range(21)))
    document["jobQueues"] += many["jobQueues"]

    result = apply_to_aws(write(tmp_path, document))

    assert result.returncode == 1
    for refusal in (
        "jobQueues[0].quotaShares[0].capacityLimits: quota share wide has 6 capacity limits; AWS Batch "
        "allows at most 5 per quota share",
        "jobQueues[0].capacityLimits[6].capacityUnit: local-gpu is the Airflow worker's own GPUs",
        "jobQueues[0].capacityLimits[6].maxCapacity: maxCapacity 0",
        f"jobQueues[1].quotaShares: job queue {queue}-many has 21 quota shares; AWS Batch allows at most 20",
    ):
        assert f"error: {refusal}" in result.stderr
    assert "AWS Batch would refuse this design: nothing was sent" in result.stderr
    assert not {op for op in answers.checked if op.startswith(("Create", "Update", "Tag"))}
    assert batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"] == []


def test_a_failed_call_stops_the_apply_saying_what_was_created_and_how_to_finish_or_undo_it(
    tmp_path: Path, batch: Any, queue: str, endpoint_url: str
) -> None:
    emulator_behaviour(endpoint_url, queue, refuse={"CreateQuotaShare": "Rate exceeded"})

    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 1
    assert (
        f"AWS Batch refused CreateQuotaShare of quota share research (job queue {queue}): ClientException: "
        "Rate exceeded" in result.stderr
    )
    assert (
        f"Done in AWS Batch before the error (kept): created service environment {queue}; created "
        f"scheduling policy {queue}; created job queue {queue}." in result.stderr
    )
    assert "To finish, fix what AWS Batch refused and run the same apply again" in result.stderr
    arn = "arn:aws:batch:us-east-1:123456789012"
    undo = result.stderr[result.stderr.index("To undo what this apply created") :]
    assert [line.strip() for line in undo.splitlines()[1:]] == [
        f"aws batch update-job-queue --job-queue {arn}:job-queue/{queue} --state DISABLED",
        f"aws batch delete-job-queue --job-queue {arn}:job-queue/{queue}",
        f"aws batch delete-scheduling-policy --arn {arn}:scheduling-policy/{queue}",
        f"aws batch update-service-environment --service-environment {arn}:service-environment/{queue} "
        "--state DISABLED",
        f"aws batch delete-service-environment --service-environment {arn}:service-environment/{queue}",
    ]
    emulator_behaviour(endpoint_url, queue)
    finished = apply_to_aws(write(tmp_path, design(queue)))
    assert finished.returncode == 0, finished.stderr
    assert f"unchanged: job queue {queue}" in finished.stdout
    assert set(shares_in_aws(batch, queue)) == {"research", "nlp"}


# --- item 1: an imported design applied changes nothing; in place, never re-pointed or lowered unasked ---


def live_account(batch: Any, queue: str, unique: str) -> dict[str, str]:
    """A design made in AWS by hand, not by us: its service environment and scheduling policy have names
    of their own, the job queue priority 5; returns the names."""
    names = {"environment": f"ml-g5-{unique}", "policy": f"quota-{unique}"}
    batch.create_service_environment(
        serviceEnvironmentName=names["environment"],
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"capacityUnit": UNIT, "maxCapacity": 6}],
        tags={"team": "platform"},
    )
    policy_arn = batch.create_scheduling_policy(
        name=names["policy"], quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )["arn"]
    batch.create_job_queue(
        jobQueueName=queue,
        jobQueueType="SAGEMAKER_TRAINING",
        state="ENABLED",
        priority=5,
        schedulingPolicyArn=policy_arn,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": names["environment"]}],
    )
    for body in design(queue)["jobQueues"][0]["quotaShares"]:
        batch.create_quota_share(jobQueue=queue, **body)
    return names


def described(batch: Any, tmp_path: Path, queue: str, names: dict[str, str]) -> list[str]:
    """The live design as the AWS CLI's describe/list commands print it, one file each."""
    job_queues = batch.describe_job_queues(jobQueues=[queue])
    answers = {
        "se.json": batch.describe_service_environments(serviceEnvironments=[names["environment"]]),
        "jq.json": job_queues,
        "sp.json": batch.describe_scheduling_policies(
            arns=[job_queues["jobQueues"][0]["schedulingPolicyArn"]]
        ),
        "shares.json": batch.list_quota_shares(jobQueue=queue),
    }
    paths = []
    for name, answer in answers.items():
        answer.pop("ResponseMetadata", None)
        (tmp_path / name).write_text(json.dumps(answer))
        paths.append(str(tmp_path / name))
    return paths


def test_a_design_imported_from_the_live_account_applies_as_nothing_to_do(
    tmp_path: Path, batch: Any, queue: str, unique: str, answers: AnswerLog
) -> None:
    """Issue 35 item 1: it used to plan a second service environment and a scheduling policy named after
    the job queue, and UpdateJobQueue priority 5 -> 1 re-pointing the queue at them."""
    names = live_account(batch, queue, unique)
    files = described(batch, tmp_path, queue, names)

    direct = run_quota(["apply", *(arg for path in files for arg in ("-f", path)), "--to-aws"])
    imported = tmp_path / "quotas.yaml"
    assert run_quota(["import", *files, "-o", str(imported)]).returncode == 0
    from_file = apply_to_aws(str(imported))

    for result in (direct, from_file):
        assert result.returncode == 0, result.stderr
        assert "Nothing to apply: AWS Batch already matches the file." in result.stdout
        assert f"unchanged: service environment {names['environment']}" in result.stdout
        assert f"unchanged: scheduling policy {names['policy']}" in result.stdout
    queue_in_file = yaml.safe_load(imported.read_text())["jobQueues"][0]
    assert {
        key: queue_in_file[key] for key in ("priority", "schedulingPolicyArn", "serviceEnvironmentOrder")
    } == {
        "priority": 5,
        "schedulingPolicyArn": names["policy"],
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": names["environment"]}],
    }
    assert not {op for op in answers.checked if op.startswith(("Create", "Update", "Tag"))} - {
        "CreateServiceEnvironment",
        "CreateSchedulingPolicy",
        "CreateJobQueue",
        "CreateQuotaShare",
    }  # only live_account's own
    assert answers.checked["CreateServiceEnvironment"] == 1
    assert batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"] == []
    assert batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["priority"] == 5


def test_a_quota_file_that_names_no_service_environment_updates_the_one_the_queue_uses_in_place(
    tmp_path: Path, batch: Any, queue: str, unique: str
) -> None:
    names = live_account(batch, queue, unique)
    document = design(queue, research=3)
    document["jobQueues"][0]["capacityLimits"][0]["maxCapacity"] = 8

    result = apply_to_aws(write(tmp_path, document))

    assert result.returncode == 0, result.stderr
    assert f"changed: service environment {names['environment']}\n    capacityLimits.{UNIT}: 6 -> 8" in (
        result.stdout
    )
    assert f"unchanged: job queue {queue}" in result.stdout  # priority 5 and both references kept
    assert "CreateServiceEnvironment" not in result.stdout and "added:" not in result.stdout
    job_queue = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]
    assert job_queue["priority"] == 5 and job_queue["schedulingPolicyArn"].endswith(names["policy"])
    assert batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"] == []
    environment = batch.describe_service_environments(serviceEnvironments=[names["environment"]])
    assert environment["serviceEnvironments"][0]["capacityLimits"][0]["maxCapacity"] == 8


def test_lowering_or_re_pointing_is_refused_unless_a_flag_names_it(
    tmp_path: Path, batch: Any, queue: str, unique: str
) -> None:
    names = live_account(batch, queue, unique)
    lowered = design(queue, research=1)
    lowered["jobQueues"][0]["priority"] = 3
    lowered["jobQueues"][0]["quotaShares"][1]["state"] = "DISABLED"

    refused = apply_to_aws(write(tmp_path, lowered))

    assert refused.returncode == 1
    for message in (
        f"error: job queue {queue}: priority 5 -> 3 lowers it: pass --allow-lower to apply it",
        f"error: quota share research (job queue {queue}): capacityLimits.{UNIT} 2 -> 1 lowers it",
        f"error: quota share nlp (job queue {queue}): state ENABLED -> DISABLED lowers it",
    ):
        assert message in refused.stderr
    assert "Nothing was sent to AWS Batch." in refused.stderr
    assert limit_of(shares_in_aws(batch, queue)["research"]) == 2

    allowed = apply_to_aws(write(tmp_path, lowered), "--allow-lower")
    assert allowed.returncode == 0, allowed.stderr
    assert limit_of(shares_in_aws(batch, queue)["research"]) == 1
    assert batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["priority"] == 3

    other = f"other-{unique}"
    batch.create_service_environment(
        serviceEnvironmentName=other,
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"capacityUnit": UNIT, "maxCapacity": 6}],
    )
    repointed = copy.deepcopy(lowered)
    repointed["jobQueues"][0]["serviceEnvironmentOrder"] = [{"order": 1, "serviceEnvironment": other}]

    refused = apply_to_aws(write(tmp_path, repointed))
    assert refused.returncode == 1
    assert (
        f"error: job queue {queue}: serviceEnvironmentOrder 1:{names['environment']} -> 1:{other} "
        "re-points it: pass --allow-repoint to apply it" in refused.stderr
    )
    assert apply_to_aws(write(tmp_path, repointed), "--allow-repoint").returncode == 0
    job_queue = batch.describe_job_queues(jobQueues=[queue])["jobQueues"][0]
    assert job_queue["serviceEnvironmentOrder"][0]["serviceEnvironment"].endswith(f"/{other}")


def test_dry_run_prints_every_aws_call_in_order(tmp_path: Path, batch: Any, queue: str) -> None:
    result = apply_to_aws(write(tmp_path, design(queue)), "--dry-run")

    assert result.returncode == 0, result.stderr
    calls = result.stdout[result.stdout.index("AWS calls, in order") :].splitlines()[1:]
    assert [line.split(" {")[0].split(" until")[0].strip() for line in calls if line.strip()] == [
        "1. CreateServiceEnvironment",
        "2. DescribeServiceEnvironments",
        "3. CreateSchedulingPolicy",
        "4. DescribeSchedulingPolicies",
        "5. CreateJobQueue",
        "6. DescribeJobQueues",
        "7. CreateQuotaShare",
        "8. ListQuotaShares",
        "9. CreateQuotaShare",
        "10. ListQuotaShares",
        "Dry run: 5 resources to create, 0 resources to change; nothing was sent to AWS Batch.",
    ]
    assert f'5. CreateJobQueue {{"jobQueueName": "{queue}"' in result.stdout
    assert f"6. DescribeJobQueues until job queue {queue} is VALID" in result.stdout


# --- item 3: credentials --------------------------------------------------------------------------------


def test_an_unknown_connection_id_is_an_error_naming_it(tmp_path: Path, batch: Any, queue: str) -> None:
    """Issue 35 item 3: it used to log "switching to empty" and use the ambient credentials, exit 0."""
    result = apply_to_aws(write(tmp_path, design(queue)), "--aws-conn-id", "nope")

    assert result.returncode == 1
    assert "error: the Airflow connection nope is not defined" in result.stderr
    assert "Nothing was sent to AWS Batch." in result.stderr
    assert batch.describe_job_queues(jobQueues=[queue])["jobQueues"] == []


def test_without_a_connection_id_or_aws_default_the_environments_credentials_are_used_and_said(
    tmp_path: Path, batch: Any, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT")  # AWS_ENDPOINT_URL still points boto3 at the emulator

    result = apply_to_aws(write(tmp_path, design(queue)), "--dry-run")

    assert result.returncode == 0, result.stderr
    assert (
        "note: no --aws-conn-id and no Airflow connection aws_default: using this environment's AWS "
        "credentials (boto3's default chain)" in result.stderr
    )
    assert f"added: job queue {queue}" in result.stdout


# --- item 4: waits --------------------------------------------------------------------------------------


@pytest.fixture
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("airflow_quota.aws_batch.apply_to_aws.SETTLE_POLL_S", 0.1)


def test_each_create_waits_until_aws_shows_the_resource_valid_quota_shares_included(
    tmp_path: Path, batch: Any, queue: str, endpoint_url: str, quick_waits: None
) -> None:
    """Issue 35 item 4: an empty Describe answer right after a Create read as "done", so CreateJobQueue
    named a service environment AWS did not show yet; quota shares were never waited on."""
    emulator_behaviour(endpoint_url, queue, invisibleSeconds=0.4, creatingSeconds=0.8)

    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 0, result.stderr
    assert {s["status"] for s in shares_in_aws(batch, queue).values()} == {"VALID"}

    emulator_behaviour(endpoint_url, queue, updatingSeconds=0.8, kinds=["quotaShares"])
    updated = apply_to_aws(write(tmp_path, design(queue, research=3)))

    assert updated.returncode == 0, updated.stderr
    assert shares_in_aws(batch, queue)["research"]["status"] == "VALID"


def test_a_resource_aws_makes_invalid_stops_the_apply_with_its_reason(
    tmp_path: Path, batch: Any, queue: str, endpoint_url: str, quick_waits: None
) -> None:
    emulator_behaviour(
        endpoint_url, queue, creatingSeconds=0.3, invalidReason="capacity unit unknown", kinds=["quotaShares"]
    )

    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 1
    assert (
        f"error: AWS Batch made quota share research (job queue {queue}) INVALID: no reason given"
        in result.stderr
    )
    assert f"created quota share research (job queue {queue})." in result.stderr
    assert "aws batch delete-quota-share --quota-share-arn " in result.stderr


def test_a_wait_is_bounded(
    tmp_path: Path,
    batch: Any,
    queue: str,
    endpoint_url: str,
    quick_waits: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("airflow_quota.aws_batch.apply_to_aws.SETTLE_TIMEOUT_S", 0.5)
    emulator_behaviour(endpoint_url, queue, creatingSeconds=60, kinds=["jobQueues"])

    result = apply_to_aws(write(tmp_path, design(queue)))

    assert result.returncode == 1
    assert f"error: job queue {queue} is still CREATING after 0.5 s" in result.stderr


@pytest.mark.airflow
def test_the_airflow_process_prints_the_dry_run_diff(tmp_path: Path, batch: Any, queue: str) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home"), "COLUMNS": "200"}
    result = subprocess.run(
        [str(AIRFLOW), "quota", "apply", "-f", write(tmp_path, design(queue)), "--to-aws", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert f"added: quota share nlp (job queue {queue})" in result.stdout
    assert "Dry run: 5 resources to create" in result.stdout
    assert batch.describe_job_queues(jobQueues=[queue])["jobQueues"] == []
