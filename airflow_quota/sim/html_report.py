"""The simulator's ``--report FILE.html``: one self-contained page of pictures of a run, drawn like the GPU
Quotas page.

The page carries inline the page's own files, read from the installed package: Apache ECharts (vendored
under ``airflow_quota/api/static/vendor``, with its NOTICE), the page's timeline code (``quota-timeline.js``)
and style (``quota.css``), and this report's drawing script (``html_report.js``); nothing is loaded from the
network. The run's data are JSON blocks in the page, which the scripts draw and tests read:

- per run (as configured, and the static partition with ``--compare-static``), a
  ``<script type="application/json" class="timeline-data">`` holding the run's GPU timeline in the REST
  API's shape (``rest_timeline.job_queue_timeline``), drawn by the page's ``QuotaTimeline.draw``: a row per
  unit of capacity, a bar per job's hold in its share's colour, borrowed units marked, the stop phase of a
  preemption drawn apart and naming (a link to) its preemptor, each job's waits;
- ``<script type="application/json" id="report-data">``: per run each share's capacity held over time per
  capacity unit, and each share's wait distribution (box, mean, p95, every job's seconds).

Above them, the run's settings, any warning line (preemption that costs nothing) and a summary table.
"""

from __future__ import annotations

import html
import json
import os
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from airflow_quota.sim.holds import Hold
from airflow_quota.sim.metrics import p95
from airflow_quota.sim.rest_timeline import job_queue_timeline, simulated_time
from airflow_quota.sim.result import SimulationResult

#: The package whose files the GPU Quotas page serves; the report inlines these of them.
PAGE_PACKAGE = "airflow_quota.api.static"
PAGE_FILES = ("quota.css", "vendor/echarts.min.js", "quota-timeline.js", "vendor/NOTICE")
#: This report's own drawing script (html_report.js) is in this package.
REPORT_PACKAGE = "airflow_quota.sim"
#: A timeline draws a lane per waiting job up to this many waiting jobs; beyond, the waits chart has them.
MAX_WAIT_LANES = 60


class ReportError(RuntimeError):
    """The report cannot be written (its file, or a file of the package it inlines)."""


@dataclass(frozen=True, slots=True)
class ReportRun:
    """One run to draw: ``label`` as in ``--json``, ``description`` as the run is titled."""

    label: str
    description: str
    result: SimulationResult


