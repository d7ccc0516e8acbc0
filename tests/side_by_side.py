"""Whole-suite runs of several commits, one after the other on this machine, each on a clean clone under one
CPU quota (``tests/cpu_quota.py``), and a table of their times: how issue 38's figures are measured.

One machine's speed drifts within a day and machines of this kind differ, so a figure means something only
beside another commit's, measured alternately in one sitting (docs/testing.md)::

    sudo .venv/bin/python -m tests.side_by_side --cores 1.1 4827b35 HEAD 4827b35 HEAD

Each run is ``./scripts/test.sh`` (set-up, ruff, mypy, pytest) in a clone at ``--into/<n>-<commit>``, with
``QUOTA_TEST_TIMELINE`` and ``tests/cpu_by_process.py`` sampling beside it: its log, timeline and samples
stay in that folder for ``python -m tests.timeline`` and ``python -m tests.cpu_by_process report``. The
table gives pytest's own time (what issue 38 measures), the CPU the cgroup used, the share of its quota,
and pytest's summary line; then each run's time against the first commit's runs.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
#: pytest's last line ("=== 1569 passed, 2 skipped in 577.96s (0:09:37) ===") and the quota's.
PYTEST_SUMMARY = re.compile(
    r"^=+ (?P<summary>.*\d+ (?:passed|failed).*) in (?P<seconds>[\d.]+)s", re.MULTILINE
)
QUOTA_LINE = re.compile(
    r"cpu_quota: .*?; (?P<cpu>[\d.]+) CPU-s in the group \((?P<share>\d+)% of its quota\)"
)


@dataclass(frozen=True)
class SuiteRun:
    """One run's figures, read from its log."""

    commit: str
    pytest_seconds: float | None
    summary: str
    cpu_seconds: float | None
    quota_share: int | None


def read_run(commit: str, log: str) -> SuiteRun:
    """The figures of a run whose output (``./scripts/test.sh`` under ``tests.cpu_quota``) is ``log``:
    pytest's last summary line, and the quota's line."""
    summaries = list(PYTEST_SUMMARY.finditer(log))
    quota = QUOTA_LINE.search(log)
    return SuiteRun(
        commit=commit,
        pytest_seconds=float(summaries[-1]["seconds"]) if summaries else None,
        summary=summaries[-1]["summary"] if summaries else "no pytest summary (see the log)",
        cpu_seconds=float(quota["cpu"]) if quota else None,
        quota_share=int(quota["share"]) if quota else None,
    )


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def against_the_first(runs: list[SuiteRun]) -> list[float | None]:
    """Each run's pytest time over the median of the first commit's runs (None where a time is missing)."""
    first = [run.pytest_seconds for run in runs if run.commit == runs[0].commit and run.pytest_seconds]
    base = statistics.median(first) if first else None
    return [run.pytest_seconds / base if base and run.pytest_seconds else None for run in runs]


def run_one(number: int, commit: str, cores: float, into: Path) -> SuiteRun:
    clone = into / f"{number}-{commit}"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    python = ROOT / ".venv" / "bin" / "python"
    sampler = subprocess.Popen(
        [python, "-m", "tests.cpu_by_process", "sample", str(clone / "cpu.jsonl")], cwd=ROOT
    )
    try:
        done = subprocess.run(
            [
                python,
                "-m",
                "tests.cpu_quota",
                "--cores",
                f"{cores:g}",
                "--",
                "bash",
                "-c",
                f"cd {clone} && QUOTA_TEST_TIMELINE={clone}/timeline.jsonl ./scripts/test.sh",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        sampler.send_signal(signal.SIGTERM)
        sampler.wait()
    log = done.stdout + done.stderr
    (clone / "suite.log").write_text(log)
    return read_run(commit, log)


def print_table(runs: list[SuiteRun], cores: float, console: Console) -> None:
    table = Table(title=f"The whole suite at {cores:g} cores, one run after the other")
    for column in (
        "commit",
        "pytest",
        "CPU-s in the cgroup",
        "of the quota",
        "against the first",
        "pytest says",
    ):
        table.add_column(column)
    for run, ratio in zip(runs, against_the_first(runs), strict=True):
        table.add_row(
            run.commit,
            minutes(run.pytest_seconds),
            "-" if run.cpu_seconds is None else f"{run.cpu_seconds:.0f}",
            "-" if run.quota_share is None else f"{run.quota_share} %",
            "-" if ratio is None else f"x{ratio:.2f}",
            run.summary,
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cores", type=float, required=True, help="the quota, in cores (1.1)")
    parser.add_argument("--into", type=Path, default=Path("/tmp/side-by-side"), help="where the clones go")
    parser.add_argument("commits", nargs="+", help="commits to run, in this order (repeat them to alternate)")
    arguments = parser.parse_args()
    arguments.into.mkdir(parents=True, exist_ok=True)
    runs = []
    for number, commit in enumerate(arguments.commits, 1):
        print(
            f"side_by_side: run {number} of {len(arguments.commits)}: {commit}", file=sys.stderr, flush=True
        )
        runs.append(run_one(number, commit, arguments.cores, arguments.into))
    print_table(runs, arguments.cores, Console(width=160))


if __name__ == "__main__":
    main()
