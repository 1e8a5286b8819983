"""Fixtures of the outcome tests: the ``tiny`` scenario generated and replayed once for the session
(in-process) into a lake the gold tables are computed from."""

from __future__ import annotations

import pytest

from kraft_replay.lake import Lake


@pytest.fixture(scope="session")
def replayed_tiny(spark, tmp_path_factory) -> Lake:
    from kraft_replay.generate import generate
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.replay import run_replay

    lk = Lake(str(tmp_path_factory.mktemp("replayed-tiny")), spark, backend="deltars")
    generate(spark, lk, load_scenario("tiny"), progress=lambda _: None)
    run_replay(spark, lk, say=lambda _: None)
    return lk
