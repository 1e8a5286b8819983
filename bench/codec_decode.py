"""Single-core raw decode rate of the codec: bytes -> bronze Arrow batches (``decode_to_arrow``).

    python bench/codec_decode.py [--records 1000000] [--real DIR] [--segments DIR]

Prints records/s and MB/s for generated segments (and for the real Kafka files if ``--real`` is
given, and for the ``*.log`` files of ``--segments``, e.g. the scenario generator's segments that
bench/ingest.py --scenario caches), plus the cost of a split task's resynchronisation (``find_batch_start`` at 32 range starts
spread over the segment: time and bytes read per task) and of decoding zstd/lz4-compressed batches.
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kraft_replay.codec.arrow import decode_to_arrow  # noqa: E402
from kraft_replay.codec.batch import batch_cuts, iter_batches  # noqa: E402
from kraft_replay.codec.files import FileKind, classify  # noqa: E402
from segments import write_segments  # noqa: E402


def _decode_file(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    info = classify(path.name)
    edges = [0, *batch_cuts(data, 4 * 1024 * 1024), len(data)]
    records = 0
    for a, b in zip(edges, edges[1:]):
        c = decode_to_arrow(data[a:b], cluster_id="bench", source_file=path.name, file_kind=info.kind.value,
                            base_position=a, snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)
        records += c.stats.records
    return records, len(data)


def measure(paths: list[Path], label: str) -> None:
    t = time.perf_counter()
    records = size = 0
    for p in paths:
        r, n = _decode_file(p)
        records += r
        size += n
    dt = time.perf_counter() - t
    t2 = time.perf_counter()
    batches = sum(1 for p in paths for _ in iter_batches(p.read_bytes()))
    dt2 = time.perf_counter() - t2
    print(f"{label}: {records:,} records, {size / 1e6:.1f} MB in {dt:.2f}s -> {records / dt:,.0f} records/s, "
          f"{size / 1e6 / dt:.1f} MB/s (decode_to_arrow); batch layer alone: {batches:,} batches in {dt2:.2f}s "
          f"({size / 1e6 / dt2:.1f} MB/s)")


def measure_resync(path: Path, tasks: int = 32) -> None:
    from kraft_replay.ingest.plan import RangeReader, find_batch_start

    size = path.stat().st_size
    edges = [size * i // tasks for i in range(1, tasks)]
    with RangeReader(str(path)) as r:
        t = time.perf_counter()
        found = sum(find_batch_start(r.read, a, min(size, a + size // tasks), size) is not None for a in edges)
        dt = time.perf_counter() - t
    print(f"resync: {found}/{len(edges)} range starts of a {size / 1e6:.1f} MB segment in {dt * 1e3:.1f} ms "
          f"({dt / len(edges) * 1e6:.0f} us, {r.bytes_read / len(edges) / 1024:.0f} KiB read per task)")


def measure_compressed(records: int = 200_000) -> None:
    from kraft_replay.codec.batch import build_batch
    from kraft_replay.codec.compression import Compression

    noop = bytes.fromhex("01140000")
    for codec in (Compression.ZSTD, Compression.LZ4):
        data = b"".join(build_batch([noop] * 500, base_offset=i * 500, leader_epoch=1, timestamp_ms=i, compression=codec)
                        for i in range(records // 500))
        t = time.perf_counter()
        c = decode_to_arrow(data, cluster_id="bench", source_file="x", file_kind="segment")
        dt = time.perf_counter() - t
        print(f"{codec.name.lower()} batches of 500 NoOps: {c.stats.records:,} records in {dt:.2f}s -> {c.stats.records / dt:,.0f} records/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--real", type=Path, default=None, help="directory of real KRaft files (e.g. ../shared/reference/real-kraft)")
    ap.add_argument("--segments", type=Path, default=None,
                    help="a __cluster_metadata-0 directory to measure too (e.g. /tmp/kraft-replay-bench-segments/"
                         "scenario-medium/__cluster_metadata-0)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        paths = write_segments(Path(d), args.records)
        measure(paths, f"generated ({len(paths)} segment(s))")
        measure_resync(max(paths, key=lambda p: p.stat().st_size))
    measure_compressed()
    if args.segments:
        logs = sorted(args.segments.glob("*.log"))
        measure(logs, f"segments of {args.segments} ({len(logs)})")
    if args.real:
        real = sorted(p for p in args.real.iterdir() if classify(p.name).kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP))
        measure(real, f"real Kafka files ({len(real)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
