#!/usr/bin/env bash
# Create .venv and install airflow-quota with its pinned dependencies (constraints.txt).
# Idempotent: re-installs only when pyproject.toml or constraints.txt changed since the last run.
#
# It installs with uv (https://docs.astral.sh/uv/, a PyPI wheel that pip puts in .venv/.uv, outside the
# venv's packages, so `pip freeze` never lists it in constraints.txt) when it can: the same constraints.txt
# and '.[dev]' from the same indexes as pip, the same packages, in about 20 s where pip takes 2 to 3 minutes.
# When uv cannot be installed or fails, it installs with pip. It says which it used.
#
#   QUOTA_SETUP_INSTALLER=auto (default)   uv, else pip
#   QUOTA_SETUP_INSTALLER=pip              pip only (what set-up did before uv; also the fallback's test)
#   QUOTA_SETUP_INSTALLER=uv               uv only: fail rather than fall back to pip
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9  # the uv release set-up installs (a PyPI wheel); its resolver is checked against pip's
INSTALLER="${QUOTA_SETUP_INSTALLER:-auto}"
case "$INSTALLER" in
auto | uv | pip) ;;
*)
    echo "setup: QUOTA_SETUP_INSTALLER must be auto, uv or pip, got '$INSTALLER'" >&2
    exit 2
    ;;
esac

# The Python that .venv is made with: QUOTA_PYTHON when set; else the newest of python3.13, 3.12 and 3.11 (or
# a python3 of 3.11 or newer) on PATH and, of that name's builds on PATH, the fastest on a short gauge. Builds
# of one version differ: on Debian 12 the system's python3.11 (built with profile-guided and link-time
# optimisation) imports Airflow in x0.75 of the CPU time, and runs the whole test suite in x0.80, that pyenv's
# build of 3.11 (built without either) takes, which comes first on PATH where pyenv is set up.
find_python() {
    if [ -n "${QUOTA_PYTHON:-}" ]; then
        if ! python_gauge "$QUOTA_PYTHON" >/dev/null; then
            echo "setup: QUOTA_PYTHON=$QUOTA_PYTHON is not a Python 3.11 or newer that can make a venv" >&2
            return 1
        fi
        echo "$QUOTA_PYTHON"
        return 0
    fi
    local name build measured fastest="" fastest_seconds="" seen=""
    for name in python3.13 python3.12 python3.11 python3; do
        for build in $(type -ap "$name"); do
            measured="$(python_gauge "$build")" || continue  # "SECONDS EXECUTABLE", or not 3.11 or newer
            case "$seen, " in *", ${measured#* } "*) continue ;; esac  # /bin and /usr/bin: one build
            seen="$seen, ${measured#* } ${measured%% *} s"
            if [ -z "$fastest" ] || awk -v a="${measured%% *}" -v b="$fastest_seconds" 'BEGIN { exit !(a < b) }'; then
                fastest="${measured#* }" fastest_seconds="${measured%% *}"
            fi
        done
        if [ -n "$fastest" ]; then
            echo "setup: $name on PATH, a short gauge's CPU time: ${seen#, }" >&2
            echo "$fastest"
            return 0
        fi
    done
    echo "airflow-quota needs Python 3.11 or newer, with its venv module (Debian: apt install python3-venv);" \
        "none was found on PATH" >&2
    return 1
}

# "SECONDS EXECUTABLE" of a Python 3.11 or newer that can make a venv (fails for any other: Debian ships
# ensurepip, which `python -m venv` needs, apart, in python3-venv): the least CPU time of three runs of a
# short pure-Python workload (objects, dicts, strings: what Airflow's start spends its time on), and the
# interpreter's own file (a pyenv shim's or a symbolic link's, resolved).
python_gauge() {
    "$1" -c '
import os, sys, time
if sys.version_info < (3, 11):
    sys.exit(1)
import ensurepip, venv
class Row:
    def __init__(self, key, value):
        self.key, self.value = key, value
    def label(self):
        return f"{self.key}={self.value}"
def timed():
    started = time.process_time()
    rows = {str(i): Row(str(i), i) for i in range(40000)}
    sum(len(row.label()) for row in rows.values())
    return time.process_time() - started
print(f"{min(timed() for _ in range(3)):.4f} {os.path.realpath(sys.executable)}")
' 2>/dev/null
}

