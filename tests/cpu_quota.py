"""Run a command as if on a slower machine: in a CPU cgroup whose quota is a number of cores (1.1 of this
machine's two, say), with PostgreSQL's server in it too, and say how much CPU it used and how long it was
held back::

    sudo .venv/bin/python -m tests.cpu_quota --cores 1.1 -- .ci/run

A suite that is CPU-bound takes as long on a machine with ``--cores`` of these cores as on a slower one
whose cores do as much work in all; a commit whose time on a slow machine is known calibrates the quota
(docs/testing.md). It needs root and the cgroup v1 ``cpu`` and ``cpuacct`` controllers
(``/sys/fs/cgroup/cpu``); on a machine with only cgroup v2, systemd does the same:
``systemd-run --scope -p CPUQuota=110% .ci/run``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CPU = Path("/sys/fs/cgroup/cpu")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
#: The scheduler's accounting period; the quota is this many microseconds times the cores.
PERIOD_US = 100_000
#: Where Debian's PostgreSQL writes its server's pid (the first line of each cluster's file).
POSTGRES_PIDS = Path("/var/run/postgresql")


def has_cgroup_v1() -> bool:
    """Whether this machine has the cgroup v1 cpu and cpuacct controllers this needs."""
    return (CPU / "cpu.cfs_quota_us").exists() and (CPUACCT / "cpuacct.usage").exists()


def postgres_servers() -> list[int]:
    """The pids of the local PostgreSQL servers (postmasters): their new backends start in their cgroup."""
    return [int(path.read_text().split()[0]) for path in sorted(POSTGRES_PIDS.glob("*.pid"))]


def group_of(pid: int | str) -> str:
    """A process's cgroup of the cpu controller, relative to the hierarchy's root ("" for the root)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path.strip("/")
    return ""


def move(pids: list[int], group: str) -> None:
    """Move processes into ``group`` of both controllers ("" is the root)."""
    for controller in (CPU, CPUACCT):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                (controller / group / "cgroup.procs").write_text(str(pid))


@contextlib.contextmanager
def quota_group(cores: float) -> Iterator[str]:
    """A new cgroup limited to ``cores`` cores, inside this process's own (a quota within a quota holds),
    removed on exit, what is left in it moved back to this process's."""
    if not has_cgroup_v1():
        sys.exit(
            "cpu_quota: no cgroup v1 cpu and cpuacct controllers under /sys/fs/cgroup; with cgroup v2 use "
            f"systemd-run --scope -p CPUQuota={cores * 100:.0f}% COMMAND"
        )
    if os.geteuid() != 0:
        sys.exit("cpu_quota: making a cgroup needs root; run it with sudo")
    here = group_of("self")
    group = f"{here}/quota-tests-{os.getpid()}".lstrip("/")
    for controller in (CPU, CPUACCT):
        (controller / group).mkdir()
    (CPU / group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (CPU / group / "cpu.cfs_quota_us").write_text(str(round(cores * PERIOD_US)))
    try:
        yield group
    finally:
        for controller in (CPU, CPUACCT):
            left = [int(pid) for pid in (controller / group / "cgroup.procs").read_text().split()]
            move(left, here)
            # A process that was exiting can hold the group a moment longer.
            for _ in range(50):
                try:
                    (controller / group).rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def run(command: list[str], cores: float, with_postgres: bool) -> int:
    with quota_group(cores) as group:
        servers = {pid: group_of(pid) for pid in postgres_servers()} if with_postgres else {}
        move(list(servers), group)
        try:
            started = time.monotonic()
            process = subprocess.Popen(command, preexec_fn=lambda: move([os.getpid()], group))
            status = process.wait()
            wall = time.monotonic() - started
        finally:
            for pid, before in servers.items():
                move([pid], before)
        used = int((CPUACCT / group / "cpuacct.usage").read_text()) / 1e9
        throttled = next(
            int(line.split()[1]) / 1e9
            for line in (CPU / group / "cpu.stat").read_text().splitlines()
            if line.startswith("throttled_time")
        )
    print(
        f"cpu_quota: {cores:g} cores; exit status {status}; {wall:.0f} s; {used:.1f} CPU-s in the group "
        f"({used / wall / cores:.0%} of its quota); held back {throttled:.1f} s in all",
        file=sys.stderr,
    )
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cores", type=float, required=True, help="the quota, in cores (1.1)")
    parser.add_argument(
        "--without-postgres", action="store_true", help="leave the PostgreSQL server outside the quota"
    )
    parser.add_argument("command", nargs="+", help="the command, after --")
    arguments = parser.parse_args()
    cores_here = os.cpu_count() or 1
    if not 0.01 <= arguments.cores <= cores_here:
        parser.error(f"--cores must be between 0.01 and this machine's {cores_here} cores")
    sys.exit(run(arguments.command, arguments.cores, not arguments.without_postgres))


if __name__ == "__main__":
    main()
