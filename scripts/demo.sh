#!/usr/bin/env bash
# The demo: a working Airflow (airflow standalone, SQLite) with airflow-quota, three teams sharing 4 local
# "GPUs" (demo/quotas.yaml) and demo DAGs that train on the local backend (CPU scripts that checkpoint:
# no GPU or AWS account needed). Once the GPU Quotas page can be opened it prints the URL and the login,
# then triggers the demo DAGs, and runs until Ctrl-C. The page then shows nlp borrowing research's idle
# GPUs; a minute later research's job arrives, the borrowers are preempted, and later resume from their
# checkpoints.
#
#   ./scripts/demo.sh               start the demo (and its first round)
#   ./scripts/demo.sh round         another round on the running demo (from another terminal)
#
#   DEMO_PORT=8080 (default)        the api-server's port
#   AIRFLOW_HOME=./airflow-home     where the demo's database, logs and checkpoints live
#   DEMO_RECLAIM_AFTER=60 (default) seconds between the borrowers' start and research's reclaim (read when
#                                   the demo starts; the tests make it short)
#   DEMO_EXIT_AFTER=SECONDS         stop by itself after that long (used by the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

COMMAND="${1:-start}"
case "$COMMAND" in
start | round) ;;
*)
    echo "demo: unknown command '$COMMAND'; use: $0 (start the demo) or $0 round (another round)" >&2
    exit 2
    ;;
