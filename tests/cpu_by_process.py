"""Where the machine's CPU went while the suite ran: every process's CPU, by what it is and by the test file
that was running on its pytest-xdist worker when it started.

The timeline (``QUOTA_TEST_TIMELINE``, ``tests/timeline.py``) counts a worker's own CPU and its finished
child processes'; it misses what a test starts in a session of its own (``scripts/demo.sh``'s ``airflow
standalone``), daemons, the PostgreSQL server's backends and Chromium's renderers. This samples ``/proc``
instead, every ``--every`` seconds::

    python -m tests.cpu_by_process sample /tmp/cpu.jsonl &     # while the suite runs, then kill it
    python -m tests.cpu_by_process report /tmp/cpu.jsonl [--timeline /tmp/timeline.jsonl]

A process is attributed to the xdist worker it descends from (by its parent when first seen) and, with the
timeline, to the test file that worker was running then. A process that lives and ends between two samples
is missed; the report says how much of the machine's busy time (``/proc/stat``) the processes it saw cover.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Seen:
    """One process as sampled: what it is, its worker, when first seen, and the CPU seconds it used since
    sampling started (all of its own, if it started later)."""

    kind: str
    cmdline: str
    worker: str
    first_seen: float
    cpu: float
    cpu_before: float = 0.0


def machine_busy_seconds() -> float:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


def kind_of(cmdline: str) -> str:
    """A process's kind: its command line without paths, numbers and arguments past the third word."""
    words = [word.rsplit("/", 1)[-1] for word in cmdline.split()[:3]]
    return re.sub(r"\d+", "N", " ".join(words))[:60]


def sample(out: Path, every: float) -> None:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` ends it as Ctrl-C does
    #: Every process seen, by pid and start time (a pid can be used again).
    seen: dict[tuple[int, int], Seen] = {}
    #: Each live pid's key in ``seen``.
    current: dict[int, tuple[int, int]] = {}
    start_busy = machine_busy_seconds()
    first_pass = True
    try:
        while True:
            now = time.time()
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                with contextlib.suppress(OSError, ValueError, IndexError):  # it ended meanwhile
                    parent, started, cpu, stat = _stat(proc)
                    key = (int(proc.name), started)
                    if key not in seen:
                        parent_seen = seen.get(current.get(parent, (0, 0)))
                        inherited = parent_seen.worker if parent_seen else "-"
                        worker = inherited if inherited != "-" else _worker_of(proc)
                        cmdline = _cmdline(proc) or stat
                        seen[key] = Seen(
                            kind_of(cmdline),
                            cmdline[:300],
                            worker,
                            now,
                            cpu=0.0,
                            cpu_before=cpu if first_pass else 0.0,
                        )
                        current[key[0]] = key
                    seen[key].cpu = cpu - seen[key].cpu_before
            first_pass = False
            time.sleep(every)
    except KeyboardInterrupt:
        pass
    finally:
        with out.open("w") as log:
            log.write(json.dumps({"busy": machine_busy_seconds() - start_busy}) + "\n")
            for (pid, _), process in seen.items():
                log.write(json.dumps({"pid": pid, **process.__dict__}) + "\n")


def _stat(proc: Path) -> tuple[int, int, float, str]:
    """A process's parent pid, start time (clock ticks since boot), CPU seconds so far, and its stat line."""
    stat = (proc / "stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / TICKS, stat


def _cmdline(proc: Path) -> str:
    return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _worker_of(proc: Path) -> str:
    with contextlib.suppress(OSError):
        for entry in (proc / "environ").read_bytes().split(b"\0"):
            if entry.startswith(b"PYTEST_XDIST_WORKER="):
                return entry.split(b"=", 1)[1].decode()
    return "-"


def report(path: Path, timeline: Path | None, top: int) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    busy = next(line["busy"] for line in lines if "busy" in line)
    processes = [line for line in lines if "pid" in line]
    runs: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    if timeline:
        for line in timeline.read_text().splitlines():
            entry = json.loads(line)
            runs[entry["worker"]].append((entry["start"], entry["end"], entry["test"].split("::", 1)[0]))
    by_kind: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    for process in processes:
        by_kind[process["kind"]] += process["cpu"]
        started = process["first_seen"]
        file = next(
            (name for start, end, name in runs[process["worker"]] if start <= started <= end + 1),
            f"(worker {process['worker']})",
        )
        by_file[file] += process["cpu"]
    total = sum(by_kind.values())
    print(f"machine busy {busy:.0f} CPU-s; the processes seen used {total:.0f} ({total / busy:.0%})")
    print("\n  cpu s  kind")
    for kind, cpu in by_kind.most_common(top):
        print(f"{cpu:7.0f}  {kind}")
    print("\n  cpu s  test file its worker ran when it started")
    for file, cpu in by_file.most_common(top):
        print(f"{cpu:7.0f}  {file}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sampling = commands.add_parser("sample", help="sample /proc until interrupted (SIGINT)")
    sampling.add_argument("out", type=Path)
    sampling.add_argument("--every", type=float, default=1.0, help="seconds between samples (1)")
    reporting = commands.add_parser("report", help="sum a sample up")
    reporting.add_argument("sample", type=Path)
    reporting.add_argument("--timeline", type=Path, help="a QUOTA_TEST_TIMELINE file of the same run")
    reporting.add_argument("--top", type=int, default=25)
    arguments = parser.parse_args()
    if arguments.command == "sample":
        sample(arguments.out, arguments.every)
    else:
        report(arguments.sample, arguments.timeline, arguments.top)


if __name__ == "__main__":
    main()
