"""``airflow quota advise``: propose a better quota design by replaying real history in the simulator.

``airflow quota advise --history FILE.csv --config QUOTAS.yaml -o PROPOSED.yaml --report REPORT.html``
replays the history (what ``airflow quota history`` writes) under the current design and searches designs
next to it (``sim/advisor.py``: the objective, what is held fixed). Without ``--history`` it reads the
ledger's jobs from ``--since`` (to ``--until``) as ``airflow quota history`` does. It writes the proposed
quota file (validated first) only when it found a better design, and says plainly when it found nothing
better. ``airflow-quota-advise`` (``main``) is the same command without Airflow (``--history`` needed).

Bad input (a history that is not a trace, a quota file that does not validate, an option out of range) is
one line on stderr, exit code 1, and no file written. Exit code 0 otherwise, better design or not.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from airflow_quota.config_file import read_mapping_file
from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.sim.advisor import AdviseError, AdviseOptions
from airflow_quota.sim.advisor import Progress as SearchProgress
from airflow_quota.sim.advisor import advise as search
from airflow_quota.sim.advisor_report import (
    advice_json,
    print_advice,
    proposed_document,
    render_document,
    validate_document,
    write_html,
)
from airflow_quota.sim.result import SimulationError
from airflow_quota.sim.trace import load_queue_configuration, load_trace

#: Defaults of the options (the Airflow CLI's help repeats them).
DEFAULTS = AdviseOptions()


def advise(args: argparse.Namespace) -> None:
    """``airflow quota advise`` (inside Airflow's CLI: without --history it reads the ledger)."""
    sys.exit(run_advise(args, ledger=True))


def main(argv: Sequence[str] | None = None) -> int:
    """``airflow-quota-advise``: the same without Airflow; it needs ``--history``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.history is None:
        parser.error(
            "give --history FILE.csv (airflow quota history writes one; 'airflow quota advise' "
            "without --history reads the ledger)"
        )
    return run_advise(args, ledger=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-quota-advise",
        description="Propose a better quota design for one job queue by replaying a history of its jobs "
        "(the CSV 'airflow quota history' writes) in the simulator. docs/advisor.md says what is optimised "
        "and what is held fixed.",
    )
    for flags, options in ADVISE_ARGUMENTS:
        parser.add_argument(*flags, **options)
    return parser


#: The command's arguments, shared by ``airflow-quota-advise`` and ``airflow quota advise``
#: (``cli/definition.py`` adds the ledger's --since and --until). Values are parsed in ``run_advise``.
ADVISE_ARGUMENTS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--history",),
        {"metavar": "FILE.csv", "help": "The jobs to replay (what 'airflow quota history' writes)"},
    ),
    (("--config",), {"metavar": "QUOTAS.yaml", "required": True, "help": "The current quota file"}),
    (("--queue",), {"metavar": "NAME", "help": "The quota file's job queue (default: the first)"}),
    (
        ("-o", "--output"),
        {"metavar": "PROPOSED.yaml", "help": "Write the proposed quota file here (only when better)"},
    ),
    (("--report",), {"metavar": "REPORT.html", "help": "Write the HTML report comparing both designs"}),
    (("--json",), {"action": "store_true", "help": "Print the advice as JSON"}),
    (
        ("--stop-seconds",),
        {
            "metavar": "S",
            "help": f"How long a stop takes in the replays (default {DEFAULTS.stop_seconds:g}; without "
            "--history: the median of the real stops)",
        },
    ),
    (("--start-seconds",), {"metavar": "S", "help": "How long a granted job is STARTING (default 0)"}),
    (
        ("--checkpoint-interval",),
        {
            "metavar": "S",
            "help": f"Jobs checkpoint every S seconds of work (default {DEFAULTS.checkpoint_interval:g}; "
            "0: a preempted job loses only its stop)",
        },
    ),
    (
        ("--max-replays",),
        {
            "metavar": "N",
            "help": f"Replays at most, the current design's included (default {DEFAULTS.max_replays})",
        },
    ),
    (
        ("--time-limit",),
        {
            "metavar": "S",
            "help": f"Start no replay ending after S s of the command (default {DEFAULTS.time_limit:g})",
        },
    ),
    (
        ("--workers",),
        {"metavar": "N", "help": "Processes replaying designs (default: one per core, at most 2)"},
    ),
    (("--seed",), {"metavar": "N", "help": "Breaks ties between moves (default 0): same seed, same search"}),
    (
        ("--min-improvement",),
        {
            "metavar": "PERCENT",
            "help": f"Propose only a design this much better (default {100 * DEFAULTS.min_improvement:g})",
        },
    ),
    (
        ("--weight",),
        {
            "metavar": "SHARE=W",
            "action": "append",
            "help": "A share's weight in the objective (repeatable; default: its fraction of the jobs)",
        },
    ),
    (
        ("--allow-reserve-changes",),
        {"action": "store_true", "help": "Let the search change a RESERVE share's strategy (or make one)"},
    ),
]


def run_advise(args: argparse.Namespace, *, ledger: bool, console: Console | None = None) -> int:
    """Run the command; errors are one line on stderr (exit code 1) and write nothing."""
    try:
        return _run(args, ledger=ledger, console=console)
    except (QuotaConfigError, AdviseError, SimulationError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 1


def one_line(error: Exception) -> str:
    """The error on one line: the file, the first problem and how many more there are."""
    if isinstance(error, QuotaConfigError):
        issues = error.issues
        first = str(issues[0]) if issues else str(error)
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        return " ".join(f"{error.source}: {first}{more}".split())
    return " ".join(str(error).split())


def _run(args: argparse.Namespace, *, ledger: bool, console: Console | None) -> int:
    started = time.perf_counter()  # the time limit counts from here: reading the history included
    options = _options(args)
    config = args.config
    for flag, path in (("-o", args.output), ("--report", args.report)):
        if path is not None and os.path.abspath(path) == os.path.abspath(config):
            raise AdviseError(f"{flag} {path} is the quota file itself: write the proposal elsewhere")
        if path is not None and args.history and os.path.abspath(path) == os.path.abspath(args.history):
            raise AdviseError(f"{flag} {path} is the history file itself: write elsewhere")
    raw = read_mapping_file(config)
    configuration = load_queue_configuration(config, args.queue)
    names = [queue.get("jobQueueName") for queue in raw.get("jobQueues", [])]
    queue_index = names.index(configuration.queue.name)
    if args.history is not None:
        history = args.history
        events = load_trace(history, configuration)
    elif ledger:
        history, events, stops = _ledger_history(args, configuration.queue.name, configuration)
        if args.stop_seconds is None and stops:
            options = _replace(options, stop_seconds=float(statistics.median(stops)))
    else:
        raise AdviseError("give --history FILE.csv")
    if not events:
        raise AdviseError(f"{history}: the history holds no job: there is nothing to replay")
    out = console or Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    advice = search(configuration, events, options, source=history, progress=_RichProgress(), started=started)
    if advice.improved and args.output is not None:
        document = proposed_document(raw, queue_index, advice)
        validate_document(document, args.output)
        _write(args.output, render_document(document, args.output, advice, history))
    if args.report is not None:
        try:
            write_html(args.report, advice, history=history, config=config)
        except OSError as error:
            raise AdviseError(f"cannot write the report to {args.report}: {error}") from error
    if args.json:
        import json

        print(json.dumps(advice_json(advice), indent=2))
        return 0
    print_advice(out, advice)
    if advice.improved and args.output is not None:
        out.print(f"Proposed quota file: {args.output} (validated; apply with airflow quota apply -f)")
    if args.report is not None:
        out.print(f"Report: {args.report}")
    return 0


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise AdviseError(f"cannot write the proposed quota file to {path}: {error}") from error


def _options(args: argparse.Namespace) -> AdviseOptions:
    weights: dict[str, float] = {}
    for item in args.weight or []:
        name, _, value = item.partition("=")
        weights[name.strip()] = _number(value, f"--weight {item}", low=0.0)
    return AdviseOptions(
        stop_seconds=_number(args.stop_seconds, "--stop-seconds", DEFAULTS.stop_seconds),
        start_seconds=_number(args.start_seconds, "--start-seconds", DEFAULTS.start_seconds),
        checkpoint_interval=_number(
            args.checkpoint_interval, "--checkpoint-interval", DEFAULTS.checkpoint_interval
        ),
        max_replays=int(_number(args.max_replays, "--max-replays", DEFAULTS.max_replays, low=1, whole=True)),
        time_limit=_number(args.time_limit, "--time-limit", DEFAULTS.time_limit),
        workers=int(_number(args.workers, "--workers", DEFAULTS.workers, low=1, whole=True)),
        seed=int(_number(args.seed, "--seed", DEFAULTS.seed, whole=True)),
        min_improvement=_number(args.min_improvement, "--min-improvement", 100 * DEFAULTS.min_improvement)
        / 100,
        allow_reserve_changes=bool(args.allow_reserve_changes),
        weights=weights,
    )


def _number(
    text: str | float | None, flag: str, default: float = 0.0, *, low: float = 0.0, whole: bool = False
) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < low or (whole and not value.is_integer()):
        kind = "a whole number" if whole else "a number"
        raise AdviseError(f"{flag} {text!r}: give {kind} >= {low:g}")
    return value


def _replace(options: AdviseOptions, **changes: Any) -> AdviseOptions:
    from dataclasses import replace

    return replace(options, **changes)


def _ledger_history(
    args: argparse.Namespace, queue_name: str, configuration: Any
) -> tuple[str, Any, list[float]]:
    """The ledger's jobs (as ``airflow quota history`` exports them) and the real stops' seconds."""
    from airflow_quota.cli.common import metadata_session, parse_time
    from airflow_quota.ledger.history import HistoryError, HistoryStream
    from airflow_quota.sim.trace import write_trace

    if getattr(args, "since", None) is None:
        raise AdviseError("give --history FILE.csv, or --since ISO-TIME to read the ledger's jobs")
    since = parse_time(args.since, "--since")
    until = None if args.until is None else parse_time(args.until, "--until")
    if until is not None and until <= since:
        raise AdviseError(f"--until {args.until} is not after --since {args.since}: give a later --until")
    with tempfile.TemporaryDirectory(prefix="quota-advise-") as folder:
        path = os.path.join(folder, "history.csv")
        with metadata_session() as session:
            try:
                stream = HistoryStream(session, since=since, until=until, job_queue_name=queue_name)
            except HistoryError as error:
                raise AdviseError(str(error)) from error
            with open(path, "w", encoding="utf-8", newline="") as handle:
                write_trace(stream, handle)
        events = load_trace(path, configuration)
    label = f"the ledger's jobs of {queue_name} since {args.since}" + (
        f" until {args.until}" if args.until else ""
    )
    return label, events, list(stream.stop_seconds)


class _RichProgress(SearchProgress):
    """A rich progress bar on stderr: replays done out of the most the search may run."""

    def __init__(self) -> None:
        self._bar = Progress(
            TextColumn("Replaying designs"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task: Any = None

    def start(self, total: int) -> None:
        self._bar.start()
        self._task = self._bar.add_task("current design", total=total)

    def advance(self, description: str) -> None:
        self._bar.update(self._task, advance=1, description=description)

    def stop(self) -> None:
        if self._task is not None:
            self._bar.update(self._task, total=self._bar.tasks[0].completed)
        self._bar.stop()


if __name__ == "__main__":
    sys.exit(main())
