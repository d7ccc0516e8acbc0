"""QuotaTrainingOperator with ``backend="local"``, its steps driven as the task runner drives them.

The training processes are real (``tests/local/train_and_note.py`` running examples/training/
train_counter.py); only the task instance and its ``task_state_store`` are stand-ins
(``tests/sagemaker/task_runtime``). The real scheduler, allocator and worker are test_end_to_end_local's.
"""

from __future__ import annotations

import json
import runpy
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_quota.backends.local import LocalTrainingJob, build_environment
from airflow_quota.backends.local_watchdog import living_group_members
from airflow_quota.backends.sagemaker import TaskIdentity
from airflow_quota.operators import local_backend
from airflow_quota.operators.local_job import task_directory
from airflow_quota.operators.training import QuotaTrainingOperator
from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY
from airflow_quota.triggers.admission import QuotaAdmissionTrigger
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun

HERE = Path(__file__).parent
ENTRY_POINT = [sys.executable, str(HERE / "train_and_note.py")]
TRAIN_COUNTER = HERE.parents[1] / "examples" / "training" / "train_counter.py"


def request(steps: int = 8, step_seconds: float = 0.05, **hyperparameters: str) -> dict[str, Any]:
    return {
        "ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": 1},
        "HyperParameters": {"steps": str(steps), "step_seconds": str(step_seconds), **hyperparameters},
    }


@pytest.fixture(autouse=True)
def _quick_signal_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker looks for the allocator's preemption signal (and its runtime limit) every 50 ms instead of
    every second, and for an earlier try's processes every 20 ms: the tests wait for what they check, not
    for a poll that production spaces out to spare the Execution API."""
    monkeypatch.setattr(local_backend, "SIGNAL_POLL_SECONDS", 0.05)
    monkeypatch.setattr(local_backend, "EARLIER_PROCESS_POLL_SECONDS", 0.02)


@pytest.fixture
def local_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where train_and_note.py notes each start (inherited by the job from the worker's environment)."""
    path = tmp_path / "starts.jsonl"
    monkeypatch.setenv("QUOTA_LOCAL_LOG", str(path))
    return path


def starts(local_log: Path) -> list[dict[str, Any]]:
    if not local_log.exists():
        return []
    entries = [json.loads(line) for line in local_log.read_text().splitlines() if line.strip()]
    return [entry for entry in entries if entry["event"] == "start"]


def task_run(tmp_path: Path, **kwargs: Any) -> TaskRun:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "job_queue": "gpu-training",
        "quota_share_name": "team-b",
        "backend": "local",
        "entry_point": ENTRY_POINT,
        "local_root_dir": str(tmp_path / "runs"),
        "training_job_config": request(),
        "stop_grace_period": 10,
        **kwargs,
    }
    operator = QuotaTrainingOperator(**arguments)
    return TaskRun(operator, TaskInstanceStandIn(dag_id="team_b_pipeline", run_id=f"manual__{tmp_path.name}"))


def local_grant(run: TaskRun, attempt: int = 1, devices: list[int] | None = None) -> dict[str, Any]:
    devices = [1] if devices is None else devices
    return run.grant(attempt) | {
        "capacityUnit": "local-gpu",
        "instanceCount": len(devices),
        "devices": devices,
    }


def preempt(run: TaskRun, lease_id: str) -> dict[str, Any]:
    return {
        "preempt": True,
        "lease_id": lease_id,
        "job_id": run.grant()["job_id"],
        "preempted_by": "team_a_pipeline/manual__2026-11-30/train/-1/1",
        "rule": "RECLAIM",
        "reason": "Preempted to give team-a its lent capacity back",
        "at": "2026-11-30T05:01:00+00:00",
    }


def uninterrupted_value(steps: int) -> int:
    next_value: Callable[[int, int], int] = runpy.run_path(str(TRAIN_COUNTER))["next_value"]
    value = 1
    for step in range(1, steps + 1):
        value = next_value(value, step)
    return value


