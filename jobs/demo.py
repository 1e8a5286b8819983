"""Spark job entry point for the demo (``spark-submit jobs/demo.py --lake DIR`` or ``python jobs/demo.py``)."""

from __future__ import annotations

import sys

from kraft_replay.serve.cli import main

if __name__ == "__main__":
    sys.exit(main([*sys.argv[1:], "demo"] if "demo" not in sys.argv[1:] else sys.argv[1:]))
