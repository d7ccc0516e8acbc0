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
    "0.3.0": "eb6845648415",
}


class QuotaDBManager(BaseDBManager):
    """The ledger's tables, migrations and alembic version table."""

    metadata = ledger_metadata
    version_table_name = "alembic_version_quota"
    migration_dir = (LEDGER_DIR / "migrations").as_posix()
    alembic_file = (LEDGER_DIR / "alembic.ini").as_posix()
    supports_table_dropping = True
    revision_heads_map = REVISION_HEADS_MAP

    def downgrade(
        self, to_revision: str, from_revision: str | None = None, show_sql_only: bool = False
    ) -> None:
        """Downgrade the ledger to ``to_revision`` (``airflow db-manager downgrade ... --to-version``).

        Later migrations' columns and tables are dropped: take a backup first. ``show_sql_only`` prints
        the SQL instead (``from_revision`` is then where the printed script starts).
        """
        from alembic import command

        config = self.get_alembic_config()  # type: ignore[no-untyped-call]  # untyped upstream
        if show_sql_only:
            start = from_revision or "heads"
            command.downgrade(config, revision=f"{start}:{to_revision}", sql=True)
            return
        command.downgrade(config, revision=to_revision)
        self.log.info("Downgraded the quota ledger to revision %s", to_revision)
