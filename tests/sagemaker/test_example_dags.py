"""The example DAGs load (no AWS call at parse time) and ask for what their docstrings say."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_quota.operators.training import QuotaTrainingOperator

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXAMPLES = sorted(DAGS.glob("quota_*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_the_example_loads(path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    assert bag.dags
    for dag in bag.dags.values():
        quota_tasks = [task for task in dag.tasks if task.task_type == "QuotaTrainingOperator"]
        assert quota_tasks, f"{dag.dag_id} has no QuotaTrainingOperator"
        for task in quota_tasks:
            fields = getattr(task, "partial_kwargs", None) or vars(task)  # a mapped task keeps them apart
            assert fields["job_queue"] == "gpu-training"


def test_the_team_pipeline_trains_on_its_share() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "quota_team_training_pipeline.py"))
    train = bag.dags["quota_team_training_pipeline"].get_task("fine_tune")
    assert isinstance(train, QuotaTrainingOperator)
    assert (train.quota_share_name, train.scheduling_priority) == ("research", 100)
    assert train.training_job_config["ResourceConfig"]["InstanceCount"] == 2
