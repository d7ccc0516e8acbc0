"""What importing our modules loads, read in a clean interpreter (the test process has everything loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence


def loaded_after_each(modules: Sequence[str], watched: Sequence[str]) -> dict[str, list[str]]:
    """Import ``modules`` one by one in a fresh interpreter and say, after each, which of ``watched`` are
    loaded: the first module that loads one is named, as a process importing it alone would show."""
    probe = (
        "import importlib, json, sys\n"
        f"for module in {tuple(modules)!r}:\n"
        "    importlib.import_module(module)\n"
        f"    print(json.dumps([module, [name for name in {tuple(watched)!r} if name in sys.modules]]))\n"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert imported.returncode == 0, imported.stderr
    return dict(json.loads(line) for line in imported.stdout.splitlines() if line.startswith("["))
