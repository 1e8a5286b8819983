"""Write the sample KRaft node in data/samples/ with the project's encoder (deterministic).

    python tools/make_samples.py [OUT_DIR]        # default: data/samples

A tiny cluster: controllers 3000-3002 (Raft voters), brokers 1-3, metadata.version 7 (3.3-IV3)
upgraded to 8 (3.4-IV0), topics ``orders`` (3 partitions), ``payments`` (2) and ``audit`` (1), a
topic config, two leader elections (LEADER_CHANGE control batches, epochs 1 and 2), broker 3 fenced
(ISR shrink and leader moves first, as the controller writes them) then unfenced, NoOp heartbeats.
Layout of the node's data dir (facts §0):

    node1/meta.properties, node1/bootstrap.checkpoint,
    node1/__cluster_metadata-0/<base offset>.log (two segments), <end offset>-<epoch>.checkpoint

Replay rules kept (facts §5): broker epoch = offset of its registration batch; BrokerRegistration-
ChangeRecord fenced 1/-1 with the current broker epoch; every PartitionChangeRecord bumps the
partition epoch, and one that sets Leader bumps the leader epoch (for MV < 3.6-IV0 an ISR shrink
sets Leader); the snapshot restates the state of every record below its end offset, with the epoch
of the last contained record and SnapshotHeader.LastContainedLogTimestamp = that batch's time.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path
from typing import Any

from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.control import ControlRecord, encode_control_record
from kraft_replay.codec.files import BOOTSTRAP_NAME, PARTITION_DIR, segment_name, snapshot_name
from kraft_replay.codec.records import MetadataRecord, encode_record_value

CLUSTER_ID = "c2FtcGxlLWNsdXN0ZXItMQ"
VOTERS = (3000, 3001, 3002)
BROKERS = (1, 2, 3)
T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def _uuid(seed: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(seed.encode()).digest()[:16]).rstrip(b"=").decode()


def _rec(api_key: int, version: int, data: dict[str, Any]) -> bytes:
    return encode_record_value(MetadataRecord(api_key, version, data))


def _control(type_id: int, data: dict[str, Any]) -> tuple[bytes, bytes]:
    return encode_control_record(ControlRecord(type_id, 0, data))


class Log:
    """Appends batches, tracking offsets, epochs, times and the replayed state for the snapshot."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bytes]] = []  # (base offset, bytes)
        self.offset = 0
        self.epoch = 0
        self.time = T0
        self.brokers: dict[int, dict[str, Any]] = {}
        self.topics: dict[str, tuple[str, int]] = {}  # name -> (id, partitions)
        self.parts: dict[tuple[str, int], dict[str, Any]] = {}
        self.configs: list[tuple[int, str, str, str]] = []
        self.mv = 0
        self.producer_ids: dict[str, int] | None = None
        self.last_time = T0

    def _append(self, values: list[bytes], keys: list[bytes] | None = None, control: bool = False) -> int:
        base = self.offset
        self.time += 500
        self.batches.append((base, build_batch(values, keys=keys, base_offset=base, leader_epoch=self.epoch,
                                               timestamp_ms=self.time, control=control)))
        self.offset += len(values)
        self.last_time = self.time
        return base

    def elect(self, leader: int) -> None:
        self.epoch += 1
        key, value = _control(2, {"version": 0, "leader_id": leader, "voters": [{"voter_id": v} for v in VOTERS],
                                  "granting_voters": [{"voter_id": v} for v in VOTERS if v != leader][:1]})
        self._append([value], [key], control=True)

    def noop(self, n: int = 1) -> None:
        for _ in range(n):
            self._append([_rec(20, 0, {})])

    def feature(self, level: int) -> None:
        self.mv = level
        self._append([_rec(12, 0, {"name": "metadata.version", "feature_level": level})])

    def register(self, broker: int) -> None:
        epoch = self.offset
        reg = {
            "broker_id": broker, "incarnation_id": _uuid(f"incarnation-{broker}"), "broker_epoch": epoch,
            "end_points": [{"name": "PLAINTEXT", "host": f"broker{broker}", "port": 9092, "security_protocol": 0}],
            "features": [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 8}],
            "rack": None, "fenced": True, "in_controlled_shutdown": False,
        }
        self.brokers[broker] = reg
        self._append([_rec(0, 1, reg)])

    def fence(self, broker: int, fenced: bool) -> None:
        reg = self.brokers[broker]
        reg["fenced"] = fenced
        self._append([_rec(17, 0, {"broker_id": broker, "broker_epoch": reg["broker_epoch"], "fenced": 1 if fenced else -1})])

    def topic(self, name: str, partitions: int) -> None:
        tid = _uuid(f"topic-{name}")
        self.topics[name] = (tid, partitions)
        values = [_rec(2, 0, {"name": name, "topic_id": tid})]
        for p in range(partitions):
            replicas = [BROKERS[(p + i) % 3] for i in range(3)]
            st = {"partition_id": p, "topic_id": tid, "replicas": replicas, "isr": list(replicas),
                  "removing_replicas": [], "adding_replicas": [], "leader": replicas[0], "leader_epoch": 0,
                  "partition_epoch": 0}
            self.parts[(tid, p)] = st
            values.append(_rec(3, 0, st))
        self._append(values)

    def config(self, topic: str, key: str, value: str) -> None:
        self.configs.append((2, topic, key, value))
        self._append([_rec(4, 0, {"resource_type": 2, "resource_name": topic, "name": key, "value": value})])

    def producer_ids_block(self, broker: int) -> None:
        self.producer_ids = {"broker_id": broker, "broker_epoch": self.brokers[broker]["broker_epoch"], "next_producer_id": 1000}
        self._append([_rec(15, 0, self.producer_ids)])

    def isr_change(self, broker: int, remove: bool) -> None:
        """ISR shrink (with Leader set, MV < 3.6-IV0) or expand for every partition hosting ``broker``."""
        values = []
        for (tid, p), st in sorted(self.parts.items()):
            if broker not in st["replicas"]:
                continue
            if remove and broker in st["isr"]:
                isr = [b for b in st["isr"] if b != broker]
                leader = st["leader"] if st["leader"] != broker else isr[0]
                st.update(isr=isr, leader=leader, leader_epoch=st["leader_epoch"] + 1, partition_epoch=st["partition_epoch"] + 1)
                values.append(_rec(5, 0, {"partition_id": p, "topic_id": tid, "isr": isr, "leader": leader}))
            elif not remove and broker not in st["isr"]:
                isr = [b for b in st["replicas"] if b in st["isr"] or b == broker]
                st.update(isr=isr, partition_epoch=st["partition_epoch"] + 1)
                values.append(_rec(5, 0, {"partition_id": p, "topic_id": tid, "isr": isr}))
        if values:
            self._append(values)

    def snapshot(self) -> tuple[int, int, bytes]:
        """(end offset, epoch, file bytes) of a snapshot of everything appended so far (facts §4.3)."""
        end_offset, epoch = self.offset, self.epoch
        values = [_rec(12, 0, {"name": "metadata.version", "feature_level": self.mv})]
        values += [_rec(0, 1, self.brokers[b]) for b in sorted(self.brokers)]
        for name, (tid, n) in self.topics.items():
            values.append(_rec(2, 0, {"name": name, "topic_id": tid}))
            values += [_rec(3, 0, self.parts[(tid, p)]) for p in range(n)]
        values += [_rec(4, 0, {"resource_type": t, "resource_name": r, "name": k, "value": v}) for t, r, k, v in self.configs]
        if self.producer_ids:
            values.append(_rec(15, 0, {**self.producer_ids, "broker_id": -1, "broker_epoch": -1}))
        return end_offset, epoch, _snapshot_file(values, epoch, self.last_time)


