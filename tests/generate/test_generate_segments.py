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

    from kraft_replay.ingest.bronze import decode_to_arrow
    from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA

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


def test_fast_framing_is_build_batch() -> None:
    """The segment writer frames data batches itself; the bytes are ``build_batch``'s."""
    import random

    from kraft_replay.codec.batch import build_batch
    from kraft_replay.generate.segments import frame_data_batch

    rng = random.Random(7)
    for _ in range(200):
        n = rng.choice([1, 2, 5, 12, 200])
        values = [rng.randbytes(rng.choice([0, 3, 60, 200, 20_000])) for _ in range(n)]
        base, epoch, t = rng.randrange(0, 1 << 40), rng.randrange(0, 1 << 31), rng.randrange(0, 1 << 42)
        assert frame_data_batch(values, base, epoch, t) == build_batch(values, base_offset=base, leader_epoch=epoch,
                                                                        timestamp_ms=t)


def test_a_batch_straddling_an_offset_bucket_is_written_whole(spark, tiny_generated, tmp_path, monkeypatch) -> None:
    """``offset_bucket`` is by record offset, segment files start at batches: a batch whose records run
    from bucket 0 into bucket 1 stays one batch, in bucket 0's file, and bucket 1's file starts at the
    first batch based in it (both when tasks read the bucket files and on the Spark path)."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from kraft_replay.codec.arrow_payload import records_from_payload_columns
    from kraft_replay.codec.batch import build_batch
    from kraft_replay.codec.records import encode_record_value
    from kraft_replay.generate import segments as S
    from kraft_replay.generate.log import control_record

    cid = tiny_generated.cluster_id
    src = tiny_generated.lake.read("metadata_log").orderBy("offset").limit(30).toArrow()
    sizes = [5, 5, 3, 7, 5, 5]                      # the 7-record batch: offsets 999,998 .. 1,000,004
    bases, offsets, o = [], [], 999_985
    for k, n in enumerate(sizes):
        if k == 4:
            o += 1                                  # offset 1,000,005: a control batch
        bases += [o] * n
        offsets += list(range(o, o + n))
        o += n
    rows = (src.set_column(src.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64()))
            .set_column(src.schema.get_field_index("batch_base_offset"), "batch_base_offset", pa.array(bases, pa.int64())))
    lake = tmp_path / "log"
    for bucket in (0, 1):
        part = rows.filter(pc.equal(pc.divide(rows.column("offset"), 1_000_000), bucket))
        part = part.drop_columns(["cluster_id", "offset_bucket"])
        d = lake / f"cluster_id={cid}" / f"offset_bucket={bucket}"
        d.mkdir(parents=True)
        half = part.num_rows // 2                   # two files per bucket, the later rows first
        pq.write_table(part.slice(half), d / "a.parquet")
        pq.write_table(part.slice(0, half), d / "b.parquet")
    log = spark.read.option("basePath", str(lake)).parquet(str(lake)).where(F.col("cluster_id") == cid)
    assert S.bucket_files(log, cid) is not None and len(S.bucket_files(log, cid)[1]) == 2
    ctrl = next(b for b in tiny_generated.result.plan.batches if b.control is not None)
    plan = SimpleNamespace(
        scenario=SimpleNamespace(cluster_id=cid, controller_ids=[3000], log=SimpleNamespace(segment_bytes=1 << 20)),
        batches=[SimpleNamespace(control=ctrl.control, base_offset=1_000_005, epoch=ctrl.epoch, time_ms=ctrl.time_ms)],
        total_records=1_000_016)
    snaps = tiny_generated.lake.read("snapshot_records").limit(0)

    # expected, from the codec alone: one build_batch per batch, a new file at the first batch based in bucket 1
    values = [encode_record_value(r) for r in records_from_payload_columns(rows)]
    times = [int(t.timestamp() * 1000) for t in rows.column("append_time").to_pylist()]
    epochs = rows.column("batch_leader_epoch").to_pylist()
    files = {0: b"", 1: b""}
    i = 0
    for k, n in enumerate(sizes):
        if k == 4:
            key, value = S._encode_control(control_record(*ctrl.control))
            files[1] += build_batch([value], base_offset=1_000_005, leader_epoch=ctrl.epoch, timestamp_ms=ctrl.time_ms,
                                    keys=[key], control=True)
        files[bases[i] // 1_000_000] += build_batch(values[i:i + n], base_offset=bases[i], leader_epoch=epochs[i],
                                                     timestamp_ms=times[i])
        i += n

    for how in ("bucket files", "spark"):
        if how == "spark":
            monkeypatch.setattr(S, "bucket_files", lambda *a: None)
        out = tmp_path / how
        names = S.write_segments(spark, plan, log, snaps, str(out))
        part = out / "__cluster_metadata-0"
        assert sorted(p.name for p in part.glob("*.log")) == ["00000000000000999985.log", "00000000000001000005.log"]
        assert [n for n in names if n.endswith(".log")] == ["00000000000000999985.log", "00000000000001000005.log"]
        assert (part / "00000000000000999985.log").read_bytes() == files[0], how
        assert (part / "00000000000001000005.log").read_bytes() == files[1], how
        straddler = [b for b in iter_batches(files[0]) if b.base_offset == 999_998]
        assert len(straddler) == 1 and straddler[0].last_offset == 1_000_004
