#!/usr/bin/env bash
# The demo: a working Airflow (airflow standalone, SQLite) with airflow-quota, three teams sharing 4 local
# "GPUs" (demo/quotas.yaml) and demo DAGs that train on the local backend (CPU scripts that checkpoint:
# no GPU or AWS account needed). It triggers the demo DAGs, prints the URL and the login, and runs until
# Ctrl-C. Within about two minutes the GPU Quotas page shows nlp borrowing research's idle GPUs,
# research's job arriving, the borrowers preempted, and later resumed from their checkpoints.
#
#   DEMO_PORT=8080 (default)        the api-server's port
#   AIRFLOW_HOME=./airflow-home     where the demo's database, logs and checkpoints live
#   DEMO_EXIT_AFTER=SECONDS         stop by itself after that long (used by the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
./scripts/setup.sh

PORT="${DEMO_PORT:-8080}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/airflow-home}"
export PATH="$ROOT/.venv/bin:$PATH"  # airflow standalone starts its components as `airflow ...`
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/demo/dags"
export AIRFLOW__CORE__EXECUTOR="LocalExecutor,airflow_quota.allocator.executor.QuotaAllocatorExecutor"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://localhost:$PORT"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
mkdir -p "$AIRFLOW_HOME"

if (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "demo: port $PORT is already in use; stop what runs there or choose another: DEMO_PORT=8081 $0" >&2
    exit 1
fi

echo "demo: the quota design (demo/quotas.yaml)"
airflow quota validate demo/quotas.yaml
echo "demo: preparing the database in $AIRFLOW_HOME"
airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || {
    tail -20 "$AIRFLOW_HOME/db-migrate.log" >&2
    exit 1
}
airflow quota apply -f demo/quotas.yaml

echo "demo: starting airflow standalone (log: $AIRFLOW_HOME/standalone.log)"
setsid airflow standalone >"$AIRFLOW_HOME/standalone.log" 2>&1 &
STANDALONE=$!
stop() {
    echo
    echo "demo: stopping airflow standalone"
    kill -TERM -- "-$STANDALONE" 2>/dev/null || true
    wait "$STANDALONE" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

wait_for() {  # wait_for WHAT SECONDS COMMAND...
    local what="$1" seconds="$2"
    shift 2
    for _ in $(seq "$seconds"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$STANDALONE" 2>/dev/null; then
            echo "demo: airflow standalone exited; the end of its log:" >&2
            tail -30 "$AIRFLOW_HOME/standalone.log" >&2
            exit 1
        fi
        sleep 1
    done
    echo "demo: timed out waiting for $what; the end of the log:" >&2
    tail -30 "$AIRFLOW_HOME/standalone.log" >&2
    exit 1
}
wait_for "the api-server" 180 .venv/bin/python -c "import urllib.request as r; r.urlopen('http://localhost:$PORT/api/v2/monitor/health', timeout=2)"
RUN="demo-$(date +%Y%m%d-%H%M%S)"
# research first: it prepares its data (25 s) while nlp's trials borrow its idle GPUs, then takes them back.
for dag in demo_research_pretrain demo_nlp_sweep demo_vision_eval; do
    wait_for "DAG $dag to be parsed" 180 airflow dags trigger "$dag" --run-id "$RUN"
done

PASSWORD=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1])).get('admin',''))" \
    "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" 2>/dev/null || true)
cat <<EOF

demo: running. Airflow:     http://localhost:$PORT  (login: admin / ${PASSWORD:-see $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated})
      GPU Quotas page:      http://localhost:$PORT/quota/
      From a terminal:      AIRFLOW_HOME=$AIRFLOW_HOME .venv/bin/airflow quota snapshot   (or: quota events)
      Triggered run $RUN of demo_nlp_sweep, demo_vision_eval and demo_research_pretrain.
      Ctrl-C stops the demo.
EOF

if [ -n "${DEMO_EXIT_AFTER:-}" ]; then
    sleep "$DEMO_EXIT_AFTER"
else
    wait "$STANDALONE"
fi
