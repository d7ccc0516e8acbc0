"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-quota",
        "name": "airflow-quota",
        "description": (
            "AWS Batch-style GPU quota management: quota shares, lending, borrowing and preemption."
        ),
        "versions": ["0.3.0", "0.2.0", "0.1.0"],
        "cli": ["airflow_quota.cli.definition.get_quota_cli_commands"],
        "db-managers": ["airflow_quota.ledger.db.QuotaDBManager"],
        "extra-links": [
            "airflow_quota.operators.links.SageMakerTrainingJobLink",
            "airflow_quota.operators.links.QuotaShareLink",
        ],
        "plugins": [{"name": "airflow_quota", "plugin-class": "airflow_quota.api.plugin.QuotaPlugin"}],
    }
