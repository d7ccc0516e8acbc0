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
# The test files run side by side on QUOTA_TEST_WORKERS pytest-xdist workers (tests/conftest.py says in
# which order); QUOTA_TEST_WORKERS=0 runs them one after another in this process.
echo "test: pytest"
# Bytecode caches on, even where the environment turns them off (PYTHONDONTWRITEBYTECODE, which many
# container images set): otherwise each pytest worker compiles the package and rewrites every test module
# again, half of what collecting the tests costs, and so does each Python process a test starts. The caches
# are the __pycache__ folders git ignores.
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/pytest -n "${QUOTA_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
