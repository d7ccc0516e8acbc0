"""Quota-file and job-request validation: every rule one table row, its id the rule, its path exact."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_quota.config_file import load_quota_file, read_mapping_file
from airflow_quota.engine.config import (
    MAX_BORROW_LIMIT,
    MAX_CAPACITY,
    MAX_INTEGER,
    MAX_NAME_LENGTH,
    MAX_UNIT_LENGTH,
    ConfigIssue,
    JobRequestError,
    QuotaConfigError,
    aws_batch_warnings,
    parse_queue_with_shares,
    parse_quota_config,
    scheduling_priority_from_text,
    validate_job_request,
    validate_job_submission,
    validate_scheduling_priority,
)
from airflow_quota.engine.messages import show_value
from airflow_quota.engine.model import (
    MAX_PRIORITY,
    JobQueue,
    JobRequest,
    QuotaShare,
    ShareState,
    SharingStrategy,
)

EXAMPLE_FILE = Path(__file__).parents[2] / "examples" / "quotas.yaml"
P4D = "ml.p4d.24xlarge"
G5 = "ml.g5.12xlarge"


def valid_file() -> dict[str, Any]:
    """A valid quota file: one queue, shares 0 RESERVE, 1 LEND, 2 LEND_AND_BORROW (borrowLimit 200)."""
    return {
        "jobQueues": [
            {
                "jobQueueName": "gpu-training",
                "capacityLimits": [
                    {"capacityUnit": P4D, "maxCapacity": 8},
                    {"capacityUnit": G5, "maxCapacity": 12},
                ],
                "quotaShares": [
                    {
                        "quotaShareName": "prod",
                        "capacityLimits": [{"capacityUnit": P4D, "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "RESERVE"},
                        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
                        "state": "ENABLED",
                    },
                    {
                        "quotaShareName": "eval",
                        "capacityLimits": [
                            {"capacityUnit": P4D, "maxCapacity": 2},
                            {"capacityUnit": G5, "maxCapacity": 8},
                        ],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                    {
                        "quotaShareName": "research",
                        "capacityLimits": [
                            {"capacityUnit": P4D, "maxCapacity": 4},
                            {"capacityUnit": G5, "maxCapacity": 4},
                        ],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                ],
            }
        ]
    }


#: Marks a key to remove in ``edited``.
DELETE = object()


@dataclass(frozen=True)
class Append:
    """Marks an item to append to the list at a path in ``edited``."""

    item: Any


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(path)]


def edited(document: Any, changes: dict[str, Any]) -> Any:
    """A copy of ``document`` with each ``path: value`` set, a ``DELETE`` key removed, an ``Append`` added."""
    document = copy.deepcopy(document)
    for path, value in changes.items():
        *parents, last = _steps(path)
        container = document
        for step in parents:
            container = container[step]
        if value is DELETE:
            del container[last]
        elif isinstance(value, Append):
            container[last].append(copy.deepcopy(value.item))
        else:
            container[last] = value
    return document


def issues_of(raw: object) -> list[tuple[str, str]]:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(raw, "quotas.yaml")
    return [(issue.path, issue.message) for issue in raised.value.issues]


# --- one invalid change, one error, at an exact path ---------------------------------------------------


@dataclass(frozen=True)
class Refused:
    rule: str
    changes: dict[str, Any]
    path: str
    says: str  # a fragment of the message


SHARE0 = "jobQueues[0].quotaShares[0]"
SHARE1 = "jobQueues[0].quotaShares[1]"
SHARE2 = "jobQueues[0].quotaShares[2]"
SHARING2 = f"{SHARE2}.resourceSharingConfiguration"
QUEUE_COPY = Append(valid_file()["jobQueues"][0])

REFUSED = [
    Refused(
        "queue_name_letters_digits_dash_underscore_only",
        {"jobQueues[0].jobQueueName": "gpu training"},
        "jobQueues[0].jobQueueName",
        "'gpu training': it must be a name of 1 to 128 letters",
    ),
    Refused(
        "share_name_at_most_128_characters",
        {f"{SHARE0}.quotaShareName": "a" * 129},
        f"{SHARE0}.quotaShareName",
        "1 to 128 letters, digits, '-' or '_'",
    ),
    Refused(
        "share_name_not_empty",
        {f"{SHARE0}.quotaShareName": ""},
        f"{SHARE0}.quotaShareName",
        "an empty string",
    ),
    Refused(
        "share_name_is_a_string",
        {f"{SHARE0}.quotaShareName": 7},
        f"{SHARE0}.quotaShareName",
        "quotaShareName is 7",
    ),
    Refused(
        "share_name_required",
        {f"{SHARE0}.quotaShareName": DELETE},
        f"{SHARE0}.quotaShareName",
        "quotaShareName is missing: add quotaShareName",
    ),
    Refused(
        "queue_needs_a_capacity_limit",
        {"jobQueues[0].capacityLimits": []},
        "jobQueues[0].capacityLimits",
        "an empty list: it must be a list of {capacityUnit, maxCapacity}",
    ),
    Refused(
        "share_needs_a_capacity_limit",
        {f"{SHARE1}.capacityLimits": []},
        f"{SHARE1}.capacityLimits",
        "(at least one)",
    ),
    Refused(
        "share_capacity_limits_required",
        {f"{SHARE1}.capacityLimits": DELETE},
        f"{SHARE1}.capacityLimits",
        "capacityLimits is missing",
    ),
    Refused(
        "capacity_limit_is_a_mapping",
        {f"{SHARE1}.capacityLimits[0]": "ml.p4d.24xlarge"},
        f"{SHARE1}.capacityLimits[0]",
        "a mapping with the keys capacityUnit, maxCapacity",
    ),
    Refused(
        "capacity_unit_not_empty",
        {f"{SHARE1}.capacityLimits[0].capacityUnit": ""},
        f"{SHARE1}.capacityLimits[0].capacityUnit",
        "an instance type",
    ),
    Refused(
        "max_capacity_not_negative",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": -1},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "maxCapacity is -1: it must be a whole number from 0 to 100000",
    ),
    Refused(
        "max_capacity_at_most_100000",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": 100_001},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "maxCapacity is 100001: it must be a whole number from 0 to 100000",
    ),
    Refused(
        "queue_max_capacity_of_a_billion_refused",
        {"jobQueues[0].capacityLimits[0].maxCapacity": 1_000_000_000},
        "jobQueues[0].capacityLimits[0].maxCapacity",
        "maxCapacity is 1000000000: it must be a whole number from 0 to 100000",
    ),
    Refused(
        "capacity_unit_at_most_256_characters",
        {f"{SHARE1}.capacityLimits[0].capacityUnit": "u" * 257},
        f"{SHARE1}.capacityLimits[0].capacityUnit",
        "capacityUnit is 'uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu...' (257 characters): it must be an "
        "instance type such as ml.p4d.24xlarge (1 to 256 letters, digits, '.', '-', '_', ':', '/' or '+')",
    ),
    Refused(
        "capacity_unit_without_spaces_or_control_characters",
        {f"{SHARE1}.capacityLimits[0].capacityUnit": "ml.p4d\x00"},
        f"{SHARE1}.capacityLimits[0].capacityUnit",
        "capacityUnit is 'ml.p4d\\x00': it must be an instance type",
    ),
    Refused(
        "max_capacity_not_a_bool",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": True},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "maxCapacity is true",
    ),
    Refused(
        "max_capacity_not_a_float",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": 1.5},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "maxCapacity is 1.5",
    ),
    Refused(
        "max_capacity_not_a_whole_float",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": 2.0},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "a whole number",
    ),
    Refused(
        "max_capacity_not_a_string",
        {f"{SHARE1}.capacityLimits[0].maxCapacity": "2"},
        f"{SHARE1}.capacityLimits[0].maxCapacity",
        "maxCapacity is '2'",
    ),
    Refused(
        "share_units_must_be_queue_units",
        {f"{SHARE1}.capacityLimits[1].capacityUnit": "ml.p5.48xlarge"},
        f"{SHARE1}.capacityLimits[1].capacityUnit",
        "capacity unit ml.p5.48xlarge has no capacity limit in job queue gpu-training "
        "(its units: ml.p4d.24xlarge, ml.g5.12xlarge): add {capacityUnit: ml.p5.48xlarge, maxCapacity: N}",
    ),
    Refused(
        "shares_may_not_exceed_queue_capacity",
        {f"{SHARE0}.capacityLimits[0].maxCapacity": 3},
        "jobQueues[0].quotaShares",
        "the quota shares' maxCapacity for ml.p4d.24xlarge adds up to 9 (prod 3, eval 2, research 4), "
        "more than the job queue's capacity of 8 ml.p4d.24xlarge",
    ),
    Refused(
        "unit_listed_twice_in_share",
        {f"{SHARE1}.capacityLimits": Append({"capacityUnit": P4D, "maxCapacity": 0})},
        f"{SHARE1}.capacityLimits[2].capacityUnit",
        "capacity unit ml.p4d.24xlarge is already listed in capacityLimits[0]: list each capacity unit once",
    ),
    Refused(
        "unit_listed_twice_in_queue",
        {"jobQueues[0].capacityLimits": Append({"capacityUnit": G5, "maxCapacity": 1})},
        "jobQueues[0].capacityLimits[2].capacityUnit",
        "ml.g5.12xlarge is already listed in capacityLimits[1]",
    ),
    Refused(
        "share_names_unique_in_queue",
        {f"{SHARE2}.quotaShareName": "prod"},
        f"{SHARE2}.quotaShareName",
        "quota share name prod is already used by quotaShares[0]",
    ),
    Refused(
        "queue_names_unique",
        {"jobQueues": QUEUE_COPY},
        "jobQueues[1].jobQueueName",
        "job queue name gpu-training is already used by jobQueues[0]",
    ),
    Refused(
        "resource_sharing_configuration_required",
        {f"{SHARE0}.resourceSharingConfiguration": DELETE},
        f"{SHARE0}.resourceSharingConfiguration",
        "resourceSharingConfiguration is missing: add resourceSharingConfiguration, a mapping with the keys "
        "strategy, borrowLimit",
    ),
    Refused(
        "strategy_required",
        {f"{SHARE0}.resourceSharingConfiguration.strategy": DELETE},
        f"{SHARE0}.resourceSharingConfiguration.strategy",
        "strategy is missing",
    ),
    Refused(
        "strategy_one_of_reserve_lend_lend_and_borrow",
        {f"{SHARING2}.strategy": "BORROW"},
        f"{SHARING2}.strategy",
        "strategy is 'BORROW': it must be one of RESERVE, LEND, LEND_AND_BORROW",
    ),
    Refused(
        "strategy_is_upper_case",
        {f"{SHARING2}.strategy": "lend_and_borrow"},
        f"{SHARING2}.strategy",
        "one of RESERVE, LEND, LEND_AND_BORROW",
    ),
    Refused(
        "borrow_limit_only_with_lend_and_borrow",
        {f"{SHARE1}.resourceSharingConfiguration.borrowLimit": 50},
        f"{SHARE1}.resourceSharingConfiguration.borrowLimit",
        "borrowLimit is only allowed with strategy LEND_AND_BORROW (this share's strategy is LEND): "
        "remove borrowLimit or set strategy: LEND_AND_BORROW",
    ),
    Refused(
        "borrow_limit_not_with_reserve_even_unlimited",
        {f"{SHARE0}.resourceSharingConfiguration.borrowLimit": -1},
        f"{SHARE0}.resourceSharingConfiguration.borrowLimit",
        "(this share's strategy is RESERVE)",
    ),
    Refused(
        "borrow_limit_minus_one_or_more",
        {f"{SHARING2}.borrowLimit": -2},
        f"{SHARING2}.borrowLimit",
        "borrowLimit is -2: it must be a whole number from 0 to 10000000",
    ),
    Refused(
        "borrow_limit_fits_the_ledger_on_postgresql",
        {f"{SHARING2}.borrowLimit": 2_147_483_648},
        f"{SHARING2}.borrowLimit",
        "borrowLimit is 2147483648: it must be a whole number from 0 to 10000000",
    ),
    Refused(
        "borrow_limit_fits_the_ledger_on_sqlite",
        {f"{SHARING2}.borrowLimit": 10**20},
        f"{SHARING2}.borrowLimit",
        "borrowLimit is 100000000000000000000: it must be a whole number from 0 to 10000000",
    ),
    Refused(
        "borrow_limit_whole_number",
        {f"{SHARING2}.borrowLimit": 12.5},
        f"{SHARING2}.borrowLimit",
        "or -1 for no limit",
    ),
    Refused(
        "in_share_preemption_enabled_or_disabled",
        {f"{SHARE2}.preemptionConfiguration.inSharePreemption": True},
        f"{SHARE2}.preemptionConfiguration.inSharePreemption",
        "inSharePreemption is true: it must be ENABLED or DISABLED",
    ),
    Refused(
        "yaml_yes_for_enabled_explained",
        {f"{SHARE0}.state": True},
        f"{SHARE0}.state",
        "state is true: it must be ENABLED or DISABLED (YAML reads an unquoted yes, no, on or off as true",
    ),
    Refused(
        "state_enabled_or_disabled",
        {f"{SHARE0}.state": "ACTIVE"},
        f"{SHARE0}.state",
        "state is 'ACTIVE': it must be ENABLED or DISABLED",
    ),
    Refused(
        "unknown_share_key_lists_allowed_keys",
        {f"{SHARE0}.priority": 5},
        f"{SHARE0}.priority",
        "unknown key 'priority': remove it; the keys allowed here are quotaShareName, capacityLimits, "
        "resourceSharingConfiguration, preemptionConfiguration, state",
    ),
    Refused(
        "misspelled_key_suggests_the_right_one",
        {f"{SHARING2}.borowLimit": 100},
        f"{SHARING2}.borowLimit",
        "unknown key 'borowLimit' (did you mean borrowLimit?)",
    ),
    Refused("key_case_matters", {f"{SHARE0}.State": "ENABLED"}, f"{SHARE0}.State", "(did you mean state?)"),
    Refused("unknown_top_level_key", {"version": 1}, "version", "the keys allowed here are jobQueues"),
    Refused(
        "unknown_queue_key",
        {"jobQueues[0].computeEnvironmentOrder": []},
        "jobQueues[0].computeEnvironmentOrder",
        "the keys allowed here are jobQueueName, capacityLimits, quotaShares",
    ),
    Refused(
        "queue_needs_a_quota_share",
        {"jobQueues[0].quotaShares": []},
        "jobQueues[0].quotaShares",
        "quotaShares is an empty list",
    ),
    Refused(
        "file_needs_a_job_queue",
        {"jobQueues": []},
        "jobQueues",
        "jobQueues is an empty list: it must be a list of job queues",
    ),
    Refused(
        "share_is_a_mapping",
        {SHARE1: "eval"},
        SHARE1,
        "quotaShares[1] is 'eval': it must be a mapping with the keys quotaShareName",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case.rule for case in REFUSED])
def test_refused(case: Refused) -> None:
    issues = issues_of(edited(valid_file(), case.changes))

    assert [path for path, _ in issues] == [case.path]
    assert case.says in issues[0][1]


# --- accepted variations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    rule: str
    changes: dict[str, Any]
    share_index: int
    share: QuotaShare


ACCEPTED = [
    Accepted("reserve_share", {}, 0, QuotaShare("prod", {P4D: 2}, SharingStrategy.RESERVE, -1, False)),
    Accepted(
        "lend_share_with_in_share_preemption",
        {},
        1,
        QuotaShare("eval", {P4D: 2, G5: 8}, SharingStrategy.LEND, -1, True),
    ),
    Accepted(
        "lend_and_borrow_share_with_borrow_limit",
        {},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, 200, True),
    ),
    Accepted(
        "borrow_limit_defaults_to_unlimited",
        {f"{SHARING2}.borrowLimit": DELETE},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, -1, True),
    ),
    Accepted(
        "borrow_limit_minus_one_is_unlimited",
        {f"{SHARING2}.borrowLimit": -1},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, -1, True),
    ),
    Accepted(
        "borrow_limit_zero_borrows_nothing",
        {f"{SHARING2}.borrowLimit": 0},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, 0, True),
    ),
    Accepted(
        "preemption_configuration_optional_defaults_to_disabled",
        {f"{SHARE2}.preemptionConfiguration": DELETE},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, 200, False),
    ),
    Accepted(
        "in_share_preemption_defaults_to_disabled",
        {f"{SHARE2}.preemptionConfiguration": {}},
        2,
        QuotaShare("research", {P4D: 4, G5: 4}, SharingStrategy.LEND_AND_BORROW, 200, False),
    ),
    Accepted(
        "state_defaults_to_enabled",
        {f"{SHARE0}.state": DELETE},
        0,
        QuotaShare("prod", {P4D: 2}, SharingStrategy.RESERVE, -1, False, ShareState.ENABLED),
    ),
    Accepted(
        "state_disabled",
        {f"{SHARE0}.state": "DISABLED"},
        0,
        QuotaShare("prod", {P4D: 2}, SharingStrategy.RESERVE, -1, False, ShareState.DISABLED),
    ),
    Accepted(
        "max_capacity_zero",
        {f"{SHARE0}.capacityLimits[0].maxCapacity": 0},
        0,
        QuotaShare("prod", {P4D: 0}, SharingStrategy.RESERVE, -1, False),
    ),
    Accepted(
        "share_need_not_cover_every_queue_unit",
        {},
        0,
        QuotaShare("prod", {P4D: 2}, SharingStrategy.RESERVE, -1, False),
    ),
    Accepted(
        "max_capacity_100000_and_borrow_limit_10000000",
        {
            "jobQueues[0].capacityLimits[0].maxCapacity": 100_000,
            f"{SHARE2}.capacityLimits[0].maxCapacity": 100_000 - 4,
            f"{SHARING2}.borrowLimit": 10_000_000,
        },
        2,
        QuotaShare("research", {P4D: 99_996, G5: 4}, SharingStrategy.LEND_AND_BORROW, 10_000_000, True),
    ),
    Accepted(
        "capacity_unit_of_256_characters",
        {
            "jobQueues[0].capacityLimits[0].capacityUnit": "nvidia.com/gpu:" + "a" * 241,
            f"{SHARE0}.capacityLimits[0].capacityUnit": "nvidia.com/gpu:" + "a" * 241,
            f"{SHARE1}.capacityLimits[0].capacityUnit": "nvidia.com/gpu:" + "a" * 241,
            f"{SHARE2}.capacityLimits[0].capacityUnit": "nvidia.com/gpu:" + "a" * 241,
        },
        0,
        QuotaShare("prod", {"nvidia.com/gpu:" + "a" * 241: 2}, SharingStrategy.RESERVE, -1, False),
    ),
    Accepted(
        "name_of_128_letters_digits_dash_underscore",
        {f"{SHARE0}.quotaShareName": "A_b-9" * 25 + "xyz"},
        0,
        QuotaShare("A_b-9" * 25 + "xyz", {P4D: 2}, SharingStrategy.RESERVE, -1, False),
    ),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[case.rule for case in ACCEPTED])
def test_accepted(case: Accepted) -> None:
    [queue] = parse_quota_config(edited(valid_file(), case.changes), "quotas.yaml").to_job_queues()

    assert queue.shares[case.share_index] == case.share


def test_converts_to_the_engine_model() -> None:
    [queue] = parse_quota_config(valid_file(), "quotas.yaml").to_job_queues()

    assert queue.name == "gpu-training"
    assert queue.capacity == {P4D: 8, G5: 12}
    assert queue.share_names() == ["prod", "eval", "research"]


def test_every_error_is_collected_structural_and_cross_object_alike() -> None:
    raw = edited(
        valid_file(),
        {
            f"{SHARE0}.state": "ON",
            f"{SHARE1}.resourceSharingConfiguration.borrowLimit": 10,
            f"{SHARE2}.capacityLimits[0].maxCapacity": 5,  # 2 + 2 + 5 > 8
            f"{SHARE2}.quotaShareName": "eval",
            "jobQueues": QUEUE_COPY,
        },
    )

    assert [path for path, _ in issues_of(raw)] == [
        f"{SHARE0}.state",
        f"{SHARE1}.resourceSharingConfiguration.borrowLimit",
        "jobQueues[1].jobQueueName",
        f"{SHARE2}.quotaShareName",
        "jobQueues[0].quotaShares",
    ]


def test_a_broken_share_does_not_hide_cross_checks_on_the_others() -> None:
    raw = edited(valid_file(), {f"{SHARE0}.state": "ON", f"{SHARE2}.capacityLimits[0].maxCapacity": 5})

    paths = [path for path, _ in issues_of(raw)]

    assert paths == [f"{SHARE0}.state", "jobQueues[0].quotaShares"]


def test_error_lists_source_count_and_each_issue() -> None:
    raw = edited(valid_file(), {f"{SHARE0}.state": "ON", f"{SHARE0}.capacityLimits[0].maxCapacity": -1})

    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(raw, "team-quotas.yaml")

    assert isinstance(raised.value, ValueError)
    assert raised.value.source == "team-quotas.yaml"
    assert all(isinstance(issue, ConfigIssue) for issue in raised.value.issues)
    assert str(raised.value).splitlines() == [
        "team-quotas.yaml: 2 errors",
        f"  {SHARE0}.capacityLimits[0].maxCapacity: maxCapacity is -1: it must be a whole number from 0 to "
        "100000 (how many instances of this capacity unit)",
        f"  {SHARE0}.state: state is 'ON': it must be ENABLED or DISABLED",
    ]


@pytest.mark.parametrize(
    ("raw", "path", "says"),
    [
        pytest.param(
            [],
            "",
            "the top level is an empty list: it must be a mapping with the keys jobQueues",
            id="top_level_list_refused",
        ),
        pytest.param(
            "jobQueues",
            "",
            "the top level is 'jobQueues': it must be a mapping",
            id="top_level_string_refused",
        ),
        pytest.param({}, "jobQueues", "jobQueues is missing: add jobQueues", id="job_queues_required"),
    ],
)
def test_top_level(raw: object, path: str, says: str) -> None:
    [(found_path, message)] = issues_of(raw)

    assert found_path == path
    assert says in message


# --- AWS Batch warnings --------------------------------------------------------------------------------


def many_shares(count: int, units_per_share: int = 1) -> dict[str, Any]:
    units = [f"ml.unit{index}.xlarge" for index in range(units_per_share)]
    return {
        "jobQueues": [
            {
                "jobQueueName": "big",
                "capacityLimits": [{"capacityUnit": unit, "maxCapacity": count} for unit in units],
                "quotaShares": [
                    {
                        "quotaShareName": f"team-{index}",
                        "capacityLimits": [{"capacityUnit": unit, "maxCapacity": 1} for unit in units],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                    }
                    for index in range(count)
                ],
            }
        ]
    }


@pytest.mark.parametrize(
    ("raw", "warnings"),
    [
        pytest.param(valid_file(), [], id="no_warning_within_aws_limits"),
        pytest.param(many_shares(20), [], id="twenty_shares_per_queue_allowed"),
        pytest.param(
            many_shares(21),
            [("jobQueues[0].quotaShares", "21 quota shares; AWS Batch allows at most 20")],
            id="more_than_twenty_shares_per_queue_warned",
        ),
        pytest.param(many_shares(2, units_per_share=5), [], id="five_capacity_limits_per_share_allowed"),
        pytest.param(
            many_shares(2, units_per_share=6),
            [
                (
                    "jobQueues[0].quotaShares[0].capacityLimits",
                    "6 capacity limits; AWS Batch allows at most 5",
                ),
                (
                    "jobQueues[0].quotaShares[1].capacityLimits",
                    "6 capacity limits; AWS Batch allows at most 5",
                ),
            ],
            id="more_than_five_capacity_limits_per_share_warned",
        ),
    ],
)
def test_aws_batch_warnings(raw: dict[str, Any], warnings: list[tuple[str, str]]) -> None:
    config = parse_quota_config(raw, "quotas.yaml")  # accepted: warnings are not errors

    found = aws_batch_warnings(config)

    assert [issue.path for issue in found] == [path for path, _ in warnings]
    assert all(says in issue.message for issue, (_, says) in zip(found, warnings, strict=True))


# --- a queue and its shares given apart (the simulator's scenario files) ----------------------------------


def test_queue_with_shares_given_apart() -> None:
    queue_raw = {k: v for k, v in valid_file()["jobQueues"][0].items() if k != "quotaShares"}
    shares_raw = valid_file()["jobQueues"][0]["quotaShares"]

    queue = parse_queue_with_shares(queue_raw, shares_raw, "scenario.yaml")

    assert queue == parse_quota_config(valid_file(), "quotas.yaml").to_job_queues()[0]
    assert isinstance(queue, JobQueue)


@pytest.mark.parametrize(
    ("queue_changes", "share_changes", "prefix", "paths"),
    [
        pytest.param(
            {"capacityLimits[0].maxCapacity": -1},
            {},
            "",
            ["jobQueue.capacityLimits[0].maxCapacity"],
            id="queue_errors_under_job_queue",
        ),
        pytest.param(
            {}, {"[1].state": "ON"}, "", ["quotaShares[1].state"], id="share_errors_under_quota_shares"
        ),
        pytest.param(
            {},
            {"[0].capacityLimits[0].maxCapacity": 7},
            "",
            ["quotaShares"],
            id="shares_above_queue_capacity_cross_checked",
        ),
        pytest.param(
            {},
            {"[1].capacityLimits[0].capacityUnit": "ml.p5.48xlarge"},
            "scenario",
            ["scenario.quotaShares[1].capacityLimits[0].capacityUnit"],
            id="path_prefix_prepended",
        ),
        pytest.param(
            {"jobQueueName": DELETE},
            {"[2].quotaShareName": "prod"},
            "",
            ["jobQueue.jobQueueName", "quotaShares[2].quotaShareName"],
            id="queue_and_share_errors_together",
        ),
    ],
)
def test_queue_with_shares_given_apart_refused(
    queue_changes: dict[str, Any], share_changes: dict[str, Any], prefix: str, paths: list[str]
) -> None:
    queue_raw = edited(
        {k: v for k, v in valid_file()["jobQueues"][0].items() if k != "quotaShares"}, queue_changes
    )
    shares_raw = edited(valid_file()["jobQueues"][0]["quotaShares"], share_changes)

    with pytest.raises(QuotaConfigError) as raised:
        parse_queue_with_shares(queue_raw, shares_raw, "scenario.yaml", path_prefix=prefix)

    assert [issue.path for issue in raised.value.issues] == paths


def test_queue_with_shares_needs_a_queue_mapping_and_a_share_list() -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_queue_with_shares(None, "team-a", "scenario.yaml")

    assert [str(issue) for issue in raised.value.issues] == [
        "jobQueue: jobQueue is null (empty): it must be a mapping with the keys jobQueueName, capacityLimits",
        "quotaShares: quotaShares is 'team-a': it must be a list of quota shares "
        "(at least one: every job names the share it runs in)",
    ]


# --- job requests ------------------------------------------------------------------------------------------


def valid_request(**changes: Any) -> dict[str, Any]:
    request = {"jobName": "llama-ft", "quotaShareName": "research", "capacityUnit": P4D, "instanceCount": 2}
    return {**request, **changes}


@pytest.mark.parametrize(
    ("raw", "request_"),
    [
        pytest.param(
            valid_request(),
            JobRequest("llama-ft", "research", P4D, 2, 0, None),
            id="priority_defaults_to_zero_and_retries_to_unlimited",
        ),
        pytest.param(
            valid_request(schedulingPriority=0),
            JobRequest("llama-ft", "research", P4D, 2, 0),
            id="priority_zero_is_a_real_value",
        ),
        pytest.param(
            valid_request(schedulingPriority=9999),
            JobRequest("llama-ft", "research", P4D, 2, 9999),
            id="priority_9999_accepted",
        ),
        pytest.param(
            valid_request(preemptionRetriesBeforeTermination=0),
            JobRequest("llama-ft", "research", P4D, 2, 0, 0),
            id="zero_preemption_retries_accepted",
        ),
        pytest.param(
            valid_request(instanceCount=1),
            JobRequest("llama-ft", "research", P4D, 1),
            id="one_instance_accepted",
        ),
        pytest.param(
            valid_request(instanceCount=100_000, preemptionRetriesBeforeTermination=2**31 - 1),
            JobRequest("llama-ft", "research", P4D, 100_000, 0, 2**31 - 1),
            id="largest_instance_count_and_preemption_retries_accepted",
        ),
    ],
)
def test_job_request_accepted(raw: dict[str, Any], request_: JobRequest) -> None:
    assert validate_job_request(raw) == request_


@pytest.mark.parametrize(
    ("raw", "path", "says"),
    [
        pytest.param(
            valid_request(schedulingPriority=10000),
            "schedulingPriority",
            "schedulingPriority is 10000: it must be a whole number from 0 to 9999",
            id="priority_above_9999",
        ),
        pytest.param(
            valid_request(schedulingPriority=-1),
            "schedulingPriority",
            "from 0 to 9999",
            id="priority_below_0",
        ),
        pytest.param(
            valid_request(schedulingPriority="5"),
            "schedulingPriority",
            "schedulingPriority is '5'",
            id="priority_not_a_string",
        ),
        pytest.param(
            valid_request(schedulingPriority=True),
            "schedulingPriority",
            "schedulingPriority is true",
            id="priority_not_a_bool",
        ),
        pytest.param(
            valid_request(instanceCount=0),
            "instanceCount",
            "instanceCount is 0: it must be a whole number from 1 to 100000",
            id="instance_count_zero_refused",
        ),
        pytest.param(
            valid_request(instanceCount=3_000_000_000),
            "instanceCount",
            "instanceCount is 3000000000: it must be a whole number from 1 to 100000",
            id="instance_count_over_the_ledger_int4_refused",
        ),
        pytest.param(
            valid_request(instanceCount=2**63),
            "instanceCount",
            "instanceCount is 9223372036854775808: it must be a whole number from 1 to 100000",
            id="instance_count_over_int64_refused",
        ),
        pytest.param(
            valid_request(capacityUnit="u" * 257),
            "capacityUnit",
            "(257 characters): it must be an instance type such as ml.p4d.24xlarge (1 to 256 letters",
            id="capacity_unit_over_the_ledger_column_refused",
        ),
        pytest.param(
            valid_request(capacityUnit="ml.p4d 24xlarge"),
            "capacityUnit",
            "capacityUnit is 'ml.p4d 24xlarge': it must be an instance type",
            id="capacity_unit_without_spaces",
        ),
        pytest.param(
            valid_request(preemptionRetriesBeforeTermination=2**31),
            "preemptionRetriesBeforeTermination",
            "it must be a whole number from 0 to 2147483647, or left out to requeue without limit",
            id="preemption_retries_fit_the_ledger",
        ),
        pytest.param(
            valid_request(instanceCount=1.0),
            "instanceCount",
            "instanceCount is 1.0",
            id="instance_count_not_a_float",
        ),
        pytest.param(valid_request(jobName="my job"), "jobName", "1 to 128 letters", id="job_name_rule"),
        pytest.param(
            valid_request(quotaShareName="team/a"), "quotaShareName", "1 to 128 letters", id="share_name_rule"
        ),
        pytest.param(
            valid_request(capacityUnit=""),
            "capacityUnit",
            "capacityUnit is an empty string: it must be an instance type",
            id="capacity_unit_not_empty",
        ),
        pytest.param(
            valid_request(preemptionRetriesBeforeTermination=-1),
            "preemptionRetriesBeforeTermination",
            "whole number from 0 to 2147483647, or left out to requeue without limit",
            id="preemption_retries_not_negative",
        ),
        pytest.param(
            valid_request(priority=5),
            "priority",
            "unknown key 'priority': remove it; the keys allowed here are jobName, quotaShareName, "
            "schedulingPriority, capacityUnit, instanceCount, preemptionRetriesBeforeTermination",
            id="unknown_key_refused",
        ),
        pytest.param(
            {k: v for k, v in valid_request().items() if k != "instanceCount"},
            "instanceCount",
            "instanceCount is missing",
            id="instance_count_required",
        ),
    ],
)
def test_job_request_refused(raw: dict[str, Any], path: str, says: str) -> None:
    with pytest.raises(JobRequestError) as raised:
        validate_job_request(raw, source="task train")

    [issue] = raised.value.issues
    assert issue.path == path
    assert says in issue.message
    assert str(raised.value).startswith("task train: 1 error")


def test_job_request_collects_every_error() -> None:
    with pytest.raises(QuotaConfigError) as raised:
        validate_job_request(valid_request(schedulingPriority=10000, instanceCount=0, jobName=""))

    assert [issue.path for issue in raised.value.issues] == ["jobName", "schedulingPriority", "instanceCount"]


def test_job_submission_names_its_job_queue() -> None:
    assert validate_job_submission({**valid_request(), "jobQueue": "gpu-training"}) == (
        "gpu-training",
        JobRequest("llama-ft", "research", P4D, 2),
    )
    with pytest.raises(JobRequestError) as raised:
        validate_job_submission({**valid_request(), "jobQueue": "gpu/training"}, source="task train")
    assert [str(issue) for issue in raised.value.issues] == [
        "jobQueue: jobQueue is 'gpu/training': it must be the name of a job queue, 1 to 128 letters, digits, "
        "'-' or '_', e.g. gpu-training"
    ]


PRIORITY_RULE = "it must be a whole number from 0 to 9999 (higher runs first)"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        pytest.param(5, 5, id="an_integer"),
        pytest.param(9999, 9999, id="the_highest"),
        pytest.param("5", None, id="not_a_string"),
        pytest.param(True, None, id="not_a_boolean"),
        pytest.param(5.0, None, id="not_a_float"),
        pytest.param(10000, None, id="not_above_9999"),
    ],
)
def test_a_new_priority_is_an_integer_from_0_to_9999(value: object, accepted: int | None) -> None:
    if accepted is not None:
        assert validate_scheduling_priority(value) == accepted
        return
    with pytest.raises(JobRequestError) as raised:
        validate_scheduling_priority(value)
    [issue] = raised.value.issues
    assert (issue.path, issue.message) == (
        "schedulingPriority",
        f"schedulingPriority is {show_value(value)}: {PRIORITY_RULE}",
    )


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        pytest.param("5", 5, id="digits"),
        pytest.param("0", 0, id="zero"),
        pytest.param("true", None, id="not_true"),
        pytest.param("+5", None, id="no_sign"),
        pytest.param("5_0", None, id="no_underscore"),
        pytest.param(" 5", None, id="no_space"),
        pytest.param("\u0665", None, id="ascii_digits_only"),
        pytest.param("1" * 5000, None, id="no_thousands_of_digits"),
    ],
)
def test_a_priority_typed_on_a_command_line_is_plain_digits(text: str, accepted: int | None) -> None:
    if accepted is not None:
        assert scheduling_priority_from_text(text) == accepted
        return
    with pytest.raises(JobRequestError, match=re.escape(PRIORITY_RULE)):
        scheduling_priority_from_text(text)


def test_bounds_fit_the_ledger_columns() -> None:
    from airflow_quota.ledger import models

    assert (MAX_NAME_LENGTH, MAX_UNIT_LENGTH) == (models.NAME_LENGTH, models.UNIT_LENGTH)
    int4_max = 2**31 - 1  # the ledger's Integer columns on PostgreSQL
    assert max(MAX_CAPACITY, MAX_BORROW_LIMIT, MAX_INTEGER, MAX_PRIORITY) <= int4_max


# --- reading files -----------------------------------------------------------------------------------------


def test_example_file_is_valid_and_within_aws_limits() -> None:
    config = load_quota_file(EXAMPLE_FILE)

    [queue] = config.to_job_queues()
    assert set(queue.capacity) == {P4D, G5}
    assert [share.strategy for share in queue.shares] == [
        SharingStrategy.RESERVE,
        SharingStrategy.LEND,
        SharingStrategy.LEND_AND_BORROW,
    ]
    assert queue.shares[2].borrow_limit == 200
    assert aws_batch_warnings(config) == []


@pytest.mark.parametrize("name", ["quotas.yaml", "quotas.yml", "quotas.json", "quotas.conf"])
def test_reads_yaml_json_and_anything_else_as_yaml(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(valid_file()))

    assert load_quota_file(path) == parse_quota_config(valid_file(), "quotas.yaml")


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        pytest.param(
            "quotas.yaml",
            "jobQueues: [\n  - a\n",
            "YAML syntax error at line 2, column 3",
            id="yaml_syntax_error_names_the_line",
        ),
        pytest.param(
            "quotas.yaml", "jobQueues:\n\t- a\n", "YAML syntax error at line 2", id="yaml_tab_refused"
        ),
        pytest.param(
            "quotas.json",
            '{"jobQueues": [1,]}',
            "JSON syntax error at line 1, column 18",
            id="json_syntax_error_names_the_line",
        ),
        pytest.param(
            "quotas.json",
            '{\n  "jobQueues": [1, 2]\n',
            "JSON syntax error at line 3",
            id="json_unclosed_object",
        ),
        pytest.param(
            "quotas.yaml",
            "jobQueues: []\njobQueues: []\n",
            "line 2, column 1: key 'jobQueues' appears twice in this mapping",
            id="yaml_duplicate_key_refused",
        ),
        pytest.param(
            "quotas.json",
            '{"jobQueues": [], "jobQueues": []}',
            "key 'jobQueues' appears twice",
            id="json_duplicate_key_refused",
        ),
        pytest.param("quotas.yaml", "", "the file is empty", id="empty_file_refused"),
        pytest.param(
            "quotas.yaml", "# only a comment\n", "the file is empty", id="comment_only_file_refused"
        ),
        pytest.param(
            "quotas.yaml",
            "- jobQueueName: a\n",
            "the top level is a list: it must be a mapping",
            id="top_level_list_refused",
        ),
        pytest.param(
            "quotas.yaml",
            "gpu-training\n",
            "the top level is a single value ('gpu-training')",
            id="top_level_scalar_refused",
        ),
        pytest.param("quotas.json", "[]", "the top level is a list", id="json_top_level_list_refused"),
        pytest.param(
            "quotas.yaml",
            "jobQueues: " + "[" * 100_000 + "]" * 100_000 + "\n",
            "the document nests more than 100 levels deep (at line 1): quota and scenario files need 6",
            id="yaml_nested_100000_deep_refused",
        ),
        pytest.param(
            "quotas.yaml",
            "jobQueues:\n" + "".join("  " * level + "- \n" for level in range(101)),
            "nests more than 100 levels deep",
            id="yaml_nested_101_deep_in_block_style_refused",
        ),
        pytest.param(
            "quotas.json",
            '{"jobQueues": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "the document nests more than 100 levels deep",
            id="json_nested_100000_deep_refused",
        ),
        pytest.param(
            "quotas.json",
            '{"jobQueues": ' + "[" * 500 + "]" * 500 + "}",
            "the document nests more than 100 levels deep",
            id="json_nested_within_pythons_stack_refused",
        ),
        pytest.param(
            "quotas.yaml",
            "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(
                f"{name}: &{name} [{', '.join([f'*{alias}'] * 10)}]\n"
                for alias, name in zip("abcdefgh", "bcdefghi", strict=True)
            ),
            "the document holds more than 1,000,000 values (YAML aliases counted each time they are used)",
            id="yaml_aliases_expanding_to_a_billion_values_refused",
        ),
    ],
)
def test_unreadable_documents_refused(tmp_path: Path, name: str, text: str, says: str) -> None:
    path = tmp_path / name
    path.write_text(text)

    with pytest.raises(QuotaConfigError) as raised:
        load_quota_file(path)

    [issue] = raised.value.issues
    assert (issue.path, raised.value.source) == ("", str(path))
    assert says in issue.message


@pytest.mark.parametrize(
    ("make", "says"),
    [
        pytest.param(
            lambda tmp: tmp / "missing.yaml",
            "cannot read the file: No such file or directory",
            id="missing_file",
        ),
        pytest.param(lambda tmp: tmp, "cannot read the file: Is a directory", id="directory"),
        pytest.param(
            lambda tmp: _write_bytes(tmp / "latin1.yaml", "state: ENABLÉ".encode("latin-1")),
            "it is not UTF-8 text",
            id="not_utf8",
        ),
    ],
)
def test_unreadable_files_refused(tmp_path: Path, make: Any, says: str) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        load_quota_file(make(tmp_path))

    assert says in str(raised.value)


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "number", "digits"),
    [
        pytest.param("quotas.yaml", "9" * 5000, 5000, id="yaml"),
        pytest.param("quotas.json", "9" * 5000, 5000, id="json"),
        pytest.param("quotas.yaml", "1_" * 2500 + "0", 2501, id="yaml_with_underscores"),
    ],
)
def test_number_of_thousands_of_digits_refused_at_its_path(
    tmp_path: Path, name: str, number: str, digits: int
) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(valid_file()).replace('"maxCapacity": 8', f'"maxCapacity": {number}', 1))

    with pytest.raises(QuotaConfigError) as raised:
        load_quota_file(path)

    assert [str(issue) for issue in raised.value.issues] == [
        f"jobQueues[0].capacityLimits[0].maxCapacity: maxCapacity is a number of {digits} digits: it must"
        " be a whole number from 0 to 100000 (how many instances of this capacity unit)"
    ]


def test_invalid_file_reports_paths_and_is_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "quotas.yaml"
    text = (
        "jobQueues:\n"
        "  - jobQueueName: gpu\n"
        "    capacityLimits: [{capacityUnit: ml.p4d.24xlarge, maxCapacity: 4}]\n"
        "    quotaShares:\n"
        "      - quotaShareName: team-a\n"
        "        capacityLimits: [{capacityUnit: ml.p4d.24xlarge, maxCapacity: 4}]\n"
        "        resourceSharingConfiguration: {strategy: LEND, borrowLimit: 200}\n"
    )
    path.write_text(text)
    modified = path.stat().st_mtime_ns

    with pytest.raises(QuotaConfigError) as raised:
        load_quota_file(path)

    assert [issue.path for issue in raised.value.issues] == [
        "jobQueues[0].quotaShares[0].resourceSharingConfiguration.borrowLimit"
    ]
    assert (path.read_text(), path.stat().st_mtime_ns) == (text, modified)


def test_read_mapping_file_returns_the_document(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("jobQueue: {jobQueueName: q}\nquotaShares: []\n")

    assert read_mapping_file(path) == {"jobQueue": {"jobQueueName": "q"}, "quotaShares": []}
