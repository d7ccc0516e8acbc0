"""One file per ledger migration, numbered in order."""
