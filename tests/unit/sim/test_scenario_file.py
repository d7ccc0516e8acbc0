"""Scenario files: every problem is reported at once, each with its path inside the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_quota.sim.__main__ import main
from airflow_quota.sim.scenario import (
    ScenarioError,
    SubmitJob,
    TerminateJob,
    UpdateJob,
    UpdateJobQueue,
    UpdateQuotaShare,
    load_scenario,
    parse_scenario,
)
from tests.unit.sim.builders import document, share, submit


def problems(raw: dict[str, Any]) -> dict[str, str]:
    """path -> message for every problem in ``raw``."""
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(raw, "scenario.yaml")
    return {issue.path: issue.message for issue in raised.value.issues}


def valid() -> dict[str, Any]:
    return document([share("s", 2)], [submit(0, "a", "s", 1, duration=5)])


def test_a_valid_scenario_becomes_typed_settings_and_events() -> None:
    raw = document(
        [share("s", 2)],
        [
            submit(0, "a", "s", 1, prio=3, duration=5, retries=2),
            {"at": 1, "updateJob": {"jobName": "a", "schedulingPriority": 9}},
            {"at": 2, "terminateJob": {"jobName": "a", "reason": "budget"}},
            {"at": 3, "updateQuotaShare": {"quotaShareName": "s", "state": "DISABLED"}},
            {"at": 4.5, "updateJobQueue": {"capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 8}]}},
        ],
        stop=2,
        start=1,
    )

    scenario = parse_scenario(raw, "scenario.yaml")

    assert (scenario.settings.stop_seconds, scenario.settings.start_seconds) == (2, 1)
    submit_job, update, terminate, share_update, queue_update = (event.action for event in scenario.events)
    assert isinstance(submit_job, SubmitJob) and submit_job.duration == 5
    request = submit_job.request
    assert (request.scheduling_priority, request.preemption_retries_before_termination) == (3, 2)
    assert update == UpdateJob("a", 9)
    assert terminate == TerminateJob("a", "budget")
    assert share_update == UpdateQuotaShare("s", {"state": "DISABLED"})
    assert isinstance(queue_update, UpdateJobQueue)
    assert [event.label for event in scenario.events][-1] == "events[4] (at 4.5, updateJobQueue)"


def test_settings_are_optional_and_default_to_instant_stops_and_starts() -> None:
    scenario = parse_scenario(valid(), "scenario.yaml")

    assert (scenario.settings.stop_seconds, scenario.settings.start_seconds) == (0, 0)


def test_unknown_keys_are_errors_with_their_path_and_a_suggestion() -> None:
    raw = valid()
    raw["setting"] = {"stopSeconds": 1}
    raw["events"][0]["submitJob"]["instanceCont"] = 2
    raw["events"].append({"at": 1, "updateJob": {"jobName": "a", "schedulingPriority": 1, "why": "x"}})

    found = problems(raw)

    assert found["setting"].startswith("unknown key 'setting' (did you mean settings?)")
    assert found["events[0].submitJob.instanceCont"].startswith(
        "unknown key 'instanceCont' (did you mean instanceCount?)"
    )
    assert "duration" in found["events[0].submitJob.instanceCont"]  # the simulator's own key is listed too
    assert found["events[1].updateJob.why"].startswith("unknown key 'why'")


def test_an_event_needs_exactly_one_action() -> None:
    raw = valid()
    raw["events"] += [
        {"at": 1},
        {"at": 2, "terminateJob": {"jobName": "a"}, "updateJob": {"jobName": "a", "schedulingPriority": 1}},
    ]

    found = problems(raw)

    assert found["events[1]"].startswith("an event needs exactly one action, found none")
    assert found["events[2]"].startswith(
        "an event needs exactly one action, found updateJob and terminateJob"
    )


def test_bad_types_and_ranges_are_reported_at_their_path() -> None:
    raw = valid()
    raw["settings"] = {"stopSeconds": -1}
    raw["events"] += [
        {"at": "soon", "terminateJob": {"jobName": "a"}},
        submit(1, "b", "s", 0, prio=10000, duration="long"),  # type: ignore[arg-type]
    ]

    found = problems(raw)

    assert (
        found["settings.stopSeconds"]
        == "stopSeconds is -1: it must be a number of seconds >= 0 (how long a stop takes)"
    )
    assert found["events[1].at"].startswith("at is 'soon': it must be a number of seconds >= 0")
    assert found["events[2].submitJob.duration"].startswith(
        "duration is 'long': it must be a number of seconds"
    )
    assert (
        found["events[2].submitJob.instanceCount"]
        == "instanceCount is 0: it must be a whole number from 1 to 100000"
    )
    assert found["events[2].submitJob.schedulingPriority"].startswith("schedulingPriority is 10000")


def test_queue_and_share_problems_use_the_quota_file_rules_and_paths() -> None:
    raw = document([share("s", 3, "LEND", borrow=50), share("t", 3)], [])

    found = problems(raw)

    assert found["quotaShares[0].resourceSharingConfiguration.borrowLimit"].startswith(
        "borrowLimit is only allowed with strategy LEND_AND_BORROW"
    )
    assert found["quotaShares"].startswith("the quota shares' maxCapacity for gpu adds up to 6")


def test_missing_sections_are_named() -> None:
    found = problems({"events": []})

    assert found["jobQueue"] == "jobQueue is missing: add it"
    assert found["quotaShares"] == "quotaShares is missing: add it"


def test_a_json_scenario_reads_like_the_same_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps(valid()))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(valid()))

    assert load_scenario(tmp_path / "s.json").events == load_scenario(tmp_path / "s.yaml").events


def test_the_command_line_reports_file_errors_with_their_path_and_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = valid()
    raw["events"][0]["submitJob"]["instanceCont"] = 2
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))

    assert main([str(path)]) == 1
    error = capsys.readouterr().err
    assert f"error: {path}: 1 error" in error
    assert "events[0].submitJob.instanceCont: unknown key 'instanceCont'" in error


def test_a_yaml_syntax_error_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("jobQueue: {jobQueueName: q\nevents: []\n")

    assert main([str(path)]) == 1
    assert "YAML syntax error at line" in capsys.readouterr().err
