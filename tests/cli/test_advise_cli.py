"""``airflow quota advise`` inside Airflow's CLI (a subprocess against a migrated metadata DB): without
--history it reads the ledger's jobs as ``airflow quota history`` does, with the real stops' time. Its
refusal of a missing source is read from the command run through Airflow's CLI parser in this process
(``tests/cli/in_process.py``: the same output and exit status without a second ``airflow`` start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.in_process import run_quota
from tests.db.allocation import QUEUE, START
from tests.db.conftest import Database, migrated
from tests.db.test_allocator_cycle import db
from tests.db.test_history_replay import QUOTA_FILE, build_history

pytestmark = [pytest.mark.db, pytest.mark.airflow]
__all__ = ["db", "migrated"]  # the fixtures this module borrows


def test_advise_reads_the_ledger_without_a_history_file(db: Database, tmp_path: Path) -> None:
    build_history(db)
    quotas, proposed = tmp_path / "quotas.yaml", tmp_path / "proposed.yaml"
    quotas.write_text(yaml.safe_dump(QUOTA_FILE))

    advised = db.airflow(
        "quota",
        "advise",
        "--since",
        START.isoformat(),
        "--config",
        str(quotas),
        "--queue",
        QUEUE,
        "-o",
        str(proposed),
        "--workers",
        "1",
        "--json",
    )
    refused = run_quota(["advise", "--config", str(quotas), "--queue", QUEUE], db.engine)

    assert advised.returncode == 0, advised.stderr
    advice = json.loads(advised.stdout)
    assert advice["jobs"] == 5 and advice["jobQueue"] == QUEUE
    assert advice["settings"]["stopSeconds"] == 2  # the median of the real stops (one, of 2 s)
    assert proposed.exists() == advice["improved"]
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: give --history FILE.csv, or --since ISO-TIME to read the ledger's jobs"
    )
