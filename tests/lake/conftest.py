"""Fixtures for the lake tests: a fresh lake per test on the shared Spark session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # lake_helpers, for tests and helper jobs

from lake_helpers import EVENTS  # noqa: E402

from kraft_replay.lake import Lake  # noqa: E402


@pytest.fixture
def lake(spark, tmp_path) -> Lake:
    return Lake(str(tmp_path / "lake"), spark, backend="deltars", target_file_rows=500)


@pytest.fixture
def events_table(lake) -> str:
    lake.create_table("events", EVENTS, partition_by=["part"])
    return "events"
