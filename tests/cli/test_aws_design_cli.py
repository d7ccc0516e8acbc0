"""``airflow quota import``, ``export``, and ``validate`` / ``apply`` given AWS Batch documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_quota.cli.aws_design import run_export, run_import
from airflow_quota.cli.validate import run_validate
from airflow_quota.config_file import load_quota_file
from tests.cli.test_quota_cli import EXAMPLE_FILE, airflow
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


def test_import_of_an_incomplete_design_exits_1_writes_nothing_and_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "quotas.yaml"

    assert run_import([write_json(tmp_path / "shares.json", LISTED_SHARES)], str(output)) == 1

    printed = capsys.readouterr()
    assert "quotaShares[0].jobQueueArn" in printed.err
    assert "add its CreateJobQueue body or DescribeJobQueues answer" in printed.err
    assert not output.exists()


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
