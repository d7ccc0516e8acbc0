"""The simulator's ``--report FILE.html``: one self-contained page of pictures of a run, drawn with plotly.

The page holds plotly's JavaScript inline (it opens offline, no CDN) and, for each run (as configured, and
the static partition with ``--compare-static``): the GPU timeline (a row per unit of capacity, a bar per
job's hold in its share's colour, borrowed units hatched, the stop phase of a preemption drawn apart and
linked by an arrow to the job that preempted it), each share's share of the capacity over time, and the
wait-time distribution per share. Above them, the run's settings, any warning line (preemption that costs
nothing) and a summary table. Hovering a bar names the job, its share, priority, attempt and why it ended.

plotly is the optional ``report`` extra; without it ``write_html_report`` raises ``ReportError`` saying
how to install it.
"""

from __future__ import annotations

import html
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_quota.sim.holds import Hold, HoldEnd
from airflow_quota.sim.lanes import LaneBar, assign_lanes, lane_count
from airflow_quota.sim.result import SimulationResult
from airflow_quota.sim.scenario import format_seconds

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

REPORT_EXTRA_INSTALL = "pip install 'airflow-quota[report]'"
#: Share colours, in quota-file order (plotly's default qualitative palette).
SHARE_COLOURS = (
    "#636efa",
    "#EF553B",
    "#00cc96",
    "#ab63fa",
    "#FFA15A",
    "#19d3f3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
)
RUN_COLOURS = ("#2a3f5f", "#8c8c8c", "#b6e880")
#: The timeline's bar kinds: (key, legend suffix, plotly fill pattern, opacity).
BAR_KINDS = (
    ("own", "", "", 1.0),
    ("borrowed", " (borrowed)", "x", 1.0),
    ("stopping", " (being stopped)", "/", 0.45),
)
PREEMPTION_COLOUR = "#d62728"
#: Wait distributions show every job as a point up to this many jobs per share; beyond, outliers only.
MAX_WAIT_POINTS = 500
#: Ids of the page's figures (tests find each figure's data by them).
FIGURE_IDS = ("timeline", "utilization", "waits")


class ReportError(RuntimeError):
    """The report cannot be written (plotly is missing, or the file cannot be written)."""


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
    plotly_js = _plotly_js()
    figures = {
        "timeline": timeline_figure(runs),
        "utilization": utilization_figure(runs),
        "waits": waits_figure(runs),
    }
    config = {"displaylogo": False, "responsive": True}
    divs = {
        name: figure.to_html(full_html=False, include_plotlyjs=False, div_id=name, config=config)
        for name, figure in figures.items()
    }
    page = PAGE.format(
        title=html.escape(title),
        plotly_js=plotly_js,
        details="".join(f"<p class='details'>{html.escape(line)}</p>" for line in details),
        warnings="".join(f"<p class='warning'>{html.escape(line)}</p>" for line in warnings),
        summary=summary_table(runs),
        timeline=divs["timeline"],
        utilization=divs["utilization"],
        waits=divs["waits"],
    )
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as error:
        raise ReportError(f"cannot write the report to {os.fspath(path)}: {error}") from error


def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ReportError(
            f"the HTML report needs plotly, which is not installed: {REPORT_EXTRA_INSTALL}"
        ) from None
    script: str = get_plotlyjs()
    return script


# --- the figures --------------------------------------------------------------------------------------------


def share_colours(runs: Sequence[ReportRun]) -> dict[str, str]:
    """A colour per share, by the order of the first run's queue (then any share met later)."""
    names: list[str] = []
    for run in runs:
        names += run.result.queue.share_names()
        names += [hold.share for hold in run.result.holds]
    ordered = list(dict.fromkeys(names))
    return {name: SHARE_COLOURS[index % len(SHARE_COLOURS)] for index, name in enumerate(ordered)}


