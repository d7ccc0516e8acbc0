"""Waiting in tests for what happens in another process (an emulator, a server): poll until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something truthy, and return that; fail naming ``what`` after
    ``timeout_s``. A poll that asks an emulator also moves its clock-driven state (a training job's end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
