"""Linear split planning on the direct path: each range task resynchronises from its own start
(candidate header, plausible length, CRC-32C, chaining next header), the driver checks that the
ranges chain, and a file whose ranges do not chain is decoded again from the last verified
boundary with batch-aligned tasks — no batch lost or duplicated, corrupt regions quarantined."""

from __future__ import annotations

import re
import struct
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from kraft_replay.codec.batch import build_batch, scan_batch_headers
from kraft_replay.codec.records import MetadataRecord, encode_record_value
from kraft_replay.ingest import run_ingest
from kraft_replay.lake.keys import lake_key
from kraft_replay.ingest.bronze import decode_to_arrow
from kraft_replay.ingest.pipeline import _Progress, _read_stats, decode_tasks
from kraft_replay.ingest.plan import RangeReader, find_batch_start, plan_ranges
from kraft_replay.ingest.sources import discover

from chain_oracle import first_batch_at_or_after  # tests/ingest is on sys.path (pytest prepend mode)

NAME = "greenlemonT__kafka-temp__kafka1__00000000000000000000.log"
NOOP = bytes.fromhex("01140000")
COLS = ["offset", "batch_base_offset", "record_type", "payload_json", "source_position"]


def _node(tmp_path: Path, name: str, data: bytes) -> Path:
    d = tmp_path / name / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(data)
    return d.parent


def _expected(data: bytes, key: bytes | None = None) -> tuple[list[tuple], list[tuple]]:
    """Rows of the sequential decoder over the whole file (the reference semantics), credential
    material fingerprinted under ``key`` as ingest does (kraft_replay.codec.secrets)."""
    from kraft_replay.codec.secrets import redact_records

    c = decode_to_arrow(data, cluster_id="c", source_file="00000000000000000000.log", file_kind="segment")
    batches = c.log.to_batches() if isinstance(c.log, pa.Table) else [c.log]
    rows = pa.Table.from_batches([b if key is None else redact_records(b, key) for b in batches], c.log.schema)
    log = sorted(tuple(r[k] for k in COLS) for r in rows.to_pylist())
    q = sorted((r["source_position"], r["length"], r["reason_code"]) for r in c.quarantine.to_pylist())
    return log, q


def _ingested(lake, cluster: str) -> tuple[list[tuple], list[tuple]]:  # noqa: ANN001
    log = sorted(tuple(r[k] for k in COLS) for r in lake.read("metadata_log").where(f"cluster_id = '{cluster}'").collect())
    q = sorted((r["source_position"], r["length"], r["reason_code"])
               for r in lake.read("ingest_quarantine").where(f"cluster_id = '{cluster}'").collect())
    return log, q


def _scram(salt: bytes) -> bytes:
    return encode_record_value(MetadataRecord(11, 0, {"name": "u", "mechanism": 1, "salt": salt, "stored_key": b"k",
                                                      "server_key": b"s", "iterations": 4096}))


def test_find_batch_start_equals_the_chain_walk_on_a_real_segment(tmp_path: Path, real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / NAME).read_bytes()
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    size = len(data)
    starts = [h.position for h in scan_batch_headers(data)[0]]
    with RangeReader(str(p)) as r:
        for target in [1, 17, 61, starts[5] - 1, starts[5], starts[5] + 1, *range(3, size, 9973), starts[-1] + 1]:
            end = min(size, target + 5000)
            want = first_batch_at_or_after(str(p), size, target)
            got = find_batch_start(r.read, target, end, size)
            assert got == (want if want is not None and want < end else None), target


def test_find_batch_start_crosses_a_long_batch_reading_about_its_length(tmp_path: Path) -> None:
    import random

    salt = random.Random(7).randbytes(300_000)
    data = b"".join([build_batch([NOOP], base_offset=0, leader_epoch=1, timestamp_ms=1),
                     build_batch([_scram(salt)], base_offset=1, leader_epoch=1, timestamp_ms=2),
                     *(build_batch([NOOP], base_offset=2 + i, leader_epoch=1, timestamp_ms=3) for i in range(50))])
    p = tmp_path / "x.log"
    p.write_bytes(data)
    heads = scan_batch_headers(data)[0]
    with RangeReader(str(p)) as r:
        assert find_batch_start(r.read, heads[1].position + 1, len(data), len(data)) == heads[2].position
        assert heads[2].position - heads[1].position < r.bytes_read < 2 * (heads[2].position - heads[1].position) + 70_000
        # a range wholly inside the long batch holds no batch start
        assert find_batch_start(r.read, heads[1].position + 10, heads[1].position + 200_000, len(data)) is None


