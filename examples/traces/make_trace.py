"""Generate bursty_teams.csv: about 2,000 training jobs from 4 teams that submit in bursts.

Run from the repository root (the seed is fixed, so the file comes out the same every time):

    python examples/traces/make_trace.py

Each team submits bursts of jobs: bursts start at random times over 16 days (exponential gaps), and the
jobs of a burst arrive a couple of minutes apart. A job asks for 1, 2 or 4 instances of
ml.p4d.24xlarge (never more than its team's own maxCapacity in quotas.yaml, so it can also run under a
fixed partition) and needs a log-normally distributed running time, about an hour at the median.
"""

from __future__ import annotations

import argparse
import csv
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20260325
HORIZON_SECONDS = 16 * 24 * 3600
UNIT = "ml.p4d.24xlarge"


@dataclass(frozen=True)
class Team:
    share: str
    jobs: int
    jobs_per_burst: int
    priorities: tuple[int, ...]
    instance_counts: tuple[int, ...]
    median_minutes: float


TEAMS = (
    Team("prod", 300, 6, (50,), (1, 2), 45),
    Team("eval", 500, 25, (20, 30), (1, 2, 4), 30),
    Team("research", 700, 35, (10, 20, 30, 40, 50), (1, 2, 4), 40),
    Team("vision", 500, 20, (10,), (2, 4), 30),
)


def generate(seed: int = SEED) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for team in TEAMS:
        bursts = max(1, team.jobs // team.jobs_per_burst)
        starts = sorted(rng.uniform(0, HORIZON_SECONDS) for _ in range(bursts))
        for index in range(team.jobs):
            at = starts[index % bursts] + rng.expovariate(1 / 120) * (index // bursts)
            minutes = rng.lognormvariate(0, 0.8) * team.median_minutes
            rows.append(
                {
                    "submitTime": round(at),
                    "quotaShareName": team.share,
                    "schedulingPriority": rng.choice(team.priorities),
                    "capacityUnit": UNIT,
                    "instanceCount": rng.choice(team.instance_counts),
                    "duration": max(60, round(minutes * 60)),
                }
            )
    rows.sort(key=lambda row: (row["submitTime"], row["quotaShareName"]))
    for number, row in enumerate(rows, start=1):
        row["jobName"] = f"{row['quotaShareName']}-{number:04d}"
    return rows


COLUMNS = [
    "submitTime",
    "jobName",
    "quotaShareName",
    "schedulingPriority",
    "capacityUnit",
    "instanceCount",
    "duration",
]


def write_trace(path: Path, seed: int = SEED) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(generate(seed))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("bursty_teams.csv"))
    args = parser.parse_args()
    write_trace(args.out, args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
