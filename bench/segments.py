"""Generated KRaft log segments for the benchmarks, written with the project's encoder.

A realistic mix modelled on real metadata logs: most batches are a lone NoOpRecord (the active
controller's heartbeat), the rest partition leader/ISR changes (PartitionChangeRecord, 1-3 per
batch), broker registration changes, config records, and occasional topic/partition creation.
Leader changes start new epochs with a LEADER_CHANGE control batch.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.files import segment_name
from kraft_replay.codec.records import MetadataRecord, encode_record_value

NOOP = encode_record_value(MetadataRecord(20, 0, {}))


def _uuid(rng: random.Random) -> str:
    return base64.urlsafe_b64encode(rng.randbytes(16)).rstrip(b"=").decode()


def write_segments(out_dir: Path, records: int, *, segment_bytes: int = 64 * 1024 * 1024, seed: int = 7) -> list[Path]:
    """Write segments holding at least ``records`` records into ``out_dir``; returns their paths."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    topics = [_uuid(rng) for _ in range(50)]
    paths: list[Path] = []
    offset, epoch, ts = 0, 1, 1_700_000_000_000
    buf: list[bytes] = []
    size = 0
    seg_base = 0

    def flush() -> None:
        nonlocal buf, size, seg_base
        if buf:
            p = out_dir / segment_name(seg_base)
            p.write_bytes(b"".join(buf))
            paths.append(p)
        buf, size, seg_base = [], 0, offset

    while offset < records:
        roll = rng.random()
        ts += 500
        if roll < 0.0005:
            epoch += 1
            key, value = encode_control_record(ControlRecord(2, 0, {
                "version": 0, "leader_id": rng.randint(1, 3),
                "voters": [{"voter_id": i} for i in (1, 2, 3)], "granting_voters": [{"voter_id": 1}]}))
            values, keys, control = [value], [key], True
        elif roll < 0.90:
            values, keys, control = [NOOP], None, False
        elif roll < 0.96:
            values = [encode_record_value(MetadataRecord(5, 0, {
                "partition_id": rng.randint(0, 11), "topic_id": rng.choice(topics), "leader": rng.randint(1, 3),
                "isr": sorted(rng.sample([1, 2, 3], rng.randint(1, 3)))})) for _ in range(rng.randint(1, 3))]
            keys, control = None, False
        elif roll < 0.98:
            values = [encode_record_value(MetadataRecord(17, 1, {
                "broker_id": rng.randint(1, 3), "broker_epoch": offset, "fenced": rng.choice([-1, 1]),
                "in_controlled_shutdown": 0}))]
            keys, control = None, False
        elif roll < 0.995:
            values = [encode_record_value(MetadataRecord(4, 0, {
                "resource_type": 2, "resource_name": f"topic-{rng.randint(0, 49)}", "name": "retention.ms",
                "value": str(rng.randint(1, 10**9))}))]
            keys, control = None, False
        else:
            tid = _uuid(rng)
            values = [encode_record_value(MetadataRecord(2, 0, {"name": f"t{offset}", "topic_id": tid}))] + [
                encode_record_value(MetadataRecord(3, 0, {
                    "partition_id": p, "topic_id": tid, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1 + p % 3,
                    "leader_epoch": 0, "partition_epoch": 0})) for p in range(3)]
            keys, control = None, False
        b = build_batch(values, keys=keys, base_offset=offset, leader_epoch=epoch, timestamp_ms=ts, control=control)
        if size + len(b) > segment_bytes:
            flush()
        buf.append(b)
        size += len(b)
        offset += len(values)
    flush()
    return paths
