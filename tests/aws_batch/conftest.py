"""One moto server (with our AWS Batch and SageMaker emulators) per test session, and Batch clients whose
every answer is checked against botocore's output shape for its operation. tests/ui's SQLite api-server starts
with ``aws_default`` on that same server (``batch_emulator``).

The server runs in a subprocess (``tests.sagemaker.moto_process``) on 127.0.0.1 and a free port; dummy
credentials and ``AWS_ENDPOINT_URL`` (set for each test) make sure nothing here can reach AWS. Each test
builds its own design (job queue names carry the test's ``unique`` suffix) from a quota file, through
``export_design``'s request bodies.
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_quota.aws_batch.export import export_design
from airflow_quota.engine.config import parse_quota_config
from tests.aws_batch.output_shapes import answer_problems
from tests.once_a_session import once_a_session
from tests.sagemaker.conftest import _cheaper_aws_clients, training_request
from tests.sagemaker.moto_process import (
    OFFLINE_AWS_ENVIRONMENT,
    REGION,
    emulator_connection,
    moto_server_process,
)

ACCOUNT_ID = "123456789012"
UNIT = "ml.g5.xlarge"

os.environ.update(OFFLINE_AWS_ENVIRONMENT)
__all__ = ["_cheaper_aws_clients"]  # the autouse fixture this area borrows from tests/sagemaker


#: This worker's moto server with our AWS Batch emulator: its endpoint URL (``batch_emulator``).
_BATCH_EMULATOR = pytest.StashKey[str]()


def batch_emulator(session: pytest.Session) -> str:
    """The endpoint URL of this worker's one moto server with our AWS Batch (and SageMaker) emulator,
    started by the first that asks, stopped at the session's end. tests/aws_batch's tests ask
    (``endpoint_url``), and so does tests/ui's SQLite api-server, which starts with ``aws_default`` on it
    (``tests.ui.conftest``; tests/aws_batch/test_rest_on_aws_queues.py asks that server about the job queues
    it makes here): a session fixture of this conftest cannot be asked for from tests/ui, and one of
    tests/ui's own would have been a second server."""
    return once_a_session(session, _BATCH_EMULATOR, moto_server_process)


@pytest.fixture(scope="session")
def endpoint_url(request: pytest.FixtureRequest) -> str:
    return batch_emulator(request.session)


@pytest.fixture(autouse=True)
def aws_default_connection(endpoint_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's ``aws_default`` connection (the provider's hooks) points at this session's server for the
    test's length only: a worker that also runs tests/sagemaker keeps its own server's connection there."""
    for name, value in emulator_connection(endpoint_url).items():
        monkeypatch.setenv(name, value)


@dataclass
class AnswerLog:
    """Every Batch answer a test's clients parsed, by operation, and what departed from its shape."""

    checked: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def check(self, operation: str, response_dict: dict[str, Any]) -> None:
        if response_dict["status_code"] >= 300:
            return
        body = response_dict["body"]
        answer = json.loads(body) if body else {}
        self.checked[operation] = self.checked.get(operation, 0) + 1
        self.problems += answer_problems(operation, answer)


@pytest.fixture
def answers() -> Iterator[AnswerLog]:
    log = AnswerLog()
    yield log
    assert not log.problems, "answers outside botocore's output shapes:\n" + "\n".join(log.problems)


