"""A local training reports its checkpoints (issue 37): while the process runs, the task records the newest
file's modification time under its checkpoint directory in its training job record (``last_checkpoint``), for
the allocator to copy to the ledger. Real processes (examples/training/train_counter.py through
tests/local/train_and_note.py), as in test_operator_local."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_quota.backends.local import newest_checkpoint
from airflow_quota.operators import local_backend
from airflow_quota.protocol import PREEMPT_KEY
from tests.local.test_operator_local import (
    checkpoint_step,
    in_thread,
    local_grant,
    preempt,
    request,
    task_run,
    wait_for,
)


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_backend, "SIGNAL_POLL_SECONDS", 0.05)
    monkeypatch.setattr(local_backend, "EARLIER_PROCESS_POLL_SECONDS", 0.02)
    monkeypatch.setattr(local_backend, "CHECKPOINT_POLL_SECONDS", 0.05)


def test_the_newest_checkpoint_is_the_newest_file_not_one_being_written(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    assert newest_checkpoint(directory) is None  # not there yet
    script = (
        "import os, sys, time\n"
        "d = sys.argv[1]\n"
        "os.makedirs(os.path.join(d, 'shard'), exist_ok=True)\n"
        "open(os.path.join(d, 'step-1.pt'), 'w').write('1')\n"
        "time.sleep(0.05)\n"
        "open(os.path.join(d, 'shard', 'step-2.pt'), 'w').write('2')\n"
        "time.sleep(0.05)\n"
        "open(os.path.join(d, '.step-3.pt.tmp'), 'w').write('3')\n"  # being written
        "open(os.path.join(d, 'step-3.pt.tmp'), 'w').write('3')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(directory)], check=True)

    assert newest_checkpoint(directory) == os.stat(directory / "shard" / "step-2.pt").st_mtime


def test_a_running_local_job_records_its_newest_checkpoint_for_the_allocator(tmp_path: Path) -> None:
    run = task_run(tmp_path, training_job_config=request(steps=200, step_seconds=0.05))
    waiting = run.execute()
    grant = local_grant(run, attempt=1, devices=[1])
    launched = time.time()
    thread, outcome = in_thread(lambda: run.resume(waiting, grant))
    wait_for(lambda: checkpoint_step(tmp_path / "runs") >= 3)

    first = wait_for(lambda: (run.record() or {}).get("last_checkpoint"))
    later = wait_for(lambda: (lambda at: at if at and at != first else None)(run.record()["last_checkpoint"]))
    [saved] = (tmp_path / "runs").glob("*/*/*/*/checkpoints/checkpoint.json")

    reported = [datetime.fromisoformat(at) for at in (first, later)]
    assert all(at.tzinfo is not None for at in reported)
    # (A report is the file's mtime to the microsecond: rounding may put it a hair past the float.)
    assert launched - 1 < reported[0].timestamp() < reported[1].timestamp() <= saved.stat().st_mtime + 1e-6
    record = run.record()
    assert (record["state"], record["lease_id"]) == ("launched", grant["lease_id"])

    run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))
    thread.join(30)
    [requeued] = outcome
    assert isinstance(requeued, TaskDeferred), requeued  # stopped and requeued, as any preempted job
