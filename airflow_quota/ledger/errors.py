"""What the ledger refuses: each error means nothing was written."""

from __future__ import annotations


class LedgerError(ValueError):
    """The ledger cannot do what was asked; nothing was written."""


class AppliedConfigError(LedgerError):
    """A job queue's applied configuration no longer validates (applied by an older release whose rules
    were looser): the queue is not allocated, and its jobs wait, until a valid quota file is applied."""


class ConfigApplyError(LedgerError):
    """A quota file cannot be applied as it is; ``problems`` says why, one line each."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join([f"{source} was not applied; nothing changed:", *problems]))
