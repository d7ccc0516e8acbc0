"""A SageMaker SDK ModelTrainer as the job description: built on the worker by a factory, then scheduled.

The SDK talks to AWS when a ModelTrainer is built (a session, a default bucket, a role check), so the
test points it at the moto server (``AWS_ENDPOINT_URL``), skips the IAM role check and opts out of the
SDK's telemetry: nothing leaves the machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_quota.protocol import PREEMPT_KEY
from airflow_quota.triggers.admission import QuotaAdmissionTrigger
from tests.sagemaker.conftest import ROLE_ARN
from tests.sagemaker.moto_fixture import MotoServer
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun, monitor_event

pytestmark = pytest.mark.airflow  # the slow tier (tests/conftest.py): the SDK takes seconds to import


@pytest.fixture
def offline_sdk(moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sagemaker-config.yaml"
    config.write_text(
        "SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n"
        # where a source_code upload goes (the SDK would name one after the account, asking STS)
        "      Session:\n        DefaultS3Bucket: team-a-code\n"
    )
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(config))
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")


def build_trainer(
    trainer_class: Any = None,
    *,
    base_job_name: str = "llm",
    source_dir: Path | None = None,
    duration_s: float = 0.3,
) -> Any:
    """What a DAG author writes: the ModelTrainer (or a subclass of theirs), built when the task runs."""
    from sagemaker.core.training.configs import Compute, OutputDataConfig, SourceCode, StoppingCondition
    from sagemaker.train import ModelTrainer

    source_code = SourceCode(source_dir=str(source_dir), entry_script="train.py") if source_dir else None
    return (trainer_class or ModelTrainer)(
        training_image="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
        role=ROLE_ARN,
        base_job_name=base_job_name,
        compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=2),
        output_data_config=OutputDataConfig(s3_output_path="s3://team-a-models/llm"),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=3600),
        hyperparameters={"emulator.duration_s": str(duration_s), "emulator.stop_delay_s": "0.3"},
        **({"source_code": source_code} if source_code else {}),
    )


def quota_operator(factory: Any) -> Any:
    from airflow_quota.operators.training import QuotaTrainingOperator

    return QuotaTrainingOperator(
        task_id="train",
        job_queue="gpu-training",
        quota_share_name="team-a",
        training_job_config=factory,
        poll_interval=0.1,
        settle_seconds=0,
        follow_seconds=0,
    )


def test_a_model_trainer_factory_is_compiled_on_the_worker(offline_sdk: None, unique: str) -> None:
    from airflow_quota.operators.training import QuotaTrainingOperator
    from airflow_quota.triggers.admission import QuotaAdmissionTrigger

    calls: list[str] = []

    def factory() -> Any:
        calls.append("built")
        return build_trainer()

    operator = QuotaTrainingOperator(
        task_id="train",
        job_queue="gpu-training",
        quota_share_name="team-a",
        training_job_config=factory,
        poll_interval=0.1,
        settle_seconds=0,
        follow_seconds=0,
    )
    assert calls == []  # nothing is built at DAG parse time
    run = TaskRun(operator, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))

    waiting = run.execute()
    assert isinstance(waiting.trigger, QuotaAdmissionTrigger)
    assert (waiting.trigger.capacity_unit, waiting.trigger.instance_count) == ("ml.p4d.24xlarge", 2)

    monitoring = run.resume_deferred(waiting, run.grant(attempt=1))
    name = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    assert name.endswith("-t1-a1")  # ours, not the SDK's timestamped name
    result = run.resume(monitoring, monitor_event(monitoring))
    assert result["training_job_name"] == name
    assert calls == ["built"]  # before waiting; the launch reads back what it gave


def test_a_subclass_of_model_trainer_is_a_model_trainer(offline_sdk: None, unique: str) -> None:
    from sagemaker.train import ModelTrainer

    class TeamTrainer(ModelTrainer):  # type: ignore[misc]
        """A team's own defaults on top of the SDK's trainer."""

    run = TaskRun(
        quota_operator(lambda: build_trainer(TeamTrainer)),
        TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"),
    )
    waiting = run.execute()
    assert (waiting.trigger.capacity_unit, waiting.trigger.instance_count) == ("ml.p4d.24xlarge", 2)  # type: ignore[attr-defined]


def source_uploads(moto_server: MotoServer, base_job_name: str) -> set[str]:
    """The uploads of trainers called ``base_job_name``: the SDK puts each compilation's code and drivers
    under its own ``<base_job_name>/<base_job_name>-<timestamp>/`` prefix."""
    s3 = moto_server.client("s3")
    return {
        "/".join(item["Key"].split("/")[:2])
        for bucket in s3.list_buckets()["Buckets"]
        for item in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
        if item["Key"].startswith(f"{base_job_name}/")
    }


def test_a_model_trainer_is_compiled_once_per_try_whatever_its_preemptions(
    offline_sdk: None, moto_server: MotoServer, unique: str, tmp_path: Path
) -> None:
    source_dir = tmp_path / "src"
    source_dir.mkdir()
    (source_dir / "train.py").write_text("print('training')\n")
    base_job_name = f"llm-{unique}"
    calls: list[int] = []

    def factory(context: Any) -> Any:
        calls.append(context["ti"].try_number)
        return build_trainer(
            base_job_name=base_job_name, source_dir=source_dir, duration_s=60 if len(calls) == 1 else 0.3
        )

    run = TaskRun(
        quota_operator(factory), TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}")
    )
    waiting = run.execute()
    first_grant = run.grant(attempt=1)
    first = run.resume_deferred(waiting, first_grant)
    preemption = {"preempt": True, "lease_id": first_grant["lease_id"], "job_id": first_grant["job_id"]}
    run.store.set(PREEMPT_KEY, preemption)  # the allocator writes both channels
    requeued = run.resume_deferred(first, preemption)
    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    second = run.resume_deferred(requeued, run.grant(attempt=2))

    assert calls == [1]  # validated, launched twice, preempted once: built and compiled once
    uploads = source_uploads(moto_server, base_job_name)
    assert len(uploads) == 1, uploads
    describe = moto_server.client().describe_training_job
    jobs = [describe(TrainingJobName=deferred.trigger.training_job_name) for deferred in (first, second)]  # type: ignore[attr-defined]
    assert [job["TrainingJobName"][-3:] for job in jobs] == ["-a1", "-a2"]
    assert jobs[0]["InputDataConfig"] == jobs[1]["InputDataConfig"]  # both train the one upload

    retry = run.retry()
    retry.execute()
    assert calls == [1, 2]  # a new try builds its own (a fixed factory takes effect)


def test_without_the_sagemaker_extra_a_model_trainer_fails_its_task_naming_the_extra(
    unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fault: a worker without the SageMaker SDK (hidden from the import system; the dev install has it).
    for name in [name for name in sys.modules if name.partition(".")[0] == "sagemaker"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "sagemaker", None)

    run = TaskRun(
        quota_operator(build_trainer), TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}")
    )
    with pytest.raises(AirflowFailException) as failure:
        run.execute()
    assert "training_job_config: a ModelTrainer needs the SageMaker SDK" in str(failure.value)
    assert "pip install 'airflow-quota[sagemaker]'" in str(failure.value)


def test_the_package_imports_none_of_the_sdk_until_a_model_trainer_is_used() -> None:
    # What lets the base install leave the SDK out: every module of the package loads without it.
    script = (
        "import importlib, pkgutil, sys, airflow_quota\n"
        "for module in pkgutil.walk_packages(airflow_quota.__path__, 'airflow_quota.'):\n"
        "    if '.migrations.' not in module.name and not module.name.endswith('__main__'):\n"
        "        importlib.import_module(module.name)\n"
        "print(sorted(name for name in sys.modules if name.partition('.')[0] == 'sagemaker'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
