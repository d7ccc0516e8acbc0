"""The README's first command, ``./scripts/demo.sh``, as a new user runs it: twice, on one AIRFLOW_HOME,
with another round (``./scripts/demo.sh round``) in between.

The script starts a real ``airflow standalone`` on SQLite. The test reads it only through what a user has:
the lines the script prints (the URL and the login), and the quota REST API that the GPU Quotas page reads,
called with that login, and through the metadata database it keeps in AIRFLOW_HOME. research's data
preparation is made short (``DEMO_RECLAIM_AFTER``; a user's demo waits a minute). The first round's story
is checked in detail (``demo_story.py``: the audit log, the REST API, the page in Chromium, the replay, the
checkpoints, the ledger sampled every half second, a bad quota file refused): this is the demo's run on
SQLite; ``test_demo_flow.py`` runs the same checks on PostgreSQL, with a scheduler restart.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa

from tests import python_startup
from tests.airflow.harness import airflow_slot, free_port
from tests.e2e.demo_story import (
    REPO,
    VICTIMS,
    DemoRun,
    LedgerSampler,
    a_bad_quota_file_changes_nothing,
    the_finished_story_holds,
    wait_until,
)

DEMO = REPO / "scripts" / "demo.sh"
#: research's data preparation in the test (DEMO_RECLAIM_AFTER; a user's demo waits a minute): the reclaim
#: comes at least this long after the URL is printed.
RECLAIM_AFTER = 10
#: The demo's promise: within two minutes of printing its URL, a borrower preempted by the lender it borrowed
#: from (the DAG runs are triggered after the URL: starting Airflow before it takes what the machine takes).
PROMISED_SECONDS = 120
RUNNING_LINE = re.compile(r"demo: running\. Airflow:\s+(http://localhost:(\d+))\s+\(login: (\S+) / (\S+)\)")


class Demo:
    """``scripts/demo.sh`` in its own process group, its output collected line by line."""

    def __init__(self, home: Path, port: int, exit_after: float) -> None:
        env = users_shell()
        env.update(AIRFLOW_HOME=str(home), DEMO_PORT=str(port), DEMO_RECLAIM_AFTER=str(RECLAIM_AFTER))
        self.env = dict(env)
        env.update(DEMO_EXIT_AFTER=f"{exit_after:g}")
        self.home = home
        self.process = subprocess.Popen(
            ["bash", str(DEMO)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            # Ctrl-C reaches it as in a terminal, even when pytest itself was started with SIGINT ignored
            # (in the background of a shell): bash cannot trap a signal ignored when it started.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.lines: list[str] = []
        #: When each line was read (UTC).
        self.read_at: list[datetime] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.read_at.append(datetime.now(UTC))
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_running_line(self, timeout: float) -> tuple[re.Match[str], datetime]:
        """The line with the URL and the login, and when it was printed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line, read_at in zip(list(self.lines), list(self.read_at), strict=False):
                if match := RUNNING_LINE.search(line):
                    return match, read_at
            assert self.process.poll() is None, f"the demo exited ({self.process.returncode}):\n{self.output}"
            time.sleep(0.5)
        raise AssertionError(f"the demo printed no URL and login within {timeout:.0f} s:\n{self.output}")

    def diagnosis(self, seen: list[dict[str, Any]]) -> str:
        """What a failed wait prints: the script's output, each job's decisions so far, which Airflow
        components still run, and the end of airflow standalone's log."""
        stories: dict[str, list[str]] = {}
        for event in seen:
            stories.setdefault(event.get("jobId") or "-", []).append(event["kind"])
        decisions = "\n".join(f"  {job}: {' '.join(kinds)}" for job, kinds in sorted(stories.items()))
        running = subprocess.run(["ps", "-eo", "pid,etime,time,args"], capture_output=True, text=True).stdout
        components = "\n".join(
            line for line in running.splitlines() if "airflow" in line and "ps -eo" not in line
        )
        log = self.home / "standalone.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-80:]) if log.exists() else "(no log)"
        return (
            f"{self.output}\ndecisions so far:\n{decisions}\nairflow processes:\n{components}\n"
            f"the end of standalone.log:\n{tail}"
        )

    def interrupt(self) -> int:
        """Ctrl-C, as a user stops it: the script stops airflow standalone and exits."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=180)

    def kill_leftovers(self) -> None:
        """Only if a test failed half-way: kill every process the demo started. airflow standalone runs in
        a session of its own (``setsid``), and Airflow's processes overwrite their environment with their
        titles (setproctitle), so they are found by session: every session below the demo's process."""
        sessions = {self.process.pid} | sessions_below(self.process.pid)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        for pid, (_, session) in processes().items():
            if session in sessions:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def users_shell() -> dict[str, str]:
    """A new user's shell: none of the test run's Airflow settings, nor its Python start-up hook
    (tests/python_startup)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    ours = python_startup.FOLDER
    python_path = [path for path in env.pop("PYTHONPATH", "").split(os.pathsep) if path and path != ours]
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    return env


def processes() -> dict[int, tuple[int, int]]:
    """Every live process: its parent and session ids, from /proc."""
    found: dict[int, tuple[int, int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (proc / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (command) "
                found[int(proc.name)] = (int(fields[1]), int(fields[3]))
    return found


def sessions_below(root: int) -> set[int]:
    """The session ids of ``root``'s descendants."""
    children: dict[int, list[int]] = {}
    table = processes()
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    sessions: set[int] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        sessions.add(table[pid][1])
        stack.extend(children.get(pid, []))
    return sessions


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