def timeline_figure(runs: Sequence[ReportRun]) -> Figure:
    """Per run a panel: a row per unit of capacity, a bar per hold on each of its units, arrows from each
    preempted job's stop phase to its preemptor's grant."""
    go, make_subplots = _plotly()
    colours = share_colours(runs)
    laid_out = [
        (run, assign_lanes(run.result.holds, run.result.queue.capacity, run.result.end)) for run in runs
    ]
    heights = [max(2, sum(lane_count(bars, run.result.queue.capacity).values())) for run, bars in laid_out]
    figure = make_subplots(
        rows=len(runs),
        cols=1,
        shared_xaxes=True,
        row_heights=[height / sum(heights) for height in heights],
        vertical_spacing=min(0.12, 0.3 / max(1, len(runs))),
        subplot_titles=[f"GPU timeline, {run.description}" for run in runs],
    )
    for row, (run, bars) in enumerate(laid_out, start=1):
        end = run.result.end
        labels = _lane_labels(lane_count(bars, run.result.queue.capacity))
        for trace in _bar_traces(go, bars, end, colours, first=row == 1):
            figure.add_trace(trace, row=row, col=1)
        figure.add_trace(_preemption_links(go, bars, end, first=row == 1), row=row, col=1)
        figure.update_yaxes(
            categoryorder="array", categoryarray=labels[::-1], type="category", row=row, col=1
        )
    figure.update_xaxes(title_text="simulated seconds", row=len(runs), col=1)
    figure.update_layout(
        barmode="overlay",
        height=180 + 22 * sum(heights),
        legend={"title": {"text": "quota share"}},
        hovermode="closest",
        margin={"l": 90, "r": 30, "t": 60, "b": 50},
    )
    return figure


def _lane_labels(counts: dict[str, int]) -> list[str]:
    return [_lane_label(unit, lane) for unit, count in counts.items() for lane in range(count)]


def _lane_label(unit: str, lane: int) -> str:
    return f"{unit} {lane}"


def _bar_traces(
    go: Any, bars: Sequence[LaneBar], end: float, colours: dict[str, str], *, first: bool
) -> list[Any]:
    """A trace per (share, kind); each bar carries ``customdata`` [job, share, priority, attempt, kind,
    preemptor, how the hold ended] for the hover and for anyone reading the figure's data."""
    segments: dict[tuple[str, str], list[tuple[float, float, str, list[Any]]]] = defaultdict(list)
    for bar in bars:
        hold = bar.hold
        until = hold.until(end)
        running_until = hold.stop_started_at if hold.stop_started_at is not None else until
        kind = "borrowed" if bar.borrowed else "own"
        label = _lane_label(hold.unit, bar.lane)
        segments[(hold.share, kind)].append((hold.granted_at, running_until, label, _bar_data(hold, kind)))
        if hold.stop_started_at is not None:
            segments[(hold.share, "stopping")].append(
                (hold.stop_started_at, until, label, _bar_data(hold, "stopping"))
            )
    traces = []
    for share, colour in colours.items():
        for kind, suffix, pattern, opacity in BAR_KINDS:
            listed = segments.get((share, kind))
            if not listed:
                continue
            traces.append(
                go.Bar(
                    orientation="h",
                    name=share + suffix,
                    legendgroup=f"{share}{suffix}",
                    showlegend=first,
                    base=[start for start, _, _, _ in listed],
                    x=[stop - start for start, stop, _, _ in listed],
                    y=[label for _, _, label, _ in listed],
                    customdata=[data for _, _, _, data in listed],
                    hovertext=[_hover(data, start, stop) for start, stop, _, data in listed],
                    hovertemplate="%{hovertext}<extra></extra>",
                    marker={
                        "color": colour,
                        "opacity": opacity,
                        "line": {"color": "white", "width": 0.5},
                        "pattern": {"shape": pattern, "fgcolor": "white" if pattern == "x" else "black"},
                    },
                    width=0.85,
                )
            )
    return traces


