"""Driver-side planning: chain walk (cuts at batch boundaries, offset range), checksums, tasks."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kraft_replay.codec.batch import build_batch, scan_batch_headers
from kraft_replay.ingest.plan import plan_tasks, sha256_of, walk_batches
from kraft_replay.ingest.sources import discover

NOOP = bytes.fromhex("01140000")


def _segment(n: int, start: int = 100) -> bytes:
    return b"".join(build_batch([NOOP] * (1 + i % 4), base_offset=start + 10 * i, leader_epoch=2, timestamp_ms=i) for i in range(n))


def test_walk_matches_header_scan(tmp_path: Path) -> None:
    data = _segment(3000)
    p = tmp_path / "00000000000000000100.log"
    p.write_bytes(data)
    w = walk_batches(str(p), len(data), 20_000)
    headers, consumed = scan_batch_headers(data)
    starts = {h.position for h in headers}
    assert w.batches == len(headers) == 3000 and w.framed_end == consumed == len(data)
    assert w.cuts and set(w.cuts) <= starts and all(b - a >= 20_000 for a, b in zip(w.cuts, w.cuts[1:]))
    assert w.first_offset == 100 and w.last_offset == 100 + 10 * 2999 + (2999 % 4)


def test_walk_stops_at_truncated_tail(tmp_path: Path) -> None:
    data = _segment(50)
    p = tmp_path / "00000000000000000100.log"
    p.write_bytes(data[:-5])
    w = walk_batches(str(p), len(data) - 5, 1000)
    assert w.batches == 49 and w.framed_end < len(data) - 5 and w.last_offset == 100 + 10 * 48 + (48 % 4)


def test_plan_tasks_cover_every_byte_once(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    (d / "00000000000000000100.log").write_bytes(_segment(2000))
    (d / "00000000000000020100.log").write_bytes(_segment(10, start=20100))
    (d / "00000000000000020200.log").write_bytes(b"")
    files, _ = discover([str(d)], cluster_id="c")
    tasks, walks = plan_tasks(files, split_bytes=16_000)
    for f in files:
        mine = sorted((t.start, t.end) for t in tasks if t.path == f.path)
        assert mine[0][0] == 0 and mine[-1][1] == f.size
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert len([t for t in tasks if t.source_file == "00000000000000000100.log"]) > 3
    assert walks[str(d / "00000000000000020100.log")].first_offset == 20100
    assert walks[str(d / "00000000000000020200.log")].batches == 0
    assert [(t.start, t.end) for t in tasks if t.source_file == "00000000000000020200.log"] == [(0, 0)]


def test_sha256_streams(tmp_path: Path) -> None:
    p = tmp_path / "x"
    data = _segment(500)
    p.write_bytes(data)
    assert sha256_of(str(p), chunk=1000) == hashlib.sha256(data).hexdigest()


def test_chain_tasks_from_a_verified_boundary(tmp_path: Path) -> None:
    from kraft_replay.ingest.plan import plan_chain_tasks

    data = _segment(2000)
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    (d / "00000000000000000100.log").write_bytes(data)
    (f,) = discover([str(d)], cluster_id="c")[0]
    starts = [h.position for h in scan_batch_headers(data)[0]]
    resume = starts[700]
    tasks = plan_chain_tasks(f, resume, 16_000, first_task_id=40)
    assert [t.task_id for t in tasks] == list(range(40, 40 + len(tasks))) and len(tasks) > 3
    assert tasks[0].start == resume and tasks[-1].end == len(data) and all(t.aligned for t in tasks)
    assert all(a.end == b.start and b.start in starts for a, b in zip(tasks, tasks[1:]))
    assert plan_chain_tasks(f, len(data), 16_000, 0) == []


def test_walk_stops_where_the_decoder_stops(tmp_path: Path) -> None:
    data = bytearray(_segment(100))
    starts = [h.position for h in scan_batch_headers(bytes(data))[0]]
    data[starts[60] + 8:starts[60] + 12] = (30).to_bytes(4, "big")  # >= 14 but shorter than a v2 header
    p = tmp_path / "00000000000000000100.log"
    p.write_bytes(bytes(data))
    w = walk_batches(str(p), len(data), 1000)
    assert w.batches == 60 and w.framed_end == starts[60] and max(w.cuts) <= starts[60]
    w2 = walk_batches(str(p), len(data), 1000, start=starts[10])
    assert w2.batches == 50 and w2.first_offset == 100 + 10 * 10 and min(w2.cuts) > starts[10]
