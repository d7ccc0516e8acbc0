"""The ``airflow quota`` commands that need no database: ``validate`` and ``simulate``'s registration.

The first test runs the real command as a user does: ``airflow`` in a subprocess, a fresh ``AIRFLOW_HOME``
with the default config. The others run the command through Airflow's own CLI parser in this process
(``tests/cli/in_process.py``: the same output and exit status, without an ``airflow`` start, about 2.5
CPU-seconds, per command), at the subprocess's 80 columns. The simulator itself is someone else's module;
here only the hand-over of the arguments to it is checked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_quota.cli.simulate import simulate
from airflow_quota.cli.validate import run_validate
from tests.cli.in_process import run_quota

EXAMPLE_FILE = Path(__file__).parents[2] / "examples" / "quotas.yaml"
AIRFLOW = Path(sys.executable).parent / "airflow"


def airflow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "COLUMNS": "80",
    }
    return subprocess.run(
        [str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def quota(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``airflow quota ARGS...`` in this process, 80 columns wide as ``airflow()``'s subprocess."""
    monkeypatch.setenv("COLUMNS", "80")
    return lambda *args: run_quota(list(args))


def write_yaml(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "quotas.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def quota_file(share_count: int, *, borrow_limit_on_lend: bool = False) -> dict[str, object]:
    sharing = {"strategy": "LEND", **({"borrowLimit": 50} if borrow_limit_on_lend else {})}
    return {
        "jobQueues": [
            {
                "jobQueueName": "gpu-training",
                "capacityLimits": [{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": share_count}],
                "quotaShares": [
                    {
                        "quotaShareName": f"team-{index}",
                        "capacityLimits": [{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 1}],
                        "resourceSharingConfiguration": sharing,
                        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
                    }
                    for index in range(share_count)
                ],
            }
        ]
    }


@pytest.mark.airflow
def test_validate_good_file_exits_0_and_shows_each_share(tmp_path: Path) -> None:
    result = airflow(tmp_path, "quota", "validate", str(EXAMPLE_FILE))

    assert result.returncode == 0, result.stdout + result.stderr
    for text in ("prod-retraining", "evaluation", "research", "LEND_AND_BORROW", "200%", "is valid"):
        assert text in result.stdout


def test_validate_bad_file_exits_1_and_names_the_path(tmp_path: Path, quota: Any) -> None:
    path = write_yaml(tmp_path, quota_file(2, borrow_limit_on_lend=True))

    result = quota("validate", str(path))

    assert result.returncode == 1
    assert f"{path} is invalid: 2 errors" in result.stdout
    for share in (0, 1):
        assert f"jobQueues[0].quotaShares[{share}].resourceSharingConfiguration.borrowLimit" in result.stdout
    assert "remove borrowLimit or set strategy: LEND_AND_BORROW" in result.stdout


def test_validate_21_shares_exits_0_with_an_aws_batch_warning(tmp_path: Path, quota: Any) -> None:
    result = quota("validate", str(write_yaml(tmp_path, quota_file(21))))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning: jobQueues[0].quotaShares: job queue gpu-training has 21 quota shares" in result.stdout
    assert "AWS Batch allows at most 20 per job queue" in result.stdout


def test_validate_missing_file_exits_1(tmp_path: Path, quota: Any) -> None:
    result = quota("validate", str(tmp_path / "nowhere.yaml"))

    assert result.returncode == 1
    assert "cannot read the file: No such file or directory" in result.stdout


def test_validate_json_reports_shares_warnings_and_errors(tmp_path: Path, quota: Any) -> None:
    good = quota("validate", "--json", str(write_yaml(tmp_path, quota_file(21))))
    report = json.loads(good.stdout)

    assert (good.returncode, report["valid"], report["errors"]) == (0, True, [])
    assert [warning["path"] for warning in report["warnings"]] == ["jobQueues[0].quotaShares"]
    # Each share in DescribeQuotaShare's nesting, as `shares list|describe -o json` print it (LEND: no
    # borrowLimit), with its ceiling per unit beside it.
    assert report["jobQueues"][0]["quotaShares"][0] == {
        "quotaShareName": "team-0",
        "jobQueueName": "gpu-training",
        "capacityLimits": [{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 1}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "ENABLED",
        "ceiling": {"ml.g5.12xlarge": 1},
    }

    bad = quota("validate", "--json", str(write_yaml(tmp_path, quota_file(1, borrow_limit_on_lend=True))))
    report = json.loads(bad.stdout)

    assert (bad.returncode, report["valid"]) == (1, False)
    assert [error["path"] for error in report["errors"]] == [
        "jobQueues[0].quotaShares[0].resourceSharingConfiguration.borrowLimit"
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            "jobQueues: " + "[" * 100_000 + "]" * 100_000,
            {
                "path": "",
                "message": "the document nests more than 100 levels deep (at line 1): quota and scenario "
                "files need 6 at most; fix its brackets",
            },
            id="nested_100000_deep",
        ),
        pytest.param(
            json.dumps(quota_file(1)).replace('"maxCapacity": 1', '"maxCapacity": ' + "9" * 5000, 1),
            {
                "path": "jobQueues[0].capacityLimits[0].maxCapacity",
                "message": "maxCapacity is a number of 5000 digits: it must be a whole number from 0 to "
                "100000 (how many instances of this capacity unit)",
            },
            id="number_of_5000_digits",
        ),
    ],
)
def test_validate_json_reports_a_file_no_reader_can_take_as_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, error: dict[str, str]
) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(text)

    code = run_validate(str(path), as_json=True)

    assert (code, json.loads(capsys.readouterr().out)) == (
        1,
        {"source": str(path), "valid": False, "errors": [error], "warnings": []},
    )


def test_simulate_is_registered(quota: Any) -> None:
    result = quota("simulate", "--help")

    assert result.returncode == 0, result.stderr
    for option in ("--trace", "--config", "--compare-static", "--json", "--report"):
        assert option in result.stdout


@pytest.mark.parametrize(
    ("given", "argv"),
    [
        pytest.param({"scenario": "s.yaml", "json": True}, ["s.yaml", "--json"], id="scenario_file"),
        pytest.param(
            {"trace": "jobs.csv", "config": "quotas.yaml", "compare_static": True},
            ["--trace", "jobs.csv", "--config", "quotas.yaml", "--compare-static"],
            id="trace_replay",
        ),
    ],
)
def test_simulate_passes_its_arguments_to_the_simulator(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, object], argv: list[str]
) -> None:
    received: list[list[str] | None] = []

    def main(argv: list[str] | None = None) -> int:
        received.append(argv)
        return 3

    monkeypatch.setitem(sys.modules, "airflow_quota.sim.__main__", types.SimpleNamespace(main=main))
    args = {"scenario": None, "trace": None, "config": None, "compare_static": False, "json": False, **given}

    with pytest.raises(SystemExit) as exited:
        simulate(argparse.Namespace(**args))

    assert (received, exited.value.code) == ([argv], 3)
