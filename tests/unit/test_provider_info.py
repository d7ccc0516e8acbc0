"""The ``[quota]`` settings: declared once in the provider info, read through Airflow's configuration,
documented in docs/allocator.md with the same defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import airflow
import jsonschema
import pytest

from airflow_quota.get_provider_info import QUOTA_CONFIG, get_provider_info

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "airflow_quota"
AIRFLOW = Path(sys.executable).parent / "airflow"
OPTIONS: dict[str, dict[str, str]] = QUOTA_CONFIG["options"]

#: A read of a ``[quota]`` setting: ``conf.get*(SECTION, ...)`` or ``conf.get*("quota", ...)``.
QUOTA_READ = re.compile(r"conf\.get\w*\(\s*(?:SECTION|\"quota\")\s*,\s*([^,)]+)([^)]*)\)")


def quota_reads() -> list[tuple[str, str, str]]:
    """Every ``[quota]`` read in the package: (file, key expression, the rest of the call)."""
    return [
        (str(path.relative_to(ROOT)), match.group(1).strip(), match.group(2))
        for path in sorted(PACKAGE.rglob("*.py"))
        for match in QUOTA_READ.finditer(path.read_text())
    ]


def documented_settings() -> dict[str, str]:
    """docs/allocator.md's settings table: key -> default."""
    text = (ROOT / "docs" / "allocator.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", table, flags=re.MULTILINE)
    return dict(rows)


def test_the_provider_info_is_valid_for_airflow() -> None:
    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    jsonschema.validate(get_provider_info(), json.loads(schema_path.read_text()))
    assert get_provider_info()["config"] == {"quota": QUOTA_CONFIG}


def test_every_quota_read_names_a_declared_setting_and_no_fallback() -> None:
    reads = quota_reads()
    assert reads, "no [quota] read found: the pattern no longer matches the code"
    for file, key, rest in reads:
        assert key.startswith('"'), f"{file}: read [quota] with a literal key, got {key}"
        assert key.strip('"') in OPTIONS, f"{file}: [quota] {key} is not declared in get_provider_info"
        assert "fallback" not in rest, f"{file}: [quota] {key} repeats a default; Airflow has it"
    assert {key.strip('"') for _, key, _ in reads} == set(OPTIONS), "a declared setting is never read"


def test_every_declared_setting_is_documented_with_its_default() -> None:
    assert documented_settings() == {key: option["default"] for key, option in OPTIONS.items()}


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        pytest.param({}, (0.25, 10, 600, 900, 1000), id="unset: the provider info's defaults"),
        pytest.param(
            {
                "AIRFLOW__QUOTA__ALLOCATION_INTERVAL": "2",
                "AIRFLOW__QUOTA__SETTLE_TIME": "3",
                "AIRFLOW__QUOTA__STOP_DEADLINE": "4",
                "AIRFLOW__QUOTA__ORPHAN_TIMEOUT": "5",
                "AIRFLOW__QUOTA__MAX_NEW_REQUESTS": "6",
            },
            (2, 3, 4, 5, 6),
            id="set in the environment: the values given",
        ),
    ],
)
def test_the_allocator_reads_its_settings_through_airflow(
    environment: dict[str, str], expected: tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_quota.allocator.host import allocation_interval, cycle_settings

    for key in OPTIONS:
        monkeypatch.delenv(f"AIRFLOW__QUOTA__{key.upper()}", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = cycle_settings()
    interval, settle, deadline, orphan, batch = expected
    assert allocation_interval() == interval
    assert settings.settle_time == timedelta(seconds=settle)
    assert settings.stop_deadline == timedelta(seconds=deadline)
    assert settings.orphan_timeout == timedelta(seconds=orphan)
    assert settings.max_new_requests == batch


@pytest.mark.airflow
def test_airflow_config_shows_the_quota_settings(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW__QUOTA__")}
    env |= {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__QUOTA__SETTLE_TIME": "20"}

    def airflow_config(*args: str) -> str:
        done = subprocess.run(
            [str(AIRFLOW), "config", *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert airflow_config("get-value", "quota", "allocation_interval").strip() == "0.25"
    assert airflow_config("get-value", "quota", "settle_time").strip() == "20"
    listed = airflow_config("list", "--section", "quota", "--show-values").splitlines()
    expected = {key: option["default"] for key, option in OPTIONS.items()} | {"settle_time": "20"}
    assert [f"{key} = {value}" for key, value in expected.items()] == listed[1 : 1 + len(expected)]
