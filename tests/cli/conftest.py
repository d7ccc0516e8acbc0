"""The ledger commands' tests reuse the migrated-database fixtures of ``tests/db`` (SQLite and PostgreSQL)."""

from tests.db.conftest import Database as Database
from tests.db.conftest import database as database
from tests.db.conftest import migrated as migrated
