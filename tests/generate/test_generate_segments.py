"""``--segments-out``: real segment/snapshot files that ingest back to the same rows."""

from __future__ import annotations

from pyspark.sql import functions as F

from kraft_replay.codec.batch import Corruption, iter_batches
from kraft_replay.codec.files import FileKind, classify

IGNORED = ("source_file", "source_position")


def test_files_are_kraft_shaped(tiny_generated) -> None:
    root = tiny_generated.segments_dir
    part = root / "__cluster_metadata-0"
    segs = sorted(part.glob("*.log"))
    snaps = sorted(part.glob("*.checkpoint"))
    assert (root / "bootstrap.checkpoint").is_file() and (root / "meta.properties").is_file()
    assert len(segs) >= 2, "segments should roll at log.segment_bytes"
    assert len(snaps) == tiny_generated.result.plan.scenario.log.snapshots
    limit = tiny_generated.result.plan.scenario.log.segment_bytes
    prev_last = -1
    for seg in segs:
        assert classify(seg.name).kind is FileKind.SEGMENT
        batches = list(iter_batches(seg.read_bytes()))
        assert batches and not any(isinstance(b, Corruption) for b in batches)
        assert int(seg.name[:20]) == batches[0].base_offset == prev_last + 1
        prev_last = batches[-1].last_offset
        assert seg.stat().st_size <= limit + max(b.size for b in batches)
        times = [b.max_timestamp for b in batches]
        assert times == sorted(times)
    for snap in snaps:
        batches = list(iter_batches(snap.read_bytes()))
        assert batches[0].is_control and batches[-1].is_control
        assert all(b.partition_leader_epoch == int(snap.name[21:31]) for b in batches)


def test_ingesting_the_segments_gives_the_same_rows(spark, tiny_generated, tmp_path) -> None:
    from kraft_replay.ingest import run_ingest
    from kraft_replay.lake import Lake

    lake2 = Lake(str(tmp_path / "lake2"), spark, backend="deltars")
    run_ingest(spark, lake2, [str(tiny_generated.segments_dir)], cluster_id=tiny_generated.cluster_id)
    for name in ("metadata_log", "snapshot_records", "metadata_control"):
        direct = tiny_generated.lake.read(name).drop(*IGNORED)
        ingested = lake2.read(name).drop(*IGNORED)
        assert ingested.count() == direct.count() > 0, name
        assert direct.exceptAll(ingested).count() == 0, name
        assert ingested.exceptAll(direct).count() == 0, name
    assert lake2.read("ingest_quarantine").count() == 0
    files = lake2.read("ingest_files").where(F.col("file_kind") == "segment").count()
    assert files == len(list((tiny_generated.segments_dir / "__cluster_metadata-0").glob("*.log")))


def test_decoding_the_files_gives_the_same_rows(spark, tiny_generated) -> None:
    """The same round trip through the codec's columnar decoder alone (no lake, no ingest job)."""
    import pyarrow as pa

    from kraft_replay.codec.arrow import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA, decode_to_arrow

    root = tiny_generated.segments_dir
    parts: dict[str, list[pa.RecordBatch]] = {"log": [], "control": [], "snapshot": [], "quarantine": []}
    files = [(p, "segment", None, None) for p in sorted((root / "__cluster_metadata-0").glob("*.log"))]
    files += [(p, "snapshot", int(p.name[:20]), int(p.name[21:31]))
              for p in sorted((root / "__cluster_metadata-0").glob("*.checkpoint"))]
    files.append((root / "bootstrap.checkpoint", "bootstrap", None, None))
    for path, kind, end, epoch in files:
        chunk = decode_to_arrow(path.read_bytes(), cluster_id=tiny_generated.cluster_id, source_file=path.name,
                                file_kind=kind, snapshot_end_offset=end, snapshot_epoch=epoch)
        for name in parts:
            parts[name].append(getattr(chunk, name))
    assert sum(b.num_rows for b in parts["quarantine"]) == 0
    for name, table, schema in (("log", "metadata_log", LOG_SCHEMA), ("control", "metadata_control", CONTROL_SCHEMA),
                                ("snapshot", "snapshot_records", SNAPSHOT_SCHEMA)):
        # one chunk: createDataFrame drops rows of multi-chunk tables that contain empty chunks
        decoded = spark.createDataFrame(pa.Table.from_batches(parts[name], schema=schema).combine_chunks()).drop(*IGNORED)
        direct = tiny_generated.lake.read(table).drop(*IGNORED)
        assert decoded.count() == direct.count() > 0, table
        assert direct.exceptAll(decoded).count() == 0, table
        assert decoded.exceptAll(direct).count() == 0, table
