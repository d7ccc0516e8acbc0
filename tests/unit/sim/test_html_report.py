"""``--report FILE.html``: one self-contained page, drawn with the GPU Quotas page's own ECharts and timeline
code, whose data blocks hold the run's jobs, shares and preemptions.

The tests read the JSON blocks the page's scripts draw (each run's timeline in the REST API's shape,
validated against its models, and the report's own data), so they check what a reader's browser draws,
not pixels.
"""

from __future__ import annotations

import argparse
import html
import json
import re
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import airflow_quota.sim.__main__ as sim_main
from airflow_quota.api.schemas import JobQueueTimeline
from airflow_quota.cli.simulate import simulator_argv
from airflow_quota.sim.__main__ import main
from airflow_quota.sim.report import FREE_PREEMPTION_LINE, FREE_PREEMPTION_SCENARIO_LINE
from airflow_quota.sim.rest_timeline import SIMULATED_DAY
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import TraceReport, run_trace
from tests.unit.sim.traces import example_trace_window, write_trace_files

ROOT = Path(__file__).resolve().parents[3]
STATIC = ROOT / "airflow_quota" / "api" / "static"
RECLAIM = ROOT / "examples" / "scenarios" / "reclaim.yaml"
TIMELINE_BLOCK = re.compile(
    r"<h3>GPU timeline, (?P<title>[^<]*)</h3>.*?"
    r"<script type='application/json' class='timeline-data'[^>]*data-run='(?P<run>[^']*)'>"
    r"(?P<json>.*?)</script>",
    re.DOTALL,
)


