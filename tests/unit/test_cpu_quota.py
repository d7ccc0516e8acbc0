"""``tests/cpu_quota.py`` holds a command to its quota of cores, passes its exit status on, and leaves no
cgroup behind (it needs root and cgroup v1's cpu controller, as these machines have)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cpu_quota

ROOT = Path(__file__).resolve().parents[2]

needs_a_cgroup = pytest.mark.skipif(
    os.geteuid() != 0 or not cpu_quota.has_cgroup_v1(),
    reason="needs root and the cgroup v1 cpu and cpuacct controllers",
)

#: A command that uses 0.6 CPU-seconds, then exits with status 3.
BURN = [sys.executable, "-c", "import sys, time\nwhile time.process_time() < 0.6: pass\nsys.exit(3)"]
TOOL = [sys.executable, "-m", "tests.cpu_quota"]


@needs_a_cgroup
def test_a_command_gets_no_more_than_its_cores_and_keeps_its_exit_status() -> None:
    tool = subprocess.Popen(
        [*TOOL, "--cores", "0.3", "--without-postgres", "--", *BURN],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = tool.communicate(timeout=60)
    assert tool.returncode == 3, stderr
    report = re.search(r"exit status 3; (\d+) s; ([\d.]+) CPU-s in the group", stderr)
    assert report, stderr
    wall, used = (float(figure) for figure in report.groups())
    # 0.6 CPU-s at 0.3 of a core take 2 s; alone, it would take 0.6 s. (How long it was held back is the
    # group's own figure: where an outer quota, such as a whole suite's, holds it back first, it is 0.)
    assert wall >= 2 and used >= 0.6, stderr
    assert not list(cpu_quota.CPU.glob(f"**/quota-tests-{tool.pid}")), "the cgroup was left behind"


def test_a_quota_beyond_this_machine_is_refused_before_anything_runs() -> None:
    cores = (os.cpu_count() or 1) + 1
    result = subprocess.run(
        [*TOOL, "--cores", str(cores), "--", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--cores must be between 0.01 and this machine's" in result.stderr
