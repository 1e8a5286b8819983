"""The driver-side plan of a scenario: the rare structural records, placed exactly in the log.

The plan walks the scenario's events in time order and writes, with exact offsets, what the active
controller would append for each (facts §5, §7): bootstrap (metadata.version FeatureLevelRecord,
ZkMigrationState from 3.4-IV0, wrapped in a metadata transaction from 3.6-IV1), controller
registrations (from 3.7-IV0), broker registrations (broker epoch = offset of the first record of
the registration's batch), unfencing, topic creation/deletion, reassignments, controlled shutdowns,
fencing after a session timeout, restarts with new incarnations, controller failovers (Raft epoch
+1 and a LEADER_CHANGE control batch), rolling upgrades, feature updates validated with the
controller's rules, configs, quotas, ACLs, SCRAM credentials, delegation tokens and producer-id
blocks — each gated by the metadata.version in force and written at the record version it selects.

Between structural groups lie stretches ("segments") of bulk batches whose content is closed-form
(:mod:`kraft_replay.generate.bulk`); each segment records the state that content depends on: the
brokers that are down, the metadata.version, the Raft epoch, and per broker the churn count of its
last liveness change (a "reset" of the partitions it replicates). The Spark stage expands the
segments. Partition leadership of stable topics follows one rule everywhere: the leader is the first
live replica, and the ISR is the live replicas (minus one on a bulk shrink step); the plan knows the
exact ISR of every stable partition at every structural group in closed form (:meth:`_Planner.stable_state`).

Partition changes follow Kafka's controller (facts §5.2, §6.2, KIP-966) through one builder,
:meth:`_Planner.change`: a record is written only when it changes something; Leader is set when the
leader changes, when the replica set drops a current replica, and — below 3.6-IV0 — on every ISR
shrink (an epoch bump); from 4.0-IV1 (PartitionChangeRecord v2) replicas leaving an ISR that is
below ``min.insync.replicas`` become EligibleLeaderReplicas (ELR ∩ ISR = ∅, ELR ⊆ replicas, cleared
when the ISR is back at min ISR) and LastKnownElr records the ELR while the partition is leaderless.
Brokers and controllers register with their software's supported feature ranges (``mv.software_feature_ranges``,
KAFKA-17492's dropped [0, x] features on old registration requests), which feature updates are
checked against (facts §7.2-§7.3).
"""

from __future__ import annotations

import copy
import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

from kraft_replay.codec.records import MetadataRecord, uuid_from_bytes
from kraft_replay.codec.schema import RECORD_TYPES, ZERO_UUID, FieldSpec
from kraft_replay.generate import mv
from kraft_replay.generate.bulk import BulkLayout, live_replicas, shrink_possible, stable_replicas, touches_between
from kraft_replay.generate.errors import ScenarioError
from kraft_replay.generate.scenario import Scenario

SETUP_MS = 2000          # bootstrap, registrations and initial topics happen in the first 2 s
CATCHUP_MS = 1500        # a restarted/healed broker rejoins ISRs this long after being unfenced

# record type ids
REGISTER_BROKER, TOPIC, PARTITION, CONFIG, PARTITION_CHANGE = 0, 2, 3, 4, 5
FENCE_BROKER, UNFENCE_BROKER, REMOVE_TOPIC, DELEGATION_TOKEN, SCRAM = 7, 8, 9, 10, 11
FEATURE_LEVEL, CLIENT_QUOTA, PRODUCER_IDS, BROKER_REG_CHANGE, ACL, REMOVE_ACL = 12, 14, 15, 17, 18, 19
ZK_MIGRATION, REMOVE_SCRAM, BEGIN_TXN, END_TXN, REMOVE_TOKEN, REGISTER_CONTROLLER = 21, 22, 23, 24, 26, 27


