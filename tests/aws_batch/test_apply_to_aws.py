"""``airflow quota apply -f FILE --to-aws`` against the AWS Batch emulator, through Airflow's own CLI parser
in this process (``run_quota``; no database: the command does not touch the ledger) and once as the real
``airflow`` process.

The command reaches the emulator through the Airflow connection ``aws_default`` (``conftest``), with the
client it builds (the provider's Batch hook's) wrapped by ``checked``: every answer the command reads
(Describe*, List*, Create*, UpdateQuotaShare, TagResource) is checked against botocore's output shape, as is
every answer of the plain boto3 client that reads back what AWS then holds.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_quota.aws_batch.apply_to_aws import batch_client
from tests.aws_batch.conftest import UNIT, AnswerLog, checked, quota_file, share
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
    changed = apply_to_aws(write(tmp_path, design(queue, research=1)), "--dry-run")

    assert changed.returncode == 0, changed.stderr
    assert f"capacityLimits.{UNIT}: 2 -> 1" in changed.stdout
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


def test_an_aws_refusal_exits_1_naming_the_field_and_what_was_created_before(
    tmp_path: Path, batch: Any, queue: str
) -> None:
    # Six capacity units in one quota share: our allocator takes it (validate warns), AWS Batch takes five.
    units = [f"ml.g5.{size}xlarge" for size in ("", "2", "4", "8", "12", "16")]
    limits = [{"capacityUnit": unit, "maxCapacity": 1} for unit in units]
    document = {
        "jobQueues": [
            {
                "jobQueueName": queue,
                "capacityLimits": limits,
                "quotaShares": [{**share("wide", "RESERVE", 1), "capacityLimits": limits}],
            }
        ]
    }

    result = apply_to_aws(write(tmp_path, document))

    assert result.returncode == 1
    assert "warning: " in result.stderr and "at most 5 per quota share" in result.stderr
    assert (
        f"AWS Batch refused CreateQuotaShare of quota share wide (job queue {queue}): ClientException: "
        "capacityLimits has 6 entries: a quota share has at most 5 capacity limits" in result.stderr
    )
    assert (
        f"Done in AWS Batch before the error (kept): created service environment {queue}; created "
        f"scheduling policy {queue}; created job queue {queue}." in result.stderr
    )
    assert shares_in_aws(batch, queue) == {}


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
