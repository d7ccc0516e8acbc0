"""The ledger's tables come with Airflow's own DB commands, and its migrations build exactly the models.

``airflow db migrate`` runs in a subprocess with no configuration but the database URL: the provider's
DB manager is found through ``get_provider_info`` alone. On a new database that command goes through the
same ``initdb`` that ``airflow standalone`` runs first, so it covers both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from airflow import settings
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.configuration import applied_config, apply_quota_config
from airflow_quota.ledger.db import QuotaDBManager
from airflow_quota.ledger.models import ledger_metadata
from tests.db.conftest import Database

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py

LEDGER_TABLES = {table.name for table in ledger_metadata.tables.values()}
VERSION_TABLE = "alembic_version_quota"
NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def quota_config(team_a_gpus: int) -> Any:
    return parse_quota_config(
        {
            "jobQueues": [
                {
                    "jobQueueName": "gpu",
                    "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 8}],
                    "quotaShares": [
                        {
                            "quotaShareName": "team-a",
                            "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": team_a_gpus}],
                            "resourceSharingConfiguration": {"strategy": "LEND"},
                        }
                    ],
                }
            ]
        },
        "test",
    )


def apply_with_sql(database: Database, team_a_gpus: int) -> None:
    """What applying ``quota_config(team_a_gpus)`` wrote with the first release's tables (the ORM models
    are head's: they name columns an older schema does not have)."""
    document = quota_config(team_a_gpus).model_dump(mode="json", by_alias=True, exclude_none=True)
    queue, share = document["jobQueues"][0], document["jobQueues"][0]["quotaShares"][0]
    rows = {
        "quota_job_queue": {
            "job_queue_name": "gpu",
            "capacity_limits": json.dumps(queue["capacityLimits"]),
            "revision": 1,
            "created_at": NOW,
            "updated_at": NOW,
        },
        "quota_share": {
            "job_queue_name": "gpu",
            "quota_share_name": share["quotaShareName"],
            "position": 0,
            "capacity_limits": json.dumps(share["capacityLimits"]),
            "strategy": share["resourceSharingConfiguration"]["strategy"],
            "borrow_limit": None,
            "in_share_preemption": share["preemptionConfiguration"]["inSharePreemption"],
            "state": share["state"],
            "created_at": NOW,
            "updated_at": NOW,
        },
        "quota_config_revision": {
            "job_queue_name": "gpu",
            "revision": 1,
            "applied_at": NOW,
            "applied_by": "test",
            "source": "quotas.yaml",
            "config": json.dumps(queue),
        },
    }
    with database.engine.begin() as connection:
        for table, values in rows.items():
            names = ", ".join(values)
            connection.execute(
                sa.text(f"INSERT INTO {table} ({names}) VALUES ({', '.join(':' + name for name in values)})"),
                values,
            )


def script() -> ScriptDirectory:
    return ScriptDirectory(QuotaDBManager.migration_dir)


def head() -> str:
    revision = script().get_current_head()
    assert revision is not None
    return revision


def first_revision() -> str:
    return next(rev.revision for rev in script().walk_revisions() if rev.down_revision is None)


def version_in(database: Database) -> str | None:
    with database.engine.connect() as connection:
        return MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE}
        ).get_current_revision()


def schema_of(database: Database) -> dict[str, Any]:
    inspector = sa.inspect(database.engine)
    return {
        table: (
            [
                (column["name"], str(column["type"]), column["nullable"])
                for column in inspector.get_columns(table)
            ],
            sorted(index["name"] or "" for index in inspector.get_indexes(table)),
        )
        for table in sorted(LEDGER_TABLES)
    }


def differences_from_models(database: Database) -> list[Any]:
    """What alembic's autogenerate would still change to make the database match the models."""

    def ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        return type_ != "table" or name in LEDGER_TABLES

    with database.engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "version_table": VERSION_TABLE,
                "include_object": ours,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return list(compare_metadata(context, ledger_metadata))


# --- airflow db migrate ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def migrated(database: Database) -> Database:
    result = database.airflow("db", "migrate")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Creating QuotaDBManager tables" in result.stdout + result.stderr
    return database


