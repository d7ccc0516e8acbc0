"""moto's server with our SageMaker and AWS Batch emulators (``moto_sagemaker``, ``aws_batch.moto_batch``) as
a subprocess on a free port, and the environment that points AWS clients (boto3, the amazon provider's
default connection) at it.

Used by the benchmarks, and by the tests as one server that all the processes of a test run share
(``shared_moto_server``: starting one costs 2.5 CPU-s, and each pytest-xdist worker started up to two).
The server's output is drained for as long as it runs (``moto_server_process``) or written to a file
(the shared one): left in an unread pipe, it fills the pipe's buffer and the server blocks on its next
write, which looks like SageMaker hanging (every call times out after botocore's 60 s).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGION = "us-east-1"

#: Dummy credentials and no AWS configuration files: no client these set up can reach AWS.
OFFLINE_AWS_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def emulator_connection(endpoint_url: str) -> dict[str, str]:
    """Airflow's default AWS connection and boto3's endpoint, both pointing at the emulator."""
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": REGION, "endpoint_url": endpoint_url},
    }
    return {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(connection), "AWS_ENDPOINT_URL": endpoint_url}


@contextlib.contextmanager
def moto_server_process() -> Iterator[str]:
    """Start the emulator, yield its endpoint URL, stop it on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.aws_batch.moto_batch", "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    try:
        first_line = process.stdout.readline()
        if not first_line.startswith("PORT "):
            process.kill()
            raise RuntimeError(f"moto server did not start: {first_line}{process.stdout.read()}")
        last_lines: deque[str] = deque(maxlen=200)  # kept for a post-mortem, the rest dropped
        threading.Thread(target=last_lines.extend, args=(process.stdout,), daemon=True).start()
        yield f"http://127.0.0.1:{int(first_line.split()[1])}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shared_moto_server(folder: Path, owner_pid: int) -> str:
    """The endpoint URL of the server every process of one test run shares, started by the first that asks.

    ``folder`` is the run's own (the process that runs the session makes it, and its pytest-xdist workers
    inherit it); a file lock there makes one process start the server while the others wait, and the
    server is detached, its output in ``folder/server.log``, so that it outlives the worker that started
    it. It exits by itself once ``owner_pid`` (the session's process) is gone; ``stop_shared_moto_server``
    stops it at the session's end. Tests keep apart on it as on any server: by names of their own.
    """
    with (folder / "moto.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        url = folder / "moto.url"
        if url.exists():
            return url.read_text()
        log_path = folder / "server.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "tests.aws_batch.moto_batch"),
                    *("--port", "0", "--exit-with", str(owner_pid)),
                ],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (folder / "moto.pid").write_text(f"{process.pid} {time.time()}")
        deadline = time.monotonic() + 60
        while not (first_line := log_path.read_text()).endswith("\n") or not first_line.startswith("PORT "):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"moto server did not start: {log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        url.write_text(f"http://127.0.0.1:{int(first_line.split()[1])}")
        return url.read_text()


def stop_shared_moto_server(folder: Path) -> tuple[float, float, float] | None:
    """Stop the run's shared server if one was started; return when it started, when it stopped and the
    CPU seconds it used (nobody waits for the detached server, so no one else counts them)."""
    pid_file = folder / "moto.pid"
    if not pid_file.exists():
        return None
    pid_text, started = pid_file.read_text().split()
    pid = int(pid_text)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, IndexError, ValueError):
        cpu = 0.0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if _reaped(pid):
                break
            os.kill(pid, 0)  # raises once it is gone (a worker started it: init reaps it)
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    return float(started), time.time(), cpu


def _reaped(pid: int) -> bool:
    """Whether ``pid``, if this process started it (a run without workers), has ended and is reaped now."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not this process's child, or reaped already
        return False