def victim(event: dict[str, Any], run: str) -> str | None:
    """The nlp trial of DAG run ``run`` an audit event is about, if it is one research reclaims from."""
    job_id = event.get("jobId") or ""
    return next((trial for trial in VICTIMS if job_id.startswith(f"demo_nlp_sweep/{run}/{trial}/")), None)


def quota_apply(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``airflow quota apply -f PATH`` in a user's shell on the demo's AIRFLOW_HOME."""
    airflow = Path(sys.executable).parent / "airflow"
    argv = [str(airflow), "quota", "apply", "-f", str(path)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)


def runs_triggered(output: str) -> list[str]:
    return re.findall(r"Triggered run (demo-\S+) of", output)


@pytest.fixture
def a_slot_for_airflow() -> Iterator[None]:
    with airflow_slot():
        yield


@pytest.mark.airflow
@pytest.mark.usefixtures("a_slot_for_airflow")
def test_the_demo_command_waits_for_its_viewer_then_borrows_reclaims_resumes_and_starts_again(
    tmp_path: Path,
) -> None:
    home = tmp_path / "airflow-home"
    port = free_port()
    first = Demo(home, port, exit_after=900)
    try:
        match, printed_at = first.wait_for_running_line(timeout=300)
        base_url, printed_port, user, password = (
            match.group(1),
            match.group(2),
            match.group(3),
            match.group(4),
        )
        assert printed_port == str(port)
        assert f"GPU Quotas page:      {base_url}/quota/" in first.output
        deadline = time.monotonic() + 60
        while not (run := runs_triggered(first.output)) or "Another round:" not in first.output:
            assert time.monotonic() < deadline, f"no DAG run triggered after the URL:\n{first.output}"
            time.sleep(0.5)
        assert f"in about\n      {RECLAIM_AFTER} s" in first.output
        assert "scripts/demo.sh round   (from another terminal" in first.output
        (run,) = run
        demo_run = DemoRun(
            engine=sa.create_engine(f"sqlite:///{home / 'airflow.db'}"),
            base_url=base_url,
            login=(user, password),
            home=home,
            run_id=run,
            reclaim_after=RECLAIM_AFTER,
        )
        sampler = LedgerSampler(demo_run.engine).start()

        resumed: set[str] = set()
        deadline = time.monotonic() + 420
        seen: list[dict[str, Any]] = []
        while len(resumed) < len(VICTIMS):
            assert time.monotonic() < deadline, (
                f"no reclaim and resume within 7 minutes:\n{first.diagnosis(seen)}"
            )
            seen = events(base_url, (user, password))
            for trial in VICTIMS:
                kinds = [e["kind"] for e in seen if victim(e, run) == trial]
                if (
                    kinds[:4] == ["SUBMITTED", "GRANTED", "PREEMPTED", "REQUEUED"]
                    and kinds.count("GRANTED") == 2
                ):
                    resumed.add(trial)
            time.sleep(2)
        lender = {e["relatedJobId"] for e in seen if e["kind"] == "PREEMPTED" and victim(e, run)}
        assert len(lender) == 1 and "demo_research_pretrain" in lender.pop()
        # The viewer sees it all: nothing was granted before the URL was printed, and research took its
        # GPUs back at least DEMO_RECLAIM_AFTER later (the borrowers ran meanwhile).
        granted = [datetime.fromisoformat(e["at"]) for e in seen if e["kind"] == "GRANTED"]
        reclaimed = min(
            datetime.fromisoformat(e["at"])
            for e in seen
            if e["kind"] == "PREEMPTED" and e["rule"] == "RECLAIM" and victim(e, run)
        )
        assert min(granted) >= printed_at, (min(granted), printed_at)
        after_url = (reclaimed - printed_at).total_seconds()
        assert RECLAIM_AFTER <= after_url <= PROMISED_SECONDS, (
            f"research reclaimed its GPUs {after_url:.0f} s after the URL was printed"
        )

        # A bad quota file, applied as a user would while the demo runs, changes nothing.
        a_bad_quota_file_changes_nothing(demo_run, lambda path: quota_apply(path, first.env))
        # The round's story in detail, once its DAG runs ended and the ledger recorded it.
        wait_until(
            "the demo's first round to end",
            lambda: demo_run.finished() and demo_run.ledger_settled(),
            360,
            lambda: first.diagnosis(events(base_url, (user, password))),
        )
        sampler.finish()
        the_finished_story_holds(demo_run, sampler)

        # Another round, as the script says, from another terminal: a new DAG run whose jobs arrive.
        another = subprocess.run(
            ["bash", str(DEMO), "round"], cwd=REPO, env=first.env, capture_output=True, text=True, timeout=180
        )
        assert another.returncode == 0, another.stdout + another.stderr
        (second_run,) = runs_triggered(another.stdout)
        assert second_run != run
        deadline = time.monotonic() + 120
        while not {victim(e, second_run) for e in events(base_url, (user, password))} >= set(VICTIMS):
            assert time.monotonic() < deadline, f"round {second_run}'s trials never reached the ledger"
            time.sleep(2)

        assert first.interrupt() == 0, first.output
        assert "demo: stopping airflow standalone" in first.output

        # Again on the same AIRFLOW_HOME: it migrates, applies and starts again, and triggers new runs.
        second = Demo(home, port, exit_after=5)
        try:
            second.wait_for_running_line(timeout=300)
            assert second.process.wait(timeout=180) == 0, second.output
        finally:
            second.kill_leftovers()
        runs = runs_triggered(first.output + second.output)
        assert len(runs) == 2 and runs[0] != runs[1], runs
    finally:
        first.kill_leftovers()


def test_another_round_without_a_running_demo_says_how_to_start_one(tmp_path: Path) -> None:
    env = users_shell()
    env.update(AIRFLOW_HOME=str(tmp_path), DEMO_PORT=str(free_port()))
    result = subprocess.run(
        ["bash", str(DEMO), "round"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert f"no demo runs on port {env['DEMO_PORT']}" in result.stderr
    assert "start it with" in result.stderr and "scripts/demo.sh" in result.stderr


@pytest.mark.parametrize(
    ("argv", "extra", "says"),
    [
        (["rounds"], {}, "unknown command 'rounds'"),
        ([], {"DEMO_RECLAIM_AFTER": "a minute"}, "DEMO_RECLAIM_AFTER must be a number of seconds"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(
    tmp_path: Path, argv: list[str], extra: dict[str, str], says: str
) -> None:
    env = users_shell()
    env.update(AIRFLOW_HOME=str(tmp_path / "home"), DEMO_PORT=str(free_port()), **extra)
    result = subprocess.run(
        ["bash", str(DEMO), *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert says in result.stderr
    assert not (tmp_path / "home").exists()