def wait_for(condition: Callable[[], Any], seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {seconds} s")


def checkpoint_step(run_root: Path) -> int:
    checkpoints = list(run_root.glob("*/*/*/*/checkpoints/checkpoint.json"))
    if not checkpoints:
        return 0
    [checkpoint] = checkpoints
    try:
        return int(json.loads(checkpoint.read_text())["step"])
    except (ValueError, FileNotFoundError):
        return 0


def in_thread(action: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``action`` (a step that blocks while the process trains) in a thread; its result or exception."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(action())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


# --- validation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        pytest.param(
            {"entry_point": None},
            "entry_point: backend='local' needs the argv to run, e.g. [sys.executable, 'train.py']",
            id="local_needs_an_entry_point",
        ),
        pytest.param(
            {"backend": "sagemaker"},
            "entry_point, local_root_dir: only for backend='local'",
            id="local_arguments_only_for_local",
        ),
        pytest.param(
            {"entry_point": "train.py"},
            "entry_point: give the argv as a list, e.g. [sys.executable, 'train.py']",
            id="entry_point_is_an_argv_list",
        ),
        pytest.param(
            {"stop_grace_period": -1},
            "stop_grace_period: must be >= 0 seconds, got -1",
            id="grace_period_not_negative",
        ),
    ],
)
def test_a_bad_local_argument_fails_its_task_when_it_runs(
    tmp_path: Path, arguments: dict[str, Any], says: str
) -> None:
    run = task_run(tmp_path, **arguments)  # no exception: the DAG file still imports

    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)

    assert says in str(failure.value)


@pytest.mark.parametrize("count", [10**7, 2**63], ids=["ten_million", "two_to_the_63"])
def test_a_huge_instance_count_builds_nothing_and_fails_its_task(tmp_path: Path, count: int) -> None:
    huge = request() | {"ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": count}}
    tracemalloc.start()
    try:
        with DAG("team_b_pipeline", schedule=None):  # parsed as the dag-processor parses it
            run = task_run(tmp_path, training_job_config=huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 5_000_000  # bytes: a list of ten million device indices took 888 MB
    assert not run.operator.start_from_trigger
    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)
    assert f"instanceCount is {count}: it must be a whole number from 1 to 100000" in str(failure.value)


def test_a_bad_local_request_fails_before_waiting_with_every_problem(tmp_path: Path) -> None:
    bad = {
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "HyperParameters": {"steps": 8},
        "InputDataConfig": [
            {"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://bucket/train"}}},
            {"ChannelName": "eval", "DataSource": {"FileDataSource": {"FileUri": "file:///no/such/dir"}}},
        ],
        "Environment": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
    }
    run = task_run(tmp_path, training_job_config=bad, entry_point=[sys.executable, ""])

    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)

    message = str(failure.value)
    for expected in (
        "RoleArn: not used by the local backend",
        "'ml.g5.xlarge' is not a local capacity unit",
        "ResourceConfig.VolumeSizeInGB: not used",
        "HyperParameters.steps: values must be strings",
        "InputDataConfig[0].DataSource: the local backend reads local directories",
        "InputDataConfig[1].DataSource.FileDataSource.FileUri: /no/such/dir does not exist",
        "entry_point: the local backend needs the entry point's argv as a list of strings",
    ):
        assert expected in message
    fixed = task_run(
        tmp_path, training_job_config=request() | {"Environment": {"CUDA_VISIBLE_DEVICES": "0,1"}}
    )
    with pytest.raises(AirflowFailException, match="extra_env may not set CUDA_VISIBLE_DEVICES"):
        fixed.operator.execute(fixed.context)


def test_execute_waits_for_local_gpus(tmp_path: Path) -> None:
    run = task_run(
        tmp_path,
        training_job_config=request()
        | {"ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": "2"}},
    )

    deferred = run.execute()

    trigger = deferred.trigger
    assert isinstance(trigger, QuotaAdmissionTrigger)
    assert (trigger.capacity_unit, trigger.instance_count, trigger.attempt) == ("local-gpu", 2, 0)


@pytest.mark.parametrize(
    ("identity", "parts"),
    [
        pytest.param(
            TaskIdentity("team_b", "manual__2026-03-01", "train", -1, 1),
            ["team_b", "manual__2026-03-01", "train", "-1"],
            id="ids_as_they_are",
        ),
        pytest.param(
            TaskIdentity("team_b", "../x/y", ".", 3, 1), ["team_b", "..%2Fx%2Fy", "%2E", "3"], id="escaped"
        ),
    ],
)
def test_a_task_directory_is_its_ids_one_directory_each(identity: TaskIdentity, parts: list[str]) -> None:
    assert task_directory(Path("/runs"), identity) == Path("/runs", *parts)


