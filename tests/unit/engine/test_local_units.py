"""The host's GPUs are one set of device indices: a quota file names at most one ``local-*`` unit, in one
job queue. Every layout is one table row; its id states the rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from airflow_quota.engine.config import QuotaConfigError, parse_quota_config


def queue(name: str, *units: str) -> dict[str, Any]:
    """A job queue with 2 of each unit, all of them its one share's."""
    limits = [{"capacityUnit": unit, "maxCapacity": 2} for unit in units]
    return {
        "jobQueueName": name,
        "capacityLimits": limits,
        "quotaShares": [
            {
                "quotaShareName": "team",
                "capacityLimits": limits,
                "resourceSharingConfiguration": {"strategy": "RESERVE"},
            }
        ],
    }


@dataclass(frozen=True)
class Layout:
    rule: str
    queues: list[dict[str, Any]]
    #: ``path: message fragment`` of each problem, in order; empty when the file is valid.
    problems: list[str]


LAYOUTS = [
    Layout("one local unit in one job queue is the host's GPUs", [queue("ws", "local-gpu")], []),
    Layout(
        "a local unit beside instance types, in its queue or others, is fine",
        [queue("ws", "local-gpu", "ml.p4d.24xlarge"), queue("cloud", "ml.p4d.24xlarge", "gpu")],
        [],
    ),
    Layout(
        "units that are not local may be named by every job queue", [queue("a", "gpu"), queue("b", "gpu")], []
    ),
    Layout(
        "a second job queue naming the same local unit would hand out the same indices",
        [queue("a", "local-gpu"), queue("b", "local-gpu")],
        [
            "jobQueues[1].capacityLimits[0].capacityUnit: local-gpu is a second local unit "
            "(the first: local-gpu at jobQueues[0].capacityLimits[0])"
        ],
    ),
    Layout(
        "two local units of other names in two job queues collide on one host",
        [queue("a", "local-a100"), queue("b", "gpu", "local-t4")],
        ["jobQueues[1].capacityLimits[1].capacityUnit: local-t4 is a second local unit"],
    ),
    Layout(
        "two local units in one job queue collide",
        [queue("a", "local-a100", "local-t4")],
        ["jobQueues[0].capacityLimits[1].capacityUnit: local-t4 is a second local unit"],
    ),
    Layout(
        "every local unit after the first is named",
        [queue("a", "local-gpu"), queue("b", "local-gpu"), queue("c", "local-gpu")],
        ["jobQueues[1].capacityLimits[0].capacityUnit", "jobQueues[2].capacityLimits[0].capacityUnit"],
    ),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.rule for layout in LAYOUTS])
def test_a_quota_file_gives_the_hosts_gpus_to_one_local_unit(layout: Layout) -> None:
    raw = {"jobQueues": layout.queues}
    if not layout.problems:
        parse_quota_config(raw, "quotas.yaml")
        return
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(raw, "quotas.yaml")
    issues = [str(issue) for issue in raised.value.issues]
    assert len(issues) == len(layout.problems)
    for issue, problem in zip(issues, layout.problems, strict=True):
        assert problem in issue
        assert "split the GPUs between teams with quota shares of that job queue" in issue