def timelines(page: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per run label, its title and its timeline block; each block is a valid REST API timeline."""
    found = {}
    for match in TIMELINE_BLOCK.finditer(page):
        timeline = json.loads(match["json"])
        JobQueueTimeline.model_validate(timeline)  # the page's drawing code reads exactly this shape
        found[html.unescape(match["run"])] = (html.unescape(match["title"]), timeline)
    assert found, "no timeline in the page"
    return found


def report_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert match, "no report-data block in the page"
    data: dict[str, Any] = json.loads(match[1])
    return data


def seconds(iso: str | None) -> float | None:
    """A timeline time as the run's simulated seconds."""
    return None if iso is None else (datetime.fromisoformat(iso) - SIMULATED_DAY).total_seconds()


def bars(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    """Every bar of the timeline, its times in simulated seconds."""
    return [
        {**bar, "start": seconds(bar["startedAt"]), "end": seconds(bar["endedAt"])}
        for unit in timeline["units"]
        for bar in unit["bars"]
    ]


def write_report(tmp_path: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "report.html"
    assert main([*argv, "--report", str(path)]) == 0
    capsys.readouterr()
    return path.read_text(encoding="utf-8")


def test_the_reclaim_report_is_one_self_contained_page_with_the_pages_own_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = write_report(tmp_path, str(RECLAIM), capsys=capsys)

    assert page.startswith("<!DOCTYPE html>")
    assert re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE) is None  # nothing loaded: all inline
    assert re.search(r"<link\b", page, re.IGNORECASE) is None
    assert re.search(r"https?://[^\s\"']*\.js\b", page) is None  # no CDN either
    # The GPU Quotas page's own files, as they are in the package, with ECharts' NOTICE.
    for name in ("vendor/echarts.min.js", "quota-timeline.js"):
        assert (STATIC / name).read_text(encoding="utf-8") in page, name
    assert "Apache ECharts 6.1.0" in page and "Apache-2.0" in page
    assert "plotly" not in page.lower()


def test_the_reclaim_timeline_shows_the_borrower_stopped_for_its_preemptor_then_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ((title, timeline),) = timelines(write_report(tmp_path, str(RECLAIM), capsys=capsys)).values()
    drawn = bars(timeline)

    def of(job: str, phase: str) -> list[tuple[int, bool, float, float | None, int, str | None]]:
        return sorted(
            (bar["row"], bar["borrowed"], bar["start"], bar["end"], bar["attempt"], bar["endedBy"])
            for bar in drawn
            if bar["jobId"] == job and bar["phase"] == phase
        )

    assert title == "scenario"
    assert [(unit["capacityUnit"], unit["rows"]) for unit in timeline["units"]] == [
        ("gpu", 4)
    ]  # a row per GPU
    assert timeline["quotaShareNames"] == ["research", "eval"]  # the colours, in quota-file order
    assert of("train-a", "RUNNING") == [
        (0, False, 0, 120, 1, "SUCCEEDED"),
        (1, False, 0, 120, 1, "SUCCEEDED"),
    ]
    # train-b borrows eval's 2 GPUs, is preempted at 30, stops for 10 s, and borrows again after eval-nightly.
    assert of("train-b", "RUNNING") == [
        (2, True, 0, 30, 1, "PREEMPTED"),
        (2, True, 70, 130, 2, "SUCCEEDED"),
        (3, True, 0, 30, 1, "PREEMPTED"),
        (3, True, 70, 130, 2, "SUCCEEDED"),
    ]
    stopping = [bar for bar in drawn if bar["phase"] == "STOPPING"]
    assert {
        (bar["jobId"], bar["row"], bar["preemptedBy"], bar["rule"], bar["start"], bar["end"], bar["endedBy"])
        for bar in stopping
    } == {
        ("train-b", 2, "eval-nightly", "RECLAIM", 30, 40, "REQUEUED"),
        ("train-b", 3, "eval-nightly", "RECLAIM", 30, 40, "REQUEUED"),
    }
    # Its preemptor is granted those rows the moment the stop completes.
    assert of("eval-nightly", "RUNNING") == [
        (2, False, 40, 70, 1, "SUCCEEDED"),
        (3, False, 40, 70, 1, "SUCCEEDED"),
    ]
    # The waits: eval-nightly from its submission to its grant, train-b from its requeue to its resume.
    waits = {
        job["jobId"]: [(seconds(wait["startedAt"]), seconds(wait["endedAt"])) for wait in job["waits"]]
        for job in timeline["jobs"]
    }
    assert waits == {"train-a": [], "train-b": [(40, 70)], "eval-nightly": [(30, 40)]}
    assert {bar["jobId"]: bar["quotaShareName"] for bar in drawn} == {
        "train-a": "research",
        "train-b": "research",
        "eval-nightly": "eval",
    }


def test_a_scenario_with_free_preemptions_says_so_on_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    free = tmp_path / "free.yaml"
    free.write_text(RECLAIM.read_text().replace("stopSeconds: 10", "stopSeconds: 0"))

    page = write_report(tmp_path, str(free), capsys=capsys)
    costly = write_report(tmp_path, str(RECLAIM), capsys=capsys)

    assert FREE_PREEMPTION_SCENARIO_LINE in page
    assert FREE_PREEMPTION_SCENARIO_LINE not in costly
    assert main([str(free)]) == 0
    assert "Preemption is free in this run" in capsys.readouterr().out  # the text output says it too
    # And --json, in a flag and the same line.
    for scenario, free_of_cost in ((free, True), (RECLAIM, False)):
        assert main([str(scenario), "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert (document["preemptionCostsZero"], document["warnings"]) == (
            free_of_cost,
            [FREE_PREEMPTION_SCENARIO_LINE] if free_of_cost else [],
        )


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        pytest.param((), True, id="free stops: the page warns like the text output"),
        pytest.param(("--stop-seconds", "60"), False, id="stops that take time"),
        pytest.param(("--checkpoint-interval", "900"), False, id="work lost since the last checkpoint"),
    ],
)
def test_a_trace_report_with_free_preemptions_says_so_on_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], warned: bool
) -> None:
    trace, quotas = write_trace_files(tmp_path)
    argv = ["--trace", str(trace), "--config", str(quotas), *options]

    page = write_report(tmp_path, *argv, capsys=capsys)

    assert (FREE_PREEMPTION_LINE in page) is warned
    assert main([*argv, "--json"]) == 0  # --json says it too, in a flag and the same line
    document = json.loads(capsys.readouterr().out)
    assert (document["preemptionCostsZero"], document["warnings"]) == (
        warned,
        [FREE_PREEMPTION_LINE] if warned else [],
    )
    ((_, timeline),) = timelines(page).values()
    assert {(bar["jobId"], bar["preemptedBy"]) for bar in bars(timeline) if bar["phase"] == "STOPPING"} == {
        ("big", "small")
    }


@pytest.fixture(scope="module")
def bursty(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, TraceReport]:
    """The report of 300 of the example trace's jobs (its four teams, borrowing and preempted) with
    --compare-static and 60 s stops, and the runs it draws: the command's own replay, kept on its way to the
    page (replaying it again would double the cost; the whole trace's 2,000 jobs cost 9 CPU-s)."""
    folder = tmp_path_factory.mktemp("bursty")
    path = folder / "report.html"
    trace, quotas = example_trace_window(folder)
    argv = ["--trace", str(trace), "--config", str(quotas), "--compare-static"]
    replays: list[tuple[dict[str, Any], TraceReport]] = []

    def kept(*args: Any, **kwargs: Any) -> TraceReport:
        replays.append((kwargs, run_trace(*args, **kwargs)))
        return replays[-1][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sim_main, "run_trace", kept)
        assert main([*argv, "--stop-seconds", "60", "--report", str(path)]) == 0
    ((options, report),) = replays
    assert options["compare_static"] is True
    assert options["settings"] == Settings(stop_seconds=60)
    return path.read_text(encoding="utf-8"), report