def test_a_task_directory_of_the_longest_ids_fits_the_file_system(tmp_path: Path) -> None:
    run_id = "é" * 250  # Airflow allows 250 characters; 500 bytes in UTF-8
    directory = task_directory(tmp_path, TaskIdentity("d" * 250, run_id, "t/" * 125, -1, 1))

    directory.mkdir(parents=True)  # before: "File name too long" at the grant

    parts = directory.relative_to(tmp_path).parts
    assert all(len(part.encode()) <= 255 for part in parts)
    assert parts[0] == "d" * 250
    assert (
        parts[1].startswith("é" * 50)
        and parts[1]
        != task_directory(tmp_path, TaskIdentity("d" * 250, "é" * 249 + "e", "t/" * 125, -1, 1))
        .relative_to(tmp_path)
        .parts[1]
    )


# --- success, failure --------------------------------------------------------------------------------------


def test_a_granted_local_job_trains_on_its_devices_and_returns_its_result(
    tmp_path: Path, local_log: Path
) -> None:
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    config = request(steps=6) | {
        "ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": 2},
        "InputDataConfig": [
            {"ChannelName": "train", "DataSource": {"FileDataSource": {"FileUri": f"file://{data}"}}}
        ],
    }
    run = task_run(tmp_path, training_job_config=config)
    waiting = run.execute()

    result = run.resume(waiting, local_grant(run, devices=[1, 3]))

    [start] = starts(local_log)
    name = result["training_job_name"]
    assert name.endswith("-t1-a1") and start["job"] == name
    assert start["devices"] == "1,3"  # the granted indices, nothing else
    assert start["channels"] == {"train": str(data)}
    task_dir = tmp_path / "runs" / "team_b_pipeline" / run.ti.run_id / "train" / "-1"
    assert start["checkpoint_dir"] == str(task_dir / "checkpoints")
    assert result == {
        "training_job_name": name,
        "model_dir": str(task_dir / name / "model"),
        "output_data_dir": str(task_dir / name / "output"),
        "attempts": 1,
        "preemptions": 0,
    }
    saved = json.loads((task_dir / name / "model" / "result.json").read_text())
    assert saved == {"steps": 6, "value": uninterrupted_value(6)}
    assert run.record() == {
        "backend": "local",
        "name": name,
        "attempt": 1,
        "lease_id": local_grant(run)["lease_id"],
        "state": "ended",
        "grace_period": 10.0,  # the allocator keeps an orphan's GPUs this long after its task died
    }


def test_a_failing_entry_point_fails_the_task_with_the_tail_of_its_output(tmp_path: Path) -> None:
    run = task_run(tmp_path, training_job_config=request() | {"HyperParameters": {"steps": "many"}})
    waiting = run.execute()

    with pytest.raises(AirflowException) as failure:
        run.resume(waiting, local_grant(run))

    assert not isinstance(failure.value, AirflowFailException)  # the task's retries apply
    message = str(failure.value)
    assert "exited with code 2" in message
    assert "bad hyperparameter: invalid literal for int() with base 10: 'many'" in message
    assert run.record()["state"] == "ended"
    # One line of how it ended, which the allocator adds to the job's reason when the try ends.
    assert run.record()["ended_as"].startswith("Failed: The training entry point exited with code 2 after ")


def test_a_job_past_its_runtime_limit_is_stopped_and_fails(tmp_path: Path) -> None:
    config = request(steps=200, step_seconds=0.1) | {"StoppingCondition": {"MaxRuntimeInSeconds": 1}}
    run = task_run(tmp_path, training_job_config=config)
    waiting = run.execute()

    with pytest.raises(AirflowException, match="ran past its runtime limit"):
        run.resume(waiting, local_grant(run))


# --- preemption and resume ----------------------------------------------------------------------------------


