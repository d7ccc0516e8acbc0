"""The AWS Batch service job link reads its XCom only when the task pushed one.

Airflow's task runner fills every extra link as a task ends (``finalize``: ``get_link`` for each), through
the supervisor; asking the supervisor for an XCom that is not there makes it log "XCom not found" as an
error, which the demo showed for every task on a queue our allocator schedules (no service job there).
These tests stand in for the supervisor's channel (``task_runner.SUPERVISOR_COMMS``) and check what the
link asks for: a slice of the key's values first (answered with an empty list, logged by nobody), the value
itself only when the slice has one.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import (
    GetXCom,
    GetXComSequenceSlice,
    XComResult,
    XComSequenceSliceResult,
)

from airflow_quota.operators.batch_backend import SERVICE_JOB_XCOM_KEY
from airflow_quota.operators.links import BatchServiceJobLink

TI = SimpleNamespace(dag_id="demo_teams", run_id="demo-20261201-030000", task_id="train", map_index=-1)
JOB_ID = "8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"
PUSHED = {"job_id": JOB_ID, "job_arn": f"arn:aws:batch:eu-west-1:123456789012:service-job/{JOB_ID}"}


class Supervisor:
    """Answers the task's requests as the supervisor would, for an XCom the task pushed or not."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        self.value = value
        self.asked: list[str] = []

    def send(self, msg: Any) -> Any:
        self.asked.append(type(msg).__name__)
        assert msg.key == SERVICE_JOB_XCOM_KEY
        if isinstance(msg, GetXComSequenceSlice):
            return XComSequenceSliceResult(root=[] if self.value is None else [self.value])
        assert isinstance(msg, GetXCom)
        if self.value is None:
            raise AssertionError("asked for an XCom that is not there: the supervisor logs an error")
        return XComResult(key=msg.key, value=self.value)


@pytest.mark.parametrize("value", [None, PUSHED], ids=["allocator's queue", "AWS Batch's queue"])
def test_the_link_asks_for_the_service_job_only_when_the_task_pushed_it(
    value: dict[str, Any] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = Supervisor(value)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)

    link = BatchServiceJobLink().get_link(operator=None, ti_key=TI)  # type: ignore[arg-type]

    if value is None:
        assert (link, supervisor.asked) == ("", ["GetXComSequenceSlice"])
    else:
        assert link == f"https://console.aws.amazon.com/batch/home?region=eu-west-1#jobs/detail/{JOB_ID}"
        assert supervisor.asked == ["GetXComSequenceSlice", "GetXCom"]
