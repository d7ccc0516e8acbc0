"""Extra links of QuotaTrainingOperator: its training job in the SageMaker console, its share's page.

Airflow lists them on the task instance; they appear in the UI once the provider registers them
(``extra-links`` in ``get_provider_info``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.providers.common.compat.sdk import XCom
from airflow.sdk import BaseOperatorLink, conf

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: XCom key under which the operator keeps its current training job (name, region, partition).
TRAINING_JOB_XCOM_KEY = "quota_training_job"

_CONSOLE_DOMAINS = {"aws": "aws.amazon.com", "aws-cn": "amazonaws.cn", "aws-us-gov": "amazonaws-us-gov.com"}


class SageMakerTrainingJobLink(BaseOperatorLink):
    """The task's latest training job in the SageMaker console."""

    @property
    def name(self) -> str:
        return "SageMaker training job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        job: Any = XCom.get_value(ti_key=ti_key, key=TRAINING_JOB_XCOM_KEY)
        if not isinstance(job, dict) or not job.get("training_job_name"):
            return ""
        return training_job_console_url(
            str(job["training_job_name"]), str(job.get("region_name")), str(job.get("partition", "aws"))
        )


class QuotaShareLink(BaseOperatorLink):
    """The task's quota share on the quota page of this Airflow's UI."""

    @property
    def name(self) -> str:
        return "Quota share"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        job_queue = getattr(operator, "job_queue", None)
        share = getattr(operator, "quota_share_name", None)
        if not job_queue or not share:
            return ""
        return quota_share_url(str(job_queue), str(share))


def training_job_console_url(name: str, region: str, partition: str = "aws") -> str:
    domain = _CONSOLE_DOMAINS.get(partition, "aws.amazon.com")
    return f"https://console.{domain}/sagemaker/home?region={region}#/jobs/{quote(name)}"


def quota_share_url(job_queue: str, quota_share_name: str, base_url: str | None = None) -> str:
    """``/quota/shares/<job_queue>/<share>`` under the Airflow base URL (``[api] base_url``)."""
    base = (
        base_url if base_url is not None else conf.get("api", "base_url", fallback="http://localhost:8080/")
    )
    return (
        f"{str(base).rstrip('/')}/quota/shares/{quote(job_queue, safe='')}/{quote(quota_share_name, safe='')}"
    )
