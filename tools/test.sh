#!/usr/bin/env bash
# `make test`: set-up (the venv, Debian's chromium, Airflow's venv), then the whole suite on two workers;
# prints the wall time of each part at the end. Exits with pytest's code.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PYTHON=${PYTHON:-python3.11}
make -s venv PYTHON="$PYTHON" || exit $?
tools/ensure_chromium.sh || exit $?
PYTHON="$PYTHON" bash tools/airflow_venv.sh || exit $?
ready=$(date +%s)
# each test module runs whole on one worker (its fixtures built once), the slowest first (tests/conftest.py)
.venv/bin/python -m pytest -q -n 2 --no-loadscope-reorder "$@"
rc=$?
end=$(date +%s)
echo "make test: $((end - start)) s in all (set-up $((ready - start)) s, suite $((end - ready)) s), pytest exit $rc"
exit $rc
