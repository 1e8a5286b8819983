"""Fixtures for the lake tests: a fresh lake per test on the shared Spark session, on each backend.

Every test taking ``lake`` runs twice, on the embedded backend (``deltars``) and on native Delta
(``delta-spark``, the jars the set-up fetched: the shared session carries them). A module or test
marked ``embedded`` tests the embedded backend's own machinery (its commit protocol, staged and
driver-side writes) and runs on ``deltars`` only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # lake_helpers, for tests and helper jobs

from lake_helpers import EVENTS  # noqa: E402

from kraft_replay.lake import Lake  # noqa: E402

BACKENDS = ("deltars", "delta-spark")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "embedded: tests the embedded backend's own machinery (deltars only)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        embedded = metafunc.definition.get_closest_marker("embedded") is not None
        metafunc.parametrize("backend", BACKENDS[:1] if embedded else BACKENDS)


@pytest.fixture
def lake(spark, tmp_path, backend) -> Lake:
    return Lake(str(tmp_path / "lake"), spark, backend=backend, target_file_rows=500)


@pytest.fixture
def events_table(lake) -> str:
    lake.create_table("events", EVENTS, partition_by=["part"])
    return "events"
