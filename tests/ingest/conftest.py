"""Fixtures for ingest tests: a node data dir built from real Kafka files, and a fresh lake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

GREEN = "greenlemonT__kafka-temp__kafka1__"
SEGMENT = GREEN + "00000000000000000000.log"
SNAPSHOT = GREEN + "00000000000000028869-0000000189.checkpoint"
BOOTSTRAP = GREEN + "bootstrap.checkpoint"


@pytest.fixture()
def node_dir(tmp_path: Path, real_kraft_dir: Path) -> Path:
    """A KRaft node's metadata.log.dir: __cluster_metadata-0/ (segment, snapshot, bookkeeping files),
    bootstrap.checkpoint and meta.properties beside it, plus another topic's partition dir."""
    node = tmp_path / "node1"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(real_kraft_dir / SEGMENT, part / "00000000000000000000.log")
    shutil.copy(real_kraft_dir / SNAPSHOT, part / "00000000000000028869-0000000189.checkpoint")
    shutil.copy(real_kraft_dir / BOOTSTRAP, node / "bootstrap.checkpoint")
    (part / "00000000000000000000.index").write_bytes(b"\x00" * 16)
    (part / "00000000000000000000.timeindex").write_bytes(b"\x00" * 12)
    (part / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":189}')
    (part / "00000000000000030000-0000000190.checkpoint.part").write_bytes(b"partial")
    (node / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=Mk3OEYBSD34fcwNTJENDM2Qk\n")
    other = node / "orders-0"
    other.mkdir()
    (other / "00000000000000000000.log").write_bytes(b"not metadata")
    return node


@pytest.fixture()
def lake(tmp_path: Path, spark):
    from kraft_replay.lake import Lake

    return Lake(str(tmp_path / "lake"), spark, backend="deltars")


@pytest.fixture()
def quarantined():
    """``quarantined(lake)``: the ``ingest_quarantine`` rows in source order, each with the bytes
    ``ingest_quarantine_raw`` keeps for it (``raw``; None where it keeps none), joined on the quarantine key."""
    from kraft_replay.ingest.schemas import QUARANTINE_KEY

    def read(lake) -> list:  # noqa: ANN001 - a Lake
        q, raw = lake.read("ingest_quarantine"), lake.read("ingest_quarantine_raw")
        cond = [q[k].eqNullSafe(raw[k]) for k in QUARANTINE_KEY]
        rows = q.join(raw, cond, "left").select(q["*"], raw["raw"]).orderBy("source_file", "source_position", "reason_code").collect()
        assert len(rows) == q.count(), "an ingest_quarantine row joins more than one ingest_quarantine_raw row"
        return rows

    return read
