#!/usr/bin/env bash
# Create .venv and install airflow-quota with its pinned dependencies (constraints.txt).
# Idempotent: re-installs only when pyproject.toml or constraints.txt changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "airflow-quota needs Python 3.11 or newer; none was found on PATH" >&2
    return 1
}

if [ ! -x .venv/bin/python ]; then
    python="$(find_python)"
    echo "setup: creating .venv with $python"
    "$python" -m venv .venv
fi

stamp=.venv/.airflow-quota-installed
wanted="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    echo "setup: installing airflow-quota and its pinned dependencies (first run takes a few minutes)"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
    echo "$wanted" > "$stamp"
fi