# pip's own settings (pip.conf files, PIP_* variables), as uv arguments, one a line: the index, extra
# indexes, find-links, constraint files, trusted hosts, pre-releases, certificate, timeout and proxy that pip
# would use, read by pip's own option parser. uv takes the best version across all indexes as pip does
# (--index-strategy unsafe-best-match; uv's default stops at the first index that has the package), reads no
# uv.toml (--no-config: pip's settings are the only ones, for both installers).
uv_arguments() {
    .venv/bin/python - <<'EOF'
import os

from pip._internal.commands import create_command

options, _ = create_command("install").parse_args([])
out = ["--no-config", "--index-strategy", "unsafe-best-match"]
if options.no_index:  # pip then reads no index at all, extra ones included
    out.append("--no-index")
else:
    out += ["--index-url", options.index_url]
    for url in options.extra_index_urls or []:
        out += ["--extra-index-url", url]
for link in options.find_links or []:
    out += ["--find-links", link]
for constraint in options.constraints or []:
    out += ["--constraint", constraint]
for host in options.trusted_hosts or []:
    out += ["--allow-insecure-host", host]
if options.pre:
    out += ["--prerelease", "allow"]
for line in out:
    print(line)
# The environment uv reads for what pip takes as options (printed as NAME=value lines, after a marker).
print("--")
if options.cert:
    print(f"SSL_CERT_FILE={options.cert}")
if options.timeout:
    print(f"UV_HTTP_TIMEOUT={int(options.timeout)}")
if options.proxy:
    print(f"HTTPS_PROXY={options.proxy}")
    print(f"HTTP_PROXY={options.proxy}")
EOF
}

install_with_uv() {
    local uv=.venv/.uv/bin/uv
    if [ ! -x "$uv" ] || [ "$("$uv" --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
        rm -rf .venv/.uv
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --target .venv/.uv \
            "uv==$UV_VERSION" || return 1
    fi
    local settings args=() env=() seen_marker="" line
    settings="$(uv_arguments)" || return 1
    while IFS= read -r line; do
        if [ "$line" = "--" ]; then
            seen_marker=1
        elif [ -n "$seen_marker" ]; then
            env+=("$line")
        else
            args+=("$line")
        fi
    done <<<"$settings"
    # Two steps, one set: the constraints pin every package, so installing '.' and then '.[dev]' gives what
    # '.[dev]' alone gives. The first (Airflow and what it runs: about 160 packages) is compiled to bytecode,
    # as pip compiles everything: where PYTHONDONTWRITEBYTECODE is set (many container images set it) an
    # `airflow` command would otherwise compile Airflow again at each start. The second (the tools and the
    # test dependencies: the SageMaker SDK with pandas, scipy, scikit-learn and mlflow; moto; sympy...) is
    # not: compiling everything took 56 CPU-s, the first step's packages 14; those compile on first use
    # instead (scripts/test.sh and scripts/demo.sh let Python write its bytecode caches). pip is upgraded
    # as the pip path upgrades it, so `.venv/bin/pip freeze --all` lists the same set either way.
    # (The arrays as ${a[@]+"${a[@]}"}: bash 3.2, macOS's, calls an empty array unbound under set -u.)
    local uv_pip=(env ${env[@]+"${env[@]}"} "$uv" pip install --quiet --python .venv/bin/python)
    "${uv_pip[@]}" ${args[@]+"${args[@]}"} --compile-bytecode -c constraints.txt -e . \
        pip --upgrade-package pip || return 1
    "${uv_pip[@]}" ${args[@]+"${args[@]}"} -c constraints.txt -e '.[dev]'
}

install_with_pip() {
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[dev]'
}

if [ ! -x .venv/bin/python ]; then
    python="$(find_python)"
    echo "setup: creating .venv with $python"
    "$python" -m venv .venv
fi

stamp=.venv/.airflow-quota-installed
wanted="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    started=$SECONDS
    used=""
    if [ "$INSTALLER" != pip ]; then
        echo "setup: installing airflow-quota and its pinned dependencies with uv $UV_VERSION"
        if install_with_uv; then
            used="uv $UV_VERSION"
        elif [ "$INSTALLER" = uv ]; then
            echo "setup: uv could not install them (QUOTA_SETUP_INSTALLER=uv: no fallback to pip)" >&2
            exit 1
        else
            echo "setup: uv could not be installed or could not install them; falling back to pip"
        fi
    fi
    if [ -z "$used" ]; then
        echo "setup: installing airflow-quota and its pinned dependencies with pip (takes a few minutes)"
        install_with_pip
        used="pip"
    fi
    echo "$wanted" >"$stamp"
    echo "setup: installed with $used in $((SECONDS - started)) s"
fi