def _snapshot_file(values: list[bytes], epoch: int, last_time: int) -> bytes:
    hk, hv = _control(3, {"version": 0, "last_contained_log_timestamp": last_time})
    fk, fv = _control(4, {"version": 0})
    n = len(values)
    return (build_batch([hv], keys=[hk], base_offset=0, leader_epoch=epoch, timestamp_ms=last_time, control=True)
            + build_batch(values, base_offset=1, leader_epoch=epoch, timestamp_ms=last_time)
            + build_batch([fv], keys=[fk], base_offset=1 + n, leader_epoch=epoch, timestamp_ms=last_time, control=True))


def build(out: Path) -> list[Path]:
    node = out / "node1"
    part = node / PARTITION_DIR
    part.mkdir(parents=True, exist_ok=True)
    log = Log()
    log.elect(3000)
    log.feature(7)
    for b in BROKERS:
        log.register(b)
    for b in BROKERS:
        log.fence(b, False)
    log.noop(3)
    log.topic("orders", 3)
    log.topic("payments", 2)
    log.config("orders", "retention.ms", "604800000")
    log.producer_ids_block(1)
    log.noop(4)
    second_segment = log.offset
    log.feature(8)                      # metadata.version 3.3-IV3 -> 3.4-IV0
    log.noop(2)
    log.isr_change(3, remove=True)      # broker 3 stops heartbeating: out of the ISRs, then fenced
    log.fence(3, True)
    log.noop(3)
    log.elect(3001)                     # controller failover: epoch 2
    log.noop(2)
    log.fence(3, False)                 # broker 3 is back
    log.isr_change(3, remove=False)
    log.topic("audit", 1)
    end_offset, epoch, snap = log.snapshot()
    log.noop(3)
    log.config("payments", "cleanup.policy", "compact")

    written = []
    segs = [(0, [b for o, b in log.batches if o < second_segment]), (second_segment, [b for o, b in log.batches if o >= second_segment])]
    for base, batches in segs:
        p = part / segment_name(base)
        p.write_bytes(b"".join(batches))
        written.append(p)
    p = part / snapshot_name(end_offset, epoch)
    p.write_bytes(snap)
    written.append(p)
    boot = _snapshot_file([_rec(12, 0, {"name": "metadata.version", "feature_level": 7})], 0, T0)
    (node / BOOTSTRAP_NAME).write_bytes(boot)
    written.append(node / BOOTSTRAP_NAME)
    (node / "meta.properties").write_text(f"#\nversion=1\nnode.id=3000\ncluster.id={CLUSTER_ID}\n")
    written.append(node / "meta.properties")
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data" / "samples"
    for path in build(target):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
