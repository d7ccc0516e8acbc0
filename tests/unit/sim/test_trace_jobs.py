"""Trace mode's per-job view (``--jobs``) and the line that says when preemption costs nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from airflow_quota.cli.simulate import simulator_argv
from airflow_quota.sim.__main__ import main
from airflow_quota.sim.report import FREE_PREEMPTION_LINE, TRACE_JOB_HEADERS, number, trace_jobs_table
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import TraceReport, TraceRun, run_trace
from tests.unit.sim.traces import example_trace_window, write_trace_files

JOB_KEYS = (
    "submittedAt",
    "firstStartedAt",
    "endedAt",
    "waitSeconds",
    "heldSeconds",
    "preemptedAttemptCount",
    "lostUnitSeconds",
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_trace_files(tmp_path)


def trace_argv(files: tuple[Path, Path], *options: str) -> list[str]:
    return ["--trace", str(files[0]), "--config", str(files[1]), *options]


def run_json(files: tuple[Path, Path], *options: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(trace_argv(files, "--json", *options)) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


@pytest.mark.parametrize(
    ("options", "big", "small"),
    [
        pytest.param(
            (),
            # preempted at 10, stopped at once; resumes at 20 with its 10 s of work kept: 90 s to go.
            {"endedAt": 110, "waitSeconds": 10, "heldSeconds": 100, "lostUnitSeconds": 0},
            {"firstStartedAt": 10, "endedAt": 20, "waitSeconds": 0},
            id="free stops: nothing lost, the preemptor starts at once",
        ),
        pytest.param(
            ("--stop-seconds", "5"),
            # the 5 s stop is lost on 4 GPUs; small waits for it; big keeps 15 s of work (10 + the stop).
            {"endedAt": 110, "waitSeconds": 10, "heldSeconds": 100, "lostUnitSeconds": 20},
            {"firstStartedAt": 15, "endedAt": 25, "waitSeconds": 5},
            id="a stop's seconds are lost on every unit",
        ),
        pytest.param(
            ("--stop-seconds", "5", "--checkpoint-interval", "4"),
            # decided at 10 s of work, last checkpoint at 8: 4 x (2 + 5) lost; resumes from 8, 92 s to go.
            {"endedAt": 117, "waitSeconds": 10, "heldSeconds": 107, "lostUnitSeconds": 28},
            {"firstStartedAt": 15, "endedAt": 25, "waitSeconds": 5},
            id="work since the last checkpoint is lost too",
        ),
    ],
)
def test_the_jobs_list_gives_each_jobs_times_waits_and_losses(
    files: tuple[Path, Path],
    options: tuple[str, ...],
    big: dict[str, Any],
    small: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = run_json(files, "--jobs", *options, capsys=capsys)["runs"]["configured"]["jobs"]

    by_name = {job["jobName"]: job for job in jobs}
    assert list(by_name) == ["big", "small"]
    assert by_name["big"] | big == by_name["big"]
    assert by_name["small"] | small == by_name["small"]
    assert by_name["big"]["submittedAt"] == 0 and by_name["big"]["firstStartedAt"] == 0
    assert by_name["big"]["preemptedAttemptCount"] == 1
    assert by_name["small"]["preemptedAttemptCount"] == 0
    assert (by_name["big"]["schedulingPriority"], by_name["big"]["instanceCount"]) == (5, 4)
    for job in jobs:
        # A job is either waiting or holding its units from its arrival to its end.
        assert job["endedAt"] - job["submittedAt"] == job["waitSeconds"] + job["heldSeconds"]


def test_per_job_figures_add_up_to_the_runs_totals(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_json(files, "--jobs", "--stop-seconds", "5", "--compare-static", capsys=capsys)["runs"]

    for label in ("configured", "static"):
        jobs = run[label]["jobs"]
        assert sum(job["lostUnitSeconds"] for job in jobs) == run[label]["gpuSecondsLost"]["gpu"]["total"]
        assert sum(job["preemptedAttemptCount"] for job in jobs) == run[label]["preemptions"]["total"]
    assert [job["preemptedAttemptCount"] for job in run["static"]["jobs"]] == [0, 0]


def test_without_jobs_the_json_runs_have_no_jobs_list(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "jobs" not in run_json(files, capsys=capsys)["runs"]["configured"]


def test_the_jobs_table_shows_the_numbers_of_the_json(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    options = ("--jobs", "--stop-seconds", "5", "--checkpoint-interval", "4")
    jobs = run_json(files, *options, capsys=capsys)["runs"]["configured"]["jobs"]
    assert main(trace_argv(files, *options)) == 0
    text = capsys.readouterr().out

    table = text[text.index("Jobs, as configured") :]
    assert "units of gpu" in table.splitlines()[0]
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.startswith(("big", "small"))}
    assert list(rows) == ["big", "small"]
    for job in jobs:
        _, share, priority, units, *figures = rows[job["jobName"]]
        assert (share, priority, units) == (
            job["quotaShareName"],
            str(job["schedulingPriority"]),
            str(job["instanceCount"]),
        )
        assert figures == [str(job[key]) for key in JOB_KEYS]


def test_a_job_still_waiting_at_the_end_shows_no_start_and_no_end(tmp_path: Path) -> None:
    # forever never finishes and holds all 4 GPUs; late arrives at 5 and waits to the end of the run.
    files = write_trace_files(
        tmp_path,
        trace="submitTime,jobName,quotaShareName,capacityUnit,instanceCount,duration\n"
        "0,forever,x,gpu,2,\n0,other,y,gpu,2,50\n5,late,x,gpu,2,10\n",
    )
    report = run_trace(*files)
    console = Console(width=120, record=True)
    console.print(trace_jobs_table(report.runs[0]))
    rows = {line.split()[0]: line.split() for line in console.export_text().splitlines() if line.split()}

    # late gets other's 2 GPUs at 50 and ends at 60; forever is still running: started, no end.
    assert rows["late"][4:8] == ["5", "50", "60", "45"]
    assert rows["forever"][4:7] == ["0", "0", "-"]


@pytest.mark.parametrize(
    ("options", "line_shown"),
    [
        pytest.param((), True, id="the defaults: free stops, no checkpoint loss"),
        pytest.param(("--stop-seconds", "60"), False, id="stops take time"),
        pytest.param(("--checkpoint-interval", "900"), False, id="work since a checkpoint is lost"),
        pytest.param(("--stop-seconds", "0", "--checkpoint-interval", "0"), True, id="zero given explicitly"),
    ],
)
def test_the_report_says_so_when_preemption_costs_nothing(
    files: tuple[Path, Path], options: tuple[str, ...], line_shown: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(trace_argv(files, *options)) == 0

    out = capsys.readouterr().out
    assert ("Preemption is free in this run" in out) is line_shown
    assert FREE_PREEMPTION_LINE.startswith(
        "Preemption is free in this run: stops take 0 s and no work is lost"
    )
    # It names options that exist.
    for option in ("--stop-seconds", "--checkpoint-interval"):
        assert option in FREE_PREEMPTION_LINE


@pytest.fixture(scope="module")
def example_report(tmp_path_factory: pytest.TempPathFactory) -> TraceReport:
    """300 jobs of the example trace (one capacity unit) with stops and checkpoints that lose work: its
    widest numbers are the whole trace's, and rendering 2,000 rows three times cost 15 CPU-s."""
    report = run_trace(
        *example_trace_window(tmp_path_factory.mktemp("example")),
        settings=Settings(stop_seconds=60),
        checkpoint_interval=900,
    )
    jobs = report.runs[0].result.jobs.values()
    assert len(str(number(max(job.submitted_at for job in jobs)))) == 7
    assert len(str(number(max(job.runnable_seconds for job in jobs)))) == 6
    return report


