#!/usr/bin/env bash
# Set up (if needed), then run the linters, the type checker and every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "test: ruff"
.venv/bin/ruff check
.venv/bin/ruff format --check
echo "test: mypy"
.venv/bin/mypy
echo "test: pytest"
exec .venv/bin/pytest "$@"
