"""The simulator's command line: ``python -m airflow_quota.sim`` (and ``airflow quota simulate``).

Scenario mode replays one scenario file and prints its timeline (or ``--json``); trace mode replays a CSV
of jobs against a queue of a quota file. Exit codes: 0 done, 1 the input is invalid or an event does not
apply (the message names the file, the path or the event), 2 wrong arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.sim.html_report import ReportError, ReportRun, write_html_report
from airflow_quota.sim.report import (
    free_preemption_line,
    preemption_is_free,
    print_scenario,
    print_trace,
    scenario_json,
    scenario_preemption_is_free,
    trace_json,
)
from airflow_quota.sim.result import SimulationError
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import Settings, format_seconds, load_scenario
from airflow_quota.sim.trace import TraceReport, run_trace

#: Columns of text output when stdout is not a terminal.
OUTPUT_WIDTH = 140

EXAMPLES = """examples:
  python -m airflow_quota.sim examples/scenarios/reclaim.yaml
  python -m airflow_quota.sim examples/scenarios/reclaim.yaml --json
  python -m airflow_quota.sim --trace examples/traces/bursty_teams.csv --config examples/traces/quotas.yaml \\
      --compare-static --stop-seconds 60 --checkpoint-interval 900 --jobs --report bursty.html

docs/simulator.md describes the files, every event and the exact meaning of each number."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_quota.sim",
        description="What-if simulator for airflow-quota: replay a scenario (a queue, its quota shares and "
        "timed events) or a CSV trace of jobs through the quota engine, on a simulated clock.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--report",
        metavar="FILE.html",
        help="also write one self-contained HTML page: the GPU timeline of the run (and of the static "
        "partition with --compare-static), capacity held per share over time, waits per share, drawn "
        "like the GPU Quotas page",
    )
    trace = parser.add_argument_group("trace mode")
    trace.add_argument("--trace", metavar="CSV", help="CSV of jobs to replay (needs --config)")
    trace.add_argument("--config", metavar="QUOTA_FILE", help="quota file holding the job queue")
    trace.add_argument("--queue", metavar="NAME", help="job queue of the quota file (default: the first)")
    trace.add_argument(
        "--compare-static",
        action="store_true",
        help="also replay with every share set to RESERVE (a fixed partition, like Airflow pools)",
    )
    trace.add_argument(
        "--checkpoint-interval",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="a job checkpoints every SECONDS of progress; a preempted job resumes from its last "
        "checkpoint (default 0: it resumes exactly where it stopped)",
    )
    trace.add_argument(
        "--stop-seconds", type=_seconds, default=0.0, metavar="SECONDS", help="how long a stop takes"
    )
    trace.add_argument(
        "--start-seconds",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="how long a granted job is STARTING",
    )
    trace.add_argument(
        "--jobs",
        action="store_true",
        help="also show one row per job (arrival, first start, end, wait, time held, preemptions, work "
        "lost); with --json, a jobs list in each run",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.trace is None:
        if args.scenario is None:
            parser.error("give a scenario file, or --trace CSV --config QUOTA_FILE")
        for option in ("config", "queue"):
            if getattr(args, option) is not None:
                parser.error(f"--{option} belongs to trace mode (--trace)")
        for flag, given in (("--compare-static", args.compare_static), ("--jobs", args.jobs)):
            if given:
                parser.error(f"{flag} belongs to trace mode (--trace)")
    else:
        if args.scenario is not None:
            parser.error("give either a scenario file or --trace, not both")
        if args.config is None:
            parser.error("--trace needs --config QUOTA_FILE (the quota file holding the job queue)")
    try:
        return _run(args)
    except (QuotaConfigError, SimulationError, ReportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    # Wide enough for the tables when the output goes to a file or a pipe (rich would assume 80 columns).
    width = None if sys.stdout.isatty() else OUTPUT_WIDTH
    console = Console(file=sys.stdout, highlight=False, width=width)
    if args.trace is not None:
        report = run_trace(
            args.trace,
            args.config,
            queue_name=args.queue,
            compare_static=args.compare_static,
            settings=Settings(stop_seconds=args.stop_seconds, start_seconds=args.start_seconds),
            checkpoint_interval=args.checkpoint_interval,
        )
        if args.report is not None:
            _write_trace_report(args.report, report)
        if args.json:
            print(json.dumps(trace_json(report, jobs=args.jobs), indent=2))
        else:
            print_trace(report, console, jobs=args.jobs)
        return 0
    result = simulate(load_scenario(args.scenario))
    if args.report is not None:
        stop = result.settings.stop_seconds
        write_html_report(
            args.report,
            [ReportRun("scenario", "scenario", result)],
            title=f"Simulation of {result.source}",
            details=[
                f"Job queue {result.queue.name}; stopSeconds {format_seconds(stop)}, "
                f"startSeconds {format_seconds(result.settings.start_seconds)}; times in simulated seconds."
            ],
            warnings=[free_preemption_line(trace=False)] if scenario_preemption_is_free(result) else [],
        )
    if args.json:
        print(json.dumps(scenario_json(result), indent=2))
    else:
        print_scenario(result, console)
    return 0


def _write_trace_report(path: str, report: TraceReport) -> None:
    settings = report.settings
    write_html_report(
        path,
        [ReportRun(run.label, run.description, run.result) for run in report.runs],
        title=f"Trace {report.trace_source} on job queue {report.queue_name}",
        details=[
            f"{report.job_count} jobs; quota file {report.config_source}.",
            f"stopSeconds {format_seconds(settings.stop_seconds)}, startSeconds "
            f"{format_seconds(settings.start_seconds)}, checkpoint interval "
            f"{format_seconds(report.checkpoint_interval)} s; times in simulated seconds from the trace's 0.",
        ],
        warnings=[free_preemption_line(trace=True)] if preemption_is_free(report) else [],
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds >= 0")
    return value


if __name__ == "__main__":
    sys.exit(main())
