"""A preempted local training that ignores SIGTERM is gone before the allocator releases its devices.

Real processes: a task stand-in starts the training with the local backend (and so its real watchdog),
is preempted and starts stopping it (SIGTERM, waiting the grace period), and is SIGKILLed mid-stop, as a
worker dies. The training ignores SIGTERM, so it runs on until the watchdog SIGKILLs it, a whole grace
period after the task died, not after the decision. The allocator may release the devices only at
``local_devices_free_at`` counted from when it can first see the try over, which is no earlier than the
task's death: the training must be gone by then.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow_quota.allocator.orphans import local_devices_free_at
from airflow_quota.backends.local_watchdog import group_alive

ROOT = Path(__file__).resolve().parents[2]
GRACE = 1.0

STUBBORN_TRAINING = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))
    print("training", flush=True)
    while True:
        time.sleep(0.05)
"""

#: The task: starts the training, and when told "preempted" on stdin, stops it as a preempted task does.
TASK = """
    import os, sys
    from pathlib import Path
    from airflow_quota.backends.local import LocalTrainingJob, LocalTrainingRun
    tmp = Path(sys.argv[1])
    job = LocalTrainingJob(
        name="victim-a1", command=[sys.executable, str(tmp / "train.py")], devices=[0],
        checkpoint_dir=tmp / "checkpoints", model_dir=tmp / "model", output_data_dir=tmp / "output",
        grace_period=float(sys.argv[2]),
    )
    run = LocalTrainingRun.start(job, lambda line: os.write(1, (line + "\\n").encode()))
    os.write(1, f"training pid {run.pid}\\n".encode())
    sys.stdin.readline()
    os.write(1, b"stopping\\n")
    run.stop()
"""


def test_a_training_ignoring_sigterm_is_gone_before_the_allocator_releases_its_devices(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(STUBBORN_TRAINING))
    task = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(TASK), str(tmp_path), str(GRACE)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert task.stdin is not None and task.stdout is not None
    training = None
    # A test that goes wrong must not hang on a read: the task is killed after a minute, ending its output.
    deadline = threading.Timer(60, task.kill)
    deadline.start()
    try:
        lines = iter(task.stdout)
        # The training's first line and the task's "training pid" line come in either order.
        started = list(itertools.islice(lines, 2))
        pid_lines = [line for line in started if line.startswith("training pid")]
        assert len(pid_lines) == 1 and "training\n" in started, started
        training = int(pid_lines[0].split()[-1])
        decided = datetime.now(UTC)
        task.stdin.write("preempted\n")
        task.stdin.flush()
        assert next(lines).strip() == "stopping"
        assert next(lines).strip() == "SIGTERM ignored"
        time.sleep(GRACE / 2)  # the task waits out its grace period ...
        task.kill()  # ... and dies (its worker is lost) before it ends
        task.wait()
        died = datetime.now(UTC)

        while group_alive(training):
            assert datetime.now(UTC) - died < timedelta(seconds=30), "the training outlived its task"
            time.sleep(0.01)
        gone = datetime.now(UTC)
        rest = task.stdout.read()
    finally:
        deadline.cancel()
        task.kill()
        task.wait()
        if training is not None and group_alive(training):
            os.killpg(training, signal.SIGKILL)

    assert f"outlived its {GRACE:g} s grace period: SIGKILLed" in rest, rest
    # The training ran a whole grace period past the task's death: a count from the decision is too early.
    assert gone - died >= timedelta(seconds=GRACE * 0.9)
    assert gone > decided + timedelta(seconds=GRACE)
    # The allocator sees the try over no earlier than the task's death; it releases the devices after.
    assert gone < local_devices_free_at(died, GRACE)
