"""Single-core raw decode rate of the codec: bytes -> bronze Arrow batches (``decode_to_arrow``).

    python bench/codec_decode.py [--records 1000000] [--real DIR] [--segments DIR] [--reference] [--worst-case]

Prints records/s and MB/s for generated segments (and for the real Kafka files if ``--real`` is
given, and for the ``*.log`` files of ``--segments``, e.g. the scenario generator's segments that
bench/ingest.py --scenario caches), plus the cost of a split task's resynchronisation (``find_batch_start`` at 32 range starts
spread over the segment: time and bytes read per task) and of decoding zstd/lz4-compressed batches.
``--reference`` measures the reference path too (``accelerate=False``). ``--worst-case`` decodes the
most expensive single batches within the decompression cap (CRC-valid gzip batches of minimal
records, empty or NoOp values, up to 256 MiB decompressed), each in a fresh process, and prints its
time and peak RSS (``ru_maxrss``: the whole process, interpreter and libraries included).
Speed is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kraft_replay.ingest.bronze import decode_to_arrow  # noqa: E402
from kraft_replay.codec.batch import batch_cuts, iter_batches  # noqa: E402
from kraft_replay.codec.files import FileKind, classify  # noqa: E402
from segments import write_segments  # noqa: E402


def _decode_file(path: Path, accelerate: bool = True) -> tuple[int, int]:
    data = path.read_bytes()
    info = classify(path.name)
    edges = [0, *batch_cuts(data, 4 * 1024 * 1024), len(data)]
    records = 0
    for a, b in zip(edges, edges[1:]):
        c = decode_to_arrow(data[a:b], cluster_id="bench", source_file=path.name, file_kind=info.kind.value,
                            base_position=a, snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch,
                            accelerate=accelerate)
        records += c.stats.records
    return records, len(data)


def measure(paths: list[Path], label: str, accelerate: bool = True) -> None:
    if not accelerate:
        label += ", reference path"
    t = time.perf_counter()
    records = size = 0
    for p in paths:
        r, n = _decode_file(p, accelerate)
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


def _worst_batches(tmp: Path) -> list[tuple[str, Path]]:
    """CRC-valid gzip batches of minimal records (facts §1.4), written to files in ``tmp``."""
    import itertools
    import struct
    import zlib
    from collections.abc import Iterator

    from kraft_replay.codec.batch import MAX_BATCH_RECORDS, Record, encode_records
    from kraft_replay.codec.compression import DEFAULT_LIMIT
    from kraft_replay.codec.crc import crc32c

    def batch(parts: Iterator[bytes], count: int) -> bytes:
        c = zlib.compressobj(1, wbits=31)
        section = b"".join(c.compress(p) for p in parts) + c.flush()
        after_crc = struct.pack(">hiqqqhii", 1, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, count) + section
        return struct.pack(">qiib", 0, 49 + len(section), 1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc

    empty = encode_records([Record(b"", 0)])                        # 7 bytes: empty value, offset delta 0
    noop = encode_records([Record(bytes.fromhex("01140000"), 0)])   # 11 bytes: a valid NoOpRecord
    unit = 1 << 16
    cases = []
    for name, rec in (("empty values", empty), ("NoOp values", noop)):
        block = rec * unit
        fill = (DEFAULT_LIMIT - 4096) // len(block)                  # just under the 256 MiB cap
        n_all = fill * unit
        cases.append((f"{name}, 256 MiB, count = {n_all:,} (all records)", batch(itertools.repeat(block, fill), n_all)))
        cases.append((f"{name}, 256 MiB, count = {MAX_BATCH_RECORDS:,} (the rest trailing)",
                      batch(itertools.repeat(block, fill), MAX_BATCH_RECORDS)))
        whole, part = divmod(MAX_BATCH_RECORDS, unit)
        cases.append((f"{name}, {MAX_BATCH_RECORDS * len(rec) / 2**20:.0f} MiB, exactly {MAX_BATCH_RECORDS:,} records",
                      batch(itertools.chain(itertools.repeat(block, whole), [rec * part]), MAX_BATCH_RECORDS)))
    out = []
    for i, (name, data) in enumerate(cases):
        p = tmp / f"worst-{i}.bin"
        p.write_bytes(data)
        out.append((name, p))
    return out


def _decode_one_file(path: str, how: str) -> None:
    """Child of --worst-case: decode one file — ``call``: one ``decode_to_arrow`` call on its bytes;
    ``segment``/``snapshot``: one ingest task over the whole file (``kraft_replay.ingest.pipeline.decode_tasks``:
    pieces, row budget, side tables written to a temp dir) — and print a JSON line with the result,
    time and peak RSS."""
    import json
    import resource

    t = time.perf_counter()
    if how == "call":
        data = Path(path).read_bytes()
        t = time.perf_counter()
        c = decode_to_arrow(data, cluster_id="bench", source_file="x", file_kind="segment")
        rows, q, codes, q_records = (c.log.num_rows, c.quarantine.num_rows,
                                     sorted(set(c.quarantine.column("reason_code").to_pylist())), c.stats.quarantined_records)
    else:
        import pyarrow.parquet as pq

        from kraft_replay.ingest.pipeline import _read_stats, decode_tasks

        size = Path(path).stat().st_size
        name = "00000000000000000000.log" if how == "segment" else "00000000000000000000-0000000001.checkpoint"
        task = {"task_id": 0, "path": path, "source_file": name, "file_kind": how, "cluster_id": "bench", "start": 0,
                "end": size, "snapshot_end_offset": None if how == "segment" else 1,
                "snapshot_epoch": None if how == "segment" else 1, "aligned": False, "file_size": size}
        from datetime import datetime, timezone

        with tempfile.TemporaryDirectory() as staging:
            rows = sum(b.num_rows for b in decode_tasks([task], datetime.now(timezone.utc), staging))
            st = _read_stats(staging)[0]
            side = Path(staging, "snapshot_records")
            rows += sum(pq.read_metadata(f).num_rows for f in side.glob("*.parquet")) if side.exists() else 0
            q, codes, q_records = st["quarantined"], [st["q_reason"]] if st["q_reason"] else [], st["q_records"]
    dt = time.perf_counter() - t
    print(json.dumps({"seconds": dt, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "bytes": Path(path).stat().st_size, "rows": rows, "quarantine": q, "codes": codes,
                      "q_records": q_records}))


def _many_batches(tmp: Path, n: int) -> tuple[str, Path]:
    """``n`` gzip batches of exactly MAX_BATCH_RECORDS NoOp records each, back to back."""
    from kraft_replay.codec.batch import MAX_BATCH_RECORDS, build_batch

    one = build_batch([bytes.fromhex("01140000")] * MAX_BATCH_RECORDS, base_offset=0, leader_epoch=1,
                      timestamp_ms=1_700_000_000_000, compression=1)
    import struct

    parts = []
    for i in range(n):
        b = bytearray(one)
        struct.pack_into(">q", b, 0, i * MAX_BATCH_RECORDS)   # the base offset is outside the CRC
        parts.append(bytes(b))
    p = tmp / "many.bin"
    p.write_bytes(b"".join(parts))
    return f"{n} gzip batches of {MAX_BATCH_RECORDS:,} NoOp records each", p


def measure_worst_cases() -> None:
    import json
    import subprocess

    def run(path: Path, how: str) -> dict:
        out = subprocess.run([sys.executable, __file__, "--decode-file", str(path), "--decode-as", how], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    with tempfile.TemporaryDirectory() as d:
        cases = _worst_batches(Path(d))
        for name, path in cases:
            r = run(path, "call")
            print(f"worst case, one decode_to_arrow call, {name}: a {r['bytes'] / 1024:.0f} KiB batch -> {r['rows']:,} "
                  f"rows, {r['quarantine']} quarantine row(s) {r['codes']} standing for {r['q_records']:,} records, "
                  f"in {r['seconds']:.2f}s, peak RSS {r['maxrss_mb']:.0f} MB")
        for name, path in [cases[-1], _many_batches(Path(d), 6)]:
            for how in ("segment", "snapshot"):
                r = run(path, how)
                print(f"worst case, one ingest task ({how}), {name}: {r['bytes'] / 1024:.0f} KiB -> {r['rows']:,} rows, "
                      f"{r['quarantine']} quarantine row(s), in {r['seconds']:.2f}s, peak RSS {r['maxrss_mb']:.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--real", type=Path, default=None, help="directory of real KRaft files (e.g. ../shared/reference/real-kraft)")
    ap.add_argument("--segments", type=Path, default=None,
                    help="a __cluster_metadata-0 directory to measure too (e.g. /tmp/kraft-replay-bench-segments/"
                         "scenario-medium/__cluster_metadata-0)")
    ap.add_argument("--reference", action="store_true", help="measure the reference path (accelerate=False) too")
    ap.add_argument("--worst-case", action="store_true", help="time and peak memory of the worst batches, one process each")
    ap.add_argument("--decode-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--decode-as", default="call", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.decode_file:
        _decode_one_file(args.decode_file, args.decode_as)
        return 0
    with tempfile.TemporaryDirectory() as d:
        paths = write_segments(Path(d), args.records)
        measure(paths, f"generated ({len(paths)} segment(s))")
        if args.reference:
            measure(paths, f"generated ({len(paths)} segment(s))", accelerate=False)
        measure_resync(max(paths, key=lambda p: p.stat().st_size))
    measure_compressed()
    if args.worst_case:
        measure_worst_cases()
    if args.segments:
        logs = sorted(args.segments.glob("*.log"))
        measure(logs, f"segments of {args.segments} ({len(logs)})")
    if args.real:
        real = sorted(p for p in args.real.iterdir() if classify(p.name).kind in (FileKind.SEGMENT, FileKind.SNAPSHOT, FileKind.BOOTSTRAP))
        measure(real, f"real Kafka files ({len(real)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
