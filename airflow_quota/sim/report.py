"""Present simulation results: the ``--json`` documents and the readable timeline and tables (``rich``).

Scenario JSON is ``{"steps": [...], "jobs": {...}, "metrics": {...}}`` exactly as docs/simulator.md
describes; trace JSON puts the run as configured (and, with --compare-static, the fixed partition) side by
side with the definitions of its numbers. Times are simulated seconds, written as whole numbers when they
are whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from airflow_quota.engine.model import JobStatus
from airflow_quota.sim.metrics import Metrics, WaitStats
from airflow_quota.sim.result import Change, ChangeKind, JobOutcome, SimulationResult
from airflow_quota.sim.scenario import format_seconds
from airflow_quota.sim.trace import DEFINITIONS, TraceReport, TraceRun

# --- JSON ---------------------------------------------------------------------------------------------------


def number(value: float | None) -> float | int | None:
    """JSON number for a time or ratio: an int when whole, else rounded to 6 decimals."""
    if value is None:
        return None
    if float(value).is_integer():
        return int(value)
    return round(value, 6)


def scenario_json(result: SimulationResult) -> dict[str, Any]:
    """The scenario document. ``preemptionCostsZero``: its stops take no time (a scenario loses no work);
    ``warnings``: the text output's free-preemption line, printed when it also preempted a job
    (``scenario_preemption_is_free``)."""
    return {
        "preemptionCostsZero": result.settings.stop_seconds == 0,
        "warnings": [free_preemption_line(trace=False)] if scenario_preemption_is_free(result) else [],
        "steps": [
            {
                "at": number(step.at),
                "jobs": {
                    name: {"status": str(view.status), "statusReason": view.status_reason}
                    for name, view in step.jobs.items()
                },
            }
            for step in result.steps
        ],
        "jobs": {
            name: {
                "status": str(job.status),
                "statusReason": job.status_reason,
                "quotaShareName": job.quota_share_name,
                "preemptedAttemptCount": job.preempted_attempt_count,
                "startedAt": number(job.started_at),
                "stoppedAt": number(job.stopped_at),
            }
            for name, job in result.jobs.items()
        },
        "metrics": {
            "utilization": _utilization_json(result.metrics),
            "runnableSeconds": _waits_json(result.metrics),
            "preemptions": _preemptions_json(result.metrics),
        },
    }


def trace_json(report: TraceReport, *, jobs: bool = False) -> dict[str, Any]:
    """The trace document; with ``jobs`` each run also lists its jobs (``trace_jobs_json``).
    ``preemptionCostsZero`` is true when stops take no time and no work is lost (``preemption_is_free``);
    ``warnings`` then holds the line the text output and the HTML report show."""
    runs = {run.label: _trace_run_json(run) for run in report.runs}
    if jobs:
        for run in report.runs:
            runs[run.label]["jobs"] = trace_jobs_json(run.result)
    return {
        "trace": report.trace_source,
        "config": report.config_source,
        "jobQueue": report.queue_name,
        "jobs": report.job_count,
        "settings": {
            "stopSeconds": number(report.settings.stop_seconds),
            "startSeconds": number(report.settings.start_seconds),
            "checkpointIntervalSeconds": number(report.checkpoint_interval),
        },
        "preemptionCostsZero": preemption_is_free(report),
        "warnings": [free_preemption_line(trace=True)] if preemption_is_free(report) else [],
        "definitions": dict(DEFINITIONS),
        "runs": runs,
    }


def trace_jobs_json(result: SimulationResult) -> list[dict[str, Any]]:
    """One object per job, in submission order: what ``--jobs`` shows as a table."""
    return [
        {
            "jobName": job.name,
            "quotaShareName": job.quota_share_name,
            "schedulingPriority": job.scheduling_priority,
            "capacityUnit": job.capacity_unit,
            "instanceCount": job.instance_count,
            "status": str(job.status),
            "submittedAt": number(job.submitted_at),
            "firstStartedAt": number(job.first_started_at),
            "endedAt": number(_ended_at(job)),
            "waitSeconds": number(job.runnable_seconds),
            "heldSeconds": number(job.held_seconds),
            "preemptedAttemptCount": job.preempted_attempt_count,
            "lostUnitSeconds": number(job.lost_unit_seconds),
        }
        for job in result.jobs.values()
    ]


def _ended_at(job: JobOutcome) -> float | None:
    """When a SUCCEEDED or FAILED job ended (its latest attempt's end, else its submission); else None."""
    if not job.status.is_final:
        return None
    return job.stopped_at if job.stopped_at is not None else job.submitted_at


def _trace_run_json(run: TraceRun) -> dict[str, Any]:
    metrics = run.result.metrics
    statuses = [job.status for job in run.result.jobs.values()]
    return {
        "sharing": run.description,
        "span": {"start": number(metrics.span_start), "end": number(metrics.span_end)},
        "utilization": _utilization_json(metrics),
        "waitSeconds": _waits_json(metrics),
        "preemptions": _preemptions_json(metrics),
        "gpuSecondsLost": {
            unit: {
                "total": number(sum(by_share.values())),
                "byShare": {s: number(v) for s, v in by_share.items()},
            }
            for unit, by_share in metrics.lost_unit_seconds.items()
        },
        "jobStatus": {
            "succeeded": statuses.count(JobStatus.SUCCEEDED),
            "failed": statuses.count(JobStatus.FAILED),
            "unfinished": sum(1 for status in statuses if not status.is_final),
        },
        "wallSeconds": round(run.wall_seconds, 3),
    }


def _utilization_json(metrics: Metrics) -> dict[str, float | int | None]:
    return {unit: number(value) for unit, value in metrics.utilization.items()}


def _waits_json(metrics: Metrics) -> dict[str, dict[str, float | int | None]]:
    return {
        share: {"jobs": stats.jobs, "mean": number(stats.mean), "p95": number(stats.p95)}
        for share, stats in metrics.runnable_seconds.items()
    }


def _preemptions_json(metrics: Metrics) -> dict[str, Any]:
    return {"total": metrics.preemptions_total, "byShare": dict(metrics.preemptions_by_share)}


# --- text ---------------------------------------------------------------------------------------------------

_STATUS_STYLE = {
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "red",
    JobStatus.RUNNING: "cyan",
    JobStatus.STARTING: "cyan",
    JobStatus.SCHEDULED: "cyan",
    JobStatus.RUNNABLE: "yellow",
}


def print_scenario(result: SimulationResult, console: Console) -> None:
    settings = result.settings
    console.print(
        Text.assemble(
            ("Scenario ", "bold"),
            (result.source, "bold"),
            f": job queue {result.queue.name} ({_capacity(result)}); "
            f"stopSeconds {format_seconds(settings.stop_seconds)}, "
            f"startSeconds {format_seconds(settings.start_seconds)}",
        )
    )
    if scenario_preemption_is_free(result):
        console.print(Text(FREE_PREEMPTION_SCENARIO_LINE, style="bold yellow"))
    for step in result.steps:
        console.print(Text(f"\nt={format_seconds(step.at)}", style="bold"))
        for change in step.changes:
            console.print(Text("  ").append_text(describe_change(change)))
    console.print()
    console.print(_jobs_table(result))
    console.print(_metrics_table(result.metrics, title="Metrics"))


def _capacity(result: SimulationResult) -> str:
    return ", ".join(f"{unit} {count}" for unit, count in result.queue.capacity.items())


def describe_change(change: Change) -> Text:
    """One line of the timeline for ``change``."""
    job = (change.subject, "bold")
    kind = change.kind
    if kind is ChangeKind.SUBMITTED:
        return Text.assemble(job, f" submitted ({change.reason})")
    if kind is ChangeKind.GRANTED:
        borrowed = f", {change.borrowed} borrowed" if change.borrowed else ""
        return Text.assemble(job, (" granted", "cyan"), f" {change.units} {change.unit}{borrowed}")
    if kind is ChangeKind.RUNNING:
        return Text.assemble(job, (" RUNNING", "cyan"))
    if kind is ChangeKind.PREEMPTED:
        return Text.assemble(
            job, (" preempted", "magenta"), f" by {change.by} ({change.rule}): being stopped"
        )
    if kind is ChangeKind.TERMINATING:
        return Text.assemble(job, (" being stopped", "magenta"), f": {change.reason}")
    if kind is ChangeKind.REQUEUED:
        return Text.assemble(job, (" stopped, requeued", "yellow"), f": {change.reason}")
    if kind is ChangeKind.FINISHED:
        suffix = f" ({change.reason})" if change.reason else ""
        return Text.assemble(job, (" SUCCEEDED", "green"), suffix)
    if kind is ChangeKind.FAILED:
        return Text.assemble(job, (" FAILED", "red"), f": {change.reason}")
    if kind is ChangeKind.WAITING:
        return Text.assemble(job, (" RUNNABLE", "yellow"), f": {change.reason}")
    if kind is ChangeKind.PRIORITY_UPDATED:
        return Text.assemble(job, f" {change.reason}")
    if kind is ChangeKind.SHARE_UPDATED:
        return Text.assemble("quota share ", job, f" updated: {change.reason}")
    if kind is ChangeKind.QUEUE_UPDATED:
        return Text.assemble("job queue ", job, f" updated: {change.reason}")
    return Text.assemble(job, f" event ignored: {change.reason}")


def _jobs_table(result: SimulationResult) -> Table:
    table = Table(title="Jobs", title_justify="left")
    for column in (
        "job",
        "share",
        "status",
        "preempted",
        "startedAt",
        "stoppedAt",
        "RUNNABLE s",
        "statusReason",
    ):
        table.add_column(column, overflow="fold")
    for job in result.jobs.values():
        table.add_row(
            job.name,
            job.quota_share_name,
            Text(str(job.status), style=_STATUS_STYLE.get(job.status, "")),
            str(job.preempted_attempt_count),
            _time(job.started_at),
            _time(job.stopped_at),
            format_seconds(round(job.runnable_seconds, 6)),
            job.status_reason,
        )
    return table


def _metrics_table(metrics: Metrics, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    span = f"{_time(metrics.span_start)} to {_time(metrics.span_end)}"
    table.add_row("span (first submission to last completion)", span)
    for unit, value in metrics.utilization.items():
        table.add_row(f"utilization {unit}", _percent(value))
    for share, stats in metrics.runnable_seconds.items():
        table.add_row(f"RUNNABLE seconds, share {share}", _wait(stats))
    table.add_row("preemptions", str(metrics.preemptions_total))
    for share, count in metrics.preemptions_by_share.items():
        table.add_row(f"preemptions, share {share}", str(count))
    return table


#: Printed when preemption costs nothing in a trace run, so the result is not read as the design's merit.
FREE_PREEMPTION_LINE = (
    "Preemption is free in this run: stops take 0 s and no work is lost. Set --stop-seconds and "
    "--checkpoint-interval to give it a cost."
)


#: The same for a scenario, whose stops take its settings.stopSeconds and which has no checkpoints.
FREE_PREEMPTION_SCENARIO_LINE = (
    "Preemption is free in this run: stops take 0 s (settings.stopSeconds) and a preempted job resumes "
    "exactly where it stopped. Set settings.stopSeconds to give it a cost."
)


def free_preemption_line(*, trace: bool) -> str:
    """The warning line for a run whose preemptions cost nothing (trace mode, or a scenario)."""
    return FREE_PREEMPTION_LINE if trace else FREE_PREEMPTION_SCENARIO_LINE


def scenario_preemption_is_free(result: SimulationResult) -> bool:
    """A scenario preempted jobs and its stops took no time (a scenario has no checkpoint loss)."""
    return result.settings.stop_seconds == 0 and result.metrics.preemptions_total > 0


def preemption_is_free(report: TraceReport) -> bool:
    """Stops take no time and a preempted job resumes where it stopped: a preemption loses nothing."""
    return report.settings.stop_seconds == 0 and report.checkpoint_interval == 0


def print_trace(report: TraceReport, console: Console, *, jobs: bool = False) -> None:
    """The header, the free-preemption line when it applies, the results table, the definitions and, with
    ``jobs``, one table of jobs per run."""
    settings = report.settings
    console.print(
        Text.assemble(
            ("Trace ", "bold"),
            (report.trace_source, "bold"),
            f": {report.job_count} jobs on job queue {report.queue_name} ({report.config_source}); "
            f"stopSeconds {format_seconds(settings.stop_seconds)}, "
            f"startSeconds {format_seconds(settings.start_seconds)}, "
            f"checkpoint interval {format_seconds(report.checkpoint_interval)} s",
        )
    )
    if preemption_is_free(report):
        console.print(Text(FREE_PREEMPTION_LINE, style="bold yellow"))
    runs = report.runs
    table = Table(title="Results", title_justify="left")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.description, justify="right")
    first = runs[0].result.metrics

    def row(label: str, values: Sequence[str]) -> None:
        table.add_row(label, *values)

    row(
        "span (s)", [f"{_time(r.result.metrics.span_start)}-{_time(r.result.metrics.span_end)}" for r in runs]
    )
    for unit in first.utilization:
        row(f"utilization {unit}", [_percent(r.result.metrics.utilization.get(unit)) for r in runs])
    for share in first.runnable_seconds:
        row(f"wait {share}: mean s", [_seconds(r.result.metrics.runnable_seconds[share].mean) for r in runs])
        row(f"wait {share}: p95 s", [_seconds(r.result.metrics.runnable_seconds[share].p95) for r in runs])
    row("preemptions", [str(r.result.metrics.preemptions_total) for r in runs])
    for share in first.preemptions_by_share:
        row(f"preemptions {share}", [str(r.result.metrics.preemptions_by_share.get(share, 0)) for r in runs])
    for unit in first.lost_unit_seconds:
        row(f"GPU-seconds lost {unit}", [_seconds(r.result.metrics.lost_total(unit)) for r in runs])
    for status in ("SUCCEEDED", "FAILED"):
        row(f"jobs {status}", [str(_count(r, status)) for r in runs])
    row(
        "jobs unfinished",
        [str(sum(1 for j in r.result.jobs.values() if not j.status.is_final)) for r in runs],
    )
    row("simulation wall time (s)", [f"{r.wall_seconds:.2f}" for r in runs])
    console.print(table)
    console.print()
    for name, definition in DEFINITIONS.items():
        console.print(Text.assemble((f"{name}: ", "bold"), definition))
    if jobs:
        for run in runs:
            console.print()
            console.print(trace_jobs_table(run))


#: The ``--jobs`` table's headers, short so that every one stays whole at 80 columns ("unit" only when the
#: jobs use more than one capacity unit; otherwise the title names it).
TRACE_JOB_HEADERS = (
    "job",
    "share",
    "prio",
    "unit",
    "units",
    "arrived",
    "started",
    "ended",
    "waited",
    "held",
    "pre- empted",
    "lost unit-s",
)


def trace_jobs_table(run: TraceRun) -> Table:
    """One row per job of ``run``, the figures of ``trace_jobs_json``; times in simulated seconds.

    Numbers and header words are never cut: narrow terminals fold the job and share names instead.
    """
    jobs = list(run.result.jobs.values())
    units = list(dict.fromkeys(job.capacity_unit for job in jobs))
    one_unit = len(units) <= 1
    of_unit = f"; units of {units[0]}" if units and one_unit else ""
    rows = [_trace_job_row(job, with_unit=not one_unit) for job in jobs]
    headers = [header for header in TRACE_JOB_HEADERS if header != "unit" or not one_unit]
    table = Table(
        title=f"Jobs, {run.description} (times in s{of_unit})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=0,
    )
    for index, header in enumerate(headers):
        numeric = header not in ("job", "share", "unit")
        widest = max(len(word) for word in header.split())
        if numeric:
            widest = max([widest, *(len(row[index]) for row in rows)])
        table.add_column(
            header,
            justify="right" if numeric else "left",
            overflow="fold",
            width=widest if numeric else None,
            min_width=None if numeric else widest,
        )
    for row in rows:
        table.add_row(*row)
    return table


def _trace_job_row(job: JobOutcome, *, with_unit: bool) -> list[str]:
    return [
        job.name,
        job.quota_share_name,
        str(job.scheduling_priority),
        *([job.capacity_unit] if with_unit else []),
        str(job.instance_count),
        _time(job.submitted_at),
        _time(job.first_started_at),
        _time(_ended_at(job)),
        _time(job.runnable_seconds),
        _time(job.held_seconds),
        str(job.preempted_attempt_count),
        _time(job.lost_unit_seconds),
    ]


def _count(run: TraceRun, status: str) -> int:
    return sum(1 for job in run.result.jobs.values() if job.status == status)


def _time(value: float | None) -> str:
    return "-" if value is None else format_seconds(round(value, 6))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _wait(stats: WaitStats) -> str:
    if not stats.jobs:
        return "no jobs"
    return f"n={stats.jobs}, mean {_seconds(stats.mean)}, p95 {_seconds(stats.p95)}"