def _defaults(fields: tuple[FieldSpec, ...], version: int, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present_in(version):
            continue
        if f.snake in data:
            v = data[f.snake]
            if f.fields is not None and v is not None:
                v = [_defaults(f.fields, version, e) for e in v] if f.is_array else _defaults(f.fields, version, v)
            out[f.snake] = v
        else:
            out[f.snake] = f.default_value(version)
    unknown = set(data) - {f.snake for f in fields}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    return out


_TEMPLATES: dict[tuple[int, int], tuple[dict[str, Any], frozenset[str], frozenset[str]]] = {}


def record(api_key: int, version: int, **data: Any) -> MetadataRecord:
    """A record with every field of its version filled (defaults for the ones not given)."""
    tpl = _TEMPLATES.get((api_key, version))
    if tpl is None:
        rt = RECORD_TYPES[api_key]
        if not rt.schema.is_valid_version(version):
            raise ValueError(f"{rt.name} has no version {version}")
        fields = rt.schema.fields
        tpl = (_defaults(fields, version, {}), frozenset(f.snake for f in fields if f.present_in(version)),
               frozenset(f.snake for f in fields if f.fields is not None))
        _TEMPLATES[(api_key, version)] = tpl
    defaults, present, nested = tpl
    if nested & data.keys() or not data.keys() <= present:     # nested structs or bad names: the full path
        return MetadataRecord(api_key, version, _defaults(RECORD_TYPES[api_key].schema.fields, version, data))
    out = {k: (list(v) if isinstance(v, list) else v) for k, v in defaults.items()}
    out.update(data)
    return MetadataRecord(api_key, version, out)


def uuid_for(seed: int, *parts: object) -> str:
    """A deterministic non-zero UUID (Kafka text form) from the seed and a name."""
    digest = hashlib.sha256(("|".join(map(str, (seed, *parts)))).encode()).digest()[:16]
    return uuid_from_bytes(digest)


@dataclass
class PlannedBatch:
    """One structural batch: data records, or one control record (``control`` = (type name, data))."""

    time_ms: int
    base_offset: int
    epoch: int
    records: list[MetadataRecord]
    control: tuple[str, dict[str, Any]] | None = None

    @property
    def size(self) -> int:
        return 1 if self.control is not None else len(self.records)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.size - 1


@dataclass
class Segment:
    """Bulk batches ``[j_start, j_end)`` then the structural group at ``group_time_ms`` (None for the last)."""

    seg_id: int
    j_start: int
    j_end: int
    offset_start: int
    noop_allowed: bool
    mv_level: int
    raft_epoch: int
    down: list[int]
    seg_start_ms: int
    group_time_ms: int | None
    group_last_offset: int       # last offset of the whole segment (bulk + group)
    reset_at: list[int]          # per broker index: churn count of its last liveness change before the segment


@dataclass
class SnapshotPoint:
    end_offset: int               # exclusive
    epoch: int
    last_contained_ms: int
    time_ms: int
    state: dict[str, Any]


@dataclass
class Window:
    """A stretch of a broker's life the apply timeline must show (partition, down, snapshot load)."""

    broker_id: int
    kind: str                    # "frozen" | "down" | "snapshot_load"
    start_ms: int
    end_ms: int
    value: int = -1              # snapshot end offset for "snapshot_load"


@dataclass
class FeatureRequest:
    time_ms: int
    feature: str
    level: int
    upgrade_type: str
    validate_only: bool
    error_code: int
    error_message: str | None
    record_offset: int | None


@dataclass
class Plan:
    scenario: Scenario
    layout: BulkLayout
    batches: list[PlannedBatch]
    segments: list[Segment]
    snapshots: list[SnapshotPoint]
    bootstrap_records: list[MetadataRecord]
    windows: list[Window]
    events: list[dict[str, Any]]
    feature_requests: list[FeatureRequest]
    topic_ids: list[str]                         # stable topics, by index
    topic_names: list[str]
    producer_id_ranges: list[tuple[int, int]]    # allocated [start, end) blocks
    total_records: int

    @property
    def structural_records(self) -> int:
        return sum(b.size for b in self.batches)


class _Planner:
    def __init__(self, sc: Scenario, layout: BulkLayout) -> None:
        self.sc = sc
        self.layout = layout
        self.seed = sc.seed
        self.rng = random.Random(f"plan-{sc.seed}")
        self.brokers_list = sc.broker_ids
        self.rf = sc.topics.replication_factor
        self.P = sc.topics.stable * sc.topics.partitions
        self.min_isr = sc.topics.min_insync_replicas
        self.bidx = {b: i for i, b in enumerate(self.brokers_list)}
        self.reset_at = [0] * len(self.brokers_list)
        self._churn_at = (-1, 0)                   # (bulk position, churn records before it), cached
        self.elr: dict[int, list[int]] = {}        # stable partition -> ELR (only non-empty entries)
        self.lke: dict[int, list[int]] = {}        # stable partition -> LastKnownElr (non-empty)
        self.sticky: dict[int, list[int]] = {}     # stable partitions whose last ISR member went down (no ELR)
        # log cursor
        self.cursor = 0
        self.pos = 0
        self.last_time = -1
        self.seg_start_ms = sc.start_ms
        self.batches: list[PlannedBatch] = []
        self.segments: list[Segment] = []
        self.snapshots: list[SnapshotPoint] = []
        self.windows: list[Window] = []
        self.events: list[dict[str, Any]] = []
        self.freqs: list[FeatureRequest] = []
        # cluster state
        self.mv = int(sc.bootstrap_metadata_version)
        self.features: dict[str, int] = {}
        self.raft_epoch = 1
        self.raft_leader = sc.controller_ids[0]
        self.down: set[int] = set()
        self.pending_down: set[int] | None = None   # applied once the bulk stretch before the event is closed
        self.software: dict[int, str] = {b: sc.brokers.software_version for b in self.brokers_list}
        self.controller_software = sc.brokers.software_version
        self.brokers: dict[int, dict[str, Any]] = {}
        self.controllers: dict[int, dict[str, Any]] = {}
        self.topic_ids = [uuid_for(self.seed, "topic", t) for t in range(sc.topics.stable)]
        self.topic_names = [f"stable-{t:05d}" for t in range(sc.topics.stable)]
        self.live_topics: dict[str, str] = {}                 # id -> name (stable and temporary)
        self.temp_parts: dict[tuple[str, int], dict[str, Any]] = {}
        self.configs: dict[tuple[int, str, str], str] = {}
        self.quotas: dict[tuple[str, str], float] = {}
        self.acls: dict[str, dict[str, Any]] = {}
        self.scram: dict[tuple[str, int], dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.next_producer_id = -1
        self.producer_ranges: list[tuple[int, int]] = []
        self.txn_open = False
        self.bootstrap_records: list[MetadataRecord] = []
        self.busy: dict[int, list[tuple[int, int, str]]] = {}

    # -- log placement -------------------------------------------------------------------------
    def _close_gap(self, t_ms: int) -> None:
        """Close the bulk stretch up to ``t_ms`` with the current state; start a new segment."""
        lay = self.layout
        t_ms = max(t_ms, self.seg_start_ms)
        p = max(lay.position(t_ms), self.pos)
        noop_ok = self.mv >= mv.NOOP_LEVEL
        n = lay.prefix(p, not noop_ok) - lay.prefix(self.pos, not noop_ok)
        seg = Segment(len(self.segments), self.pos, p, self.cursor, noop_ok, self.mv, self.raft_epoch,
                      sorted(self.down), self.seg_start_ms, t_ms, -1, list(self.reset_at))
        if n > 0:
            j = p - 1
            while lay.noop[j % len(lay.sizes)] and not noop_ok:
                j -= 1
            self.last_time = lay.time_of(j)
        self.cursor += n
        self.pos = p
        self.segments.append(seg)
        self.seg_start_ms = t_ms
        if self.pending_down is not None:
            self.down, self.pending_down = self.pending_down, None

    def _finish_group(self) -> None:
        self.segments[-1].group_last_offset = self.cursor - 1

    def emit(self, t_ms: int, recs: list[MetadataRecord], *, split: bool = True) -> tuple[int, int]:
        """Append data batches at ``t_ms`` (never before an earlier batch); returns (first, last offset)."""
        self._close_gap(t_ms)
        t_ms = self.seg_start_ms
        first = self.cursor
        step = self.sc.log.max_structural_batch if split else max(len(recs), 1)
        for i in range(0, len(recs), step):
            chunk = recs[i:i + step]
            self.batches.append(PlannedBatch(t_ms, self.cursor, self.raft_epoch, chunk))
            self.cursor += len(chunk)
        self.last_time = t_ms
        self._finish_group()
        return first, self.cursor - 1

    def emit_control(self, t_ms: int, ctype: str, data: dict[str, Any]) -> int:
        self._close_gap(t_ms)
        t_ms = self.seg_start_ms
        off = self.cursor
        self.batches.append(PlannedBatch(t_ms, off, self.raft_epoch, [], (ctype, data)))
        self.cursor += 1
        self.last_time = t_ms
        self._finish_group()
        return off

    def next_offset_at(self, t_ms: int) -> int:
        """The offset the next structural batch at ``t_ms`` will get (closes the gap first)."""
        self._close_gap(t_ms)
        self._finish_group()
        return self.cursor

    # -- helpers --------------------------------------------------------------------------------
    def event(self, kind: str, start_ms: int, end_ms: int | None = None, *, broker_id: int | None = None,
              controller_id: int | None = None, first_offset: int | None = None, last_offset: int | None = None,
              **details: Any) -> dict[str, Any]:
        ev = {"event_type": kind, "start_ms": start_ms, "end_ms": end_ms, "broker_id": broker_id,
              "controller_id": controller_id, "first_offset": first_offset, "last_offset": last_offset,
              "details": details}
        self.events.append(ev)
        return ev

    def pc_version(self) -> int:
        return mv.partition_record_version(self.mv)

    def software_max(self, b: int) -> int:
        return mv.SOFTWARE_MAX_LEVEL[self.software[b]]

    def reserve(self, broker: int, start: int, end: int, key: str) -> None:
        for s, e, k in self.busy.get(broker, []):
            if start < e and s < end:
                raise ScenarioError(f"scenario {self.sc.name}: key '{key}': broker {broker} is already busy with "
                                    f"'{k}' between {s - self.sc.start_ms} and {e - self.sc.start_ms} ms")
        self.busy.setdefault(broker, []).append((start, end, key))

    # -- record builders ------------------------------------------------------------------------
    def register_broker(self, t: int, b: int) -> int:
        epoch = self.next_offset_at(t)
        inc = uuid_for(self.seed, "incarnation", b, epoch)
        v = mv.register_broker_version(self.mv)
        ranges = mv.registered_broker_features(self.software[b], self.controller_software)
        data: dict[str, Any] = dict(
            broker_id=b, incarnation_id=inc, broker_epoch=epoch,
            end_points=[{"name": "PLAINTEXT", "host": f"broker-{b}.kafka.internal", "port": 9092, "security_protocol": 0}],
            features=mv.features_list(ranges),
            rack=f"rack-{b % self.sc.brokers.racks}", fenced=True,
        )
        if v >= 1:
            data["in_controlled_shutdown"] = False
        if v >= 2:
            data["is_migrating_zk_broker"] = False
        if v >= 3:
            data["log_dirs"] = [uuid_for(self.seed, "logdir", b)]
        self.emit(t, [record(REGISTER_BROKER, v, **data)])
        self.brokers[b] = {"epoch": epoch, "incarnation": inc, "fenced": True, "ics": False,
                           "range": (1, self.software_max(b)), "ranges": ranges, "data": data}
        return epoch

    def fence_record(self, b: int, fence: bool) -> MetadataRecord:
        epoch = self.brokers[b]["epoch"]
        self.brokers[b]["fenced"] = fence
        if self.mv >= mv.BRCR_LEVEL:
            return record(BROKER_REG_CHANGE, 0, broker_id=b, broker_epoch=epoch, fenced=1 if fence else -1)
        return record(FENCE_BROKER if fence else UNFENCE_BROKER, 0, id=b, epoch=epoch)

    # -- partition changes (facts §5.2, §6.2; KIP-966) -----------------------------------------
    def change(self, st: dict[str, Any], tid: str, pid: int, *, isr: list[int] | None = None,
               leader: int | None = None, replicas: list[int] | None = None, adding: list[int] | None = None,
               removing: list[int] | None = None) -> MetadataRecord | None:
        """The PartitionChangeRecord the controller writes to move partition state ``st`` (keys replicas,
        isr, leader, elr, lke) to the given values, or None when nothing would change.

        Rules: Leader is set when it changes, when the replica set drops a current replica, and below
        3.6-IV0 on every ISR shrink (leader-epoch bump, facts §5.2/§6.2). From 4.0-IV1 (record v2) the
        ELR follows KIP-966: ISR >= min.insync.replicas clears ELR and LastKnownElr; below it, the
        members leaving the ISR join the ELR (ELR ∩ ISR = ∅, ELR ⊆ replicas), and while the partition
        is leaderless LastKnownElr holds the ELR. ``st`` is updated in place."""
        v = self.pc_version()
        new_reps = list(replicas) if replicas is not None else st["replicas"]
        new_isr = list(isr) if isr is not None else st["isr"]
        new_leader = leader if leader is not None else st["leader"]
        data: dict[str, Any] = {"partition_id": pid, "topic_id": tid}
        if replicas is not None and new_reps != st["replicas"]:
            data["replicas"] = new_reps
            if v >= 1:
                data["directories"] = [ZERO_UUID] * len(new_reps)
        if new_isr != st["isr"]:
            data["isr"] = new_isr
        shrinks = bool(set(st["isr"]) - set(new_isr))
        drops_replica = bool(set(st["replicas"]) - set(new_reps))
        if new_leader != st["leader"] or drops_replica or (shrinks and self.mv < mv.NO_EPOCH_BUMP_ON_SHRINK_LEVEL):
            data["leader"] = new_leader
        if adding is not None and adding != st.get("adding", []):
            data["adding_replicas"] = list(adding)
        if removing is not None and removing != st.get("removing", []):
            data["removing_replicas"] = list(removing)
        old_elr, old_lke = st.get("elr", []), st.get("lke", [])
        new_elr, new_lke = old_elr, old_lke
        if v >= 2:
            if len(new_isr) >= self.min_isr:
                new_elr, new_lke = [], []
            else:
                new_elr = []
                for r in [*old_elr, *st["isr"]]:
                    if r not in new_isr and r in new_reps and r not in new_elr:
                        new_elr.append(r)
                new_lke = list(new_elr) if new_leader == -1 else []
            if new_elr != old_elr:
                data["eligible_leader_replicas"] = new_elr
            if new_lke != old_lke:
                data["last_known_elr"] = new_lke
        if len(data) == 2:
            return None
        st.update(replicas=new_reps, isr=new_isr, leader=new_leader, elr=new_elr, lke=new_lke)
        if adding is not None:
            st["adding"] = list(adding)
        if removing is not None:
            st["removing"] = list(removing)
        return record(PARTITION_CHANGE, v, **data)

    def stable_state(self, k: int, down: set[int]) -> dict[str, Any]:
        """Stable partition ``k``'s registration at the current log position, in closed form (bulk module doc):
        the ISR is full unless the partition can shrink and has been touched an odd number of times since its
        last reset."""
        reps = stable_replicas(k, self.brokers_list, self.rf)
        live = live_replicas(reps, down)
        st: dict[str, Any] = {"replicas": reps, "elr": list(self.elr.get(k, [])), "lke": list(self.lke.get(k, []))}
        if k in self.sticky:
            st.update(isr=list(self.sticky[k]), leader=-1)
            return st
        last_reset = max(self.reset_at[self.bidx[r]] for r in reps)
        if self._churn_at[0] != self.pos:
            self._churn_at = (self.pos, self.layout.prefix(self.pos, True))
        m = touches_between(self.layout, k, last_reset, self._churn_at[1])
        shrunk = shrink_possible(len(live), self.min_isr) and m % 2 == 1
        st.update(isr=live[:-1] if shrunk else live, leader=live[0] if live else -1)
        return st

    def _store_stable(self, k: int, st: dict[str, Any]) -> None:
        for d, key in ((self.elr, "elr"), (self.lke, "lke")):
            if st[key]:
                d[k] = list(st[key])
            else:
                d.pop(k, None)

    def _stable_key(self, k: int) -> tuple[str, int]:
        return self.topic_ids[k // self.sc.topics.partitions], k % self.sc.topics.partitions

    def isolate(self, t: int, b: int) -> list[MetadataRecord]:
        """Partition changes when ``b`` leaves (controlled shutdown or fencing): ``b`` dropped from every
        ISR, leadership moved to the next live replica. A stable partition whose ISR had shrunk without
        ``b`` first takes the lagging replica back (it caught up), so every partition of ``b`` is left
        with a full ISR (a reset, see the bulk module). When ``b`` was the last ISR member the partition
        becomes leaderless: below 4.0-IV1 the ISR keeps ``b`` (Kafka keeps the last member), from 4.0-IV1
        the ISR empties and ``b`` joins the ELR."""
        self.next_offset_at(t)
        old = set(self.down)
        new = old | {b}
        recs: list[MetadataRecord] = []
        elr_mode = self.pc_version() >= 2
        for k in range(self.P):
            reps = stable_replicas(k, self.brokers_list, self.rf)
            if b not in reps:
                continue
            tid, pid = self._stable_key(k)
            st = self.stable_state(k, old)
            lo, ln = live_replicas(reps, old), live_replicas(reps, new)
            if b in st["isr"] and st["isr"] != lo and k not in self.sticky:
                rec = self.change(st, tid, pid, isr=lo)          # the lagging replica caught up
                if rec is not None:
                    recs.append(rec)
            if b in st["isr"]:
                target = [r for r in st["isr"] if r != b]
                if not target and not elr_mode:
                    rec = self.change(st, tid, pid, leader=-1)   # the last ISR member stays in the ISR
                    self.sticky[k] = list(st["isr"])
                else:
                    leader = st["leader"] if st["leader"] != b else (ln[0] if target else -1)
                    rec = self.change(st, tid, pid, isr=target, leader=leader)
                if rec is not None:
                    recs.append(rec)
            self._store_stable(k, st)
        recs += self._isolate_temp(b)
        self.reset_at[self.bidx[b]] = self.layout.prefix(self.pos, True)
        self.pending_down = new
        return recs

    def _isolate_temp(self, b: int) -> list[MetadataRecord]:
        recs: list[MetadataRecord] = []
        elr_mode = self.pc_version() >= 2
        for (tid, pid), st in sorted(self.temp_parts.items()):
            if b not in st["isr"]:
                continue
            target = [r for r in st["isr"] if r != b]
            if not target and not elr_mode:
                rec = self.change(st, tid, pid, leader=-1)
            else:
                leader = st["leader"] if st["leader"] != b else (target[0] if target else -1)
                rec = self.change(st, tid, pid, isr=target, leader=leader)
            if rec is not None:
                recs.append(rec)
        return recs

    @staticmethod
    def _no_clean_candidate(st: dict[str, Any], b: int) -> bool:
        """A leaderless partition whose last ISR member or ELR is known, and ``b`` is neither: electing ``b``
        would be an unclean election, so the partition stays leaderless (KIP-966 / unclean election off)."""
        return st["leader"] == -1 and bool(st["isr"] or st["elr"]) and b not in st["isr"] + st["elr"]

    def rejoin(self, t: int, b: int) -> list[MetadataRecord]:
        """Partition changes when ``b`` is back and caught up: ISRs expanded to the live replicas (the
        stable partitions of ``b`` are left full: a reset), the preferred (first live) replica leads again,
        ``b`` leaves the ELR."""
        self.next_offset_at(t)
        old = set(self.down)
        new = old - {b}
        recs: list[MetadataRecord] = []
        for k in range(self.P):
            reps = stable_replicas(k, self.brokers_list, self.rf)
            if b not in reps:
                continue
            tid, pid = self._stable_key(k)
            st = self.stable_state(k, old)
            if self._no_clean_candidate(st, b):
                self.sticky[k] = list(st["isr"])     # still leaderless: b holds no data the ISR/ELR vouch for
                continue
            self.sticky.pop(k, None)
            ln = live_replicas(reps, new)
            rec = self.change(st, tid, pid, isr=ln, leader=ln[0])
            if rec is not None:
                recs.append(rec)
            self._store_stable(k, st)
        for (tid, pid), st in sorted(self.temp_parts.items()):
            if b in st["replicas"] and (b not in st["isr"] or st["leader"] == -1) and not self._no_clean_candidate(st, b):
                isr = [r for r in st["replicas"] if r == b or (r in st["isr"] and r not in new)]
                leader = st["leader"] if st["leader"] in isr else isr[0]
                rec = self.change(st, tid, pid, isr=isr, leader=leader)
                if rec is not None:
                    recs.append(rec)
        self.reset_at[self.bidx[b]] = self.layout.prefix(self.pos, True)
        self.pending_down = new
        return recs

    def partition_record(self, tid: str, pid: int, replicas: list[int], leader: int) -> MetadataRecord:
        v = self.pc_version()
        data: dict[str, Any] = dict(partition_id=pid, topic_id=tid, replicas=replicas, isr=list(replicas),
                                    removing_replicas=[], adding_replicas=[], leader=leader, leader_epoch=0,
                                    partition_epoch=0)
        if v >= 1:
            data["directories"] = [ZERO_UUID] * len(replicas)
        return record(PARTITION, v, **data)

    # -- phases ---------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        sc = self.sc
        t = sc.start_ms
        voters = [{"voter_id": c} for c in sc.controller_ids]
        off = self.emit_control(t, "LEADER_CHANGE", {"version": 0, "leader_id": self.raft_leader, "voters": voters,
                                                     "granting_voters": voters[: len(voters) // 2 + 1]})
        self.event("controller_elected", t, t, controller_id=self.raft_leader, first_offset=off, last_offset=off,
                   raft_epoch=self.raft_epoch)
        boot = [record(FEATURE_LEVEL, 0, name="metadata.version", feature_level=self.mv)]
        if self.mv >= mv.ZK_MIGRATION_LEVEL:
            boot.append(record(ZK_MIGRATION, 0, zk_migration_state=0))
        self.bootstrap_records = [boot[0]]
        if self.mv >= mv.TRANSACTIONS_LEVEL:
            boot = [record(BEGIN_TXN, 0, name="Bootstrap records"), *boot, record(END_TXN, 0)]
        first, last = self.emit(t + 1, boot, split=False)
        self.event("bootstrap", t + 1, t + 1, first_offset=first, last_offset=last, metadata_version=self.mv)
        t += 2
        if self.mv >= mv.CONTROLLER_REGISTRATION_LEVEL:
            self.register_controllers(t)
        t += 1
        for b in self.brokers_list:
            self.register_broker(t, b)
            t += 1
        for b in self.brokers_list:
            first, last = self.emit(t, [self.fence_record(b, False)])
            self.event("broker_registered", t, t, broker_id=b, first_offset=first, last_offset=last,
                       broker_epoch=self.brokers[b]["epoch"], software_version=self.software[b])
            t += 1
        for ti, (tid, name) in enumerate(zip(self.topic_ids, self.topic_names, strict=True)):
            recs = [record(TOPIC, 0, name=name, topic_id=tid)]
            for pid in range(sc.topics.partitions):
                k = ti * sc.topics.partitions + pid
                reps = stable_replicas(k, self.brokers_list, self.rf)
                recs.append(self.partition_record(tid, pid, reps, reps[0]))
            self.emit(t, recs)
            self.live_topics[tid] = name
            if ti % 200 == 199:
                t += 1
        t += 1
        self.set_config(t, 4, "", "log.retention.hours", "168")
        if self.min_isr != 1:
            self.set_config(t, 4, "", "min.insync.replicas", str(self.min_isr))

    def register_controllers(self, t: int) -> None:
        ranges = mv.software_feature_ranges(self.controller_software)
        for c in self.sc.controller_ids:
            inc = uuid_for(self.seed, "controller", c, t)
            rec = record(REGISTER_CONTROLLER, 0, controller_id=c, incarnation_id=inc, zk_migration_ready=False,
                         end_points=[{"name": "CONTROLLER", "host": f"controller-{c}.kafka.internal", "port": 9093,
                                      "security_protocol": 0}],
                         features=mv.features_list(ranges))
            self.emit(t, [rec])
            self.controllers[c] = {"ranges": ranges, "data": rec.data}

    def set_config(self, t: int, rtype: int, rname: str, key: str, value: str | None) -> None:
        self.emit(t, [record(CONFIG, 0, resource_type=rtype, resource_name=rname, name=key, value=value)])
        if value is None:
            self.configs.pop((rtype, rname, key), None)
        else:
            self.configs[(rtype, rname, key)] = value

    # -- feature updates (facts §7.2/§7.3) --------------------------------------------------------
    def check_feature_update(self, feature: str, level: int, utype: str,
                             proposed: dict[str, int] | None = None) -> tuple[int, str | None]:
        """(error code, message) the controller answers for one feature update; (0, None) = accepted.

        Rules, in the controller's order (facts §7.2): negative level; support everywhere (§7.3: the
        local controller's range, every registered broker's RegisterBrokerRecord range — a feature it
        does not list counts as [0, 0] — and, from 3.7-IV0, every voter's RegisterControllerRecord
        range); direction vs upgrade type; for metadata.version the known-level, 3.3-IV0 floor and
        metadata-changed downgrade checks; for other features a known name, a defined level and the
        dependencies (level >= 1 needs metadata.version >= 3.3-IV0; kraft.version 1 needs 3.9-IV0)."""
        def fail(reason: str, mv_form: bool = False) -> tuple[int, str]:
            head = f"Invalid metadata.version {level}. " if mv_form else f"Invalid update version {level} for feature {feature}. "
            return 95, "The update failed for all features since the following feature had an error: " + head + reason

        is_mv = feature == "metadata.version"
        current = self.mv if is_mv else self.features.get(feature, 0)
        if level < 0:
            return fail("A feature version cannot be less than 0.")
        leader = self.raft_leader
        lo, hi = mv.software_feature_ranges(self.controller_software).get(feature, (0, 0))
        if not lo <= level <= hi:
            if hi == 0:
                return fail(f"Local controller {leader} does not support this feature.")
            return fail(f"Local controller {leader} only supports versions {mv.range_text(lo, hi)}")
        for b in sorted(self.brokers):
            lo, hi = self.brokers[b]["ranges"].get(feature, (0, 0))
            if not lo <= level <= hi:
                if hi == 0:
                    return fail(f"Broker {b} does not support this feature.")
                return fail(f"Broker {b} only supports versions {mv.range_text(lo, hi)}")
        if self.mv >= mv.CONTROLLER_REGISTRATION_LEVEL:
            for c in self.sc.controller_ids:
                if c not in self.controllers:
                    return fail(f"controller {c} has not registered, and may not support this feature")
                lo, hi = self.controllers[c]["ranges"].get(feature, (0, 0))
                if not lo <= level <= hi:
                    if hi == 0:
                        return fail(f"Controller {c} does not support this feature.")
                    return fail(f"Controller {c} only supports versions {mv.range_text(lo, hi)}")
        if level < current and utype == "UPGRADE":
            return fail("Can't downgrade the version of this feature without setting the upgrade type to either "
                        "safe or unsafe downgrade.")
        if level > current and utype != "UPGRADE":
            return fail("Can't downgrade to a newer version.")
        if is_mv:
            if level not in mv.MV_LEVELS:
                return fail("Unknown metadata.version.", True)
            if level < mv.MIN_BOOTSTRAP_LEVEL:
                return fail("Unable to set a metadata.version less than 3.3-IV0", True)
            if level < current and mv.metadata_changed_between(level, current):
                if utype == "SAFE_DOWNGRADE":
                    return fail("Refusing to perform the requested downgrade because it might delete metadata "
                                "information.", True)
                return fail("Unsafe metadata downgrade is not supported in this version.", True)
            return 0, None
        if feature not in mv.FEATURE_DEFINED_LEVELS:
            return fail(f"Feature {feature} not found.")
        if level not in mv.FEATURE_DEFINED_LEVELS[feature]:
            return fail(f"Feature {feature} has no level {level}.")
        mv_after = (proposed or {}).get("metadata.version", self.mv)
        if level >= 1 and mv_after < mv.MIN_FEATURE_MV_LEVEL:
            return fail(f"{feature} could not be set to {level} because it depends on metadata.version="
                        f"{mv.MIN_FEATURE_MV_LEVEL} (3.3-IV0)")
        need = mv.FEATURE_MV_DEPENDENCY.get((feature, level))
        if need is not None and mv_after < need:
            return fail(f"{feature} could not be set to {level} because it depends on metadata.version level {need}")
        return 0, None

    def feature_update(self, t: int, feature: str, level: int, utype: str, *, reason: str) -> bool:
        code, msg = self.check_feature_update(feature, level, utype)
        off = None
        before = self.mv if feature == "metadata.version" else self.features.get(feature, 0)
        if code == 0:
            off, _ = self.emit(t, [record(FEATURE_LEVEL, 0, name=feature, feature_level=level)])
            if feature == "metadata.version":
                crossed = self.mv < mv.CONTROLLER_REGISTRATION_LEVEL <= level
                self.mv = level
                if crossed:
                    self.register_controllers(t)
            elif level == 0:
                self.features.pop(feature, None)       # level 0 removes the feature (facts §5.4)
            else:
                self.features[feature] = level
        self.freqs.append(FeatureRequest(t, feature, level, utype, False, code, msg, off))
        self.event("feature_update", t, t, first_offset=off, last_offset=off, feature=feature, from_level=before,
                   target_level=level, upgrade_type=utype, accepted=code == 0, error_code=code, error_message=msg,
                   reason=reason)
        return code == 0

    # -- scheduled events -----------------------------------------------------------------------
    def schedule(self) -> list[tuple[int, int, Callable[[], None]]]:
        sc = self.sc
        t0 = sc.start_ms
        bulk0 = self.layout.start_ms
        end = sc.start_ms + sc.duration_ms
        acts: list[tuple[int, int, Callable[[], None]]] = []
        seq = iter(range(1 << 30))

        def at(t: float, fn: Callable[[], None]) -> None:
            acts.append((max(int(t), bulk0), next(seq), fn))

        st = sc.session_timeout_ms
        for i, ev in enumerate(sc.events.broker_restarts):
            start = t0 + int(ev.at_s * 1000)
            down = int(ev.downtime_s * 1000)
            if not ev.controlled:
                down = max(down, st + 1000)
            self.reserve(ev.broker, start, start + down + CATCHUP_MS + 200, f"events.broker_restarts.{i}")
            self._restart(at, ev.broker, start, down, ev.controlled, f"restart-{i}", None)
        for i, ev in enumerate(sc.events.network_partitions):
            start = t0 + int(ev.at_s * 1000)
            dur = int(ev.duration_s * 1000)
            self.reserve(ev.broker, start, start + dur + CATCHUP_MS + 200, f"events.network_partitions.{i}")
            self._partition(at, ev.broker, start, dur)
        for i, ev in enumerate(sc.events.controller_failovers):
            t = t0 + int(ev.at_s * 1000)
            at(t, lambda t=t: self._do_failover(t))
        ru = sc.events.rolling_upgrade
        if ru is not None:
            start = t0 + int(ru.at_s * 1000)
            step = int(ru.interval_s * 1000)
            final = int(ru.final_metadata_version)
            if final > mv.SOFTWARE_MAX_LEVEL[sc.brokers.software_version]:
                at(start - 500, lambda f=final: self.feature_update(
                    start - 500, "metadata.version", f, "UPGRADE", reason="before rolling upgrade: brokers too old"))

            def upgrade_controllers(ru=ru, start=start) -> None:
                self.controller_software = ru.to_software
                if self.mv >= mv.CONTROLLER_REGISTRATION_LEVEL:
                    self.register_controllers(start)
            at(start, upgrade_controllers)
            for i, b in enumerate(self.brokers_list):
                bstart = start + (i + 1) * step
                self.reserve(b, bstart, bstart + step // 2 + CATCHUP_MS + 200, "events.rolling_upgrade")
                self._restart(at, b, bstart, step // 2, True, f"upgrade-{b}", ru.to_software)
            fin = start + (len(self.brokers_list) + 1) * step
            at(fin, lambda f=final, fin=fin: self.feature_update(fin, "metadata.version", f, "UPGRADE",
                                                                 reason="rolling upgrade finished"))
            self.event("rolling_upgrade", start, fin, from_software=sc.brokers.software_version,
                       to_software=ru.to_software, final_metadata_version=final)
        for i, fu in enumerate(sc.events.feature_updates):
            t = t0 + int(fu.at_s * 1000)
            at(t, lambda fu=fu, t=t: self.feature_update(t, fu.feature, int(fu.level), fu.upgrade_type,
                                                         reason="scenario feature update"))
        for i in range(sc.feature_update_requests.extra_rejected):
            t = self.rng.randrange(bulk0, end)
            at(t, lambda t=t, i=i: self._rejected_request(t, i))
        # temporary topics
        tt = sc.topics.temporary
        life = int(tt.lifetime_s * 1000)
        for i in range(tt.count):
            if end - life - bulk0 <= 2:
                break
            t = self.rng.randrange(bulk0 + 1, end - life - 1)
            at(t, lambda i=i, t=t: self._create_temp(i, t))
            if tt.reassign and life >= 4:
                at(t + life // 3, lambda i=i, t=t + life // 3: self._reassign_start(i, t))
                at(t + 2 * life // 3, lambda i=i, t=t + 2 * life // 3: self._reassign_finish(i, t))
            at(t + life, lambda i=i, t=t + life: self._delete_temp(i, t))
        # misc records
        m = sc.misc
        for kind, count in (("config", m.config_changes), ("quota", m.client_quota_changes), ("acl", m.acl_changes),
                            ("scram", m.scram_changes), ("token", m.delegation_token_changes),
                            ("pid", m.producer_id_blocks)):
            for i in range(count):
                t = self.rng.randrange(bulk0, end)
                at(t, lambda kind=kind, i=i, t=t: self._misc(kind, i, t))
        # snapshots, spread evenly
        n = sc.log.snapshots
        for i in range(n):
            t = bulk0 + (end - bulk0) * (i + 1) // (n + 1)
            at(t, lambda t=t: self._snapshot(t))
        return sorted(acts, key=lambda a: (a[0], a[1]))

    def _restart(self, at: Callable, b: int, start: int, down: int, controlled: bool, tag: str,
                 new_software: str | None) -> None:
        info: dict[str, Any] = {}
        st = self.sc.session_timeout_ms

        def shutdown_begin() -> None:
            info["old_epoch"] = self.brokers[b]["epoch"]
            if controlled and self.mv >= mv.CONTROLLED_SHUTDOWN_LEVEL:
                self.brokers[b]["ics"] = True
                f, _ = self.emit(start, [record(BROKER_REG_CHANGE, 1, broker_id=b, broker_epoch=self.brokers[b]["epoch"],
                                                in_controlled_shutdown=1)])
                info["shutdown_offset"] = f
            if controlled:
                f, _ = self.emit(start + 50, self.isolate(start + 50, b))
                info["leaders_moved_offset"] = f
                f, _ = self.emit(start + 100, [self.fence_record(b, True)])
                info["fence_offset"] = f
        at(start, shutdown_begin)
        if not controlled:
            def crash_fence() -> None:
                f, _ = self.emit(start + st, [*self.isolate(start + st, b), self.fence_record(b, True)])
                info["fence_offset"] = f
            at(start + st, crash_fence)
        up = start + down

        def come_back() -> None:
            if new_software:
                self.software[b] = new_software
            info["new_epoch"] = self.register_broker(up, b)
            snap = [s for s in self.snapshots if s.end_offset <= self.cursor]
            load_end = up + CATCHUP_MS
            if snap:
                self.windows.append(Window(b, "snapshot_load", up, load_end, snap[-1].end_offset))
            self.windows.append(Window(b, "down", start + 100 if controlled else start, up))
        at(up, come_back)

        def unfence() -> None:
            f, _ = self.emit(up + CATCHUP_MS, [self.fence_record(b, False)])
            info["unfence_offset"] = f
        at(up + CATCHUP_MS, unfence)

        def rejoin() -> None:
            f, last = self.emit(up + CATCHUP_MS + 100, self.rejoin(up + CATCHUP_MS + 100, b))
            self.event("broker_restart", start, up + CATCHUP_MS + 100, broker_id=b, first_offset=info.get("fence_offset"),
                       last_offset=last, controlled=controlled, tag=tag, software_version=self.software[b], **info)
        at(up + CATCHUP_MS + 100, rejoin)

    def _partition(self, at: Callable, b: int, start: int, dur: int) -> None:
        info: dict[str, Any] = {}
        st = self.sc.session_timeout_ms
        self.windows.append(Window(b, "frozen", start, start + dur))
        fenced = dur > st

        def fence() -> None:
            f, last = self.emit(start + st, [*self.isolate(start + st, b), self.fence_record(b, True)])
            info["fence_offset"] = last
            info["fenced_at_ms"] = start + st
        if fenced:
            at(start + st, fence)

        def heal() -> None:
            last = None
            if fenced:
                f, _ = self.emit(start + dur, [self.fence_record(b, False)])
                info["unfence_offset"] = f
                _, last = self.emit(start + dur + CATCHUP_MS, self.rejoin(start + dur + CATCHUP_MS, b))
            self.event("network_partition", start, start + dur, broker_id=b, first_offset=info.get("fence_offset"),
                       last_offset=last, fenced=fenced, broker_epoch=self.brokers[b]["epoch"], **info)
        at(start + dur, heal)

    def _do_failover(self, t: int) -> None:
        self.next_offset_at(t)       # the bulk before the failover belongs to the old epoch
        ids = self.sc.controller_ids
        old = self.raft_leader
        self.raft_leader = ids[(ids.index(old) + 1) % len(ids)]
        self.raft_epoch += 1
        voters = [{"voter_id": c} for c in ids]
        off = self.emit_control(t, "LEADER_CHANGE", {"version": 0, "leader_id": self.raft_leader, "voters": voters,
                                                     "granting_voters": voters[: len(voters) // 2 + 1]})
        self.event("controller_failover", t, t, controller_id=self.raft_leader, first_offset=off, last_offset=off,
                   old_leader=old, raft_epoch=self.raft_epoch)

    def _rejected_request(self, t: int, i: int) -> None:
        kinds = [
            ("metadata.version", self.mv - 1 if self.mv > 4 else 3, "UPGRADE"),
            ("metadata.version", self.mv + 1, "SAFE_DOWNGRADE"),
            ("metadata.version", mv.SOFTWARE_MAX_LEVEL[self.controller_software] + 1, "UPGRADE"),
            ("group.version", 1, "UPGRADE"),
            ("metadata.version", 3, "UNSAFE_DOWNGRADE"),
            ("kraft.version", 1, "UPGRADE"),
            ("transaction.version", 2, "UPGRADE"),
            ("no.such.feature", 1, "UPGRADE"),
        ]
        feature, level, utype = kinds[i % len(kinds)]
        code, msg = self.check_feature_update(feature, level, utype)
        if code == 0:      # the state happened to allow it: ask for something surely refused instead
            feature, level, utype = "metadata.version", -1, "UPGRADE"
            code, msg = self.check_feature_update(feature, level, utype)
        self.feature_update(t, feature, level, utype, reason="injected invalid request")

    def _create_temp(self, i: int, t: int) -> None:
        tt = self.sc.topics.temporary
        tid = uuid_for(self.seed, "temp-topic", i)
        name = f"tmp-{i:04d}"
        live = [b for b in self.brokers_list if b not in self.down]
        if len(live) < self.rf:
            live = list(self.brokers_list)
        recs = [record(TOPIC, 0, name=name, topic_id=tid)]
        for pid in range(tt.partitions):
            reps = [live[(i + pid + r) % len(live)] for r in range(self.rf)]
            isr = [r for r in reps if r not in self.down]
            leader = isr[0] if isr else -1
            rec = self.partition_record(tid, pid, reps, leader)
            rec.data["isr"] = isr
            recs.append(rec)
            self.temp_parts[(tid, pid)] = {"replicas": list(reps), "isr": list(isr), "leader": leader, "elr": [],
                                           "lke": []}
        first, last = self.emit(t, recs)
        self.live_topics[tid] = name
        self.set_config(t, 2, name, "retention.ms", "3600000")
        self.event("topic_created", t, None, first_offset=first, last_offset=last, topic_id=tid, topic=name,
                   partitions=tt.partitions)

    def _reassign_start(self, i: int, t: int) -> None:
        tid = uuid_for(self.seed, "temp-topic", i)
        st = self.temp_parts.get((tid, 0))
        if st is None or st.get("target"):
            return
        spare = [b for b in self.brokers_list if b not in st["replicas"] and b not in self.down]
        if not spare:
            return
        add, drop = spare[0], st["replicas"][-1]
        st["target"] = [r for r in st["replicas"] if r != drop] + [add]
        rec = self.change(st, tid, 0, replicas=st["replicas"] + [add], adding=[add], removing=[drop])
        assert rec is not None
        first, last = self.emit(t, [rec])
        self.event("reassignment_started", t, None, first_offset=first, last_offset=last, topic_id=tid, partition_id=0,
                   adding=[add], removing=[drop])

    def _reassign_finish(self, i: int, t: int) -> None:
        tid = uuid_for(self.seed, "temp-topic", i)
        st = self.temp_parts.get((tid, 0))
        if st is None or not st.get("target"):
            return
        target = st.pop("target")
        drop = st["removing"][0]
        isr = [r for r in target if r not in self.down]
        leader = st["leader"] if st["leader"] in isr else (isr[0] if isr else -1)
        rec = self.change(st, tid, 0, replicas=target, isr=isr, leader=leader, adding=[], removing=[])
        assert rec is not None
        first, last = self.emit(t, [rec])
        self.event("reassignment_completed", t, None, first_offset=first, last_offset=last, topic_id=tid,
                   partition_id=0, removed=drop, replicas=target)

    def _delete_temp(self, i: int, t: int) -> None:
        tid = uuid_for(self.seed, "temp-topic", i)
        if tid not in self.live_topics:
            return
        name = self.live_topics.pop(tid)
        for key in [k for k in self.temp_parts if k[0] == tid]:
            del self.temp_parts[key]
        first, last = self.emit(t, [record(REMOVE_TOPIC, 0, topic_id=tid)])
        self.configs.pop((2, name, "retention.ms"), None)
        self.event("topic_deleted", t, None, first_offset=first, last_offset=last, topic_id=tid, topic=name)

    def _misc(self, kind: str, i: int, t: int) -> None:
        rng = random.Random(f"misc-{self.seed}-{kind}-{i}")
        if kind == "config":
            name = self.topic_names[rng.randrange(len(self.topic_names))]
            key = rng.choice(["retention.ms", "cleanup.policy", "max.message.bytes"])
            existing = (2, name, key) in self.configs
            value = None if existing and rng.random() < 0.3 else str(rng.randrange(1, 10**7))
            if value is None or key != "cleanup.policy":
                self.set_config(t, 2, name, key, value)
            else:
                self.set_config(t, 2, name, key, rng.choice(["delete", "compact"]))
        elif kind == "quota":
            user = f"user-{rng.randrange(20)}"
            key = rng.choice(["producer_byte_rate", "consumer_byte_rate", "request_percentage"])
            remove = (user, key) in self.quotas and rng.random() < 0.3
            value = float(rng.choice([1048576, 2097152, 1.0e7, 0.5, 25.0]))
            self.emit(t, [record(CLIENT_QUOTA, 0, entity=[{"entity_type": "user", "entity_name": user}], key=key,
                                 value=0.0 if remove else value, remove=remove)])
            if remove:
                del self.quotas[(user, key)]
            else:
                self.quotas[(user, key)] = value
        elif kind == "acl":
            if self.acls and rng.random() < 0.3:
                aid = sorted(self.acls)[rng.randrange(len(self.acls))]
                del self.acls[aid]
                self.emit(t, [record(REMOVE_ACL, 0, id=aid)])
            else:
                aid = uuid_for(self.seed, "acl", i)
                data = dict(id=aid, resource_type=2, resource_name=self.topic_names[rng.randrange(len(self.topic_names))],
                            pattern_type=3, principal=f"User:user-{rng.randrange(20)}", host="*",
                            operation=rng.choice([3, 4, 8]), permission_type=3)
                self.acls[aid] = data
                self.emit(t, [record(ACL, 0, **data)])
        elif kind == "scram":
            if self.mv < mv.SCRAM_LEVEL:
                return
            if self.scram and rng.random() < 0.3:
                key = sorted(self.scram)[rng.randrange(len(self.scram))]
                del self.scram[key]
                self.emit(t, [record(REMOVE_SCRAM, 0, name=key[0], mechanism=key[1])])
            else:
                name, mech = f"user-{rng.randrange(20)}", rng.choice([1, 2])
                n = 32 if mech == 1 else 64
                data = dict(name=name, mechanism=mech, salt=rng.randbytes(16), stored_key=rng.randbytes(n),
                            server_key=rng.randbytes(n), iterations=4096)
                self.scram[(name, mech)] = data
                self.emit(t, [record(SCRAM, 0, **data)])
        elif kind == "token":
            if self.mv < mv.DELEGATION_TOKEN_LEVEL:
                return
            if self.tokens and rng.random() < 0.3:
                tok = sorted(self.tokens)[rng.randrange(len(self.tokens))]
                del self.tokens[tok]
                self.emit(t, [record(REMOVE_TOKEN, 0, token_id=tok)])
            else:
                tok = uuid_for(self.seed, "token", i)
                owner = f"User:user-{rng.randrange(20)}"
                data = dict(owner=owner, requester=owner, renewers=["User:admin"], issue_timestamp=t,
                            max_timestamp=t + 7 * 86_400_000, expiration_timestamp=t + 86_400_000, token_id=tok)
                self.tokens[tok] = data
                self.emit(t, [record(DELEGATION_TOKEN, 0, **data)])
        elif kind == "pid":
            live = [b for b in self.brokers_list if b not in self.down and b in self.brokers]
            if not live:
                return
            b = live[rng.randrange(len(live))]
            start = max(self.next_producer_id, 0)
            self.next_producer_id = start + 1000
            self.producer_ranges.append((start, start + 1000))
            self.emit(t, [record(PRODUCER_IDS, 0, broker_id=b, broker_epoch=self.brokers[b]["epoch"],
                                 next_producer_id=self.next_producer_id)])

    def _snapshot(self, t: int) -> None:
        end = self.next_offset_at(t)
        state = {
            "mv": self.mv, "features": dict(self.features), "brokers": copy.deepcopy(self.brokers),
            "controllers": copy.deepcopy(self.controllers), "controller_software": self.controller_software,
            "software": dict(self.software), "live_topics": dict(self.live_topics),
            "configs": dict(self.configs), "quotas": dict(self.quotas), "acls": copy.deepcopy(self.acls),
            "scram": copy.deepcopy(self.scram), "tokens": copy.deepcopy(self.tokens),
            "next_producer_id": self.next_producer_id, "seed": self.seed,
        }
        epoch = self.raft_epoch
        self.snapshots.append(SnapshotPoint(end, epoch, self.last_time, t, state))
        self.event("snapshot", t, t, first_offset=end, last_offset=end, snapshot_end_offset=end, snapshot_epoch=epoch)

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> None:
        self.bootstrap()
        acts = self.schedule()
        for _, _, fn in acts:
            fn()
        # last segment: the bulk after the final group
        lay = self.layout
        noop_ok = self.mv >= mv.NOOP_LEVEL
        n = lay.prefix(lay.n_batches, not noop_ok) - lay.prefix(self.pos, not noop_ok)
        self.segments.append(Segment(len(self.segments), self.pos, lay.n_batches, self.cursor, noop_ok, self.mv,
                                     self.raft_epoch, sorted(self.down), self.seg_start_ms, None, self.cursor + n - 1,
                                     list(self.reset_at)))
        self.cursor += n
        self.pos = lay.n_batches


def build_plan(sc: Scenario) -> Plan:
    """Plan the structural records of ``sc`` and size the bulk so the log holds ``log.target_records``."""
    bulk_start = sc.start_ms + SETUP_MS
    end = sc.start_ms + sc.duration_ms
    if end <= bulk_start + 1000:
        raise ScenarioError(f"scenario {sc.name}: key 'duration_s': must be more than {SETUP_MS / 1000 + 1} s")
    layout = BulkLayout.make(sc.seed, sc.log.target_records, bulk_start, end, sc.log.batch_records.min,
                             sc.log.batch_records.max, sc.log.noop_fraction, sc.topics.stable * sc.topics.partitions)
    planner = None
    for _ in range(3):   # structural records are sized first, then the bulk fills the remainder
        planner = _Planner(sc, layout)
        planner.run()
        structural = sum(b.size for b in planner.batches)
        bulk = planner.cursor - structural
        want = max(sc.log.target_records - structural, 0)
        if abs(bulk - want) <= max(sc.log.batch_records.max * 2, want // 1000):
            break
        mean = bulk / layout.n_batches if layout.n_batches and bulk else sum(layout.sizes) / len(layout.sizes)
        layout = layout.with_batches(int(round(want / mean)) if mean else 0)
    assert planner is not None
    return Plan(sc, layout, planner.batches, planner.segments, planner.snapshots, planner.bootstrap_records,
                planner.windows, planner.events, planner.freqs, planner.topic_ids, planner.topic_names,
                planner.producer_ranges, planner.cursor)
