"""Sum up a ``QUOTA_TEST_TIMELINE`` file: per test file, its wall time on its workers and the CPU it used.

``python -m tests.timeline FILE [--top N]`` prints the suite's span, the busiest files by wall time and by
CPU seconds, and how long each worker was busy, so a slow suite shows whether it waited or computed.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    entries = [json.loads(line) for line in args.timeline.read_text().splitlines() if line.strip()]
    first, last = min(e["start"] for e in entries), max(e["end"] for e in entries)
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    for entry in entries:
        path = entry["test"].split("::")[0]
        wall[path] += entry["end"] - entry["start"]
        cpu[path] += entry.get("cpu", 0.0)
        busy[entry["worker"]] += entry["end"] - entry["start"]
    print(f"{len(entries)} tests over {last - first:.0f} s; CPU {sum(cpu.values()):.0f} s in all")
    print("workers busy: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(busy.items())))
    print(f"\n{'wall s':>7} {'cpu s':>7}  file (by wall time)")
    for path, seconds in sorted(wall.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{seconds:7.0f} {cpu[path]:7.0f}  {path}")
    print(f"\n{'cpu s':>7} {'wall s':>7}  file (by CPU)")
    for path, seconds in sorted(cpu.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{seconds:7.0f} {wall[path]:7.0f}  {path}")


if __name__ == "__main__":
    main()