def test_airflow_db_migrate_creates_the_ledger_at_head(migrated: Database) -> None:
    tables = set(sa.inspect(migrated.engine).get_table_names())

    assert tables >= LEDGER_TABLES | {VERSION_TABLE, "alembic_version", "task_instance"}
    assert version_in(migrated) == head()
    assert differences_from_models(migrated) == []


def test_airflow_db_migrate_twice_changes_nothing_and_keeps_the_data(migrated: Database) -> None:
    with migrated.session() as session, session.begin():
        apply_quota_config(session, quota_config(4), applied_by="test", source="quotas.yaml", now=NOW)
    schema_before = schema_of(migrated)

    result = migrated.airflow("db", "migrate")

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Upgrading the QuotaDBManager database" in result.stdout + result.stderr
    assert version_in(migrated) == head()
    assert schema_of(migrated) == schema_before
    with migrated.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT job_queue_name, revision FROM quota_job_queue")).all() == [
            ("gpu", 1)
        ]


def test_airflow_db_migrate_adds_the_ledger_to_an_existing_airflow_database(migrated: Database) -> None:
    """The provider installed after Airflow's DB was made: the next ``airflow db migrate`` adds the ledger."""
    with migrated.engine.begin() as connection:
        ledger_metadata.drop_all(connection)
        connection.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))

    result = migrated.airflow("db", "migrate")

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert set(sa.inspect(migrated.engine).get_table_names()) >= LEDGER_TABLES
    assert version_in(migrated) == head()


# --- QuotaDBManager: upgrades from the first migration ----------------------------------------------------


@pytest.fixture
def empty_database(database: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """The module's database without the ledger, with Airflow's settings pointing at it (as in a CLI)."""
    _drop_ledger(database)
    monkeypatch.setattr(settings, "SQL_ALCHEMY_CONN", database.url)
    monkeypatch.setattr(settings, "engine", database.engine)
    yield database
    _drop_ledger(database)


def _drop_ledger(database: Database) -> None:
    with database.engine.begin() as connection:
        ledger_metadata.drop_all(connection)
        connection.execute(sa.text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))


def upgrade(database: Database, to_revision: str | None = None) -> None:
    with database.session() as session:
        QuotaDBManager(session).upgradedb(to_revision=to_revision)


def test_upgrade_from_the_first_migration_to_head_keeps_the_data(empty_database: Database) -> None:
    upgrade(empty_database, to_revision=first_revision())
    assert version_in(empty_database) == first_revision()
    apply_with_sql(empty_database, 4)

    upgrade(empty_database)

    assert version_in(empty_database) == head()
    assert differences_from_models(empty_database) == []
    with empty_database.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT quota_share_name FROM quota_share")).scalars().all() == [
            "team-a"
        ]
    with empty_database.session() as session:
        assert QuotaDBManager(session).check_migration()


def test_a_downgrade_to_the_first_release_then_upgrade_keeps_the_data(empty_database: Database) -> None:
    upgrade(empty_database)
    with empty_database.session() as session, session.begin():
        apply_quota_config(session, quota_config(4), applied_by="test", source="quotas.yaml", now=NOW)
    with empty_database.session() as session:
        QuotaDBManager(session).downgrade(to_revision=first_revision())

    assert version_in(empty_database) == first_revision()
    columns = {column["name"] for column in sa.inspect(empty_database.engine).get_columns("quota_job")}
    assert "held_devices" not in columns

    upgrade(empty_database)

    assert version_in(empty_database) == head()
    assert differences_from_models(empty_database) == []
    with empty_database.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT quota_share_name FROM quota_share")).scalars().all() == [
            "team-a"
        ]


