"""``airflow quota advise`` on a generated week of 5,000 jobs: wall time and what it proposed.

The benchmark writes a seeded trace (``--jobs`` jobs over ``--days`` days from four teams submitting in
bursts, as ``airflow quota history`` writes them) and a quota file of 16 ``ml.p4d.24xlarge`` shared as in
``examples/traces/quotas.yaml`` (prod RESERVE 4, eval LEND 4, research LEND_AND_BORROW 4 with borrowLimit
100, vision LEND_AND_BORROW 4), then runs the real command as a user does (a new process:
``python -m airflow_quota.cli.advise --history ... --config ... -o ... --report ... --json``) and prints
its wall time, the number of replays and one replay's time, the objective before and after, the changes
it proposed and why the search stopped, with the commit, the date and the load average (``os.getloadavg``)
before and after.

Usage::

    .venv/bin/python benchmarks/advise.py                  # 5,000 jobs over 7 days, the command's defaults
    .venv/bin/python benchmarks/advise.py --workers 1      # one process (is multiprocessing worth it?)
    .venv/bin/python benchmarks/advise.py --quick          # 300 jobs over 1 day: a smoke run
    .venv/bin/python benchmarks/advise.py --keep /tmp/advise-bench   # keep the trace, files and report

**Goal (issue 37)**: a week of history with 5,000 jobs in under a minute, with a progress bar, saying
plainly when nothing better was found.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = "ml.p4d.24xlarge"
GOAL_SECONDS = 60.0

#: (share, fraction of the jobs, priorities, instance counts, median minutes of work)
TEAMS = (
    ("prod", 0.18, (50,), (1, 2), 9),
    ("eval", 0.24, (20, 30), (1, 2, 4), 5),
    ("research", 0.34, (10, 20, 30, 40, 50), (1, 2, 4), 6),
    ("vision", 0.24, (10,), (2, 4), 5),
)

QUOTAS = f"""jobQueues:
  - jobQueueName: gpu-training
    capacityLimits: [{{capacityUnit: {UNIT}, maxCapacity: 16}}]
    quotaShares:
      - quotaShareName: prod
        capacityLimits: [{{capacityUnit: {UNIT}, maxCapacity: 4}}]
        resourceSharingConfiguration: {{strategy: RESERVE}}
      - quotaShareName: eval
        capacityLimits: [{{capacityUnit: {UNIT}, maxCapacity: 4}}]
        resourceSharingConfiguration: {{strategy: LEND}}
      - quotaShareName: research
        capacityLimits: [{{capacityUnit: {UNIT}, maxCapacity: 4}}]
        resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 100}}
        preemptionConfiguration: {{inSharePreemption: ENABLED}}
      - quotaShareName: vision
        capacityLimits: [{{capacityUnit: {UNIT}, maxCapacity: 4}}]
        resourceSharingConfiguration: {{strategy: LEND_AND_BORROW}}
"""


def generate(jobs: int, days: float, seed: int) -> list[dict[str, object]]:
    """Seeded bursts of jobs (about 25 a burst, a couple of minutes apart), log-normal running times."""
    rng = random.Random(seed)
    horizon = days * 24 * 3600
    rows: list[dict[str, object]] = []
    for share, fraction, priorities, counts, minutes in TEAMS:
        count = round(jobs * fraction)
        bursts = max(1, count // 25)
        starts = sorted(rng.uniform(0, horizon) for _ in range(bursts))
        for index in range(count):
            at = starts[index % bursts] + rng.expovariate(1 / 120) * (index // bursts)
            rows.append(
                {
                    "submitTime": round(at),
                    "quotaShareName": share,
                    "schedulingPriority": rng.choice(priorities),
                    "capacityUnit": UNIT,
                    "instanceCount": rng.choice(counts),
                    "duration": max(60, round(rng.lognormvariate(0, 0.8) * minutes * 60)),
                }
            )
    rows.sort(key=lambda row: (row["submitTime"], row["quotaShareName"]))
    for number, row in enumerate(rows[:jobs], start=1):
        row["jobName"] = f"{row['quotaShareName']}-{number:05d}"
    return rows[:jobs]


def write_files(folder: Path, jobs: int, days: float, seed: int) -> tuple[Path, Path]:
    history, quotas = folder / "history.csv", folder / "quotas.yaml"
    columns = ["submitTime", "jobName", "quotaShareName", "schedulingPriority", "capacityUnit"]
    columns += ["instanceCount", "duration"]
    with open(history, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(generate(jobs, days, seed))
    quotas.write_text(QUOTAS)
    return history, quotas


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--quick", action="store_true", help="300 jobs over 1 day")
    parser.add_argument("--keep", metavar="DIR", help="write the files here and keep them")
    parser.add_argument("--workers", help="passed to the command (default: its own)")
    parser.add_argument("--time-limit", help="passed to the command (default: its own, 50 s)")
    parser.add_argument("--max-replays", help="passed to the command (default: its own, 24)")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.days = 300, 1.0
    with tempfile.TemporaryDirectory(prefix="advise-bench-") as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        history, quotas = write_files(folder, args.jobs, args.days, args.seed)
        command = [sys.executable, "-m", "airflow_quota.cli.advise", "--history", str(history)]
        command += ["--config", str(quotas), "-o", str(folder / "proposed.yaml")]
        command += ["--report", str(folder / "report.html"), "--json"]
        for option in ("workers", "time_limit", "max_replays"):
            if getattr(args, option) is not None:
                command += ["--" + option.replace("_", "-"), getattr(args, option)]
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        load_after = os.getloadavg()[0]
        if completed.returncode != 0:
            print(completed.stdout + completed.stderr)
            return 1
        advice = json.loads(completed.stdout)
    trials = advice["trials"]
    replay = sum(trial["wallSeconds"] for trial in trials) / len(trials)
    objective = advice["objective"]
    print(f"airflow quota advise: {advice['jobs']} jobs over {args.days:g} days (seed {args.seed})")
    print(
        f"commit {commit or '?'}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {load_before:.1f} before, {load_after:.1f} after"
    )
    verdict = "met" if wall < GOAL_SECONDS else "MISSED"
    print(f"wall time of the command   {wall:.1f} s (goal under {GOAL_SECONDS:g} s: {verdict})")
    print(f"replays                    {len(trials)} (one replay {replay:.1f} s on average, in its process)")
    print(
        f"objective                  {objective['current']:.0f} -> {objective['proposed']:.0f} s "
        f"({100 * objective['improvement']:.1f}% lower)"
    )
    for side in ("current", "proposed"):
        util = ", ".join(
            f"{value:.3f}" for value in advice[side]["utilization"].values() if value is not None
        )
        print(
            f"{side:<9} utilization {util}; preemptions {advice[side]['preemptions']}; GPU-h lost "
            f"{advice[side]['gpuSecondsLost'] / 3600:.1f}"
        )
    print("proposed" if advice["improved"] else "found nothing better", "; ".join(advice["changes"]) or "-")
    print(f"stopped: {advice['stoppedBecause']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