def write_html_report(
    path: str | os.PathLike[str],
    runs: Sequence[ReportRun],
    *,
    title: str,
    details: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> None:
    """Write the page for ``runs`` to ``path``; ``details`` are lines under the title, ``warnings`` lines
    shown in a box above the pictures."""
    until = max(run.result.end for run in runs)
    timelines = "".join(
        f"<h3>GPU timeline, {html.escape(run.description)}</h3>"
        f"<div class='timeline-host' id='timeline-{index}'></div>"
        f"<script type='application/json' class='timeline-data' id='timeline-data-{index}' "
        f"data-host='timeline-{index}' data-run='{html.escape(run.label)}'>"
        f"{_json(job_queue_timeline(run.result, until=until))}</script>"
        for index, run in enumerate(runs)
    )
    css, echarts, timeline_js, notice = (_package_text(PAGE_PACKAGE, name) for name in PAGE_FILES)
    page = PAGE.format(
        title=html.escape(title),
        notice=notice.replace("--", "- -"),
        css=css,
        echarts=echarts,
        timeline_js=timeline_js,
        report_js=_package_text(REPORT_PACKAGE, "html_report.js"),
        details="".join(f"<p class='details'>{html.escape(line)}</p>" for line in details),
        warnings="".join(f"<p class='warning'>{html.escape(line)}</p>" for line in warnings),
        summary=summary_table(runs),
        timelines=timelines,
        data=_json(report_data(runs, until)),
    )
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as error:
        raise ReportError(f"cannot write the report to {os.fspath(path)}: {error}") from error


def _package_text(package: str, name: str) -> str:
    try:
        return resources.files(package).joinpath(name).read_text(encoding="utf-8")
    except OSError as error:
        raise ReportError(
            f"cannot read {name} of the package {package} for the report ({error}): reinstall airflow-quota"
        ) from error


def _json(value: Any) -> str:
    """JSON safe inside a <script> element (no ``</script>`` can end it early)."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


# --- the data the charts draw -------------------------------------------------------------------------------


def share_names(runs: Sequence[ReportRun]) -> list[str]:
    """The shares in the first run's quota-file order (their colours), then any share met later."""
    names: list[str] = []
    for run in runs:
        names += run.result.queue.share_names()
        names += [hold.share for hold in run.result.holds]
    return list(dict.fromkeys(names))


def report_data(runs: Sequence[ReportRun], until: float) -> dict[str, Any]:
    """The ``report-data`` block: per run its capacity held per share over time and its waits per share;
    times in simulated seconds (the page draws second 0 at ``clockStart``, as the timelines do)."""
    return {
        "clockStart": simulated_time(0),
        "maxWaitLanes": MAX_WAIT_LANES,
        "quotaShareNames": share_names(runs),
        "runs": [
            {
                "label": run.label,
                "description": run.description,
                "until": until,
                "capacity": [_capacity_held(run.result, unit) for unit in _units(run.result)],
                "waits": wait_distributions(run.result),
            }
            for run in runs
        ],
    }


def _capacity_held(result: SimulationResult, unit: str) -> dict[str, Any]:
    times, held = held_over_time(result.holds, unit, result.end)
    return {"capacityUnit": unit, "capacity": _capacity(result, unit), "times": times, "held": held}


def wait_distributions(result: SimulationResult) -> list[dict[str, Any]]:
    """Per share (quota-file order) its jobs' seconds RUNNABLE: sorted, the box [least, q1, median, q3,
    most] (quartiles inclusive of the ends), mean and nearest-rank p95."""
    by_share: dict[str, list[float]] = defaultdict(list)
    for job in result.jobs.values():
        by_share[job.quota_share_name].append(job.runnable_seconds)
    order = list(dict.fromkeys([*result.queue.share_names(), *by_share]))
    distributions = []
    for share in order:
        seconds = sorted(by_share.get(share, []))
        if not seconds:
            continue
        q1, median, q3 = (
            statistics.quantiles(seconds, n=4, method="inclusive") if len(seconds) > 1 else seconds * 3
        )
        distributions.append(
            {
                "quotaShareName": share,
                "jobs": len(seconds),
                "box": [_round(value) for value in (seconds[0], q1, median, q3, seconds[-1])],
                "mean": _round(statistics.fmean(seconds)),
                "p95": _round(p95(seconds) or 0.0),
                "seconds": [_round(value) for value in seconds],
            }
        )
    return distributions


def _round(value: float) -> float:
    return round(value, 3)


def _units(result: SimulationResult) -> list[str]:
    return list(dict.fromkeys([*result.queue.capacity, *(hold.unit for hold in result.holds)]))


def _capacity(result: SimulationResult, unit: str) -> int:
    """The unit's capacity (at the end of the run), or the most held at once when the queue has none."""
    capacity = int(result.queue.capacity.get(unit, 0))
    if capacity:
        return capacity
    _, held = held_over_time(result.holds, unit, result.end)
    totals = [sum(column) for column in zip(*held.values(), strict=True)] if held else []
    return int(max([1, *totals]))


def held_over_time(holds: Sequence[Hold], unit: str, end: float) -> tuple[list[float], dict[str, list[int]]]:
    """The moments at which ``unit``'s holdings changed, and per share the units it held from each one."""
    changes: dict[float, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    shares: list[str] = []
    for hold in holds:
        if hold.unit != unit:
            continue
        shares.append(hold.share)
        changes[hold.granted_at][hold.share] += hold.count
        changes[hold.until(end)][hold.share] -= hold.count
    if not changes:
        return [], {}
    times = sorted(changes)
    current: dict[str, int] = defaultdict(int)
    held: dict[str, list[int]] = {share: [] for share in dict.fromkeys(shares)}
    for at in times:
        for share, delta in changes[at].items():
            current[share] += delta
        for share, values in held.items():
            values.append(current[share])
    return times, held


# --- the summary table --------------------------------------------------------------------------------------


def summary_table(runs: Sequence[ReportRun]) -> str:
    """The runs' main figures side by side, as an HTML table (the same figures the text output has)."""
    first = runs[0].result.metrics
    rows: list[tuple[str, list[str]]] = []
    for unit in first.utilization:
        rows.append(
            (f"utilization {unit}", [_percent(run.result.metrics.utilization.get(unit)) for run in runs])
        )
    for share in first.runnable_seconds:
        rows.append(
            (
                f"wait {share}: mean s",
                [_seconds(run.result.metrics.runnable_seconds[share].mean) for run in runs],
            )
        )
        rows.append(
            (
                f"wait {share}: p95 s",
                [_seconds(run.result.metrics.runnable_seconds[share].p95) for run in runs],
            )
        )
    rows.append(("preemptions", [str(run.result.metrics.preemptions_total) for run in runs]))
    for unit in first.lost_unit_seconds:
        rows.append(
            (f"unit-seconds lost {unit}", [_seconds(run.result.metrics.lost_total(unit)) for run in runs])
        )
    header = "".join(f"<th>{html.escape(run.description)}</th>" for run in runs)
    body = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td class='num'>{value}</td>" for value in values)
        + "</tr>"
        for label, values in rows
    )
    return f"<table class='summary'><tr><th>metric</th>{header}</tr>{body}</table>"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


PAGE = """<!DOCTYPE html>
<html lang="en">
<!--
{notice}
-->
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
{css}
body {{ margin: 1.5em; }}
.details {{ margin: 0.2em 0; color: var(--muted); }}
.warning {{ border-left: 4px solid var(--warn); background: var(--panel); padding: 0.5em 0.8em;
  font-weight: 600; }}
table.summary {{ border-collapse: collapse; margin: 1em 0; }}
table.summary td, table.summary th {{ border: 1px solid var(--line); padding: 0.25em 0.6em; }}
table.summary td.num {{ text-align: right; }}
.how {{ color: var(--muted); max-width: 70em; }}
.legend-item {{ margin-right: 1.2em; white-space: nowrap; }}
.swatch {{ display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px;
  vertical-align: -1px; }}
.report-chart {{ width: 100%; }}
</style>
<script>{echarts}</script>
<script>{timeline_js}</script>
</head>
<body>
<h1>{title}</h1>
{details}
{warnings}
{summary}
<h2>GPU timeline</h2>
<p class="how">Drawn as the GPU Quotas page draws a job queue. One row per unit of capacity (#1, #2, ...),
time left to right from the run's second 0 (00:00:00; 1d 02:00 is a day and two hours in). Each bar is a
job holding that unit, in its quota share's colour; borrowed units are lighter with a dashed edge; a faded
bar with a red edge is the job being stopped after a preemption, while it still holds the units. Hover a
bar for the job, its priority and why (its times too are the time since second 0, 1d 02:10:00 on the second
day of a run); click it to
keep its details under the chart, where a stop phase links to the job that preempted it. The lanes under
the rows are the jobs' waits. Zoom with the mouse wheel, drag to pan.</p>
<p id="legend"></p>
{timelines}
<h2>Capacity held per share over time</h2>
<p class="how">Each share's units held as a share of the unit's capacity, stacked: the top is the unit's
utilization at that moment.</p>
<div id="capacity"></div>
<h2>Wait time per share</h2>
<div id="waits"></div>
<script type="application/json" id="report-data">{data}</script>
<script>{report_js}</script>
</body>
</html>
"""
