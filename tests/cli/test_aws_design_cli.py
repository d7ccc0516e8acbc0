"""``airflow quota import``, ``export``, and ``validate`` / ``apply`` given AWS Batch documents."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from airflow_quota.cli.aws_design import run_export, run_import
from airflow_quota.cli.validate import run_validate
from airflow_quota.config_file import MAX_FILE_BYTES, load_quota_file
from airflow_quota.ledger.models import JobQueueRow, QuotaShareRow
from tests.cli.in_process import run_quota
from tests.cli.test_quota_cli import EXAMPLE_FILE, airflow
from tests.db.conftest import Database
from tests.unit.aws_batch.test_design import DESCRIBED, LISTED_SHARES, botocore_errors


def write_json(path: Path, document: object) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def test_export_prints_request_bodies_botocore_accepts_and_import_writes_the_same_quota_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_export([str(EXAMPLE_FILE)], region="us-east-1", account_id="123456789012") == 0
    exported = capsys.readouterr()
    bundle = json.loads(exported.out)
    assert botocore_errors(bundle) == []
    assert "REGION" not in exported.out and exported.err == ""

    written = tmp_path / "quotas.yaml"
    assert run_import([write_json(tmp_path / "aws.json", bundle)], str(written)) == 0

    assert "Wrote" in capsys.readouterr().err
    assert load_quota_file(written).to_job_queues() == load_quota_file(EXAMPLE_FILE).to_job_queues()


def test_export_without_region_and_account_says_the_arn_has_placeholders(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_export([str(EXAMPLE_FILE)]) == 0

    printed = capsys.readouterr()
    assert "scheduling-policy/gpu-training" in printed.out
    assert "pass --region and --account-id" in printed.err


def test_export_warns_about_what_aws_batch_refuses_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35 item 10: export printed designs AWS refuses without a word."""
    units = [f"ml.g5.{size}xlarge" for size in ("", "2", "4", "8", "12", "16")]
    limits = [{"capacityUnit": unit, "maxCapacity": 1} for unit in units]
    document = {
        "jobQueues": [
            {
                "jobQueueName": "wide",
                "capacityLimits": [*limits, {"capacityUnit": "local-gpu", "maxCapacity": 0}],
                "quotaShares": [
                    {
                        "quotaShareName": "all",
                        "capacityLimits": limits,
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
                    }
                ],
            }
        ]
    }
    path = write_json(tmp_path / "quotas.json", document)
    assert run_validate([path], as_json=True) == 0
    validated = [(w["path"], w["message"]) for w in json.loads(capsys.readouterr().out)["warnings"]]

    assert run_export([path]) == 0

    printed = capsys.readouterr()
    assert json.loads(printed.out)["quotaShares"][0]["quotaShareName"] == "all"
    warned = [
        line.removeprefix("warning: ") for line in printed.err.splitlines() if line.startswith("warning")
    ]
    assert warned == [f"{path}: {message}" for path, message in validated]
    assert len(warned) == 3  # six limits, a local unit, maxCapacity 0


def test_import_prints_the_quota_file_and_lists_what_it_did_not_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [
        write_json(tmp_path / "described.json", DESCRIBED),
        write_json(tmp_path / "shares.json", LISTED_SHARES),
    ]

    assert run_import(files) == 0

    printed = capsys.readouterr()
    quota_file = yaml.safe_load(printed.out)
    assert [share["quotaShareName"] for share in quota_file["jobQueues"][0]["quotaShares"]] == [
        "qs1",
        "qs2",
        "qs3",
    ]
    assert f"not kept: {files[0]}:serviceEnvironments[0].tags" in printed.err


def test_import_lists_the_scheduling_policys_tags_as_not_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35 item 10: a scheduling policy's tags were dropped without a word."""
    described = json.loads(json.dumps(DESCRIBED))
    described["schedulingPolicies"][0]["tags"] = {"cost-centre": "42"}
    files = [
        write_json(tmp_path / "described.json", described),
        write_json(tmp_path / "shares.json", LISTED_SHARES),
    ]

    assert run_import(files) == 0

    assert (
        f"not kept: {files[0]}:schedulingPolicies[0].tags: the scheduling policy's tags are not kept"
        in capsys.readouterr().err
    )


def test_import_of_an_incomplete_design_exits_1_writes_nothing_and_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "quotas.yaml"

    assert run_import([write_json(tmp_path / "shares.json", LISTED_SHARES)], str(output)) == 1

    printed = capsys.readouterr()
    assert "quotaShares[0].jobQueueArn" in printed.err
    assert "add its CreateJobQueue body or DescribeJobQueues answer" in printed.err
    assert not output.exists()


#: The address space the import below may use: enough for Python and its imports, far less than a read
#: of /dev/zero without a bound takes before it fails (so the test never starves the machine).
IMPORT_ADDRESS_SPACE = 3 * 2**30


@pytest.mark.parametrize("endless", ["/dev/zero", "/dev/urandom"])
def test_import_of_an_endless_file_says_it_is_too_large_without_a_traceback(endless: str) -> None:
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (IMPORT_ADDRESS_SPACE, IMPORT_ADDRESS_SPACE))

    started = time.monotonic()
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airflow_quota.cli.aws_design import run_import; "
            f"sys.exit(run_import([{endless!r}]))",
        ],
        capture_output=True,
        text=True,
        preexec_fn=limit_memory,
        timeout=120,
        check=False,
    )

    assert ran.returncode == 1, ran.stderr[-2000:]
    assert "Traceback" not in ran.stderr, ran.stderr[-2000:]
    assert ran.stdout == ""
    assert [line.strip() for line in ran.stderr.splitlines()] == [
        f"{endless} is invalid: 1 error",
        f"the file holds more than {MAX_FILE_BYTES // 2**20} MiB: quota files, AWS Batch documents and "
        "scenarios need far less; give the file itself, not a device or a stream",
        "Nothing was written.",
    ]
    assert time.monotonic() - started < 60


