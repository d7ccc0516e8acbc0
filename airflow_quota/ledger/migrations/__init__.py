"""The ledger's alembic migrations (run by ``QuotaDBManager``)."""
