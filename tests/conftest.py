"""Shared fixtures: one SparkSession for the whole test session, tmp lakes, the reference dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KRAFT_REPLAY_SHARED", ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"


@pytest.fixture(scope="session")
def spark():
    from kraft_replay.spark import get_spark

    session = get_spark("test")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference (third-party data; never copied into the project)."""
    if not (REFERENCE / "kafka-kraft-facts.md").is_file():
        pytest.skip(f"reference data not found at {REFERENCE}: clone the project with ../shared beside it")
    return REFERENCE


@pytest.fixture(scope="session")
def schemas_dir(reference_dir: Path) -> Path:
    return reference_dir / "kafka-metadata-schemas"


@pytest.fixture(scope="session")
def real_kraft_dir(reference_dir: Path) -> Path:
    return reference_dir / "real-kraft"
