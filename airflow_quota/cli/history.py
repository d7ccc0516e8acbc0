"""``airflow quota history --since ISO-TIME [--until ISO-TIME] [--queue NAME] [-o FILE]``: the ledger's real
jobs as a simulator trace (``ledger/history.py``), to replay under another design with ``airflow quota
simulate --trace FILE --config NEW.yaml``. The CSV goes to FILE (or stdout); what was exported, and the
stop time the real preemptions took, go to stderr. The trace is written as the ledger's rows are read
(``ledger.history.HistoryStream``): memory stays bounded however long the history.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from rich.console import Console

from airflow_quota.cli.common import fail, iso, metadata_session, parse_time
from airflow_quota.ledger.history import HistoryError, HistoryStream, HistoryTrace
from airflow_quota.sim.trace import write_trace


def history(args: argparse.Namespace) -> None:
    since = parse_time(args.since, "--since")
    until = None if args.until is None else parse_time(args.until, "--until")
    if until is not None and until <= since:
        fail(f"--until {args.until} is not after --since {args.since}: give a later --until")
    target = args.output
    with metadata_session() as session:
        try:
            trace = HistoryStream(session, since=since, until=until, job_queue_name=args.queue)
        except HistoryError as error:
            fail(str(error))
        # Written as the rows are read (bounded memory, however long the history).
        if target in (None, "-"):
            write_trace(trace, sys.stdout)
        else:
            try:
                with open(target, "w", encoding="utf-8", newline="") as handle:
                    write_trace(trace, handle)
            except OSError as error:
                fail(f"cannot write the trace to {target}: {error}")
    Console(stderr=True, highlight=False, soft_wrap=True).print(summary(trace, target), markup=False)


def summary(trace: HistoryStream | HistoryTrace, target: str | None) -> str:
    """What was exported and how to replay it, for stderr."""
    exported = trace.exported if isinstance(trace, HistoryStream) else len(trace.jobs)
    if not exported:
        return "No job that held capacity was submitted in that time: the trace has its header only."
    lines = [
        f"Exported {_jobs(exported)} of job queue {trace.job_queue_name}; "
        f"submitTime 0 is {iso(trace.origin)}."
    ]
    if trace.left_out:
        lines.append(f"Left out {_jobs(trace.left_out)} that ended without ever being granted.")
    stop = "0"
    stops = trace.stop_seconds
    if stops:
        stop = _seconds(statistics.median(stops))
        if len(stops) == 1:
            lines.append(f"The one preemption's stop took {stop} s.")
        else:
            lines.append(
                f"The {len(stops)} preemptions' stops took {stop} s (median; from {_seconds(min(stops))} "
                f"to {_seconds(max(stops))} s)."
            )
    lost = trace.lost_unit_seconds
    if lost:
        each = "" if len(lost) == 1 else f" (per preemption: from {_whole(min(lost))} to {_whole(max(lost))})"
        lines.append(
            f"Work lost to preemption: {_whole(sum(lost))} GPU-seconds in {len(lost)} "
            f"preemption{'' if len(lost) == 1 else 's'}{each}, since each victim's last checkpoint or start."
        )
    file = target if target not in (None, "-") else "jobs.csv"
    lines.append(
        f"Replay: airflow quota simulate --trace {file} --config QUOTA_FILE --queue {trace.job_queue_name} "
        f"--stop-seconds {stop} --compare-static --report report.html"
    )
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _whole(value: float) -> str:
    return f"{value:,.0f}"


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
