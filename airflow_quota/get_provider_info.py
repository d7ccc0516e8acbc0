"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

``config`` declares the ``[quota]`` settings the allocator reads (Airflow's provider-config format): Airflow
takes their defaults from here, so ``airflow config list --section quota`` and ``airflow config get-value
quota <key>`` show them, and the code reads them with no fallback of its own. docs/allocator.md's settings
table is checked against it (tests/unit/test_provider_info.py). Free of Airflow imports.
"""

from typing import Any

#: The ``[quota]`` section: every setting, its default (a string, as in airflow.cfg) and what it means.
QUOTA_CONFIG: dict[str, Any] = {
    "description": "The GPU quota allocator (airflow-quota): how often it runs and how long it waits.",
    "options": {
        "allocation_interval": {
            "description": (
                "Seconds between allocation cycle starts. A host starts a cycle at most once per interval, "
                "and after a cycle that took longer than the interval waits as long as it took.\n"
            ),
            "version_added": "0.1.0",
            "type": "float",
            "example": "1",
            "default": "0.25",
        },
        "settle_time": {
            "description": (
                "Seconds a task that deferred from a worker run waits before the allocator resumes it "
                "(Airflow 3.3 can fail a task resumed sooner: apache/airflow#71580).\n"
            ),
            "version_added": "0.1.0",
            "type": "float",
            "example": "20",
            "default": "10",
        },
        "stop_deadline": {
            "description": (
                "Seconds a job told to stop has to report it stopped before its task instance is cleared.\n"
            ),
            "version_added": "0.1.0",
            "type": "float",
            "example": "1200",
            "default": "600",
        },
        "orphan_timeout": {
            "description": (
                "Seconds after which the capacity of a SageMaker training job left running by a task that "
                "ended is released, even if the job is not confirmed stopped.\n"
            ),
            "version_added": "0.1.0",
            "type": "float",
            "example": "1800",
            "default": "900",
        },
        "max_new_requests": {
            "description": (
                "Most requests new to the ledger one cycle records per job queue, the earliest submitted "
                "first; the others wait deferred for the next cycles, so a burst of requests is admitted in "
                "bounded batches and no cycle holds the database for long. 0: no bound.\n"
            ),
            "version_added": "0.3.0",
            "type": "integer",
            "example": "5000",
            "default": "1000",
        },
        "checkpoint_listing_interval": {
            "description": (
                "Seconds between two listings, by the allocator's host, of a running SageMaker training "
                "job's checkpoint prefix (CheckpointConfig.S3Uri): its newest object is the job's last "
                "checkpoint, what a preemption's lost work counts from. 0: never listed.\n"
            ),
            "version_added": "0.3.0",
            "type": "float",
            "example": "300",
            "default": "60",
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-quota",
        "name": "airflow-quota",
        "description": (
            "AWS Batch-style GPU quota management: quota shares, lending, borrowing and preemption."
        ),
        "versions": ["0.3.0", "0.2.0", "0.1.0"],
        "integrations": [
            {
                "integration-name": "AWS Batch service jobs (airflow-quota)",
                "external-doc-url": "https://docs.aws.amazon.com/batch/latest/userguide/service-jobs.html",
                "tags": ["aws"],
            }
        ],
        "hooks": [
            {
                "integration-name": "AWS Batch service jobs (airflow-quota)",
                "python-modules": ["airflow_quota.hooks.batch_service_job"],
            }
        ],
        "triggers": [
            {
                "integration-name": "AWS Batch service jobs (airflow-quota)",
                "python-modules": ["airflow_quota.triggers.batch_service_job"],
            }
        ],
        "cli": ["airflow_quota.cli.definition.get_quota_cli_commands"],
        "db-managers": ["airflow_quota.ledger.db.QuotaDBManager"],
        "extra-links": [
            "airflow_quota.operators.links.SageMakerTrainingJobLink",
            "airflow_quota.operators.links.BatchServiceJobLink",
            "airflow_quota.operators.links.QuotaShareLink",
        ],
        "plugins": [{"name": "airflow_quota", "plugin-class": "airflow_quota.api.plugin.QuotaPlugin"}],
        "config": {"quota": QUOTA_CONFIG},
    }