def test_a_task_reads_only_its_own_range(tmp_path: Path, real_kraft_dir: Path) -> None:
    one = (real_kraft_dir / NAME).read_bytes()
    data = one * 4  # the chain continues across copies (8 MB)
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    files, _ = discover([str(p)], "c")
    tasks = plan_ranges(files, 256 * 1024)
    assert len(tasks) > 30
    starts = [h.position for h in scan_batch_headers(data)[0]]
    staging = str(tmp_path / "staging")
    now = datetime.now(timezone.utc)
    for t in (tasks[-1], tasks[len(tasks) // 2], tasks[1]):
        row = {"task_id": t.task_id, "path": t.path, "source_file": t.source_file, "file_kind": t.file_kind,
               "cluster_id": "c", "start": t.start, "end": t.end, "snapshot_end_offset": None, "snapshot_epoch": None,
               "aligned": t.aligned, "file_size": t.file_size}
        rows = sum(b.num_rows for b in decode_tasks([row], now, staging))
        (st,) = [s for s in _read_stats(staging) if s["task_id"] == t.task_id]
        first = next(s for s in starts if s >= t.start)
        end = next((s for s in starts if s >= t.end), len(data))
        assert (st["first_pos"], st["end_pos"]) == (first, end)
        assert st["records"] >= rows > 1000  # records count control records too
        # O(range): its own bytes, the batch crossing its end and one resync window; never the
        # bytes in front of it (the old planning read the file from byte 0 to the range's start)
        span = t.end - t.start
        assert st["read_bytes"] <= span + 2 * 256 * 1024 + 8 * 1024 * 1024 // 8, (t.start, st["read_bytes"])
        assert st["read_bytes"] < t.start or t.start < 1024 * 1024


@pytest.mark.parametrize("kind", ["segment", "snapshot"])
def test_a_task_bounds_what_compressed_batches_expand_to(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         kind: str) -> None:
    """Compressed batches holding many more records than bytes: the task decodes them in pieces with a
    row budget and writes its side rows out as they come; the rows and statistics are those of one
    whole decode (budget and flush size made small here to see them work)."""
    import pyarrow.parquet as pq

    from kraft_replay.ingest import pipeline

    from kraft_replay.ingest import bronze

    monkeypatch.setattr(pipeline, "_ROW_BUDGET", 2500)
    monkeypatch.setattr(pipeline, "_SIDE_FLUSH_ROWS", 3000)
    calls = []
    real = bronze.decode_to_arrow

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        c = real(*a, **k)
        calls.append(c.stats.records)
        return c

    monkeypatch.setattr(bronze, "decode_to_arrow", counting)
    noop = bytes.fromhex("01140000")
    data = b"".join(build_batch([noop] * 2000, base_offset=2000 * i, leader_epoch=1, timestamp_ms=5, compression=1)
                    for i in range(10)) + b"\x00" * 7
    name = "00000000000000000000.log" if kind == "segment" else "00000000000000020000-0000000001.checkpoint"
    p = tmp_path / name
    p.write_bytes(data)
    row = {"task_id": 3, "path": str(p), "source_file": name, "file_kind": kind, "cluster_id": "c", "start": 0,
           "end": len(data), "snapshot_end_offset": None if kind == "segment" else 20000,
           "snapshot_epoch": None if kind == "segment" else 1, "aligned": False, "file_size": len(data)}
    staging = str(tmp_path / "staging")
    log_rows = sum(b.num_rows for b in decode_tasks([row], datetime.now(timezone.utc), staging))
    (st,) = _read_stats(staging)
    whole = decode_to_arrow(data, cluster_id="c", source_file=name, file_kind=kind, snapshot_end_offset=20000,
                            snapshot_epoch=1)
    assert (st["records"], st["batches"], st["quarantined"], st["q_bytes"]) == (20_000, 10, 1, 7)
    assert (st["first_pos"], st["end_pos"]) == (0, len(data))
    assert len(calls) == 5 and max(calls) == 4000   # two batches a call: the second one reaches the budget
    if kind == "segment":
        assert log_rows == whole.log.num_rows == 20_000
    else:
        side = pq.read_table(tmp_path / "staging" / "snapshot_records" / "task-000003.parquet")
        assert log_rows == 0 and side.num_rows == 20_000
        assert side.column("position_in_snapshot").to_pylist() == whole.snapshot.column("position_in_snapshot").to_pylist()
    q = pq.read_table(tmp_path / "staging" / "ingest_quarantine" / "task-000003.parquet").to_pylist()
    assert [(r["reason_code"], r["records"]) for r in q] == [("TRUNCATED_BATCH", None)]


def test_corrupt_batches_and_batch_like_payloads_give_the_sequential_rows(spark, lake, tmp_path: Path,
                                                                           real_kraft_dir: Path) -> None:
    real = bytearray((real_kraft_dir / NAME).read_bytes())
    heads = scan_batch_headers(bytes(real))[0]
    split = 200_000
    n = -(-len(real) // split)
    edges = [len(real) * i // n for i in range(1, n)]
    # (a) a CRC mismatch in the middle of a later range: that range resynchronises before it, the
    # decoder quarantines it on the chain; (b) a CRC mismatch on the first batch of another range:
    # that range resynchronises past it, the chain check fails and the file is decoded again.
    mid = next(h for h in heads if h.position > edges[4] + 50_000)
    at_start = next(h for h in heads if h.position >= edges[7])
    for h in (mid, at_start):
        real[h.position + 40] ^= 0xFF  # inside maxTimestamp: covered by the CRC
    corrupt = bytes(real)

    # a segment whose record payloads hold whole valid batches (CRC and a chaining next header)
    fake = build_batch([NOOP], base_offset=10**12, leader_epoch=9, timestamp_ms=1) * 2
    batches = []
    off = 0
    for i in range(600):
        if i % 3 == 1:
            value = _scram(fake * 60)
            batches.append(build_batch([value], base_offset=off, leader_epoch=1, timestamp_ms=1000 + i))
        else:
            batches.append(build_batch([NOOP] * 5, base_offset=off, leader_epoch=1, timestamp_ms=1000 + i))
        off += 5 if i % 3 != 1 else 1
    tricky = b"".join(batches)
    assert len(tricky) > 8 * split

    lines: list[str] = []
    s = run_ingest(spark, lake, [str(_node(tmp_path, "corrupt", corrupt)), str(_node(tmp_path, "tricky", tricky))],
                   split_bytes=split, say=lines.append)
    assert not any("de-duplication" in x for x in lines)
    rerun = [x for x in lines if "do not chain" in x]
    assert len(rerun) == 2, lines  # the corrupt first batch of a range, and a fake header in a payload
    assert any(f"after byte {at_start.position}" in x for x in rerun)

    log, q = _ingested(lake, "corrupt")
    want_log, want_q = _expected(corrupt, lake_key(lake.root))
    assert q == want_q == sorted([(mid.position, mid.size, "CRC_MISMATCH"), (at_start.position, at_start.size, "CRC_MISMATCH")])
    assert log == want_log and len({r[0] for r in log}) == len(log)

    log, q = _ingested(lake, "tricky")
    want_log, want_q = _expected(tricky, lake_key(lake.root))
    assert q == want_q == []
    assert log == want_log and len(log) == 400 * 5 + 200
    assert not [r for r in log if r[1] >= 10**12]  # no row from a fake batch inside a payload
    files = {(r["cluster_id"], r["source_file"]): r for r in lake.read("ingest_files").collect()}
    assert files[("corrupt", "00000000000000000000.log")]["quarantined"] == 2
    assert files[("tricky", "00000000000000000000.log")]["batches"] == 600
    assert s.quarantined == 2 and not list((Path(lake.root) / "_ingest_staging").glob("*/*"))
    # nothing of the discarded tasks is committed: each offset once in every table
    ctrl = lake.read("metadata_control")
    assert ctrl.count() == ctrl.select("cluster_id", "offset").distinct().count() > 0


def test_split_rows_equal_the_unsplit_rows(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / NAME).read_bytes()
    node = _node(tmp_path, "a", data)
    run_ingest(spark, lake, [str(node)], cluster_id="whole", say=lambda _: None)
    lines: list[str] = []
    run_ingest(spark, lake, [str(_node(tmp_path, "b", data + b"\x00" * 3))], cluster_id="split", split_bytes=64 * 1024,
               say=lines.append)
    assert any("in 33 task(s)" in x for x in lines) and not any("do not chain" in x for x in lines)
    whole, q0 = _ingested(lake, "whole")
    split, q1 = _ingested(lake, "split")
    assert whole == split and len(whole) == 30638 - 59 and q0 == []
    assert q1 == [(len(data), 3, "TRUNCATED_BATCH")]


def test_progress_line_shows_records_per_second(spark, tmp_path: Path, real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / NAME).read_bytes()
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    files, _ = discover([str(p)], "c")
    tasks = plan_ranges(files, 512 * 1024)
    from kraft_replay.ingest.pipeline import _mapper, _tasks_df
    from kraft_replay.ingest.tables import spark_schema
    from kraft_replay.ingest.schemas import LOG_SCHEMA

    acc = spark.sparkContext.accumulator(0)
    n = _tasks_df(spark, tasks).mapInArrow(_mapper(datetime.now(timezone.utc), str(tmp_path / "st"), True, acc),
                                           spark_schema(LOG_SCHEMA)).count()
    assert acc.value == n + 59 == 30638  # data + control records, summed over the tasks in the driver
    lines: list[str] = []
    line = _Progress(spark, len(data), lines.append, acc).line(3, len(tasks))
    m = re.search(r"decoding: 3/5 tasks, ~\d+/2 MB \([\d.]+ MB/s\), 30,638 records \(([\d,]+) records/s\)", line)
    assert m and int(m.group(1).replace(",", "")) > 0, line
