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
