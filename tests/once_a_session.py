"""A resource started once in a pytest session (one xdist worker) by whichever test asks first, and stopped
at the session's end: what a session fixture is, for modules that cannot ask for the fixture because it
lives in another folder's conftest (a copy of the fixture there would start a second one)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import TypeVar

import pytest

T = TypeVar("T")


def once_a_session(
    session: pytest.Session, key: pytest.StashKey[T], start: Callable[[], AbstractContextManager[T]]
) -> T:
    """What ``start()``'s context gives, entered the first time ``key`` is asked for in this session and
    exited when the session ends."""
    if key not in session.stash:
        running = ExitStack()
        session.stash[key] = running.enter_context(start())
        session.addfinalizer(running.close)
    return session.stash[key]