def test_a_preempted_job_checkpoints_requeues_in_place_and_resumes_on_a_new_grant(
    tmp_path: Path, local_log: Path
) -> None:
    steps = 60
    run = task_run(tmp_path, training_job_config=request(steps=steps, step_seconds=0.05))
    waiting = run.execute()
    first_grant = local_grant(run, attempt=1, devices=[1])
    thread, outcome = in_thread(lambda: run.resume(waiting, first_grant))
    wait_for(lambda: checkpoint_step(tmp_path / "runs") >= 5)

    run.store.set(PREEMPT_KEY, preempt(run, first_grant["lease_id"]))  # the allocator's store signal
    thread.join(30)

    [requeued] = outcome
    assert isinstance(requeued, TaskDeferred), requeued
    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert requeued.method_name == "on_grant"
    assert requeued.trigger.attempt == 1
    assert requeued.trigger.released_lease_id == first_grant["lease_id"]
    assert requeued.trigger.submitted_at == waiting.kwargs["submitted_at"]  # type: ignore[index]
    assert run.store.get(PREEMPT_KEY) is None
    [first_start] = starts(local_log)
    assert living_group_members(first_start["pid"]) == []  # the GPUs are free: the whole group is gone
    assert run.record() == {
        "backend": "local",
        "name": first_start["job"],
        "attempt": 1,
        "lease_id": first_grant["lease_id"],
        "state": "ended",
        "grace_period": 10.0,  # the allocator keeps an orphan's GPUs this long after its task died
    }
    stopped_at = checkpoint_step(tmp_path / "runs")
    assert 5 <= stopped_at < steps

    # Granted again, on another device: attempt 2 resumes at the checkpoint step and ends as if never stopped
    # (its steps take no time: a step's length changes no value, and nothing here waits on attempt 2).
    run.operator.training_job_config = request(steps=steps, step_seconds=0)
    result = run.resume(requeued, local_grant(run, attempt=2, devices=[0]))

    second_start = starts(local_log)[1]
    assert second_start["job"] == first_start["job"].removesuffix("-a1") + "-a2"
    assert (second_start["devices"], second_start["resumed_from"]) == ("0", stopped_at)
    assert second_start["checkpoint_dir"] == first_start["checkpoint_dir"]
    assert (result["training_job_name"], result["attempts"], result["preemptions"]) == (
        second_start["job"],
        2,
        1,
    )
    saved = json.loads((Path(result["model_dir"]) / "result.json").read_text())
    assert saved == {"steps": steps, "value": uninterrupted_value(steps)}


def test_a_preemption_signalled_before_launch_starts_no_process(tmp_path: Path, local_log: Path) -> None:
    run = task_run(tmp_path)
    waiting = run.execute()
    grant = local_grant(run)
    run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))

    requeued = run.resume_deferred(waiting, grant)

    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert (requeued.trigger.attempt, requeued.trigger.released_lease_id) == (1, grant["lease_id"])
    assert starts(local_log) == []
    assert run.store.get(TRAINING_JOB_KEY) is None


def test_a_preemption_of_another_lease_is_ignored(tmp_path: Path, local_log: Path) -> None:
    run = task_run(tmp_path)
    waiting = run.execute()
    run.store.set(PREEMPT_KEY, preempt(run, "an-old-lease#1"))

    result = run.resume(waiting, local_grant(run, attempt=2))

    assert (result["attempts"], result["preemptions"]) == (2, 0)
    assert len(starts(local_log)) == 1


# --- retries and kills --------------------------------------------------------------------------------------


def test_a_retry_granted_as_a_reattach_launches_a_new_attempt_from_the_checkpoint(
    tmp_path: Path, local_log: Path
) -> None:
    run = task_run(tmp_path, training_job_config=request(steps=40, step_seconds=0.05))
    waiting = run.execute()
    thread, outcome = in_thread(lambda: run.resume(waiting, local_grant(run)))
    wait_for(lambda: checkpoint_step(tmp_path / "runs") >= 3)
    run.operator.on_kill()  # the first try's worker dies: its process group goes with it
    thread.join(30)
    assert isinstance(outcome[0], AirflowException)
    run.store.set(TRAINING_JOB_KEY, run.record() | {"state": "launched"})  # died before it noted the end
    stopped_at = checkpoint_step(tmp_path / "runs")

    retry = run.retry()
    retry.operator._training_backend = None  # a new worker process
    retry.operator.training_job_config = request(steps=40, step_seconds=0)  # the rest, at once
    result = retry.resume(retry.execute(), local_grant(retry, devices=[2]) | {"reattach": True})

    first, second = starts(local_log)
    assert first["job"].endswith("-t1-a1") and second["job"].endswith("-t2-a1")
    assert (second["devices"], second["resumed_from"]) == ("2", stopped_at)
    assert result["training_job_name"] == second["job"]
    assert json.loads((Path(result["model_dir"]) / "result.json").read_text())[
        "value"
    ] == uninterrupted_value(40)


