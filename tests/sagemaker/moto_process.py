"""moto's server with our SageMaker and AWS Batch emulators (``moto_sagemaker``, ``aws_batch.moto_batch``), or
SageMaker's alone, as a subprocess on a free port, and the environment that points AWS clients (boto3, the
amazon provider's default connection) at it.

Used by the tests' session fixture and by the benchmarks. The server's output is drained for as long as
it runs: left in an unread pipe, it fills the pipe's buffer and the server blocks on its next write,
which looks like SageMaker hanging (every call times out after botocore's 60 s).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

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


#: The tag whose AddTags ends an emulated training job's training now (``moto_sagemaker``; tests call
#: ``tests.sagemaker.conftest.finish_training``).
FINISH_TAG = "emulator:finish"


@contextlib.contextmanager
def cheaper_aws_clients() -> Iterator[None]:
    """While inside, a new AWS client in this process costs little more than a request.

    Each hook of the amazon provider, and so each task run, builds a new boto3 session and client. Each
    session loads botocore's data files again (the endpoints, the service's model: about 0.2 CPU-s a
    client here), and the hook finds its caller for the user agent (``Caller/<operator>``) with
    ``inspect.stack()``, which reads the source of every frame of the stack: a test's stack is pytest's,
    dozens of frames deep. Here the sessions share one botocore data loader (read-only data, as the
    clients of one session already share it) and the caller is "Unknown", what the hook says itself when
    it cannot tell. No test checks the user agent; every call still goes through a new session and client
    as before. The sagemaker and aws_batch tests went from 54 to 29 CPU-s (moto's server included).
    Only the tests use this: the benchmarks pay what a worker pays.
    """
    import botocore.loaders
    import botocore.session
    from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook

    shared_loader = functools.lru_cache(botocore.loaders.create_loader)

    def unknown_caller(self: AwsGenericHook, target_function_name: str = "execute") -> str:
        return "Unknown"

    with (
        mock.patch.object(botocore.session, "create_loader", shared_loader),
        mock.patch.object(AwsGenericHook, "_get_caller", unknown_caller),
    ):
        yield


def emulator_connection(endpoint_url: str) -> dict[str, str]:
    """Airflow's default AWS connection and boto3's endpoint, both pointing at the emulator."""
    connection = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": REGION, "endpoint_url": endpoint_url},
    }
    return {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(connection), "AWS_ENDPOINT_URL": endpoint_url}


#: The server with both emulators, and with SageMaker's alone (a third of the CPU to start: moto's AWS Batch
#: imports its EC2, 1.5 CPU-s; the SageMaker tests call no AWS Batch API).
BOTH_EMULATORS = "tests.aws_batch.moto_batch"
SAGEMAKER_ONLY = "tests.sagemaker.moto_sagemaker"


@contextlib.contextmanager
def moto_server_process(module: str = BOTH_EMULATORS) -> Iterator[str]:
    """Start the emulator (``python -m module``), yield its endpoint URL, stop it on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0"],
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
