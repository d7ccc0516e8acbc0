"""The README's first command, ``./scripts/demo.sh``, as a new user runs it: twice, on one AIRFLOW_HOME.

The script starts a real ``airflow standalone`` on SQLite. The test reads it only through what a user has:
the lines the script prints (the URL and the login), and the quota REST API that the GPU Quotas page reads,
called with that login. ``test_demo_flow.py`` checks the same flow in detail on the test harness.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.airflow.harness import airflow_slot, free_port

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.sh"
#: The demo's promise: within two minutes of starting, a borrower preempted by the lender it borrowed from.
PROMISED_SECONDS = 120
#: The nlp trials that borrow research's GPUs and are preempted when research's job arrives.
VICTIMS = ("trial_b", "trial_c")
RUNNING_LINE = re.compile(r"demo: running\. Airflow:\s+(http://localhost:(\d+))\s+\(login: (\S+) / (\S+)\)")


class Demo:
    """``scripts/demo.sh`` in its own process group, its output collected line by line."""

    def __init__(self, home: Path, port: int, exit_after: float) -> None:
        # A new user's shell: none of the test run's Airflow settings.
        env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
        env.update(AIRFLOW_HOME=str(home), DEMO_PORT=str(port), DEMO_EXIT_AFTER=f"{exit_after:g}")
        self.home = home
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            ["bash", str(DEMO)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_running_line(self, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := RUNNING_LINE.search(line):
                    return match
            assert self.process.poll() is None, f"the demo exited ({self.process.returncode}):\n{self.output}"
            time.sleep(0.5)
        raise AssertionError(f"the demo printed no URL and login within {timeout:.0f} s:\n{self.output}")

    def interrupt(self) -> int:
        """Ctrl-C, as a user stops it: the script stops airflow standalone and exits."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=180)

    def kill_leftovers(self) -> None:
        """Only if a test failed half-way: kill every process still running with this AIRFLOW_HOME."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        marker = f"AIRFLOW_HOME={self.home}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue


def events(base_url: str, login: tuple[str, str]) -> list[dict[str, Any]]:
    """The audit log through the quota REST API, authenticated with the login the demo printed."""
    token = requests.post(
        f"{base_url}/auth/token", json={"username": login[0], "password": login[1]}, timeout=30
    )
    assert token.status_code == 201, f"the printed login does not work: {token.status_code} {token.text}"
    response = requests.get(
        f"{base_url}/quota/api/events",
        params={"limit": 1000},
        headers={"Authorization": f"Bearer {token.json()['access_token']}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["events"])


def victim(event: dict[str, Any]) -> str | None:
    """The nlp trial an audit event is about, if it is one of the trials research reclaims from."""
    job_id = event.get("jobId") or ""
    return next((trial for trial in VICTIMS if "demo_nlp_sweep" in job_id and trial in job_id), None)


@pytest.fixture
def a_slot_for_airflow() -> Iterator[None]:
    with airflow_slot():
        yield


@pytest.mark.airflow
@pytest.mark.usefixtures("a_slot_for_airflow")
def test_the_demo_command_shows_borrow_reclaim_and_resume_and_starts_again(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    port = free_port()
    first = Demo(home, port, exit_after=900)
    try:
        match = first.wait_for_running_line(timeout=300)
        base_url, printed_port, user, password = (
            match.group(1),
            match.group(2),
            match.group(3),
            match.group(4),
        )
        assert printed_port == str(port)
        assert f"GPU Quotas page:      {base_url}/quota/" in first.output

        preempted_at = None
        resumed: set[str] = set()
        deadline = time.monotonic() + 420
        while len(resumed) < len(VICTIMS):
            assert time.monotonic() < deadline, f"no reclaim and resume within 7 minutes:\n{first.output}"
            seen = events(base_url, (user, password))
            reclaims = [e for e in seen if e["kind"] == "PREEMPTED" and e["rule"] == "RECLAIM" and victim(e)]
            if reclaims and preempted_at is None:
                preempted_at = time.monotonic() - first.started
            for trial in VICTIMS:
                kinds = [e["kind"] for e in seen if victim(e) == trial]
                if (
                    kinds[:4] == ["SUBMITTED", "GRANTED", "PREEMPTED", "REQUEUED"]
                    and kinds.count("GRANTED") == 2
                ):
                    resumed.add(trial)
            time.sleep(2)
        assert preempted_at is not None and preempted_at <= PROMISED_SECONDS, (
            f"research reclaimed its GPUs {preempted_at:.0f} s after the demo started, not within "
            f"{PROMISED_SECONDS} s"
        )
        lender = {e["relatedJobId"] for e in seen if e["kind"] == "PREEMPTED" and victim(e)}
        assert len(lender) == 1 and "demo_research_pretrain" in lender.pop()

        assert first.interrupt() == 0, first.output
        assert "demo: stopping airflow standalone" in first.output

        # Again on the same AIRFLOW_HOME: it migrates, applies and starts again, and triggers new runs.
        second = Demo(home, port, exit_after=5)
        try:
            second.wait_for_running_line(timeout=300)
            assert second.process.wait(timeout=180) == 0, second.output
        finally:
            second.kill_leftovers()
        runs = re.findall(r"Triggered run (demo-\S+) of", first.output + second.output)
        assert len(runs) == 2 and runs[0] != runs[1], runs
    finally:
        first.kill_leftovers()
