"""Fixtures of the replay tests: the hand-built scenarios (replay_scenarios.py, one cluster each) and —
when ../shared/reference is present — every real Kafka file plus one snapshot-only cluster per
log/snapshot pair, replayed once for the session by Spark (one run: the replay works per cluster)
and by the sequential oracle (each group separately)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay_scenarios as scenarios  # noqa: E402
from replay_oracle import replay  # noqa: E402
from replay_scenarios import spark_replay  # noqa: E402

from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402


class Runs:
    """The Spark replay of every group (``res``: ReplayTables, ``got``: {table: Arrow}) and the oracle
    of each group (``scenario_oracle``, ``real_oracle``; the latter None without the reference data)."""

    def __init__(self, res, got, scenario_oracle, real_oracle) -> None:
        self.res, self.got = res, got
        self.scenario_oracle, self.real_oracle = scenario_oracle, real_oracle


@pytest.fixture(scope="session")
def replay_runs(spark, request) -> Runs:
    groups = [scenarios.bronze()]
    try:
        real_dir = request.getfixturevalue("real_kraft_dir")
    except pytest.skip.Exception:
        real_dir = None
    if real_dir is not None:
        groups.append(scenarios.real_bronze(real_dir))
    oracles = [replay(*g) for g in groups]
    log, control, snaps = (pa.concat_tables([g[i].cast(s) for g in groups])
                           for i, s in enumerate((LOG_SCHEMA, CONTROL_SCHEMA, SNAPSHOT_SCHEMA)))
    res, got = spark_replay(spark, log, control, snaps)
    return Runs(res, got, oracles[0], oracles[1] if real_dir is not None else None)


@pytest.fixture(scope="session")
def scenario_runs(replay_runs):
    """``(oracle result, Spark ReplayTables, {table: pyarrow.Table})`` of the scenarios (the Spark
    tables also hold the real files' clusters: filter by cluster)."""
    return replay_runs.scenario_oracle, replay_runs.res, replay_runs.got


@pytest.fixture(scope="session")
def real_runs(replay_runs):
    if replay_runs.real_oracle is None:
        pytest.skip("reference data absent: ../shared/reference/real-kraft")
    return replay_runs.real_oracle, replay_runs.res, replay_runs.got
