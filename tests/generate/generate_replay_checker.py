"""A small sequential replayer for tests: applies the replay rules of kafka-kraft-facts §5 (and the
metadata.version gates of §6.3) record by record and raises on the first violation.

Besides replay errors it checks what Kafka's controller never writes:
- a data record before the metadata.version FeatureLevelRecord (bootstrap's BeginTransaction aside, §5.4, §7.5);
- a FeatureLevelRecord outside a registered broker's supported range (§7.4), or a metadata.version
  downgrade that §7.2 step 6 refuses (below 3.3-IV0, or across a level that changed metadata);
- a broker registering without support for a finalized level (§7.4);
- a PartitionChangeRecord that changes nothing (§5.2); an ISR shrink without Leader below 3.6-IV0 (§6.2);
- a leader or ISR member written while that broker is fenced or unregistered;
- ELR (KIP-966): ELR ∩ ISR = ∅, ELR ⊆ replicas, LastKnownElr ⊆ replicas, ELR non-empty only while the
  ISR is below min.insync.replicas (the cluster default ConfigRecord, 1 if absent).

Written independently of the generator so it can catch the generator's mistakes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

MV_CHANGED = {1, 3, 5, 6, 7, 8, 11, 13, 14, 15, 17, 23, 30, 32, 33}
KNOWN_LEVELS = set(range(1, 35))


class Violation(AssertionError):
    pass


def pc_version(mv: int) -> int:
    return 0 if mv <= 16 else (1 if mv <= 22 else 2)


def rb_version(mv: int) -> int:
    return 0 if mv <= 6 else 1 if mv == 7 else 2 if mv <= 16 else 3


@dataclass
class Image:
    mv: int = 1
    topics: dict[str, str] = field(default_factory=dict)
    partitions: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    brokers: dict[int, dict[str, Any]] = field(default_factory=dict)
    acls: set[str] = field(default_factory=set)
    scram: set[tuple[str, int]] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)
    next_producer_id: int = -1
    in_txn: bool = False
    mv_seen: bool = False
    offset: int = -1
    features: dict[str, int] = field(default_factory=dict)
    min_isr: int = 1


def check_log(data_rows: list[dict[str, Any]], control_rows: list[dict[str, Any]],
              capture: set[int] = frozenset()) -> tuple[Image, dict[int, Image]]:
    """Replay ``metadata_log`` rows (plus the log's ``metadata_control`` rows); return the final image
    and copies of the image just before each offset in ``capture``."""
    entries = [(r["offset"], "data", r) for r in data_rows] + [(r["offset"], "control", r) for r in control_rows]
    entries.sort(key=lambda e: e[0])
    if [e[0] for e in entries] != list(range(len(entries))):
        raise Violation("offsets are not contiguous from 0")
    img = Image()
    captured: dict[int, Image] = {}
    last_time = None
    last_epoch = None
    batch_rows: dict[int, list[dict[str, Any]]] = {}
    for off, kind, r in entries:
        batch_rows.setdefault(r["batch_base_offset"], []).append(r)
    for base, rows in batch_rows.items():
        lasts = {r["batch_last_offset"] for r in rows}
        if lasts != {base + len(rows) - 1}:
            raise Violation(f"batch {base}: last offset {lasts} does not match its {len(rows)} records")
        if len({r["batch_leader_epoch"] for r in rows}) != 1 or len({r["append_time"] for r in rows}) != 1:
            raise Violation(f"batch {base}: records disagree on epoch or append time")
    for off, kind, r in entries:
        if off in capture:
            captured[off] = copy.deepcopy(img)
        if off == r["batch_base_offset"]:
            if last_time is not None and r["append_time"] < last_time:
                raise Violation(f"offset {off}: append time goes backwards")
            if last_epoch is not None and r["batch_leader_epoch"] != last_epoch:
                if r["batch_leader_epoch"] < last_epoch:
                    raise Violation(f"offset {off}: raft epoch goes backwards")
                if kind != "control" or r["control_type"] != "LEADER_CHANGE":
                    raise Violation(f"offset {off}: new raft epoch without a LEADER_CHANGE batch")
            last_time, last_epoch = r["append_time"], r["batch_leader_epoch"]
        if kind == "data":
            _apply(img, r)
        img.offset = off
    if img.in_txn:
        raise Violation("log ends inside a metadata transaction")
    return img, captured


def _need(cond: bool, off: int, msg: str) -> None:
    if not cond:
        raise Violation(f"offset {off}: {msg}")


def _ranges(d: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {f["name"]: (f["min_supported_version"], f["max_supported_version"]) for f in d["features"] or []}


def _alive(img: Image, b: int) -> bool:
    return b in img.brokers and not img.brokers[b]["fenced"]


def _apply(img: Image, r: dict[str, Any]) -> None:
    off, k, v, mv = r["offset"], r["api_key"], r["record_version"], img.mv
    if not img.mv_seen and not (k == 23 or (k == 12 and r["feature_level"]["name"] == "metadata.version")):
        raise Violation(f"offset {off}: record type {k} before the metadata.version FeatureLevelRecord")
    if k == 20:
        _need(mv >= 5, off, "NoOpRecord below 3.3-IV1")
    elif k == 12:
        d = r["feature_level"]
        name, level = d["name"], d["feature_level"]
        for b, info in img.brokers.items():
            lo, hi = info["ranges"].get(name, (1, 1) if name == "metadata.version" else (0, 0))
            _need(lo <= level <= hi, off, f"{name}={level} outside broker {b}'s supported range [{lo}, {hi}]")
        if name == "metadata.version":
            _need(level in KNOWN_LEVELS, off, f"unknown metadata.version {level}")
            if img.mv_seen and level < img.mv:
                _need(level >= 4, off, f"metadata.version downgrade to {level} below 3.3-IV0")
                _need(not any(x in MV_CHANGED for x in range(level + 1, img.mv + 1)), off,
                      f"metadata.version downgrade {img.mv} -> {level} crosses a level that changed metadata")
            img.mv = level
            img.mv_seen = True
        elif level == 0:
            img.features.pop(name, None)
        else:
            img.features[name] = level
    elif k == 21:
        _need(mv >= 8, off, "ZkMigrationStateRecord below 3.4-IV0")
    elif k in (23, 24):
        # the bootstrap transaction opens before the metadata.version record it wraps
        _need(mv >= 13 or (k == 23 and not img.mv_seen), off, "transaction record below 3.6-IV1")
        if k == 23:
            _need(not img.in_txn, off, "nested BeginTransaction")
            img.in_txn = True
        else:
            _need(img.in_txn, off, "EndTransaction without Begin")
            img.in_txn = False
    elif k == 27:
        _need(mv >= 15, off, "RegisterControllerRecord below 3.7-IV0")
    elif k == 0:
        d = r["register_broker"]
        _need(v == rb_version(mv), off, f"RegisterBrokerRecord v{v} at metadata.version {mv}")
        old = img.brokers.get(d["broker_id"])
        if old is None or old["incarnation"] != d["incarnation_id"]:
            _need(d["broker_epoch"] == r["batch_base_offset"], off,
                  f"new incarnation epoch {d['broker_epoch']} != batch base offset {r['batch_base_offset']}")
        ranges = _ranges(d)
        finalized = {"metadata.version": img.mv if img.mv_seen else 1, **img.features}
        for name, level in finalized.items():
            lo, hi = ranges.get(name, (0, 0))
            _need(lo <= level <= hi, off, f"broker {d['broker_id']} registers without support for {name}={level}")
        img.brokers[d["broker_id"]] = {"epoch": d["broker_epoch"], "incarnation": d["incarnation_id"],
                                       "fenced": d["fenced"], "ics": bool(d["in_controlled_shutdown"]),
                                       "ranges": ranges}
    elif k in (7, 8):
        _need(mv < 6, off, "Fence/UnfenceBrokerRecord from 3.3-IV2")
        d = r["fence_broker" if k == 7 else "unfence_broker"]
        b = img.brokers.get(d["id"])
        _need(b is not None and b["epoch"] == d["epoch"], off, "fence/unfence epoch mismatch")
        b["fenced"] = k == 7
    elif k == 17:
        _need(mv >= 6, off, "BrokerRegistrationChangeRecord below 3.3-IV2")
        d = r["broker_registration_change"]
        b = img.brokers.get(d["broker_id"])
        _need(b is not None, off, f"unknown broker {d['broker_id']}")
        _need(b["epoch"] == d["broker_epoch"], off, f"broker {d['broker_id']} epoch {d['broker_epoch']} != {b['epoch']}")
        _need(d["fenced"] in (-1, 0, 1), off, "bad Fenced value")
        if d["fenced"]:
            _need(v == 0 or d["in_controlled_shutdown"] == 0, off, "fence change written with controlled shutdown")
            b["fenced"] = d["fenced"] == 1
        if v >= 1 and d["in_controlled_shutdown"]:
            _need(d["in_controlled_shutdown"] == 1 and mv >= 7, off, "bad InControlledShutdown")
            b["ics"] = True
    elif k == 2:
        d = r["topic"]
        img.topics[d["topic_id"]] = d["name"]
    elif k == 9:
        tid = r["remove_topic"]["topic_id"]
        _need(tid in img.topics, off, f"RemoveTopic of unknown topic {tid}")
        del img.topics[tid]
        for key in [x for x in img.partitions if x[0] == tid]:
            del img.partitions[key]
    elif k == 3:
        d = r["partition"]
        _need(v == pc_version(mv), off, f"PartitionRecord v{v} at metadata.version {mv}")
        _need(d["topic_id"] in img.topics, off, "PartitionRecord of unknown topic")
        st = {x: d[x] for x in ("replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_epoch",
                                "partition_epoch", "leader_recovery_state")}
        st["elr"] = list(d.get("eligible_leader_replicas") or [])
        st["lke"] = list(d.get("last_known_elr") or [])
        _check_written(img, off, d["leader"], d["isr"])
        img.partitions[(d["topic_id"], d["partition_id"])] = st
        _check_partition(img, st, off)
    elif k == 5:
        d = r["partition_change"]
        _need(v == pc_version(mv), off, f"PartitionChangeRecord v{v} at metadata.version {mv}")
        st = img.partitions.get((d["topic_id"], d["partition_id"]))
        _need(st is not None, off, f"change to missing partition {d['topic_id']}-{d['partition_id']}")
        lists = {"replicas": "replicas", "isr": "isr", "removing_replicas": "removing_replicas",
                 "adding_replicas": "adding_replicas", "eligible_leader_replicas": "elr", "last_known_elr": "lke"}
        changes = [x for x, key in lists.items() if d.get(x) is not None and list(d[x]) != st[key]]
        if d["leader"] != -2:
            changes.append("leader")
        if d["leader_recovery_state"] not in (-1, st["leader_recovery_state"]):
            changes.append("leader_recovery_state")
        if d.get("directories") is not None:
            changes.append("directories")
        _need(bool(changes), off, f"PartitionChangeRecord for {d['topic_id']}-{d['partition_id']} changes nothing")
        if mv < 12 and d["isr"] is not None and set(st["isr"]) - set(d["isr"]):
            _need(d["leader"] != -2, off, f"ISR shrink without a leader-epoch bump at metadata.version {mv} (< 3.6-IV0)")
        _check_written(img, off, d["leader"], d["isr"])
        for x, key in lists.items():
            if d.get(x) is not None:
                st[key] = list(d[x])
        if d["leader"] != -2:
            st["leader"] = d["leader"]
            st["leader_epoch"] += 1
        if d["leader_recovery_state"] != -1:
            st["leader_recovery_state"] = d["leader_recovery_state"]
        st["partition_epoch"] += 1
        _check_partition(img, st, off)
    elif k == 4:
        d = r["config"]
        if d["resource_type"] == 4 and d["resource_name"] == "" and d["name"] == "min.insync.replicas":
            img.min_isr = int(d["value"]) if d["value"] is not None else 1
    elif k == 18:
        img.acls.add(r["access_control_entry"]["id"])
    elif k == 19:
        aid = r["remove_access_control_entry"]["id"]
        _need(aid in img.acls, off, "removal of an unknown ACL")
        img.acls.discard(aid)
    elif k == 11:
        _need(mv >= 11, off, "SCRAM record below 3.5-IV2")
        d = r["user_scram_credential"]
        img.scram.add((d["name"], d["mechanism"]))
    elif k == 22:
        d = r["remove_user_scram_credential"]
        _need((d["name"], d["mechanism"]) in img.scram, off, "removal of an unknown SCRAM credential")
        img.scram.discard((d["name"], d["mechanism"]))
    elif k == 10:
        _need(mv >= 14, off, "delegation token below 3.6-IV2")
        img.tokens.add(r["delegation_token"]["token_id"])
    elif k == 26:
        tok = r["remove_delegation_token"]["token_id"]
        _need(tok in img.tokens, off, "removal of an unknown token")
        img.tokens.discard(tok)
    elif k == 15:
        d = r["producer_ids"]
        _need(d["next_producer_id"] > img.next_producer_id, off, "producer ids go backwards")
        b = img.brokers.get(d["broker_id"])
        _need(b is not None and b["epoch"] == d["broker_epoch"], off, "producer id block for a stale broker epoch")
        img.next_producer_id = d["next_producer_id"]


def _check_written(img: Image, off: int, leader: int, isr: list[int] | None) -> None:
    """A leader or ISR member the record writes is a registered, unfenced broker at that moment."""
    if leader >= 0:
        _need(_alive(img, leader), off, f"leader {leader} is fenced or unregistered")
    for b in isr or []:
        _need(_alive(img, b), off, f"ISR member {b} is fenced or unregistered")


def _check_partition(img: Image, st: dict[str, Any], off: int) -> None:
    reps = set(st["replicas"])
    _need(set(st["isr"]) <= reps, off, f"ISR {st['isr']} not within replicas {st['replicas']}")
    _need(st["leader"] == -1 or st["leader"] in st["isr"], off, f"leader {st['leader']} not in ISR {st['isr']}")
    _need(not set(st["elr"]) & set(st["isr"]), off, f"ELR {st['elr']} overlaps ISR {st['isr']}")
    _need(set(st["elr"]) <= reps, off, f"ELR {st['elr']} not within replicas {st['replicas']}")
    _need(set(st["lke"]) <= reps, off, f"LastKnownElr {st['lke']} not within replicas {st['replicas']}")
    _need(not st["elr"] or len(st["isr"]) < img.min_isr, off,
          f"ELR {st['elr']} while the ISR {st['isr']} is at min.insync.replicas {img.min_isr}")
