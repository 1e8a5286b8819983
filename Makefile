# Two commands set up and run everything on a fresh machine with Python 3.11:
#   make demo   - create/update .venv (with the delta-spark backend's jars when Maven is there), then run
#                 the demo end to end on the embedded default
#   make test   - create/update .venv and the delta-spark jars (and Airflow's .venv-airflow), then run the
#                 whole test suite (tools/test.sh)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv deps jars bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 (or run make PYTHON=/path/to/python3.11)"; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# the delta-spark backend's jars from Maven Central, once (kraft_replay.spark.delta_jars); without Maven
# a note, and the embedded backend works as before
jars: $(STAMP)
	@$(PY) -m kraft_replay.spark.delta_jars --optional

# the venv alone (make test's set-up fetches the jars beside the class archive: tools/test.sh)
deps: $(STAMP)

venv: deps jars

demo: $(STAMP) jars
	$(VENV)/bin/kraft-replay --lake ./lake demo

test:
	PYTHON=$(PYTHON) bash tools/test.sh

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf lake .spark-warehouse .pytest_cache .hypothesis
