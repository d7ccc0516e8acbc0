"""``QuotaDBManager``: creates and upgrades the ledger's tables when Airflow's own DB commands run.

Airflow 3.3 finds it with no configuration, through the ``db-managers`` entry of ``get_provider_info``:
``airflow db migrate`` and ``airflow standalone`` then create the tables on a new database (from the
models, stamped at the head revision) and run the pending migrations of ``ledger/migrations`` on an
existing one, tracking them in the ``alembic_version_quota`` table, apart from Airflow's ``alembic_version``.
"""

from __future__ import annotations

from pathlib import Path

from airflow.utils.db_manager import BaseDBManager

from airflow_quota.ledger.models import ledger_metadata

LEDGER_DIR = Path(__file__).parent

#: The migration head each release of airflow-quota ships, oldest first (``airflow db-manager migrate
#: --to-version`` reads it).
REVISION_HEADS_MAP: dict[str, str] = {
    "0.1.0": "07ac53478b6a",
    "0.2.0": "5b1e0c2f9a7d",
}


class QuotaDBManager(BaseDBManager):
    """The ledger's tables, migrations and alembic version table."""

    metadata = ledger_metadata
    version_table_name = "alembic_version_quota"
    migration_dir = (LEDGER_DIR / "migrations").as_posix()
    alembic_file = (LEDGER_DIR / "alembic.ini").as_posix()
    supports_table_dropping = True
    revision_heads_map = REVISION_HEADS_MAP
