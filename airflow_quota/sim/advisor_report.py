"""What the advisor writes: the proposed quota file, its diff against the current one, a summary for the
terminal and a self-contained HTML report comparing the current and proposed designs per share."""

from __future__ import annotations

import copy
import html
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from airflow_quota.engine.config import parse_quota_config
from airflow_quota.sim.advisor import OBJECTIVE_TEXT, Advice, Evaluation

HOUR = 3600.0


def proposed_document(raw: Mapping[str, Any], queue_index: int, advice: Advice) -> dict[str, Any]:
    """The whole quota file with the advised queue's shares replaced (everything else as it was)."""
    document = copy.deepcopy(dict(raw))
    document["jobQueues"][queue_index]["quotaShares"] = [copy.deepcopy(s) for s in advice.proposed_shares]
    return document


def validate_document(document: Mapping[str, Any], source: str) -> None:
    """Raise ``QuotaConfigError`` unless ``document`` is a valid quota file (engine/config.py)."""
    parse_quota_config(document, source)


def render_document(document: Mapping[str, Any], path: str, advice: Advice, history: str) -> str:
    """The proposed file's text: JSON for a ``.json`` path, else YAML headed by a comment on its origin."""
    if path.lower().endswith(".json"):
        return json.dumps(document, indent=2) + "\n"
    header = (
        f"# Proposed by airflow quota advise on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC for job queue "
        f"{advice.queue_name}\n# from {history} ({advice.job_count} jobs): objective "
        f"{advice.current_score:.0f} -> {advice.proposed_score:.0f} s ({100 * advice.improvement:.1f}% "
        "lower).\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=110)


def diff_lines(advice: Advice) -> list[str]:
    """One line per changed field of a share: ``research: capacityLimits.gpu 4 -> 6``."""
    lines: list[str] = []
    for before, after in zip(advice.current_shares, advice.proposed_shares, strict=True):
        old, new = _flatten(before), _flatten(after)
        for key in dict.fromkeys([*old, *new]):
            if old.get(key) != new.get(key):
                lines.append(
                    f"{after['quotaShareName']}: {key} {_shown(old.get(key))} -> {_shown(new.get(key))}"
                )
    return lines


def _flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in document.items():
        if key == "quotaShareName":
            continue
        if isinstance(value, Mapping):
            fields |= _flatten(value, f"{prefix}{key}.")
        elif key == "capacityLimits" and isinstance(value, list):
            fields |= {f"{prefix}{key}.{item['capacityUnit']}": item.get("maxCapacity") for item in value}
        else:
            fields[f"{prefix}{key}"] = value
    return fields


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def verdict(advice: Advice) -> str:
    """What came of the search, in one or two sentences (said plainly when nothing better was found)."""
    early = (
        ""
        if advice.complete
        else f" The search stopped early ({advice.stopped_because}): more replays (--time-limit, "
        "--max-replays) may find more."
    )
    if advice.improved:
        return (
            f"Proposed design: objective {advice.current_score:.0f} -> {advice.proposed_score:.0f} s "
            f"({100 * advice.improvement:.1f}% lower).{early}"
        )
    designs = len(advice.trials) - 1
    if designs == 0:
        tried = "no other design was replayed"
    else:
        best = min((t.score for t in advice.trials[1:] if t.allowed), default=advice.current_score)
        gain = 100 * (advice.current_score - best) / advice.current_score if advice.current_score > 0 else 0.0
        tried = (
            f"the best of {designs} other designs was {max(gain, 0.0):.1f}% lower, under the "
            f"{100 * advice.options.min_improvement:g}% a proposal needs"
        )
    return (
        f"Found nothing better: the current design stays (objective {advice.current_score:.0f} s; {tried}). "
        f"No quota file written.{early}"
    )


def search_line(advice: Advice) -> str:
    replays = len(advice.trials)
    per = sum(trial.evaluation.wall_seconds for trial in advice.trials) / max(1, replays)
    return (
        f"{replays} replays of {advice.job_count} jobs in {advice.elapsed_seconds:.1f} s (one replay "
        f"{per:.1f} s); stopped: {advice.stopped_because}."
    )


# --- the terminal -------------------------------------------------------------------------------------------


def print_advice(console: Console, advice: Advice) -> None:
    console.print(comparison_table(advice))
    changes = diff_lines(advice)
    if advice.improved:
        console.print("[bold]Changes[/]")
        for line in changes:
            console.print(f"  {escape(line)}", soft_wrap=True)
    console.print(escape(verdict(advice)), soft_wrap=True)
    console.print(escape(search_line(advice)), soft_wrap=True)


def comparison_table(advice: Advice) -> Table:
    table = Table(
        title=escape(f"Job queue {advice.queue_name}: current -> proposed (waits in minutes)"),
        caption=escape("Objective: " + OBJECTIVE_TEXT),
    )
    for header in (
        "share",
        "jobs",
        "wait p50",
        "wait p95",
        "wait mean",
        "GPU-h held",
        "preempted",
        "GPU-h lost",
    ):
        table.add_column(header, justify="left" if header == "share" else "right")
    for name, row in share_rows(advice).items():
        table.add_row(escape(name), *row)
    return table


def share_rows(advice: Advice) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    now, then = advice.current, advice.proposed
    for name, before in now.shares.items():
        after = then.shares[name]
        rows[name] = [
            str(before.jobs),
            _pair(before.wait_p50 / 60, after.wait_p50 / 60),
            _pair(before.wait_p95 / 60, after.wait_p95 / 60),
            _pair(before.wait_mean / 60, after.wait_mean / 60),
            _pair(before.held_unit_seconds / HOUR, after.held_unit_seconds / HOUR),
            _pair(before.preemptions, after.preemptions, digits=0),
            _pair(before.lost_unit_seconds / HOUR, after.lost_unit_seconds / HOUR),
        ]
    return rows


def _pair(before: float, after: float, *, digits: int = 1) -> str:
    first, second = f"{before:.{digits}f}", f"{after:.{digits}f}"
    return first if first == second else f"{first} -> {second}"


# --- the HTML report ----------------------------------------------------------------------------------------

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1a1a1a; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.better { color: #137333; font-weight: 600; } .worse { color: #b3261e; font-weight: 600; }
.verdict { font-size: 1.15em; font-weight: 600; } code { background: #f3f3f3; padding: 1px 4px; }
.bar { display: inline-block; height: 10px; background: #5b8def; vertical-align: middle; }
.bar.proposed { background: #34a853; }
"""


def write_html(path: str | os.PathLike[str], advice: Advice, *, history: str, config: str) -> None:
    """Write the report (raises ``OSError`` when the file cannot be written)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(html_report(advice, history=history, config=config))


def html_report(advice: Advice, *, history: str, config: str) -> str:
    esc = html.escape
    options = advice.options
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Quota advice for {esc(advice.queue_name)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>Quota advice: job queue {esc(advice.queue_name)}</h1>",
        f"<p>History <code>{esc(history)}</code> ({advice.job_count} jobs), current design "
        f"<code>{esc(config)}</code>. Replayed with stops of {options.stop_seconds:g} s, starts of "
        f"{options.start_seconds:g} s, checkpoints every {options.checkpoint_interval:g} s of work "
        f"(0: none needed); seed {options.seed}.</p>",
        f"<p class='verdict' id='verdict'>{esc(verdict(advice))}</p>",
        f"<p>{esc(search_line(advice))}</p>",
        "<h2>What was optimised</h2>",
        f"<p>{esc(OBJECTIVE_TEXT)}</p>",
        "<p>Weights: "
        + ", ".join(f"{esc(name)} {weight:.3f}" for name, weight in advice.weights.items())
        + ".</p>",
        "<h2>What was held fixed</h2><ul>",
        *(f"<li>{esc(rule)}</li>" for rule in advice.held_fixed),
        "</ul><p>Own-limit floors (units held at p95 under the current design): "
        + "; ".join(
            f"{esc(name)} " + ", ".join(f"{esc(unit)} {floor}" for unit, floor in floors.items())
            for name, floors in advice.floors.items()
        )
        + ".</p>",
        "<p>Not searched: " + "; ".join(esc(line) for line in advice.not_searched) + ".</p>",
        "<h2>Changes</h2>",
        _changes_html(advice),
        "<h2>Per share: current &rarr; proposed</h2>",
        _shares_html(advice),
        "<h2>Queue</h2>",
        _queue_html(advice),
        "<h2>Every design replayed</h2>",
        _trials_html(advice),
        "<script type='application/json' id='advice-data'>",
        json.dumps(advice_json(advice)).replace("</", "<\\/"),
        "</script></body></html>",
    ]
    return "\n".join(parts)


def _changes_html(advice: Advice) -> str:
    if not advice.improved:
        return "<p>None: the current design stays.</p>"
    items = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in diff_lines(advice))
    return f"<ul id='changes'>{items}</ul>"


def _cell(
    before: float,
    after: float,
    *,
    scale: float = 1.0,
    digits: int = 1,
    lower_better: bool = True,
    extra: str = "",
) -> str:
    """A table cell ``before -> after`` (one value when they show the same), green when better."""
    first, second = f"{before / scale:.{digits}f}", f"{after / scale:.{digits}f}"
    text = first if first == second else f"{first} &rarr; {second}"
    css = ""
    if first != second:
        improved = (after < before) == lower_better
        css = " class='better'" if improved else " class='worse'"
    return f"<td{css}>{text}{extra}</td>"


def _shares_html(advice: Advice) -> str:
    header = (
        "<table id='shares'><tr><th>share</th><th>jobs</th><th>own limit</th><th>strategy</th>"
        "<th>wait p50 (min)</th><th>wait p95 (min)</th><th>wait mean (min)</th><th>utilization "
        "(of the queue)</th><th>preemptions</th><th>GPU-h lost</th></tr>"
    )
    rows = [header]
    for before_share, after_share in zip(advice.current_shares, advice.proposed_shares, strict=True):
        name = str(before_share["quotaShareName"])
        before, after = advice.current.shares[name], advice.proposed.shares[name]
        limits = _limits_text(before_share), _limits_text(after_share)
        strategies = _sharing_text(before_share), _sharing_text(after_share)
        used = (
            advice.current.capacity_share(name, advice.capacity),
            advice.proposed.capacity_share(name, advice.capacity),
        )
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{before.jobs}</td>"
            f"<td>{_text_pair(*limits)}</td><td>{_text_pair(*strategies)}</td>"
            + _cell(before.wait_p50, after.wait_p50, scale=60)
            + _cell(before.wait_p95, after.wait_p95, scale=60)
            + _cell(before.wait_mean, after.wait_mean, scale=60)
            + _cell(100 * used[0], 100 * used[1], lower_better=False, extra=f" %<br>{_bars(used)}")
            + _cell(before.preemptions, after.preemptions, digits=0)
            + _cell(before.lost_unit_seconds, after.lost_unit_seconds, scale=HOUR)
            + "</tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def _bars(values: tuple[float, float]) -> str:
    spans = []
    for index, value in enumerate(values):
        css = "bar proposed" if index else "bar"
        spans.append(f"<span class='{css}' style='width:{max(1, round(200 * value))}px'></span><br>")
    return "".join(spans)


def _queue_html(advice: Advice) -> str:
    rows = ["<table id='queue'><tr><th>measure</th><th>current &rarr; proposed</th></tr>"]
    for unit in advice.capacity:
        before = advice.current.utilization.get(unit) or 0.0
        after = advice.proposed.utilization.get(unit) or 0.0
        rows.append(
            f"<tr><td>utilization {html.escape(unit)} (%)</td>"
            + _cell(100 * before, 100 * after, lower_better=False)
            + "</tr>"
        )
    rows.append(
        "<tr><td>objective (s)</td>"
        + _cell(advice.current_score, advice.proposed_score, digits=0)
        + "</tr><tr><td>preemptions</td>"
        + _cell(advice.current.preemptions, advice.proposed.preemptions, digits=0)
        + "</tr><tr><td>GPU-hours lost to preemption</td>"
        + _cell(advice.current.lost_unit_seconds, advice.proposed.lost_unit_seconds, scale=HOUR)
        + "</tr><tr><td>jobs unfinished at the end</td>"
        + _cell(advice.current.unfinished, advice.proposed.unfinished, digits=0)
        + "</tr></table>"
    )
    return "".join(rows)


def _trials_html(advice: Advice) -> str:
    rows = [
        "<table id='trials'><tr><th>#</th><th>round</th><th>move (from the best design so far)</th>"
        "<th>objective (s)</th><th>kept</th><th>replay (s)</th></tr>"
    ]
    for trial in advice.trials:
        kept = (
            "yes"
            if trial.taken
            else ("no (a share's p95 wait would more than double)" if not trial.allowed else "")
        )
        rows.append(
            f"<tr><td>{trial.number}</td><td>{trial.round}</td><td>{html.escape(trial.move)}</td>"
            f"<td>{trial.score:.0f}</td><td>{kept}</td><td>{trial.evaluation.wall_seconds:.1f}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def _limits_text(share: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{item['capacityUnit']} {item['maxCapacity']}" for item in share.get("capacityLimits") or []
    )


def _sharing_text(share: Mapping[str, Any]) -> str:
    sharing = share.get("resourceSharingConfiguration") or {}
    text = str(sharing.get("strategy", "RESERVE"))
    if "borrowLimit" in sharing and sharing["borrowLimit"] != -1:
        text += f" {sharing['borrowLimit']}%"
    extensions = share.get("extensions") or {}
    if extensions:
        text += " (" + ", ".join(f"{key} {value}" for key, value in extensions.items()) + ")"
    return text


def _text_pair(before: str, after: str) -> str:
    if before == after:
        return html.escape(before)
    return f"<span class='better'>{html.escape(before)} &rarr; {html.escape(after)}</span>"


# --- JSON ---------------------------------------------------------------------------------------------------


def advice_json(advice: Advice) -> dict[str, Any]:
    """The advice as data (``--json``, and embedded in the report for tests and tools)."""
    return {
        "jobQueue": advice.queue_name,
        "jobs": advice.job_count,
        "settings": {
            "stopSeconds": advice.options.stop_seconds,
            "startSeconds": advice.options.start_seconds,
            "checkpointIntervalSeconds": advice.options.checkpoint_interval,
            "maxReplays": advice.options.max_replays,
            "timeLimitSeconds": advice.options.time_limit,
            "seed": advice.options.seed,
            "minImprovement": advice.options.min_improvement,
            "allowReserveChanges": advice.options.allow_reserve_changes,
        },
        "improved": advice.improved,
        "objective": {
            "definition": OBJECTIVE_TEXT,
            "current": advice.current_score,
            "proposed": advice.proposed_score,
            "improvement": advice.improvement,
        },
        "weights": advice.weights,
        "heldFixed": advice.held_fixed,
        "floors": advice.floors,
        "notSearched": advice.not_searched,
        "changes": diff_lines(advice) if advice.improved else [],
        "current": evaluation_json(advice.current),
        "proposed": evaluation_json(advice.proposed),
        "replays": len(advice.trials),
        "stoppedBecause": advice.stopped_because,
        "searchComplete": advice.complete,
        "elapsedSeconds": round(advice.elapsed_seconds, 3),
        "trials": [
            {
                "move": trial.move,
                "round": trial.round,
                "objective": trial.score,
                "allowed": trial.allowed,
                "taken": trial.taken,
                "wallSeconds": round(trial.evaluation.wall_seconds, 3),
            }
            for trial in advice.trials
        ],
    }


def evaluation_json(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "utilization": evaluation.utilization,
        "preemptions": evaluation.preemptions,
        "gpuSecondsLost": evaluation.lost_unit_seconds,
        "unfinished": evaluation.unfinished,
        "shares": {
            name: {
                "jobs": stats.jobs,
                "waitP50": stats.wait_p50,
                "waitP95": stats.wait_p95,
                "waitMean": stats.wait_mean,
                "heldUnitSeconds": stats.held_unit_seconds,
                "preemptions": stats.preemptions,
                "gpuSecondsLost": stats.lost_unit_seconds,
                "usageP95": stats.usage_p95,
            }
            for name, stats in evaluation.shares.items()
        },
    }
