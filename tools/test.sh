#!/usr/bin/env bash
# `make test`: set-up (the venv, Debian's chromium, Airflow's venv, the JVM's class archive), then the whole suite on two workers;
# prints the wall time of each part at the end. Exits with pytest's code.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PYTHON=${PYTHON:-python3.11}
make -s venv PYTHON="$PYTHON" || exit $?
tools/ensure_chromium.sh || exit $?
PYTHON="$PYTHON" bash tools/airflow_venv.sh || exit $?
# the driver JVM's class archive (once per Java and pyspark): each of the suite's Spark processes starts sooner
.venv/bin/python -m kraft_replay.spark.classes
ready=$(date +%s)
# each test module runs whole on one worker (its fixtures built once), the slowest first (tests/conftest.py)
.venv/bin/python -m pytest -q -n 2 --no-loadscope-reorder "$@"
rc=$?
end=$(date +%s)
echo "make test: $((end - start)) s in all (set-up $((ready - start)) s, suite $((end - ready)) s), pytest exit $rc"
exit $rc