def test_validate_reads_aws_documents_and_warns_at_their_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shares = json.loads(json.dumps(LISTED_SHARES))
    del shares["quotaShares"][2]["preemptionConfiguration"]  # optional in ListQuotaShares' answer
    files = [write_json(tmp_path / "described.json", DESCRIBED), write_json(tmp_path / "shares.json", shares)]

    assert run_validate(files, as_json=True) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert [warning["path"] for warning in report["warnings"]] == [
        f"{files[1]}:quotaShares[2].preemptionConfiguration",
        f"{files[0]}:serviceEnvironments[0].tags",
    ]


def test_validate_refuses_a_quota_file_mixed_with_aws_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(EXAMPLE_FILE), write_json(tmp_path / "shares.json", LISTED_SHARES)]

    assert run_validate(files, as_json=True) == 1

    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert error["path"] == str(EXAMPLE_FILE)
    assert "a quota file is read on its own" in error["message"]


def applied_shares(database: Database) -> dict[str, dict[str, object]]:
    """The ledger's shares, each as a CreateQuotaShare body (``jobQueue`` by name) would give it."""
    with database.session() as session:
        rows = session.scalars(sa.select(QuotaShareRow).order_by(QuotaShareRow.position)).all()
        return {
            row.quota_share_name: {
                "quotaShareName": row.quota_share_name,
                "jobQueue": row.job_queue_name,
                "capacityLimits": row.capacity_limits,
                "resourceSharingConfiguration": {
                    "strategy": row.strategy,
                    **({} if row.borrow_limit is None else {"borrowLimit": row.borrow_limit}),
                },
                "preemptionConfiguration": {"inSharePreemption": row.in_share_preemption},
                "state": row.state,
            }
            for row in rows
        }


def queue_capacity(database: Database) -> dict[str, object]:
    with database.session() as session:
        return {row.job_queue_name: row.capacity_limits for row in session.scalars(sa.select(JobQueueRow))}


@pytest.mark.db
def test_apply_writes_the_shares_of_aws_documents_to_the_ledger(
    migrated: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Create* request bodies: the export of the example quota file.
    assert run_export([str(EXAMPLE_FILE)], region="us-east-1", account_id="123456789012") == 0
    bundle = json.loads(capsys.readouterr().out)
    exported = write_json(tmp_path / "aws.json", bundle)

    applied, again, listed = (
        run_quota(command, migrated.engine)
        for command in (
            ["apply", "-f", exported],
            ["apply", "-f", exported],
            ["shares", "list", "--output", "json"],
        )
    )

    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "added: quota share research (job queue gpu-training)" in applied.stdout
    assert applied_shares(migrated) == {body["quotaShareName"]: body for body in bundle["quotaShares"]}
    assert queue_capacity(migrated) == {"gpu-training": bundle["serviceEnvironments"][0]["capacityLimits"]}
    assert "Nothing to apply" in again.stdout
    # `shares list -o json` gives each back in the Create body's nesting (jobQueueName for jobQueue).
    assert [
        {"jobQueue": share.pop("jobQueueName"), **{k: v for k, v in share.items() if k != "units"}}
        for share in json.loads(listed.stdout)["quotaShares"]
    ] == bundle["quotaShares"]

    # Describe and List answers (ARNs, status, tags), in two files: the design they describe replaces it.
    files = [
        write_json(tmp_path / "described.json", DESCRIBED),
        write_json(tmp_path / "shares.json", LISTED_SHARES),
    ]
    described = run_quota(["apply", "-f", files[0], "-f", files[1]], migrated.engine)

    assert described.returncode == 0, described.stdout + described.stderr
    assert "removed: quota share research (job queue gpu-training)" in described.stdout
    assert applied_shares(migrated) == {
        share["quotaShareName"]: {
            "quotaShareName": share["quotaShareName"],
            "jobQueue": "gpu-training",  # its jobQueueArn, resolved
            **{
                key: share[key]
                for key in ("resourceSharingConfiguration", "preemptionConfiguration", "state")
            },
            "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
        }
        for share in json.loads(json.dumps(LISTED_SHARES))["quotaShares"]
    }
    assert queue_capacity(migrated) == {"gpu-training": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 3}]}


@pytest.mark.airflow
def test_import_and_export_are_airflow_quota_commands(tmp_path: Path) -> None:
    exported = airflow(tmp_path, "quota", "export", str(EXAMPLE_FILE), "--format", "aws")
    assert exported.returncode == 0, exported.stderr
    bundle = tmp_path / "aws.json"
    bundle.write_text(exported.stdout)

    imported = airflow(tmp_path, "quota", "import", str(bundle), "-o", str(tmp_path / "quotas.yaml"))
    validated = airflow(tmp_path, "quota", "validate", str(bundle))

    assert imported.returncode == 0, imported.stderr
    assert (
        load_quota_file(tmp_path / "quotas.yaml").to_job_queues()
        == load_quota_file(EXAMPLE_FILE).to_job_queues()
    )
    assert validated.returncode == 0, validated.stdout
    assert f"{bundle} is valid: 1 job queue, 3 quota shares" in validated.stdout
