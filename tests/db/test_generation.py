"""A job queue's generation (``ledger.generation``) is bumped once per transaction: every later bump in
the same transaction, or in a savepoint inside it, is skipped; a savepoint rolled back takes its bump with
it, and the next bump after it bumps again (issue 16: a cycle recording ten finishes ran ten UPDATEs)."""

from __future__ import annotations

import pytest

from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.generation import QueueMark, bump_generation, mark_written, read_mark
from tests.db.conftest import Database
from tests.db.test_apply_lock_order import quotas

pytestmark = pytest.mark.db


def generation(migrated: Database, name: str) -> int:
    with migrated.session() as session:
        mark = read_mark(session, name)
    assert mark is not None
    return mark.generation


def test_a_queue_is_bumped_once_per_transaction_and_again_after_a_rolled_back_savepoint(
    migrated: Database,
) -> None:
    with migrated.session() as session, session.begin():
        apply_quota_config(session, quotas(2, "gen-a", "gen-b"), applied_by="test", source="test")
    start_a, start_b = generation(migrated, "gen-a"), generation(migrated, "gen-b")

    with migrated.session() as session, session.begin():
        bump_generation(session, "gen-a")
        bump_generation(session, "gen-a")
        with session.begin_nested():
            bump_generation(session, "gen-a")  # bumped already in the transaction around it
            bump_generation(session, "gen-b")
        bump_generation(session, "gen-b")  # its savepoint was released: bumped once more, harmlessly
    assert (generation(migrated, "gen-a"), generation(migrated, "gen-b")) == (start_a + 1, start_b + 2)

    with migrated.session() as session, session.begin():
        savepoint = session.begin_nested()
        bump_generation(session, "gen-a")
        savepoint.rollback()  # the bump is gone with it
        bump_generation(session, "gen-a")  # so this one bumps
        bump_generation(session, "gen-a")
    assert generation(migrated, "gen-a") == start_a + 2

    with migrated.session() as session:  # a transaction ended: the next one bumps again
        with session.begin():
            bump_generation(session, "gen-b")
        with session.begin():
            bump_generation(session, "gen-b")
    assert generation(migrated, "gen-b") == start_b + 4


def test_the_mark_a_transaction_leaves_is_known_without_reading_it_again(migrated: Database) -> None:
    with migrated.session() as session, session.begin():
        apply_quota_config(session, quotas(2, "gen-a", "gen-b"), applied_by="test", source="test")

    with migrated.session() as session:
        with session.begin():
            read = read_mark(session, "gen-a", lock=True)
            assert read is not None
            assert mark_written(session, "gen-a", read) == read  # nothing written yet
            with session.begin_nested():
                bump_generation(session, "gen-a")
            bumped = QueueMark(read.revision, read.generation + 1)
            assert mark_written(session, "gen-a", read) == read_mark(session, "gen-a") == bumped
        with session.begin():  # the next transaction starts from its own read
            read = read_mark(session, "gen-a", lock=True)
            assert read == bumped
            assert mark_written(session, "gen-a", read) == read
            savepoint = session.begin_nested()
            bump_generation(session, "gen-a")
            savepoint.rollback()
            # The rolled-back bump leaves it off: a kept state with it is read whole next time, never
            # taken for the ledger's.
            assert mark_written(session, "gen-a", read) != read_mark(session, "gen-a")
