"""Tests against real databases: the quota ledger on SQLite and PostgreSQL."""
