"""``decode_to_arrow(stop=..., at_eof=...)``: decoding a file piece by piece gives the rows of one
whole-file decode, and a piece that is not the end of the file never quarantines a batch that merely
runs past the piece."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from kraft_replay.codec.batch import scan_batch_headers
from kraft_replay.ingest.bronze import decode_to_arrow

NAME = "rjmfernandes__flink-on-prem__00000000000000000000.log"
AT = datetime(2024, 1, 2, tzinfo=timezone.utc)


def _decode(buf: bytes, **kw):
    return decode_to_arrow(buf, cluster_id="c", source_file="f.log", file_kind="segment", ingested_at=AT, **kw)


def _pieces(data: bytes, piece: int, window: int) -> tuple[pa.Table, pa.Table, int]:
    logs, quarantine, pos, calls = [], [], 0, 0
    while pos < len(data):
        hi = min(len(data), pos + window)
        c = _decode(data[pos:hi], base_position=pos, stop=piece, at_eof=hi == len(data))
        calls += 1
        if c.consumed == 0:
            window *= 2
            continue
        logs.append(c.log)
        quarantine.append(c.quarantine)
        pos += c.consumed
    return pa.Table.from_batches(logs), pa.Table.from_batches(quarantine), calls


def test_pieces_equal_whole_decode(real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / NAME).read_bytes()
    whole = _decode(data)
    heads, _ = scan_batch_headers(data)
    boundaries = {h.position for h in heads} | {len(data)}
    first = _decode(data[:300_000], stop=100_000, at_eof=False)
    assert first.consumed in boundaries and 100_000 <= first.consumed < 300_000
    assert first.stats.bytes == first.consumed and first.quarantine.num_rows == 0
    log, quarantine, calls = _pieces(data, 50_000, 60_000)
    assert calls > 20 and quarantine.num_rows == 0
    assert log.num_rows == whole.log.num_rows == 17026
    assert log.equals(pa.Table.from_batches([whole.log]))


def test_tail_is_quarantined_only_at_the_end_of_the_file(real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / NAME).read_bytes()[:400_000]  # ends inside a batch
    whole = _decode(data)
    assert whole.quarantine.num_rows == 1
    tail = whole.quarantine.to_pylist()[0]
    # a piece ending inside the truncated batch stops in front of it instead of quarantining it
    part = _decode(data[:399_990], stop=len(data), at_eof=False)
    assert part.quarantine.num_rows == 0 and part.consumed == tail["source_position"]
    assert part.log.num_rows == whole.log.num_rows
    log, quarantine, _ = _pieces(data, 30_000, 31_000)
    assert quarantine.to_pylist() == [tail] and log.num_rows == whole.log.num_rows


def test_corrupt_length_ends_the_scan_through_the_end_of_the_file(real_kraft_dir: Path) -> None:
    data = bytearray((real_kraft_dir / NAME).read_bytes())
    heads, _ = scan_batch_headers(bytes(data))
    bad = heads[len(heads) // 2].position
    data[bad + 8:bad + 12] = (20).to_bytes(4, "big")  # magic 2 with a length below a header: CORRUPT_BATCH_LENGTH
    data = bytes(data)
    assert _decode(data[:bad + 5000], stop=bad + 10, at_eof=False).consumed == bad
    log, quarantine, _ = _pieces(data, 40_000, 50_000)
    q = quarantine.to_pylist()
    assert [(r["reason_code"], r["source_position"], r["length"]) for r in q] == [("CORRUPT_BATCH_LENGTH", bad, len(data) - bad)]
    assert q[0]["raw"] == data[bad:]
    assert log.num_rows == _decode(data).log.num_rows
