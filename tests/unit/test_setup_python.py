"""Which Python ``scripts/setup.sh`` makes ``.venv`` with: of the builds of one name on PATH, the fastest on
its gauge, passing over one that cannot make a venv (Debian's python3.11 without python3-venv has no
ensurepip).

Each build is a real interpreter: a venv of the test's own Python made with ``--copies``, so each is a file
of its own. A slow one runs every Python function call through a trace function (its ``.pth`` sets it at
start-up); one without ensurepip hides the module the same way. ``find_python`` runs in bash, read from the
script itself, with nothing else on PATH but awk.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = f"python{sys.version_info.major}.{sys.version_info.minor}"
SLOW = "import sys; sys.settrace(lambda *event: None)\n"
NO_ENSUREPIP = "import sys; sys.modules['ensurepip'] = None\n"


def a_build(root: Path, start_up: str = "") -> Path:
    """A copy of this Python at ``root``, running ``start_up`` as it starts; its ``bin`` folder."""
    venv.EnvBuilder(symlinks=False, with_pip=False).create(root)
    if start_up:
        (site_packages(root) / "zz_start_up.pth").write_text(start_up)
    return root / "bin"


def site_packages(root: Path) -> Path:
    (found,) = root.glob("lib/python*/site-packages")
    return found


def find_python(path: list[Path], tmp_path: Path) -> tuple[str, str]:
    """What setup.sh's ``find_python`` prints (the build it chose) and says on stderr, with only ``path``
    and awk on PATH."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    functions = [
        match.group(0)
        for match in re.finditer(r"^(find_python|python_gauge)\(\) \{\n.*?^\}\n", script, re.M | re.S)
    ]
    assert len(functions) == 2, "setup.sh's find_python and python_gauge were not found"
    awk = shutil.which("awk")
    assert awk is not None
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "awk").symlink_to(awk)
    done = subprocess.run(
        ["/bin/bash", "-c", "".join(functions) + "find_python"],
        env={"PATH": ":".join(str(folder) for folder in [*path, tools])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


def test_set_up_makes_the_venv_with_the_fastest_build_of_the_name_on_path(tmp_path: Path) -> None:
    slow = a_build(tmp_path / "slow", SLOW)
    fast = a_build(tmp_path / "fast")
    chosen, said = find_python([slow, fast], tmp_path)
    assert chosen == str((fast / NAME).resolve())
    assert str((slow / NAME).resolve()) in said and str((fast / NAME).resolve()) in said


def test_set_up_passes_over_a_build_that_cannot_make_a_venv_however_fast(tmp_path: Path) -> None:
    slow = a_build(tmp_path / "slow", SLOW)
    without_ensurepip = a_build(tmp_path / "without-ensurepip", NO_ENSUREPIP)
    chosen, said = find_python([without_ensurepip, slow], tmp_path)
    assert chosen == str((slow / NAME).resolve())
    assert "without-ensurepip" not in said
