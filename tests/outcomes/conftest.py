"""Fixtures of the outcome tests: the ``tiny`` scenario (the session's CLI-generated lake, copied: it is
generated once per test run) replayed once for the session (in-process) into a lake the gold tables are
computed from."""

from __future__ import annotations

import shutil

import pytest

from kraft_replay.lake import Lake


@pytest.fixture(scope="session")
def replayed_tiny(spark, tiny_generated, tmp_path_factory) -> Lake:
    from kraft_replay.replay import run_replay

    root = tmp_path_factory.mktemp("replayed-tiny") / "lake"
    shutil.copytree(tiny_generated.lake_dir, root)
    lk = Lake(str(root), spark, backend="deltars")
    run_replay(spark, lk, say=lambda _: None)
    return lk


@pytest.fixture(scope="session")
def gold_tiny(spark, replayed_tiny) -> Lake:
    """``replayed_tiny`` with every gold table: the outcomes (written by ``kraft-replay outcomes`` unless
    an earlier test did) and ``cache_lag``."""
    from kraft_replay.outcomes.cache_lag import CACHE_LAG, write_cache_lag
    from kraft_replay.outcomes.run import OUTCOME_TABLES
    from kraft_replay.serve.cli import main

    lake = replayed_tiny
    if not all(lake.exists(t) for t in OUTCOME_TABLES):
        assert main(["--profile", "test", "outcomes", "--lake", lake.root]) == 0
    if not lake.exists(CACHE_LAG):
        clusters = [r.cluster_id for r in lake.read("log_commit").select("cluster_id").distinct().collect()]
        write_cache_lag(lake, clusters, say=lambda _: None)
    return lake
