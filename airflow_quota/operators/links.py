"""Extra links of QuotaTrainingOperator: its training job in the SageMaker console, its share's page.

Airflow lists them on the task instance; they appear in the UI once the provider registers them
(``extra-links`` in ``get_provider_info``). The console link is the amazon provider's ``BaseAwsLink``
(its partition-to-domain map, its XCom read, its formatting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink
from airflow.sdk import BaseOperatorLink, conf

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

    from airflow_quota.operators.backend import ConsoleLink

#: XCom key under which the operator keeps its current training job (name, region, console domain).
TRAINING_JOB_XCOM_KEY = "quota_training_job"


class SageMakerTrainingJobLink(BaseAwsLink):
    """The task's latest training job in the SageMaker console."""

    name = "SageMaker training job"
    key = TRAINING_JOB_XCOM_KEY
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/jobs/{training_job_name}"

    @classmethod
    def xcom_value(cls, link: ConsoleLink | None) -> dict[str, Any]:
        """What the operator pushes under ``key``: ``persist``'s document (empty for no link).

        Pushed by the operator itself rather than through ``persist``, which skips the push when the task's
        ``do_xcom_push`` is off: the link shows whether or not the task pushes its return value.
        """
        if link is None:
            return {}
        return {
            "region_name": link.region_name,
            "aws_domain": cls.get_aws_domain(link.partition),
            "training_job_name": link.training_job_name,
        }

    def format_link(self, **kwargs: Any) -> str:
        if "aws_domain" not in kwargs and "partition" in kwargs:  # pushed by airflow-quota 0.3.0 or older
            kwargs["aws_domain"] = self.get_aws_domain(kwargs["partition"])
        return str(super().format_link(**kwargs))


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


def quota_share_url(job_queue: str, quota_share_name: str, base_url: str | None = None) -> str:
    """``/quota/shares/<job_queue>/<share>`` under the Airflow base URL (``[api] base_url``)."""
    base = (
        base_url if base_url is not None else conf.get("api", "base_url", fallback="http://localhost:8080/")
    )
    return (
        f"{str(base).rstrip('/')}/quota/shares/{quote(job_queue, safe='')}/{quote(quota_share_name, safe='')}"
    )