def test_a_trace_report_with_compare_static_draws_both_runs(bursty: tuple[str, TraceReport]) -> None:
    page, report = bursty

    drawn = timelines(page)
    assert [(label, title) for label, (title, _) in drawn.items()] == [
        (run.label, run.description) for run in report.runs
    ]
    assert [run.description for run in report.runs] == ["as configured", "static (every share RESERVE)"]
    (_, configured), (_, static) = drawn.values()
    assert configured["until"] == static["until"]  # one time axis for both
    assert {bar["jobId"] for bar in bars(configured)} == set(report.runs[0].result.jobs)
    assert {bar["jobId"] for bar in bars(static)} == set(report.runs[1].result.jobs)
    assert {job["jobId"] for job in configured["jobs"]} == set(report.runs[0].result.jobs)
    assert not [bar for bar in bars(static) if bar["borrowed"]]  # a fixed partition borrows nothing
    assert [bar for bar in bars(configured) if bar["borrowed"]]
    preempted = {bar["jobId"] for bar in bars(configured) if bar["phase"] == "STOPPING"}
    assert preempted == {
        job.name for job in report.runs[0].result.jobs.values() if job.preempted_attempt_count
    }
    data = report_data(page)
    assert [run["description"] for run in data["runs"]] == ["as configured", "static (every share RESERVE)"]
    assert [wait["quotaShareName"] for wait in data["runs"][0]["waits"]] == [
        "prod",
        "eval",
        "research",
        "vision",
    ]


def test_no_two_jobs_share_a_gpu_row_at_once_and_the_rows_are_the_capacity(
    bursty: tuple[str, TraceReport],
) -> None:
    for _, timeline in timelines(bursty[0]).values():
        ((unit),) = timeline["units"]
        assert (unit["capacity"], unit["rows"]) == (16, 16)
        by_row: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
        for bar in bars(timeline):  # a stop phase starts on its own row as its running phase ends
            by_row[bar["row"]].append((bar["start"], bar["end"] or float("inf"), bar["jobId"]))
        for row, intervals in by_row.items():
            intervals.sort()
            for (_, end, job), (start, _, other) in pairwise(intervals):
                assert start >= end - 1e-9, (
                    f"row {row}: {other} starts at {start} while {job} holds it until {end}"
                )


def test_the_stacked_utilization_integrates_to_the_reported_utilization(
    bursty: tuple[str, TraceReport],
) -> None:
    page, report = bursty
    data = report_data(page)

    for drawn, run in zip(data["runs"], report.runs, strict=True):
        ((unit),) = drawn["capacity"]
        metrics = run.result.metrics
        xs = unit["times"]
        area = sum(
            sum(held[i] * (x1 - x0) for i, (x0, x1) in enumerate(pairwise(xs)))
            for held in unit["held"].values()
        )
        assert metrics.span_start is not None and metrics.span_end is not None
        utilization = area / unit["capacity"] / (metrics.span_end - metrics.span_start)
        assert utilization == pytest.approx(metrics.utilization["ml.p4d.24xlarge"], rel=1e-6)


def test_the_wait_distributions_agree_with_the_reported_waits(bursty: tuple[str, TraceReport]) -> None:
    page, report = bursty

    for drawn, run in zip(report_data(page)["runs"], report.runs, strict=True):
        for wait in drawn["waits"]:
            share = wait["quotaShareName"]
            stats = run.result.metrics.runnable_seconds[share]
            jobs = [job for job in run.result.jobs.values() if job.quota_share_name == share]
            assert wait["jobs"] == len(jobs) == len(wait["seconds"])
            assert wait["mean"] == pytest.approx(stats.mean, abs=1e-3)
            assert wait["p95"] == pytest.approx(stats.p95, abs=1e-3)
            least, q1, median, q3, most = wait["box"]
            assert least == min(wait["seconds"]) <= q1 <= median <= q3 <= most == max(wait["seconds"])


def test_airflow_quota_simulate_passes_report_on_and_the_page_is_written(tmp_path: Path) -> None:
    path = tmp_path / "out.html"
    args = argparse.Namespace(
        scenario=str(RECLAIM), trace=None, config=None, compare_static=False, json=True, report=str(path)
    )

    argv = simulator_argv(args)

    assert argv == [str(RECLAIM), "--report", str(path), "--json"]
    assert main(argv) == 0
    ((_, timeline),) = timelines(path.read_text(encoding="utf-8")).values()
    assert {bar["jobId"] for bar in bars(timeline)} == {"train-a", "train-b", "eval-nightly"}


def test_a_report_that_cannot_be_written_fails_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "missing-folder" / "r.html"

    assert main([str(RECLAIM), "--report", str(path)]) == 1

    assert f"cannot write the report to {path}" in capsys.readouterr().err
    assert not path.exists()