def rendered(run: TraceRun, width: int) -> list[str]:
    console = Console(width=width, record=True)
    console.print(trace_jobs_table(run))
    return console.export_text().splitlines()


def header_words(lines: list[str]) -> list[str]:
    """The words above the table's rule (the title is the first line)."""
    rule = next(index for index, line in enumerate(lines) if line.startswith("─"))
    return " ".join(lines[1:rule]).split()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_jobs_table_keeps_every_header_and_number_whole(example_report: TraceReport, width: int) -> None:
    run = example_report.runs[0]
    lines = rendered(run, width)

    assert max(len(line.rstrip()) for line in lines) <= width
    assert "units of ml.p4d.24xlarge" in lines[0]  # one capacity unit: the title names it, no unit column
    for header in TRACE_JOB_HEADERS:
        if header != "unit":
            assert all(word in header_words(lines) for word in header.split()), header
    lossy = next(job for job in run.result.jobs.values() if job.lost_unit_seconds > 0)
    lost = str(number(lossy.lost_unit_seconds))
    assert any(line.split()[-1:] == [lost] for line in lines if line.startswith(lossy.name[:5]))


def test_jobs_of_several_capacity_units_get_a_unit_column_at_80_columns(tmp_path: Path) -> None:
    (tmp_path / "quotas.yaml").write_text(
        "jobQueues:\n"
        "  - jobQueueName: q\n"
        "    capacityLimits: &limits\n"
        "      [{capacityUnit: ml.p4d.24xlarge, maxCapacity: 2}, {capacityUnit: cpu, maxCapacity: 8}]\n"
        "    quotaShares:\n"
        "      - {quotaShareName: research, capacityLimits: *limits,\n"
        "         resourceSharingConfiguration: {strategy: RESERVE}}\n"
    )
    (tmp_path / "jobs.csv").write_text(
        "submitTime,jobName,quotaShareName,capacityUnit,instanceCount,duration\n"
        "0,fine-tune-llama-70b,research,ml.p4d.24xlarge,2,3600\n0,tokenize,research,cpu,8,60\n"
    )
    lines = rendered(run_trace(tmp_path / "jobs.csv", tmp_path / "quotas.yaml").runs[0], 80)

    assert max(len(line.rstrip()) for line in lines) <= 80
    for header in TRACE_JOB_HEADERS:
        assert all(word in header_words(lines) for word in header.split()), header
    # Names fold; the numbers (units, arrived ... lost) stay whole on the job's first line.
    tokenize = next(line for line in lines if line.startswith("tok")).split()
    assert tokenize[-8:] == ["8", "0", "0", "60", "0", "60", "0", "0"]


def test_jobs_belongs_to_trace_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["examples/scenarios/reclaim.yaml", "--jobs"])

    assert exited.value.code == 2
    assert "--jobs belongs to trace mode" in capsys.readouterr().err


def test_airflow_quota_simulate_passes_jobs_on() -> None:
    args = argparse.Namespace(
        scenario=None, trace="t.csv", config="q.yaml", compare_static=False, json=True, jobs=True
    )

    assert simulator_argv(args) == ["--trace", "t.csv", "--config", "q.yaml", "--jobs", "--json"]
