"""The demo's quota file (demo/quotas.yaml) is what a newcomer validates first: no AWS Batch warning, and
the one note about its local GPUs says why it is harmless. A job queue AWS Batch would schedule keeps the
same finding as a warning."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airflow_quota.cli.validate import main as validate_main

DEMO_QUOTAS = Path(__file__).parents[2] / "demo" / "quotas.yaml"


def test_the_demos_quota_file_has_no_warning_and_one_harmless_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert validate_main([str(DEMO_QUOTAS)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning" not in out
    assert (
        "note: jobQueues[0].capacityLimits[0].capacityUnit: local-gpu is the Airflow worker's own GPUs" in out
    )
    assert "harmless for this job queue: our allocator schedules it on this machine's GPUs" in out
    assert out.endswith("is valid: 1 job queue, 3 quota shares, 1 AWS Batch note (harmless here)")


def test_what_aws_batch_would_read_otherwise_is_still_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A share without preemptionConfiguration (AWS Batch requires it), and a local unit on a job queue AWS
    Batch is to schedule: warnings, not notes."""
    design = yaml.safe_load(DEMO_QUOTAS.read_text())
    queue = design["jobQueues"][0]
    del queue["quotaShares"][0]["preemptionConfiguration"]
    queue["scheduler"] = "AWS_BATCH"
    path = tmp_path / "quotas.yaml"
    path.write_text(yaml.safe_dump(design))

    validate_main([str(path)])
    out = " ".join(capsys.readouterr().out.split())

    assert "warning: jobQueues[0].quotaShares[0].preemptionConfiguration: missing" in out
    assert "warning: jobQueues[0].capacityLimits[0].capacityUnit: local-gpu" in out
    assert "note:" not in out
