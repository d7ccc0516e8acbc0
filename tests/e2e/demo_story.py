"""The demo's story, checked alike on whichever Airflow runs it.

Two tests run the demo (demo/dags/demo_teams.py under demo/quotas.yaml): ``test_demo_command.py`` through
``scripts/demo.sh`` (``airflow standalone`` on SQLite, as a new user runs it) and ``test_demo_flow.py`` on the
test harness's processes on PostgreSQL (with a scheduler restart midway). Both check one DAG run's story
here, reading only the metadata database, the REST API and the page, and of them only the demo's job queue
(``test_demo_flow.py``'s Airflow runs other stories' queues too):

nlp borrows research's idle GPUs; research's job reclaims them; the two lowest-priority nlp trials stop, are
requeued and resume from their checkpoints (their results equal an uninterrupted run); nobody uses an
Airflow retry; the audit log, the REST API and the page's GPU timeline (in Chromium) agree; the run,
exported as ``airflow quota history`` does and replayed by the simulator, makes the same decisions; at no
sampled moment is more capacity held than the queue has, or one device index held twice; a bad quota file
applied midway changes nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from sqlalchemy.orm import Session

from airflow_quota.ledger.history import export_history
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import run_trace, write_trace
from tests.airflow.harness import ledger_settled, run_state, task_states
from tests.scripts import load_script
from tests.ui.browser import (
    ARTIFACTS,
    CHROMEDRIVER,
    CHROMIUM,
    chromium,
    console_errors,
    drawn_timeline,
    log_in,
    pick_window,
    wait_for,
)

REPO = Path(__file__).resolve().parents[2]
QUOTAS = REPO / "demo" / "quotas.yaml"
#: Triggered in this order, as scripts/demo.sh does: nlp's trials first, then research, whose data
#: preparation takes DEMO_RECLAIM_AFTER seconds (short in the tests, a minute in a user's demo) before it
#: comes back for its GPUs; the trials last a minute longer than that, so they still run when it does.
DAGS = ("demo_nlp_sweep", "demo_vision_eval", "demo_research_pretrain")
#: The demo's job queue and its capacity (demo/quotas.yaml).
QUEUE = "workstation"
CAPACITY = 4
#: The nlp trials research reclaims its GPUs from, lowest priority first.
VICTIMS = ("trial_c", "trial_b")


@dataclass(frozen=True)
class DemoRun:
    """One DAG run of the demo's three DAGs on a running Airflow: what the checks read it through."""

    engine: sa.Engine
    base_url: str
    login: tuple[str, str]
    #: The Airflow's AIRFLOW_HOME: the local backend trains under ``quota-training/`` there.
    home: Path
    run_id: str
    reclaim_after: float

    def job_id(self, dag_id: str, task_id: str) -> str:
        return f"{dag_id}/{self.run_id}/{task_id}/-1/1"

    @property
    def victims(self) -> list[str]:
        return [self.job_id("demo_nlp_sweep", trial) for trial in VICTIMS]

    @property
    def pretrain(self) -> str:
        return self.job_id("demo_research_pretrain", "pretrain")

    def api(self, path: str) -> Any:
        """A GET of the quota REST API with the run's login."""
        user, password = self.login
        token = requests.post(
            f"{self.base_url}/auth/token", json={"username": user, "password": password}, timeout=30
        )
        assert token.status_code == 201, token.text
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
        response = requests.get(f"{self.base_url}/quota/api{path}", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def audit(self) -> list[dict[str, Any]]:
        """The demo's job queue's audit log."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.text(
                    "SELECT at, kind, job_id, related_job_id, rule FROM quota_audit_log"
                    " WHERE job_queue_name = :queue ORDER BY id"
                ),
                {"queue": QUEUE},
            ).mappings()
            return [dict(row) for row in rows]

    def applied(self) -> list[tuple[Any, ...]]:
        """The applied quota configuration: revisions and every share's settings."""
        with self.engine.connect() as connection:
            revisions = connection.execute(
                sa.text("SELECT job_queue_name, revision FROM quota_config_revision")
            )
            shares = connection.execute(
                sa.text(
                    "SELECT quota_share_name, capacity_limits, strategy, borrow_limit, in_share_preemption,"
                    " state FROM quota_share ORDER BY quota_share_name"
                )
            )
            return [tuple(row) for row in revisions] + [tuple(str(value) for value in row) for row in shares]

    def task_states(self, dag_id: str) -> dict[str, tuple[str | None, int]]:
        """``{task_id: (state, try_number)}`` of the run's DAG ``dag_id``."""
        return task_states(self.engine, dag_id, self.run_id)

    def finished(self) -> bool:
        """Whether each of the three DAGs' runs has ended."""
        return all(run_state(self.engine, dag_id, self.run_id) in ("success", "failed") for dag_id in DAGS)

    def ledger_settled(self) -> bool:
        """Whether the ledger recorded the end of every job of the demo's queue (the cycle after the tasks
        ended)."""
        return ledger_settled(self.engine, job_queue_name=QUEUE)


def wait_until(what: str, probe: Callable[[], bool], timeout: float, diagnosis: Callable[[], str]) -> None:
    """Poll ``probe`` every second until it holds; fail saying what never happened, with ``diagnosis()``."""
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s:\n{diagnosis()}"
        time.sleep(1)


@dataclass
class LedgerSampler:
    """Samples the demo's job queue in the ledger every half second: units held, and device indices held by
    more than one job."""

    engine: sa.Engine
    held: list[int] = field(default_factory=list)
    shared_devices: list[list[int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> LedgerSampler:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)

    def __enter__(self) -> LedgerSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            with self.engine.connect() as connection:
                rows = connection.execute(
                    sa.text(
                        "SELECT held_instance_count, held_devices FROM quota_job"
                        " WHERE held_instance_count > 0 AND job_queue_name = :queue"
                    ),
                    {"queue": QUEUE},
                ).all()
            self.held.append(sum(count for count, _ in rows))
            devices: Counter[int] = Counter()
            for _, held in rows:
                devices.update(json.loads(held) if isinstance(held, str) else held or [])
            self.shared_devices.append(sorted(index for index, times in devices.items() if times > 1))


def a_bad_quota_file_changes_nothing(
    run: DemoRun, apply: Callable[[Path], subprocess.CompletedProcess[str]]
) -> None:
    """``airflow quota apply`` (``apply``) of the demo's quota file with a negative capacity: refused, naming
    the field, and the applied configuration is as it was."""
    before = run.applied()
    bad = run.home / "bad-quotas.yaml"
    bad.write_text(QUOTAS.read_text().replace("maxCapacity: 2}", "maxCapacity: -2}"))
    refused = apply(bad)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "maxCapacity" in refused.stderr + refused.stdout
    assert run.applied() == before


def the_finished_story_holds(run: DemoRun, sampler: LedgerSampler) -> None:
    """Every check of the story, once the three DAG runs ended and the ledger recorded it."""
    for dag_id in DAGS:
        states = run.task_states(dag_id)
        assert set(states.values()) == {("success", 1)}, (dag_id, states)
    assert sampler.held and max(sampler.held) <= CAPACITY
    assert not any(sampler.shared_devices), "a device index was held by two jobs at once"

    events = run.audit()
    preempted = [(e["job_id"], e["related_job_id"], e["rule"]) for e in events if e["kind"] == "PREEMPTED"]
    assert sorted(preempted) == sorted((victim, run.pretrain, "RECLAIM") for victim in run.victims)
    for victim in run.victims:
        kinds = [e["kind"] for e in events if e["job_id"] == victim]
        assert kinds == ["SUBMITTED", "GRANTED", "PREEMPTED", "REQUEUED", "GRANTED", "SUCCEEDED"], kinds

    # The REST API tells the same story as the ledger.
    jobs = {
        job["jobId"]: job for job in run.api(f"/jobs?jobQueueName={QUEUE}&finished=true&limit=100")["jobs"]
    }
    for victim in run.victims:
        assert jobs[victim]["status"] == "SUCCEEDED"
        assert jobs[victim]["preemptionSummary"]["preemptedAttemptCount"] == 1
    assert jobs[run.pretrain]["status"] == "SUCCEEDED"

    # Its GPU timeline tells it too: each victim's bar runs, stops for pretrain (RECLAIM), then resumes; each
    # grant on the rows of the GPUs it got (as its GRANTED audit row says).
    (unit,) = run.api(f"/jobQueues/{QUEUE}/timeline?window=all")["units"]
    assert unit["devices"] is True and unit["rows"] == CAPACITY
    assert unit["bars"] and all(bar["row"] == bar["device"] for bar in unit["bars"]), unit["bars"]
    for victim in run.victims:
        phases = sorted(
            {
                (bar["startedAt"], bar["phase"], bar["preemptedBy"])
                for bar in unit["bars"]
                if bar["jobId"] == victim
            }
        )
        assert [step[1:] for step in phases] == [
            ("RUNNING", None),
            ("STOPPING", run.pretrain),
            ("RUNNING", None),
        ]
    # And the page draws it so, in Chromium.
    if (CHROMIUM and CHROMEDRIVER) or os.environ.get("CI") == "true":
        the_page_shows_the_reclaim(run)

    # What-if on real history: the run exported as a trace (airflow quota history) and replayed by the
    # simulator with the demo's quota file gives the same grants in the same order and the same preemptions.
    # (Within one allocation cycle the order may differ: the allocator met the four first jobs in one cycle,
    # the simulator one by one, a few milliseconds apart, as they were submitted.)
    grants, replayed_preemptions = replayed_history(run)
    real_cycles = [
        sorted(e["job_id"] for e in granted)
        for _, granted in itertools.groupby((e for e in events if e["kind"] == "GRANTED"), lambda e: e["at"])
    ]
    replayed_cycles = []
    for cycle in real_cycles:
        replayed_cycles.append(sorted(grants[: len(cycle)]))
        grants = grants[len(cycle) :]
    assert (replayed_cycles, grants) == (real_cycles, [])
    assert sorted(replayed_preemptions) == sorted(preempted)

    # Resumed from their checkpoints: the results equal uninterrupted runs.
    steps = load_script("demo/dags/demo_teams.py").trial_steps(run.reclaim_after)
    for trial in ("trial_a", "trial_b", "trial_c"):
        [result] = (run.home / "quota-training").glob(
            f"demo_nlp_sweep/{run.run_id}/{trial}/*/*/model/result.json"
        )
        assert json.loads(result.read_text()) == {"steps": steps, "value": uninterrupted_value(steps)}


def uninterrupted_value(steps: int) -> int:
    module = load_script("examples/training/train_counter.py")
    step, value = module.load_checkpoint(REPO / "no-checkpoint-here")  # where a fresh training starts
    assert step == 0
    for step in range(1, steps + 1):
        value = module.next_value(value, step)
    return value


def replayed_history(run: DemoRun) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The run exported as ``airflow quota history`` does and replayed by the simulator, with the demo's
    quota file and the real stops' median: its grants in order, and its preemptions (victim, preemptor,
    rule), as the ledger's job ids."""
    with Session(run.engine) as session:
        trace = export_history(session, since=datetime(2000, 1, 1, tzinfo=UTC), job_queue_name=QUEUE)
    path = run.home / "history.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        write_trace(trace.jobs, handle)
    settings = Settings(stop_seconds=statistics.median(trace.stop_seconds))
    replay = run_trace(path, QUOTAS, settings=settings).runs[0].result
    grants = [trace.job_ids[hold.job_name] for hold in replay.holds]
    preemptions = [
        (trace.job_ids[hold.job_name], trace.job_ids[hold.preempted_by], str(hold.rule))
        for hold in replay.holds
        if hold.preempted_by is not None
    ]
    return grants, preemptions


def the_page_shows_the_reclaim(run: DemoRun) -> None:
    """The GPU Quotas page's timeline of the last 15 minutes: each victim's bars run, stop for pretrain (the
    stop phase linked to it), then resume; and a victim's own "Quota" tab in its task instance page."""
    with chromium() as driver:
        log_in(driver, run.base_url, "/quota/", *run.login)
        console_errors(driver)
        pick_window(driver, "15m")
        drawn = wait_for(
            driver,
            lambda d: [item for item in drawn_timeline(d, QUEUE) if item["kind"] == "bar"] or None,
            "the demo's timeline",
        )
        for victim in run.victims:
            phases = sorted(
                {
                    (item["start"], item["phase"], item["preemptedBy"])
                    for item in drawn
                    if item["jobId"] == victim
                }
            )
            assert [step[1:] for step in phases] == [
                ("RUNNING", None),
                ("STOPPING", run.pretrain),
                ("RUNNING", None),
            ]
        # Each bar is on the row of the GPU its job trained on.
        bars = [item for item in drawn if item["kind"] == "bar"]
        assert all(item["laneName"] == f"GPU {item['device']}" for item in bars), bars
        driver.save_screenshot(str(ARTIFACTS / "gpu-quotas-demo-timeline.png"))
        assert console_errors(driver) == []
        # A victim's own "Quota" tab in Airflow's task instance page (the React task view) tells its story as
        # the REST API's audit log does: a row per decision, at its time, its waits beside them.
        victim = run.victims[0]
        dag_id, run_id, task_id = victim.split("/")[:3]
        driver.get(f"{run.base_url}/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/plugin/quota")
        rows = wait_for(driver, lambda d: d.execute_script(STORY) or None, "the task instance's story")
        events = sorted(run.api(f"/events?jobId={victim}&limit=100")["events"], key=lambda e: e["id"])
        assert [e["kind"] for e in events] == [
            "SUBMITTED",
            "GRANTED",
            "PREEMPTED",
            "REQUEUED",
            "GRANTED",
            "SUCCEEDED",
        ]
        job = run.api(f"/jobs/{victim}")
        expected = []
        for event in events:
            at = day_clock(event["at"])
            if event["kind"] == "SUBMITTED":  # it waits from its submission (its record's, when older)
                submitted = min(map(datetime.fromisoformat, (job["submittedAt"], event["at"])))
                expected.append((day_clock(submitted.isoformat()), "WAITING"))
                continue
            expected.append((at, event["kind"]))
            if event["kind"] == "REQUEUED":
                expected.append((at, "WAITING"))  # and from its requeue
        assert [(row["at"], row["kind"]) for row in rows] == expected, (rows, events, job["submittedAt"])
        preemptor = run.api(f"/jobs/{run.pretrain}")["displayName"]
        granted = [row["details"] for row in rows if row["kind"] == "GRANTED"]
        assert all(
            line.startswith(f"Granted {job['instanceCount']} {job['capacityUnit']}") for line in granted
        )
        assert "resumed from its checkpoint" in granted[1], granted
        (preempted,) = [row["details"] for row in rows if row["kind"] == "PREEMPTED"]
        assert preempted.startswith(f"Preempted by {preemptor} (RECLAIM): "), preempted
        title = driver.find_element(By.CSS_SELECTOR, "[data-quota-page=task] #title").text
        assert title == f"Quota: {task_id}"
        driver.save_screenshot(str(ARTIFACTS / "gpu-quotas-demo-task-instance.png"))
        assert console_errors(driver) == []


#: The task view's story rows, read in one script run (the view refreshes itself every 5 s).
STORY = """
const rows = document.querySelectorAll("[data-quota-page=task] table.story tr[data-kind]");
return [...rows].map((row) => {
  const cells = [...row.querySelectorAll(":scope > td")].map((cell) => cell.innerText.trim());
  return {kind: row.dataset.kind, at: cells[0], details: cells[cells.length - 1]};
});
"""
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def day_clock(iso: str) -> str:
    """An API time as the page writes it: "Mar 1 14:03:07" (UTC)."""
    at = datetime.fromisoformat(iso).astimezone(UTC)
    return f"{MONTHS[at.month - 1]} {at.day} {at:%H:%M:%S}"
