"""``--report FILE.html``: one self-contained page whose figures hold the run's jobs, shares and preemptions.

The figures are read back from the data plotly embeds in the page (``Plotly.newPlot(id, data, layout)``),
so the tests check what a reader's browser draws, not pixels.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from airflow_quota.cli.simulate import simulator_argv
from airflow_quota.sim.__main__ import main
from airflow_quota.sim.html_report import REPORT_EXTRA_INSTALL
from airflow_quota.sim.report import FREE_PREEMPTION_LINE, FREE_PREEMPTION_SCENARIO_LINE
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import TraceReport, run_trace

ROOT = Path(__file__).resolve().parents[3]
RECLAIM = ROOT / "examples" / "scenarios" / "reclaim.yaml"
BURSTY_TRACE = ROOT / "examples" / "traces" / "bursty_teams.csv"
BURSTY_QUOTAS = ROOT / "examples" / "traces" / "quotas.yaml"


def figure(page: str, figure_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The data and layout plotly draws in the div ``figure_id``."""
    match = re.search(r"Plotly\.newPlot\(\s*" + re.escape(json.dumps(figure_id)) + r",\s*", page)
    assert match, f"no figure {figure_id} in the page"
    decoder = json.JSONDecoder()
    data, after = decoder.raw_decode(page, match.end())
    between = re.compile(r"\s*,\s*").match(page, after)
    assert between, f"no layout after the data of {figure_id}"
    layout, _ = decoder.raw_decode(page, between.end())
    return data, layout


def write_report(tmp_path: Path, *argv: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "report.html"
    assert main([*argv, "--report", str(path)]) == 0
    capsys.readouterr()
    return path.read_text(encoding="utf-8")


def bars(data: list[dict[str, Any]], axis: str = "y") -> list[dict[str, Any]]:
    """Every bar of the timeline panel on ``axis``: job, share, kind, preemptor, lane, start and end."""
    found = []
    for trace in data:
        if trace["type"] != "bar" or trace.get("yaxis", "y") != axis:
            continue
        for base, length, lane, custom in zip(
            trace["base"], trace["x"], trace["y"], trace["customdata"], strict=True
        ):
            job, share, priority, attempt, kind, preemptor, ended = custom
            found.append(
                {
                    "job": job,
                    "share": share,
                    "priority": priority,
                    "attempt": attempt,
                    "kind": kind,
                    "preemptor": preemptor,
                    "ended": ended,
                    "lane": lane,
                    "start": base,
                    "end": base + length,
                    "colour": trace["marker"]["color"],
                }
            )
    return found


def test_the_reclaim_report_is_one_self_contained_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = write_report(tmp_path, str(RECLAIM), capsys=capsys)

    assert page.startswith("<!DOCTYPE html>")
    assert re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE) is None  # nothing loaded: plotly inline
    assert re.search(r"<link\b", page, re.IGNORECASE) is None
    assert "Plotly.newPlot" in page and "plotly.js v" in page.lower()


def test_the_reclaim_timeline_shows_the_borrower_stopped_for_its_preemptor_then_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, layout = figure(write_report(tmp_path, str(RECLAIM), capsys=capsys), "timeline")
    drawn = bars(data)

    def of(job: str, kind: str) -> list[tuple[str, float, float, int]]:
        return sorted(
            (bar["lane"], bar["start"], bar["end"], bar["attempt"])
            for bar in drawn
            if bar["job"] == job and bar["kind"] == kind
        )

    assert layout["yaxis"]["categoryarray"] == ["gpu 3", "gpu 2", "gpu 1", "gpu 0"]  # a row per GPU
    assert of("train-a", "own") == [("gpu 0", 0, 120, 1), ("gpu 1", 0, 120, 1)]
    # train-b borrows eval's 2 GPUs, is preempted at 30, stops for 10 s, and borrows again after eval-nightly.
    assert of("train-b", "borrowed") == [
        ("gpu 2", 0, 30, 1),
        ("gpu 2", 70, 130, 2),
        ("gpu 3", 0, 30, 1),
        ("gpu 3", 70, 130, 2),
    ]
    stopping = [bar for bar in drawn if bar["kind"] == "stopping"]
    assert {(bar["job"], bar["preemptor"], bar["start"], bar["end"]) for bar in stopping} == {
        ("train-b", "eval-nightly", 30, 40)
    }
    assert of("eval-nightly", "own") == [("gpu 2", 40, 70, 1), ("gpu 3", 40, 70, 1)]
    # Each share has its own colour, the same on all its bars.
    colours = {bar["share"]: set() for bar in drawn}
    for bar in drawn:
        colours[bar["share"]].add(bar["colour"])
    assert all(len(each) == 1 for each in colours.values())
    assert colours["research"] != colours["eval"]
    # The arrow goes from train-b's stop (t=30) to eval-nightly's grant (t=40).
    (links,) = [trace for trace in data if trace["type"] == "scatter"]
    assert links["x"] == [30, 40, None]
    assert links["customdata"][0] == ["train-b", "eval-nightly", "RECLAIM"]


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