def test_upgrading_to_0004_keeps_each_job_queue_scheduled_by_airflow_until_its_file_says_otherwise(
    empty_database: Database,
) -> None:
    """A job queue applied before the ``scheduler`` column existed reads as left out (our allocator);
    applying the file with ``scheduler: AWS_BATCH`` afterwards is revision 2; a downgrade drops it again."""
    before_scheduler = "9d4f2a61c3e8"
    upgrade(empty_database, to_revision=before_scheduler)
    apply_with_sql(empty_database, 4)

    upgrade(empty_database)

    with empty_database.session() as session:
        applied = applied_config(session, "gpu")
    assert (
        applied == quota_config(4).model_dump(mode="json", by_alias=True, exclude_none=True)["jobQueues"][0]
    )
    assert applied is not None
    assert "scheduler" not in applied
    moved = quota_config(4).model_dump(mode="json", by_alias=True, exclude_none=True)
    moved["jobQueues"][0]["scheduler"] = "AWS_BATCH"
    with empty_database.session() as session, session.begin():
        changes = apply_quota_config(
            session, parse_quota_config(moved, "test"), applied_by="test", source="quotas.yaml", now=NOW
        )
    assert [(change.quota_share_name, change.revision, change.new) for change in changes] == [
        (
            None,
            2,
            {"jobQueueName": "gpu", "capacityLimits": applied["capacityLimits"], "scheduler": "AWS_BATCH"},
        )
    ]
    with empty_database.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT scheduler FROM quota_job_queue")).scalars().all() == [
            "AWS_BATCH"
        ]

    with empty_database.session() as session:
        QuotaDBManager(session).downgrade(to_revision=before_scheduler)
    columns = {column["name"] for column in sa.inspect(empty_database.engine).get_columns("quota_job_queue")}
    assert "scheduler" not in columns


#: The migrations that add an index: (the revision before, table, index, its columns).
INDEX_MIGRATIONS = {
    # The GPU timeline's query of a window's jobs.
    "0005 jobs by queue and last change": (
        "3c7e51b0d9a4",
        "quota_job",
        "quota_job_queue_updated_idx",
        ["job_queue_name", "updated_at"],
    ),
    # The page's job filter: a job's decisions as the other job (its preemptor's, its victims').
    "0008 audit rows by related job": (
        "c5d2e8a17f40",
        "quota_audit_log",
        "quota_audit_log_related_job_idx",
        ["related_job_id", "id"],
    ),
    # A cycle's next submission sequence number, read without the queue's whole history.
    "0009 jobs by queue and submission sequence": (
        "9e4b7d21c3a8",
        "quota_job",
        "quota_job_queue_submit_seq_idx",
        ["job_queue_name", "submit_seq"],
    ),
    # Pages of finished jobs by when they finished (the page's Recently finished), one status at a time.
    "0012 jobs by status and last change": (
        "2b6f0d4c8e17",
        "quota_job",
        "quota_job_status_updated_idx",
        ["status", "updated_at"],
    ),
    # The work a queue's preemptions lost over a window: its PREEMPTED rows alone.
    "0012 audit rows by queue, kind and time": (
        "2b6f0d4c8e17",
        "quota_audit_log",
        "quota_audit_log_queue_kind_idx",
        ["job_queue_name", "kind", "at"],
    ),
}


@pytest.mark.parametrize("migration", INDEX_MIGRATIONS)
def test_an_index_migration_adds_its_index_and_a_downgrade_drops_it(
    empty_database: Database, migration: str
) -> None:
    """The index is there after an upgrade, and not after a downgrade to the revision before (the data
    stays)."""
    before_index, table, index, columns = INDEX_MIGRATIONS[migration]
    upgrade(empty_database, to_revision=before_index)
    apply_with_sql(empty_database, 4)

    def indexes() -> dict[str, list[str]]:
        inspector = sa.inspect(empty_database.engine)
        return {each["name"] or "": each["column_names"] for each in inspector.get_indexes(table)}

    assert index not in indexes()
    upgrade(empty_database)
    assert indexes()[index] == columns

    with empty_database.session() as session:
        QuotaDBManager(session).downgrade(to_revision=before_index)
    assert index not in indexes()
    with empty_database.engine.connect() as connection:  # the data stays (read as that schema has it)
        assert connection.execute(sa.text("SELECT job_queue_name FROM quota_job_queue")).scalars().all() == [
            "gpu"
        ]


