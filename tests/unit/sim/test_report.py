"""The --json document's exact shape, and what the readable report shows."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from airflow_quota.sim.report import print_scenario, scenario_json
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import load_scenario
from tests.unit.sim.builders import run, share, submit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "scenarios"


def test_the_json_document_has_exactly_the_specified_shape() -> None:
    result = run(
        [share("s", 2, "RESERVE")],
        [submit(0, "a", "s", 2, duration=10), submit(5, "b", "s", 2, duration=2.5)],
        gpu=2,
    )

    document = json.loads(json.dumps(scenario_json(result)))

    assert set(document) == {"preemptionCostsZero", "warnings", "steps", "jobs", "metrics"}
    # Stops take 0 s (no settings), but nothing was preempted: no warning line.
    assert (document["preemptionCostsZero"], document["warnings"]) == (True, [])
    assert document["steps"] == [
        {"at": 0, "jobs": {"a": {"status": "RUNNING", "statusReason": ""}}},
        {
            "at": 5,
            "jobs": {
                "a": {"status": "RUNNING", "statusReason": ""},
                "b": {
                    "status": "RUNNABLE",
                    "statusReason": "Waiting for capacity: this job needs 2 gpu, more than quota share s "
                    "has free of its own 2; a RESERVE share does not borrow: it waits for its own jobs to "
                    "finish",
                },
            },
        },
        {
            "at": 10,
            "jobs": {
                "a": {"status": "SUCCEEDED", "statusReason": ""},
                "b": {"status": "RUNNING", "statusReason": ""},
            },
        },
        {
            "at": 12.5,
            "jobs": {
                "a": {"status": "SUCCEEDED", "statusReason": ""},
                "b": {"status": "SUCCEEDED", "statusReason": ""},
            },
        },
    ]
    assert document["jobs"] == {
        "a": {
            "status": "SUCCEEDED",
            "statusReason": "",
            "quotaShareName": "s",
            "preemptedAttemptCount": 0,
            "startedAt": 0,
            "stoppedAt": 10,
        },
        "b": {
            "status": "SUCCEEDED",
            "statusReason": "",
            "quotaShareName": "s",
            "preemptedAttemptCount": 0,
            "startedAt": 10,
            "stoppedAt": 12.5,
        },
    }
    assert document["metrics"] == {
        "utilization": {"gpu": 1},  # 2 GPUs held from 0 to 12.5, whole numbers written as such
        "runnableSeconds": {"s": {"jobs": 2, "mean": 2.5, "p95": 5}},
        "preemptions": {"total": 0, "byShare": {"s": 0}},
    }


def test_jobs_that_never_started_have_null_times() -> None:
    result = run([share("s", 2, "RESERVE", state="DISABLED")], [submit(0, "refused", "s", 1)])

    job = scenario_json(result)["jobs"]["refused"]

    assert (job["status"], job["startedAt"], job["stoppedAt"]) == ("FAILED", None, None)


def test_the_readable_report_tells_the_story_step_by_step() -> None:
    result = simulate(load_scenario(EXAMPLES / "reclaim.yaml"))
    out = io.StringIO()

    print_scenario(result, Console(file=out, width=200, color_system=None))

    text = out.getvalue()
    for line in [
        "t=0",
        "train-b granted 2 gpu, 2 borrowed",
        "t=30",
        "train-b preempted by eval-nightly (RECLAIM): being stopped",
        "eval-nightly RUNNABLE: Waiting for 1 preempted job(s) to stop: train-b",
        "t=40",
        "train-b stopped, requeued: Preempted by eval-nightly; requeued at its original position",
        "eval-nightly granted 2 gpu",
        "t=130",
        "train-b SUCCEEDED",
        "utilization gpu",
        "96.2%",
    ]:
        assert line in text