def checked(client: Any, answers: AnswerLog) -> Any:
    """``client`` (a boto3 Batch client) with each of its answers going through ``answers``."""

    def check(operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
        answers.check(operation_model.name, response_dict)

    client.meta.events.register("before-parse.batch.*", check)
    return client


@pytest.fixture
def batch(endpoint_url: str, answers: AnswerLog) -> Any:
    """A boto3 Batch client against the emulator; each answer goes through ``answers``."""
    import boto3

    return checked(boto3.client("batch", endpoint_url=endpoint_url, region_name=REGION), answers)


def emulator_behaviour(
    endpoint_url: str, prefix: str, *, region: str = REGION, account_id: str = ACCOUNT_ID, **behaviour: Any
) -> None:
    """Make the emulator's resources whose name (a quota share: its job queue's) starts with ``prefix``
    behave as AWS may, from their next Create or Update on: ``invisibleSeconds`` (left out of answers after
    their Create), ``creatingSeconds``, ``updatingSeconds``, ``invalidReason`` (INVALID once created),
    ``refuse`` ({operation: message}), ``kinds`` (the kinds the timeline applies to, e.g. ``["quotaShares"]``;
    left out, all); no keyword: as at once again (``batch_resources.Behaviour``)."""
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    body = {"accountId": account_id, "region": region, "prefix": prefix, "behaviour": behaviour}
    url = f"{endpoint_url}/v1/emulatorsettings"
    signed = AWSRequest("POST", url, data=json.dumps(body), headers={"Content-Type": "application/json"})
    # Signed as AWS Batch's requests are: moto's server tells the service from the signature.
    SigV4Auth(botocore.session.get_session().get_credentials(), "batch", region).add_auth(signed)
    request = urllib.request.Request(url, data=signed.body, headers=dict(signed.headers), method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


@pytest.fixture
def sagemaker(endpoint_url: str) -> Any:
    import boto3

    return boto3.client("sagemaker", endpoint_url=endpoint_url, region_name=REGION)


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:8]


def share(
    name: str, strategy: str, max_capacity: int, *, borrow_limit: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A CreateQuotaShare body without ``jobQueue`` (a quota share of our quota file)."""
    sharing: dict[str, Any] = {"strategy": strategy}
    if borrow_limit is not None:
        sharing["borrowLimit"] = borrow_limit
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": max_capacity}],
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {"inSharePreemption": extra.pop("inSharePreemption", "DISABLED")},
        **extra,
    }


def quota_file(queue_name: str, capacity: int, *shares: dict[str, Any]) -> dict[str, Any]:
    return {
        "jobQueues": [
            {
                "jobQueueName": queue_name,
                "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": capacity}],
                "quotaShares": list(shares),
            }
        ]
    }


def create_design(batch: Any, document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Create in the emulator every resource ``airflow quota export --format aws`` prints for ``document``."""
    bundle = export_design(parse_quota_config(document, "test"), region=REGION, account_id=ACCOUNT_ID)
    for body in bundle["serviceEnvironments"]:
        batch.create_service_environment(**body)
    for body in bundle["schedulingPolicies"]:
        batch.create_scheduling_policy(**body)
    for body in bundle["jobQueues"]:
        batch.create_job_queue(**body)
    for body in bundle["quotaShares"]:
        batch.create_quota_share(**body)
    return bundle


def submit(
    batch: Any,
    queue_name: str,
    job_name: str,
    share_name: str,
    count: int,
    *,
    duration_s: str = "30",
    training_job_name: str | None = None,
    **extra: Any,
) -> str:
    """SubmitServiceJob of a training job on ``count`` instances that trains ``duration_s`` (per attempt,
    as ``emulator.duration_s`` reads it); returns the job id. SageMaker's names are per account, so the
    training job's name is ``job_name`` and a random suffix unless given."""
    payload = training_request(instance_type=UNIT, instance_count=count, stop_delay_s=0.3)
    payload["HyperParameters"]["emulator.duration_s"] = duration_s
    payload["TrainingJobName"] = training_job_name or f"{job_name}-{uuid.uuid4().hex[:8]}"
    payload["CheckpointConfig"] = {"S3Uri": f"s3://team-a-models/llm/checkpoints/{job_name}/"}
    answer = batch.submit_service_job(
        jobName=job_name,
        jobQueue=queue_name,
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=json.dumps(payload),
        quotaShareName=share_name,
        **extra,
    )
    return str(answer["jobId"])