def test_a_retry_waits_until_the_training_of_the_dead_try_is_gone(
    tmp_path: Path, local_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = 80
    # The retry's own attempt trains at once; the orphan (below) takes 0.05 s a step.
    run = task_run(tmp_path, training_job_config=request(steps=steps, step_seconds=0))
    run.execute()
    retry = run.retry()
    waiting = retry.execute()
    # The first try's worker died while its training ran; the training is still saving its checkpoint
    # (its watchdog SIGTERMed it): a process with the first try's environment, alone in its session.
    grant = local_grant(run)
    name = f"{_task_key(run)}-t1-a1"
    task_dir = tmp_path / "runs" / "team_b_pipeline" / run.ti.run_id / "train" / "-1"
    earlier = LocalTrainingJob(
        name=name,
        command=ENTRY_POINT,
        devices=[1],
        checkpoint_dir=task_dir / "checkpoints",
        model_dir=task_dir / name / "model",
        output_data_dir=task_dir / name / "output",
        hyperparameters=request(steps=steps, step_seconds=0.05)["HyperParameters"],
    )
    orphan = subprocess.Popen(ENTRY_POINT, env=build_environment(earlier), start_new_session=True)
    wait_for(lambda: checkpoint_step(tmp_path / "runs") >= 4)
    run.store.set(
        TRAINING_JOB_KEY,
        {"backend": "local", "name": name, "attempt": 1, "lease_id": grant["lease_id"], "state": "launched"},
    )
    # What the watchdog does, once the retry has found the orphan still there and looked again: it waits.
    looked = local_backend.processes_of_job
    seen: list[list[int]] = []

    def watchdog_stops_the_orphan_once_waited_for(job_name: str) -> list[int]:
        found = looked(job_name)
        if job_name == name and found:
            seen.append(found)
            if len(seen) == 2:
                orphan.send_signal(signal.SIGTERM)
        return found

    monkeypatch.setattr(local_backend, "processes_of_job", watchdog_stops_the_orphan_once_waited_for)

    result = retry.resume(waiting, local_grant(retry, devices=[1]) | {"reattach": True})

    assert len(seen) >= 2 and seen[0] == [orphan.pid]  # the retry found the orphan and waited for it
    assert orphan.wait(5) == 143
    entries = [json.loads(line) for line in local_log.read_text().splitlines()]
    orphan_exit = next(entry for entry in entries if entry["event"] == "exit" and entry["job"] == name)
    new_start = next(entry for entry in entries if entry["event"] == "start" and entry["job"] != name)
    assert new_start["job"] == f"{_task_key(run)}-t2-a1"
    assert new_start["t"] >= orphan_exit["t"]  # never two trainings on the device and checkpoint
    assert new_start["resumed_from"] == orphan_exit["step"] > 3
    assert result["training_job_name"] == new_start["job"]
    assert json.loads((Path(result["model_dir"]) / "result.json").read_text())[
        "value"
    ] == uninterrupted_value(steps)


def _task_key(run: TaskRun) -> str:
    ti = run.ti
    return TaskIdentity(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, 1).task_key


def test_on_kill_kills_the_whole_process_group(tmp_path: Path, local_log: Path) -> None:
    # The entry point ignores SIGTERM: on_kill SIGKILLs the group after the grace period.
    config = request(steps=1000, step_seconds=0.05, ignore_sigterm="true")
    run = task_run(tmp_path, training_job_config=config, stop_grace_period=0.5)
    waiting = run.execute()
    thread, outcome = in_thread(lambda: run.resume(waiting, local_grant(run)))
    [start] = wait_for(lambda: starts(local_log))
    wait_for(lambda: checkpoint_step(tmp_path / "runs") >= 1)  # its SIGTERM handler is installed

    began = time.monotonic()
    run.operator.on_kill()
    stopped_after = time.monotonic() - began
    thread.join(30)

    assert living_group_members(start["pid"]) == []
    assert 0.5 <= stopped_after < 5
    [failure] = outcome
    assert isinstance(failure, AirflowException)
    assert "killed by SIGKILL" in str(failure)
    assert "SIGTERM received and ignored" in str(failure)
    assert "killed by SIGKILL" in run.record()["ended_as"]
