#!/usr/bin/env bash
# Airflow's own virtualenv, .venv-airflow next to .venv (airflow_dags/README.md): the Spark provider pulls
# pyspark-client, which must never overwrite the engine's pyspark. Idempotent: a stamp names what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
VENV=.venv-airflow
STAMP=$VENV/.installed
PACKAGES="apache-airflow==3.3.2 apache-airflow-providers-apache-spark==6.3.4"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$PACKAGES" ]; then exit 0; fi
if ! command -v "$PYTHON" >/dev/null; then
  echo "error: $PYTHON not found: install Python 3.11 (or run PYTHON=/path/to/python3.11 bash tools/airflow_venv.sh)" >&2
  exit 2
fi
echo "creating $VENV ($PACKAGES) ..."
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# shellcheck disable=SC2086 # PACKAGES is a list of requirements
"$VENV/bin/python" -m pip install --quiet $PACKAGES
echo "$PACKAGES" > "$STAMP"