def test_upgrading_to_0006_starts_each_job_queue_at_generation_0_and_a_downgrade_drops_it(
    empty_database: Database,
) -> None:
    """A job queue applied before the generation counter existed starts at 0 (an allocator that kept its
    state then reads it whole once); applying a change bumps it; a downgrade to 0005 drops the column."""
    before_generation = "7264ee896a91"
    upgrade(empty_database, to_revision=before_generation)
    apply_with_sql(empty_database, 4)

    upgrade(empty_database)

    def generations() -> list[int]:
        with empty_database.engine.connect() as connection:
            return list(connection.execute(sa.text("SELECT generation FROM quota_job_queue")).scalars())

    assert generations() == [0]
    with empty_database.session() as session, session.begin():
        apply_quota_config(session, quota_config(3), applied_by="test", source="quotas.yaml", now=NOW)
    assert generations() == [1]

    with empty_database.session() as session:
        QuotaDBManager(session).downgrade(to_revision=before_generation)
    columns = {column["name"] for column in sa.inspect(empty_database.engine).get_columns("quota_job_queue")}
    assert "generation" not in columns
    with empty_database.engine.connect() as connection:  # the data stays (read as that schema has it)
        assert connection.execute(sa.text("SELECT job_queue_name FROM quota_job_queue")).scalars().all() == [
            "gpu"
        ]


def test_the_migration_files_alone_build_the_models(empty_database: Database) -> None:
    """From nothing to head through every migration file (not create_all), the schema is the models'."""
    upgrade(empty_database, to_revision="heads")

    assert version_in(empty_database) == head()
    assert differences_from_models(empty_database) == []


def test_tables_made_without_a_version_are_stamped_at_the_first_migration_then_upgraded(
    empty_database: Database,
) -> None:
    """Tables of the first release whose version row was lost: stamped at the base, then upgraded."""
    upgrade(empty_database, to_revision=first_revision())
    with empty_database.engine.begin() as connection:
        connection.execute(sa.text(f"DROP TABLE {VERSION_TABLE}"))

    upgrade(empty_database)

    assert version_in(empty_database) == head()


def test_drop_tables_removes_the_ledger_and_its_version_table(empty_database: Database) -> None:
    upgrade(empty_database)
    with empty_database.session() as session, session.begin():
        QuotaDBManager(session).drop_tables(session.connection())

    assert not set(sa.inspect(empty_database.engine).get_table_names()) & (LEDGER_TABLES | {VERSION_TABLE})


def test_revision_heads_map_names_each_release_head_and_ends_at_head() -> None:
    heads = QuotaDBManager.revision_heads_map
    known = {rev.revision for rev in script().walk_revisions()}

    assert list(heads) == ["0.1.0", "0.2.0", "0.3.0"]
    assert set(heads.values()) <= known
    assert list(heads.values())[-1] == head()
    assert first_revision() == heads["0.1.0"]


def _job_fillfactor(database: Database) -> str | None:
    """PostgreSQL's fillfactor storage parameter of ``quota_job`` (None: the default, pages filled whole)."""
    with database.engine.connect() as connection:
        options = connection.execute(
            sa.text("SELECT reloptions FROM pg_class WHERE relname = 'quota_job' AND relkind = 'r'")
        ).scalar_one()
    found = [each.split("=", 1)[1] for each in options or [] if each.startswith("fillfactor=")]
    return found[0] if found else None


def test_upgrading_to_0007_leaves_room_in_the_job_tables_pages_on_postgresql_and_a_downgrade_resets_it(
    empty_database: Database,
) -> None:
    """PostgreSQL keeps 30% of each new page of ``quota_job`` free after 0007 (a waiting job's new
    statusReason then fits beside its row: rewritten in place, no index touched), as a ledger created
    from the models has it; a downgrade to 0006 resets it. SQLite has no such setting: nothing changes."""
    before_fillfactor = "a41c9e07d2b6"
    upgrade(empty_database, to_revision=before_fillfactor)
    apply_with_sql(empty_database, 4)
    postgresql = empty_database.engine.dialect.name == "postgresql"
    if postgresql:
        assert _job_fillfactor(empty_database) is None

    upgrade(empty_database)
    if postgresql:
        assert _job_fillfactor(empty_database) == "70"

    with empty_database.session() as session:
        QuotaDBManager(session).downgrade(to_revision=before_fillfactor)
    if postgresql:
        assert _job_fillfactor(empty_database) is None
    with empty_database.engine.connect() as connection:  # the data stays
        assert connection.execute(sa.text("SELECT job_queue_name FROM quota_job_queue")).scalars().all() == [
            "gpu"
        ]

    _drop_ledger(empty_database)
    with empty_database.engine.begin() as connection:  # created from the models, as a new ledger is
        ledger_metadata.create_all(connection)
    if postgresql:
        assert _job_fillfactor(empty_database) == "70"
