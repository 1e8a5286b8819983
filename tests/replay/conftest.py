"""Fixtures of the replay tests: the hand-built scenarios (replay_scenarios.py) replayed once by Spark
(one cluster per scenario, one run for the session) and by the sequential oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay_scenarios as scenarios  # noqa: E402
from replay_oracle import replay  # noqa: E402

from replay_scenarios import spark_replay  # noqa: E402


@pytest.fixture(scope="session")
def scenario_runs(spark):
    """``(oracle result, Spark ReplayTables, {table: pyarrow.Table})`` of every scenario."""
    log, control, snaps = scenarios.bronze()
    oracle = replay(log, control, snaps)
    res, got = spark_replay(spark, log, control, snaps)
    return oracle, res, got