def _bar_data(hold: Hold, kind: str) -> list[Any]:
    return [
        hold.job_name,
        hold.share,
        hold.priority,
        hold.attempt,
        kind,
        hold.preempted_by or "",
        str(hold.end),
    ]


def _hover(data: list[Any], start: float, stop: float) -> str:
    job, share, priority, attempt, kind, preemptor, ended = data
    lines = [
        f"<b>{html.escape(job)}</b> (attempt {attempt})",
        f"share {html.escape(share)}, priority {priority}",
        f"{format_seconds(round(start, 3))} s to {format_seconds(round(stop, 3))} s",
    ]
    if kind == "borrowed":
        lines.append("on borrowed capacity")
    if kind == "stopping":
        why = f"preempted by {html.escape(preemptor)}" if preemptor else "terminated"
        lines.append(f"being stopped: {why}")
    elif ended == HoldEnd.REQUEUED and preemptor:
        lines.append(f"then preempted by {html.escape(preemptor)}")
    else:
        lines.append(f"ended: {ended}")
    return "<br>".join(lines)


def _preemption_links(go: Any, bars: Sequence[LaneBar], end: float, *, first: bool) -> Any:
    """One arrow per preemption: from the victim's first lane when its stop began to the preemptor's first
    lane when it was granted (a preemptor never granted in the run gets no arrow)."""
    first_bar: dict[tuple[str, int], LaneBar] = {}
    grants: dict[str, list[Hold]] = defaultdict(list)
    for bar in bars:
        first_bar.setdefault((bar.hold.job_name, bar.hold.attempt), bar)
    for (job, _), bar in first_bar.items():
        grants[job].append(bar.hold)
    xs: list[float | None] = []
    ys: list[str | None] = []
    data: list[list[str] | None] = []
    sizes: list[int] = []
    for (victim, _), bar in first_bar.items():
        hold = bar.hold
        if hold.preempted_by is None or hold.stop_started_at is None:
            continue
        stop_began = hold.stop_started_at
        granted = next((g for g in grants.get(hold.preempted_by, []) if g.granted_at >= stop_began), None)
        if granted is None:
            continue
        target = first_bar[(granted.job_name, granted.attempt)]
        link = [victim, hold.preempted_by, hold.rule or ""]
        xs += [stop_began, granted.granted_at, None]
        ys += [_lane_label(hold.unit, bar.lane), _lane_label(target.hold.unit, target.lane), None]
        data += [link, link, None]
        sizes += [6, 14, 0]
    return go.Scatter(
        mode="lines+markers",
        name="preempted by (arrow to the preemptor's grant)",
        legendgroup="preemptions",
        showlegend=first,
        x=xs,
        y=ys,
        customdata=data,
        line={"color": PREEMPTION_COLOUR, "dash": "dot", "width": 2},
        marker={"symbol": "arrow", "angleref": "previous", "size": sizes, "color": PREEMPTION_COLOUR},
        hovertemplate="%{customdata[0]} preempted by %{customdata[1]} (%{customdata[2]})<extra></extra>",
    )


def utilization_figure(runs: Sequence[ReportRun]) -> Figure:
    """Per run and capacity unit, each share's units held as a % of the unit's capacity, stacked (the top
    of the stack is the unit's utilization)."""
    go, make_subplots = _plotly()
    colours = share_colours(runs)
    panels = [(run, unit) for run in runs for unit in _units(run.result)]
    figure = make_subplots(
        rows=max(1, len(panels)),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.12, 0.3 / max(1, len(panels))),
        subplot_titles=[
            f"{unit} held per share, {run.description} (capacity {_capacity(run.result, unit)})"
            for run, unit in panels
        ],
    )
    for row, (run, unit) in enumerate(panels, start=1):
        capacity = _capacity(run.result, unit)
        times, held = held_over_time(run.result.holds, unit, run.result.end)
        for share, colour in colours.items():
            values = held.get(share)
            if values is None:
                continue
            figure.add_trace(
                go.Scatter(
                    x=times,
                    y=[100 * value / capacity for value in values],
                    customdata=values,
                    name=share,
                    legendgroup=share,
                    showlegend=row == 1,
                    stackgroup=f"row{row}",
                    line={"shape": "hv", "color": colour, "width": 1},
                    hovertemplate=f"{html.escape(share)}: %{{customdata}} of {capacity} {html.escape(unit)} "
                    "(%{y:.1f}%) from %{x} s<extra></extra>",
                ),
                row=row,
                col=1,
            )
        figure.update_yaxes(title_text="% of capacity", range=[0, 100], row=row, col=1)
    figure.update_xaxes(title_text="simulated seconds", row=max(1, len(panels)), col=1)
    figure.update_layout(
        height=120 + 220 * max(1, len(panels)),
        legend={"title": {"text": "quota share"}},
        margin={"l": 70, "r": 30, "t": 60, "b": 50},
    )
    return figure


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