esac
RECLAIM_AFTER="${DEMO_RECLAIM_AFTER:-60}"
if ! [[ "$RECLAIM_AFTER" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "demo: DEMO_RECLAIM_AFTER must be a number of seconds (like 60), got '$RECLAIM_AFTER'" >&2
    exit 2
fi

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
# A task's calls to the api-server time out after 5 s by default; on a busy laptop a call can take longer,
# and a task whose call keeps timing out fails before its own code runs.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=30
export DEMO_RECLAIM_AFTER="$RECLAIM_AFTER"  # the demo DAGs read it (demo/dags/demo_teams.py)
# Python writes its bytecode caches (__pycache__), even where the environment turns them off
# (PYTHONDONTWRITEBYTECODE, which many container images set): otherwise every Airflow process compiles this
# package again, and what set-up left uncompiled (scripts/setup.sh), at each start.
unset PYTHONDONTWRITEBYTECODE
DAGS=(demo_nlp_sweep demo_vision_eval demo_research_pretrain)

api_up() {
    .venv/bin/python -c "import urllib.request as r; r.urlopen('http://localhost:$PORT/api/v2/monitor/health', timeout=2)"
}
# Airflow builds the api-server's task API (/execution) on its first request: 8 to 10 s of CPU on a
# 2-core machine, during which the api-server answers nothing. Made here, before any task runs, so the demo's first
# tasks do not wait for it (on a loaded machine their calls timed out and the trials failed).
task_api_up() {
    .venv/bin/python -c "import urllib.request as r; r.urlopen('http://localhost:$PORT/execution/health', timeout=120)"
}

# The demo DAGs are parsed (the dag processor wrote them to the database): asked of the REST API by one small
# process, not an `airflow dags list` (an Airflow start, about 3 CPU-s, each try) while Airflow starts.
dags_parsed() {
    .venv/bin/python demo/trigger_round.py --parsed "http://localhost:$PORT" "${DAGS[@]}"
}

# One round: the three demo DAGs triggered under one run id. nlp's trials start at once (two on research's
# idle GPUs); research's data preparation takes DEMO_RECLAIM_AFTER seconds, then it takes its GPUs back.
# Through the REST API, as the admin user (demo/trigger_round.py): one small process, not an Airflow start
# per DAG.
trigger_round() {
    RUN="demo-$(date +%Y%m%d-%H%M%S)"
    .venv/bin/python demo/trigger_round.py "http://localhost:$PORT" "$RUN" "${DAGS[@]}"
    echo "      Triggered run $RUN of ${DAGS[0]}, ${DAGS[1]} and ${DAGS[2]}."
}

if [ "$COMMAND" = round ]; then
    if [ ! -d "$AIRFLOW_HOME" ] || ! api_up >/dev/null 2>&1; then
        echo "demo: no demo runs on port $PORT with AIRFLOW_HOME=$AIRFLOW_HOME; start it with $0" >&2
        exit 1
    fi
    echo "demo: another round (research reclaims its GPUs as set when the demo started)"
    trigger_round
    echo "      GPU Quotas page:      http://localhost:$PORT/quota/  (filter the decisions by DAG run $RUN)"
    exit 0
fi

./scripts/setup.sh
mkdir -p "$AIRFLOW_HOME"

if (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    echo "demo: port $PORT is already in use; stop what runs there or choose another: DEMO_PORT=8081 $0" >&2
    exit 1
fi

echo "demo: the quota design (demo/quotas.yaml)"
airflow-quota-validate demo/quotas.yaml  # `airflow quota validate` without starting Airflow (3 s less)
# airflow standalone migrates the database ($AIRFLOW_HOME) before it starts its components, the quota tables
# too (the provider's migrations run with Airflow's): no `airflow db migrate` of our own before it (an Airflow
# start, about 5 CPU-s and as many seconds before the URL). The quota file is applied once it has.
echo "demo: starting airflow standalone (log: $AIRFLOW_HOME/standalone.log)"
setsid airflow standalone >"$AIRFLOW_HOME/standalone.log" 2>&1 &
STANDALONE=$!
stop() {
    echo
    echo "demo: stopping airflow standalone"
    kill -TERM -- "-$STANDALONE" 2>/dev/null || true
    wait "$STANDALONE" 2>/dev/null || true
    # Its api-server and scheduler can outlive it by a moment, the port still taken: a demo started again
    # at once found it in use. Wait for its whole process group (SIGKILL what is left after 30 s).
    for _ in $(seq 150); do
        kill -0 -- "-$STANDALONE" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -KILL -- "-$STANDALONE" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

wait_for() {  # wait_for WHAT SECONDS COMMAND...: tried every half second
    local what="$1" seconds="$2"
    shift 2
    for _ in $(seq $((seconds * 2))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if ! kill -0 "$STANDALONE" 2>/dev/null; then
            echo "demo: airflow standalone exited; the end of its log:" >&2
            tail -30 "$AIRFLOW_HOME/standalone.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "demo: timed out waiting for $what; the end of the log:" >&2
    tail -30 "$AIRFLOW_HOME/standalone.log" >&2
    exit 1
}
wait_for "the api-server" 180 api_up
echo "demo: applying demo/quotas.yaml"
airflow quota apply -f demo/quotas.yaml
wait_for "the api-server's task API" 180 task_api_up
wait_for "the demo DAGs to be parsed" 180 dags_parsed

PASSWORD=$(.venv/bin/python -c "import json,sys; print(json.load(open(sys.argv[1])).get('admin',''))" \
    "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" 2>/dev/null || true)
cat <<EOF

demo: running. Airflow:     http://localhost:$PORT  (login: admin / ${PASSWORD:-see $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated})
      GPU Quotas page:      http://localhost:$PORT/quota/
      From a terminal:      AIRFLOW_HOME=$AIRFLOW_HOME .venv/bin/airflow quota snapshot   (or: quota events)
EOF
trigger_round
cat <<EOF
      nlp's trials start now, two of them on research's idle GPUs; research takes its GPUs back in about
      ${RECLAIM_AFTER} s (DEMO_RECLAIM_AFTER), and the trials resume when its job is done.
      Another round:        $0 round   (from another terminal, while the demo runs)
      Ctrl-C stops the demo.
EOF

if [ -n "${DEMO_EXIT_AFTER:-}" ]; then
    sleep "$DEMO_EXIT_AFTER"
else
    wait "$STANDALONE"
fi
