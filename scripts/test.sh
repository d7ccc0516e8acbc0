#!/usr/bin/env bash
# Set up (if needed), then run the linters, the type checker and every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "test: ruff"
.venv/bin/ruff check
.venv/bin/ruff format --check
# Bytecode caches on, even where the environment turns them off (PYTHONDONTWRITEBYTECODE, which many
# container images set): otherwise each pytest worker compiles the package and rewrites every test module
# again, half of what collecting the tests costs, and so does each Python process a test starts. The caches
# are the __pycache__ folders git ignores.
unset PYTHONDONTWRITEBYTECODE
echo "test: mypy"
# mypy uses one core. On the other, pytest collects the tests once, which writes the test modules' rewritten
# bytecode: on a fresh clone the workers below would otherwise all rewrite them at once (four workers'
# collection: 22.5 CPU-s, 15.2 with them cached). Its output and status are dropped: the run below says
# the same.
.venv/bin/pytest --collect-only -q "$@" >/dev/null 2>&1 &
collecting=$!
typed=0
.venv/bin/mypy || typed=$?
wait "$collecting" || true
[ "$typed" = 0 ] || exit "$typed"
# The test files run side by side on QUOTA_TEST_WORKERS pytest-xdist workers (tests/conftest.py says in
# which order); QUOTA_TEST_WORKERS=0 runs them one after another in this process.
echo "test: pytest"
exec .venv/bin/pytest -n "${QUOTA_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
