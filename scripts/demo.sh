#!/usr/bin/env bash
# Set up (if needed), check the example quota file, then replay the three-teams scenario through the
# quota engine and print its timeline: one team borrows idle GPUs, the lender's job arrives, the
# borrower is preempted, and later resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/airflow-home}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
echo "demo: airflow quota validate examples/quotas.yaml"
.venv/bin/airflow quota validate examples/quotas.yaml
echo
echo "demo: airflow quota simulate examples/scenarios/three_teams.yaml"
.venv/bin/airflow quota simulate examples/scenarios/three_teams.yaml
