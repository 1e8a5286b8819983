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

from lake_helpers import BACKENDS, EVENTS  # noqa: E402

from kraft_replay.lake import Lake  # noqa: E402


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


@pytest.fixture(scope="module")
def shared_lakes(spark, tmp_path_factory):
    """Lakes that several tests of a module only read, each built once per module and backend:
    ``shared_lakes(backend, key, build)`` is the lake ``build(lake)`` filled on ``backend`` (a fresh lake,
    as the ``lake`` fixture makes), built on the first ask for ``key``. A test taking one must not write
    to it."""
    made: dict[tuple[str, str], Lake] = {}

    def get(backend: str, key: str, build) -> Lake:  # noqa: ANN001 - build(lake)
        if (backend, key) not in made:
            lake = Lake(str(tmp_path_factory.mktemp(f"{key}-{backend}") / "lake"), spark, backend=backend,
                        target_file_rows=500)
            build(lake)
            made[backend, key] = lake
        return made[backend, key]

    return get