def waits_figure(runs: Sequence[ReportRun]) -> Figure:
    """Per share, the distribution of its jobs' time RUNNABLE (a box per run, grouped by share)."""
    go, _ = _plotly()
    figure = go.Figure()
    for index, run in enumerate(runs):
        shares = run.result.queue.share_names()
        jobs = sorted(run.result.jobs.values(), key=lambda job: shares.index(job.quota_share_name))
        many = max([0, *(_count_by_share(jobs).values())]) > MAX_WAIT_POINTS
        figure.add_trace(
            go.Box(
                name=run.description,
                x=[job.quota_share_name for job in jobs],
                y=[job.runnable_seconds for job in jobs],
                text=[job.name for job in jobs],
                boxpoints="outliers" if many else "all",
                jitter=0.3,
                pointpos=0,
                boxmean=True,
                marker={"color": RUN_COLOURS[index % len(RUN_COLOURS)], "size": 4},
                hovertemplate="%{text}: waited %{y} s<extra>%{x}</extra>",
            )
        )
    figure.update_layout(
        boxmode="group",
        height=420,
        title={"text": "Time RUNNABLE per job, by quota share (the line is the median, the dash the mean)"},
        xaxis={"title": {"text": "quota share"}},
        yaxis={"title": {"text": "seconds waiting"}, "rangemode": "tozero"},
        margin={"l": 70, "r": 30, "t": 60, "b": 50},
    )
    return figure


def _count_by_share(jobs: Sequence[Any]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for job in jobs:
        counts[job.quota_share_name] += 1
    return counts


def _plotly() -> tuple[Any, Any]:
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise ReportError(
            f"the HTML report needs plotly, which is not installed: {REPORT_EXTRA_INSTALL}"
        ) from None
    return go, make_subplots


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
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #1e1e1e; }}
.details {{ margin: 0.2em 0; color: #444; }}
.warning {{ border-left: 4px solid #e6a700; background: #fff6dc; padding: 0.5em 0.8em; font-weight: 600; }}
table.summary {{ border-collapse: collapse; margin: 1em 0; }}
table.summary td, table.summary th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; }}
table.summary td.num {{ text-align: right; }}
.how {{ color: #444; max-width: 70em; }}
</style>
<script type="text/javascript">{plotly_js}</script>
</head>
<body>
<h1>{title}</h1>
{details}
{warnings}
{summary}
<h2>GPU timeline</h2>
<p class="how">One row per unit of capacity. Each bar is a job holding that unit, in its quota share's colour;
hatched (x) units are borrowed above the share's own limit; a faded, striped (/) end is the job being stopped
after a preemption, while it still holds the units, and the dotted red arrow goes from there to the job that
preempted it, when that job is granted. Hover a bar for the job, its priority, attempt and why it ended.</p>
{timeline}
<h2>Capacity held per share over time</h2>
<p class="how">Each share's units held as a share of the unit's capacity, stacked: the top is the unit's
utilization at that moment.</p>
{utilization}
<h2>Wait time per share</h2>
{waits}
</body>
</html>
"""
