"""The suite's one ``moto_server`` fixture: moto's server with our SageMaker emulator, per test session, and
Airflow's ``aws_default`` connection pointing at it.

Registered for the whole suite (``pytest_plugins`` in tests/conftest.py) instead of imported by the
modules that use it: each module that imported the fixture got a fixture of its own, so a worker could run
two or three such servers, and the last one started held the connection. A test asking for one server then
called another (tests/sagemaker/test_backend.py after tests/db/test_allocator_sagemaker_checkpoints.py on
one worker: "Could not find training job").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.sagemaker.moto_process import REGION, SAGEMAKER_ONLY, emulator_connection, moto_server_process


@dataclass(frozen=True)
class MotoServer:
    """moto's server with our SageMaker emulator, and a plain boto3 client to look at it."""

    endpoint_url: str

    def client(self, service: str = "sagemaker") -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint_url, region_name=REGION)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with moto_server_process(SAGEMAKER_ONLY) as endpoint_url, pytest.MonkeyPatch.context() as patch:
        for name, value in emulator_connection(endpoint_url).items():
            patch.setenv(name, value)
        yield MotoServer(endpoint_url)