QUOTAS = """
jobQueues:
  - jobQueueName: q
    capacityLimits: [{capacityUnit: gpu, maxCapacity: 4}]
    quotaShares:
      - {quotaShareName: x, capacityLimits: [{capacityUnit: gpu, maxCapacity: 2}],
         resourceSharingConfiguration: {strategy: LEND_AND_BORROW}}
      - {quotaShareName: y, capacityLimits: [{capacityUnit: gpu, maxCapacity: 2}],
         resourceSharingConfiguration: {strategy: LEND_AND_BORROW}}
"""
# big borrows y's 2 idle GPUs; small (y) reclaims them at t=10.
TRACE = """submitTime,jobName,quotaShareName,schedulingPriority,capacityUnit,instanceCount,duration
0,big,x,5,gpu,4,100
10,small,y,1,gpu,2,10
"""


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
    (tmp_path / "quotas.yaml").write_text(QUOTAS)
    (tmp_path / "jobs.csv").write_text(TRACE)
    argv = ["--trace", str(tmp_path / "jobs.csv"), "--config", str(tmp_path / "quotas.yaml"), *options]

    page = write_report(tmp_path, *argv, capsys=capsys)

    assert (FREE_PREEMPTION_LINE in page) is warned
    data, _ = figure(page, "timeline")
    assert {(bar["job"], bar["preemptor"]) for bar in bars(data) if bar["kind"] == "stopping"} == {
        ("big", "small")
    }


@pytest.fixture(scope="module")
def bursty(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, TraceReport]:
    """The example trace's report with --compare-static and 60 s stops, and the runs it draws."""
    path = tmp_path_factory.mktemp("bursty") / "report.html"
    argv = ["--trace", str(BURSTY_TRACE), "--config", str(BURSTY_QUOTAS), "--compare-static"]
    assert main([*argv, "--stop-seconds", "60", "--report", str(path)]) == 0
    report = run_trace(BURSTY_TRACE, BURSTY_QUOTAS, compare_static=True, settings=Settings(stop_seconds=60))
    return path.read_text(encoding="utf-8"), report


def test_a_trace_report_with_compare_static_draws_both_runs(bursty: tuple[str, TraceReport]) -> None:
    page, report = bursty

    timeline, layout = figure(page, "timeline")
    titles = [annotation["text"] for annotation in layout["annotations"]]
    assert titles == ["GPU timeline, as configured", "GPU timeline, static (every share RESERVE)"]
    configured, static = bars(timeline, "y"), bars(timeline, "y2")
    assert {bar["job"] for bar in configured} == set(report.runs[0].result.jobs)
    assert {bar["job"] for bar in static} == set(report.runs[1].result.jobs)
    assert not [bar for bar in static if bar["kind"] == "borrowed"]  # a fixed partition borrows nothing
    assert [bar for bar in configured if bar["kind"] == "borrowed"]
    preempted = {bar["job"] for bar in configured if bar["kind"] == "stopping"}
    assert preempted == {
        job.name for job in report.runs[0].result.jobs.values() if job.preempted_attempt_count
    }
    waits, _ = figure(page, "waits")
    assert [trace["name"] for trace in waits] == ["as configured", "static (every share RESERVE)"]
    assert set(waits[0]["x"]) == {"prod", "eval", "research", "vision"}


def test_no_two_jobs_share_a_gpu_row_at_once_and_the_rows_are_the_capacity(
    bursty: tuple[str, TraceReport],
) -> None:
    timeline, layout = figure(bursty[0], "timeline")

    assert len(layout["yaxis"]["categoryarray"]) == 16
    by_lane: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for bar in bars(timeline):
        if bar["kind"] != "stopping":  # a stop phase continues its own running bar on the same row
            by_lane[bar["lane"]].append((bar["start"], bar["end"], bar["job"]))
    for lane, intervals in by_lane.items():
        intervals.sort()
        for (_, end, job), (start, _, other) in pairwise(intervals):
            assert start >= end - 1e-9, f"{lane}: {other} starts at {start} while {job} holds it until {end}"


def test_the_stacked_utilization_integrates_to_the_reported_utilization(
    bursty: tuple[str, TraceReport],
) -> None:
    page, report = bursty
    data, _ = figure(page, "utilization")

    for axis, run in (("y", report.runs[0]), ("y2", report.runs[1])):
        metrics = run.result.metrics
        area = 0.0
        for trace in data:
            if trace.get("yaxis", "y") == axis:
                xs, ys = trace["x"], trace["y"]
                area += sum(y * (x1 - x0) for x0, x1, y in zip(xs, xs[1:], ys, strict=False)) / 100
        assert metrics.span_start is not None and metrics.span_end is not None
        utilization = area / (metrics.span_end - metrics.span_start)
        assert utilization == pytest.approx(metrics.utilization["ml.p4d.24xlarge"], rel=1e-6)


def test_airflow_quota_simulate_passes_report_on_and_the_page_is_written(tmp_path: Path) -> None:
    path = tmp_path / "out.html"
    args = argparse.Namespace(
        scenario=str(RECLAIM), trace=None, config=None, compare_static=False, json=True, report=str(path)
    )

    argv = simulator_argv(args)

    assert argv == [str(RECLAIM), "--report", str(path), "--json"]
    assert main(argv) == 0
    data, _ = figure(path.read_text(encoding="utf-8"), "timeline")
    assert {bar["job"] for bar in bars(data)} == {"train-a", "train-b", "eval-nightly"}


def test_without_plotly_the_report_fails_naming_the_extra_to_install(tmp_path: Path) -> None:
    # Fault injection: plotly made unimportable in a subprocess (it is installed in the test environment).
    code = (
        "import sys; sys.modules['plotly'] = None; "
        "from airflow_quota.sim.__main__ import main; "
        f"sys.exit(main([{str(RECLAIM)!r}, '--report', {str(tmp_path / 'r.html')!r}]))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )

    assert completed.returncode == 1
    assert REPORT_EXTRA_INSTALL in completed.stderr
    assert not (tmp_path / "r.html").exists()
