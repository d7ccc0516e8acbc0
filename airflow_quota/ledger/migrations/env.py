"""Alembic environment of the ledger: only the ledger's tables, versioned in ``alembic_version_quota``.

Alembic runs this file (through ``QuotaDBManager``) against the Airflow metadata DB: online on Airflow's
engine, or offline printing SQL (``--show-sql-only``). ``render_as_batch`` lets later migrations alter
tables on SQLite.
"""

from __future__ import annotations

import contextlib
from logging import getLogger
from logging.config import fileConfig
from typing import Any

from airflow import settings
from alembic import context

from airflow_quota.ledger.db import QuotaDBManager

config = context.config
target_metadata = QuotaDBManager.metadata
version_table = QuotaDBManager.version_table_name
ledger_table_names = {table.name for table in target_metadata.tables.values()}

if not getLogger().handlers and config.config_file_name:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Compare and migrate the ledger's tables only, never Airflow's or another provider's."""
    return type_ != "table" or name in ledger_table_names


def run_migrations_offline() -> None:
    context.configure(
        url=settings.SQL_ALCHEMY_CONN,
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        compare_server_default=True,
        render_as_batch=True,
        version_table=version_table,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    with contextlib.ExitStack() as stack:
        connection = config.attributes.get("connection")
        if connection is None:
            if settings.engine is None:
                raise RuntimeError("Airflow's ORM is not configured: run this through `airflow db migrate`")
            connection = stack.enter_context(settings.engine.connect())
        context.configure(
            connection=connection,
            transaction_per_migration=True,
            target_metadata=target_metadata,
            compare_type=True,
            compare_server_default=True,
            render_as_batch=True,
            version_table=version_table,
            include_object=include_object,
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
