#!/usr/bin/env bash
# `make test`: set-up (the venv and the delta-spark jars, Debian's chromium, Airflow's venv, the JVM's class
# archive), then the whole suite on two workers;
# prints the wall time of each part at the end. Exits with pytest's code.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PYTHON=${PYTHON:-python3.11}
# the set-up's parts at once (each idempotent): Debian's chromium and Airflow's venv (mostly downloads)
# beside the project's venv; then, beside each other, the delta-spark jars and the driver JVM's class
# archive (once per Java and pyspark: a Spark run whose classes each of the suite's Spark processes then
# maps, so it starts sooner), which both need that venv
tools/ensure_chromium.sh & chromium=$!
PYTHON="$PYTHON" bash tools/airflow_venv.sh & airflow=$!
setup_rc=0
jars=""
if make -s deps PYTHON="$PYTHON"; then
  # the delta-spark jars beside the archive: the archive's sessions run on the embedded backend, whose class
  # path holds pyspark's jars only
  make -s jars PYTHON="$PYTHON" & jars=$!
  .venv/bin/python -m kraft_replay.spark.classes  # optional: without an archive the JVMs start slower, nothing fails
else
  setup_rc=$?
fi
for pid in $chromium $airflow $jars; do wait "$pid" || setup_rc=$?; done
[ "$setup_rc" = 0 ] || { echo "make test: set-up failed (exit $setup_rc)" >&2; exit "$setup_rc"; }
ready=$(date +%s)
# each test module runs whole on one worker (its fixtures built once), the slowest first (tests/conftest.py)
.venv/bin/python -m pytest -q -n 2 --no-loadscope-reorder "$@"
rc=$?
end=$(date +%s)
echo "make test: $((end - start)) s in all (set-up $((ready - start)) s, suite $((end - ready)) s), pytest exit $rc"
exit $rc
