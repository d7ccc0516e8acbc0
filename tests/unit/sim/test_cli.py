"""``python -m airflow_quota.sim`` as a user runs it: real subprocesses, exit codes, every example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_quota.sim.__main__ import main
from tests.unit.sim.builders import document, share, submit

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))


def test_the_reclaim_example_runs_as_a_subprocess_and_prints_json() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "airflow_quota.sim", "examples/scenarios/reclaim.yaml", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout)
    assert [step["at"] for step in document["steps"]] == [0, 30, 40, 70, 120, 130]
    assert document["jobs"]["train-b"] == {
        "status": "SUCCEEDED",
        "statusReason": "",
        "quotaShareName": "research",
        "preemptedAttemptCount": 1,
        "startedAt": 70,
        "stoppedAt": 130,
    }
    assert document["metrics"]["preemptions"] == {"total": 1, "byShare": {"research": 1, "eval": 0}}


def test_the_simulator_never_imports_airflow() -> None:
    code = (
        "import sys, airflow_quota.sim.__main__; "
        "print(any(name.split('.')[0] == 'airflow' for name in sys.modules))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )

    assert completed.stdout.strip() == "False"


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.name for path in SCENARIOS])
def test_every_example_scenario_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "Jobs" in out and "utilization" in out


def test_the_three_promised_examples_exist() -> None:
    assert {path.name for path in SCENARIOS} >= {"reclaim.yaml", "in_share_priority.yaml", "three_teams.yaml"}


def test_an_invalid_event_exits_1_with_a_message_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        yaml.safe_dump(document([share("s", 2)], [{"at": 6, "terminateJob": {"jobName": "ghost"}}]))
    )

    assert main([str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"error: {path}: event events[0] (at 6, terminateJob): no job named 'ghost'"
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--trace", "jobs.csv"],
        ["scenario.yaml", "--trace", "jobs.csv", "--config", "quotas.yaml"],
        ["scenario.yaml", "--compare-static"],
        ["scenario.yaml", "--config", "quotas.yaml"],
        ["--trace", "jobs.csv", "--config", "quotas.yaml", "--checkpoint-interval", "-5"],
    ],
    ids=[
        "nothing",
        "trace_without_config",
        "both_modes",
        "static_without_trace",
        "config_without_trace",
        "negative",
    ],
)
def test_wrong_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)

    assert raised.value.code == 2


def test_a_missing_file_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no/such/scenario.yaml"]) == 1
    assert "cannot read the file" in capsys.readouterr().err


def test_json_output_of_a_scenario_with_jobs_left_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(document([share("s", 2)], [submit(0, "forever", "s", 1)])))

    assert main([str(path), "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["jobs"]["forever"]
    assert (job["status"], job["startedAt"], job["stoppedAt"]) == ("RUNNING", 0, None)
