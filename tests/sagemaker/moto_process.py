"""moto's server with our SageMaker emulator (``moto_sagemaker``) as a subprocess on a free port.

Used by the tests' session fixture and by the benchmarks. The server's output is drained for as long as
it runs: left in an unread pipe, it fills the pipe's buffer and the server blocks on its next write,
which looks like SageMaker hanging (every call times out after botocore's 60 s).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def moto_server_process() -> Iterator[str]:
    """Start the emulator, yield its endpoint URL, stop it on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.sagemaker.moto_sagemaker", "--port", "0"],
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
