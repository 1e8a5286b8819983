"""Fixtures for the generator tests: the ``tiny`` scenario generated once into a temporary lake."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Generated:
    lake: object
    result: object
    segments_dir: Path
    cluster_id: str


@pytest.fixture(scope="session")
def tiny_generated(spark, tmp_path_factory) -> Generated:
    from kraft_replay.generate.runner import generate
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.lake import Lake

    root = tmp_path_factory.mktemp("gen")
    lake = Lake(str(root / "lake"), spark, backend="deltars")
    sc = load_scenario("tiny")
    res = generate(spark, lake, sc, segments_out=str(root / "segments"), progress=lambda _m: None)
    return Generated(lake, res, root / "segments", sc.cluster_id)
