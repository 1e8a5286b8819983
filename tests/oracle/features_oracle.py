"""A plain sequential ``feature_transitions`` / ``feature_protection_violations`` /
``feature_update_outcomes`` / ``downgrade_losses`` (docs/design.md, "``feature_transitions``,
``feature_protection_violations``" and "``feature_update_outcomes``, ``downgrade_losses``"; seeds 004 and
001, facts §5.3, §5.4, §6, §7), written again from the design without Spark and without
``kraft_replay``: rows in are dicts as from ``Row.asDict(recursive=True)`` (silver versions, bronze
requests, ``metadata_control``), rows out are dicts with exactly the design's columns.

Everything is per ``cluster_id``. "As of offset O" is the design's visibility rule: a version with
``valid_from_offset <= O``, ``valid_to_offset`` null or ``> O``, and ``valid_from_offset !=
valid_to_offset`` (never-visible versions are ignored everywhere); "registered" / "finalized" = such a
version that is not a tombstone.

Readings chosen where the design leaves room (each also marked ``# choice:`` below):

- ``feature_transitions``: a tombstone following a tombstone or nothing (to = from = 0) is ``REMOVAL``
  (the kinds are tried in the listed order); ``unsupported_nodes`` always writes ``[<min>-<max>]``, even
  when min = max (``"broker 2 [0-0]"``); ``from_version`` / ``to_version`` are the §6.1/§6.1b names of
  the level (null for a level outside 1-34).
- ``feature_protection_violations``: pieces are merged on exactly the design's key (``finalized_level``,
  ``min_supported``, ``max_supported``); ``listed`` is the first piece's (an unlisted [0, 0] followed by
  a listed [0, 0] stays one interval). ``from_time`` / ``to_time`` are the ``valid_from_time`` of a
  visible version (the broker's first, else the feature's) starting at that boundary. Rows are ordered by
  (``cluster_id``, ``broker_id``, ``feature``, ``from_offset``).
- ``feature_update_outcomes``, ``BEFORE_LOG`` rows: ``as_of_offset`` = -1; ``metadata_version_level``,
  ``current_level``, ``active_controller``, ``failed_check``, ``feature_error_message``,
  ``skipped_checks``, ``error_code``, ``error_message``, every ``kip1155_*`` column and ``loss_count`` are
  null; ``rule_followed`` is still ``kafka``; ``truth_*`` are filled when an event matches but
  ``matches_truth`` is null (there is no verdict to compare). A request whose rows straddle the first
  batch (different request times) is judged on its non-``BEFORE_LOG`` rows.
- No ``LEADER_CHANGE`` row at or below O: ``active_controller`` null, the local-controller check is
  skipped with ``skipped_checks`` = ``["no active controller"]``; no voters (no ``KRAFT_VOTERS`` nor
  ``LEADER_CHANGE`` row): the ``CONTROLLER`` check has nobody to check. Only ``source_kind = 'log'`` rows
  count, as the design says (a ``KRAFT_VOTERS`` held only in a snapshot is not seen).
- ``skipped_checks`` lists a skip only when the validation reached step 4 (an update failing at step 1 or
  3 has ``[]``).
- The upgrade type is read from ``upgrade_type_code`` (1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE),
  not from the ``upgrade_type`` text.
- No ``zk_migration_state`` version at O = ``NONE``.
- Step 7's ``DEPENDENCY``: only the two dependencies the design lists (facts §7.2 also has
  test.feature.version 2 → level 25; not applied). The proposed metadata.version is the level of the
  request's own metadata.version row (the last one if there were several).
- ``kip1155_failed_check`` is the row's own failing check under the proposal (null when the row passes);
  ``kip1155_outcome`` / ``kip1155_error_message`` are request-level like ``outcome`` / ``error_message``:
  the request's first failing update in feature-name order with metadata.version last, taking this rule's
  verdict for the metadata.version downgrade row and today's for the other rows; the message is the full
  "The update failed for all features since …" text. ``ACCEPTED_WITH_LOSS`` = accepted, UNSAFE, loss > 0
  (``validate_only`` does not change the KIP-1155 verdict's name).
- The KIP-1155 checks that replace ``METADATA_CHANGED`` (``DOWNGRADE_FLOOR``, ``DOWNGRADE_SUPPORT``,
  ``FEATURE_DEPENDENCY``, ``LOSS``) use step 6's prefix ``Invalid metadata.version <L>. ``.
  ``DOWNGRADE_SUPPORT``: a node that does not list metadata.version has max 0; an unregistered voter is
  reported as not supporting (unreachable in practice: step 4 already refused it at level ≥ 15).
  ``FEATURE_DEPENDENCY`` checks the finalized features at O (not the request's other updates), by name;
  a feature at level ≥ 1 needs 4, kraft.version 1 needs 21 (the larger need that fails is named).
- Loss rows are ordered by the design's domain order (partitions, brokers, controllers,
  scram_credentials, delegation_tokens, zk_migration_state, features), then the entity's key values,
  then the field order as listed; ``LOSS``'s "first" is the first of them, written
  ``<domain> <entity JSON> <field>`` with the field left out (no trailing space) when it is null. A
  partition contributes one row per losing field (``directories``, ``eligible_leader_replicas``,
  ``last_known_elr``), a broker one per losing field; ``zk_migration_state`` has field null;
  ``"the isMigratingZkBroker state of one or more brokers"`` completes the design's "…". ``loss_count``
  counts the rows. ``downgrade_losses`` is sorted by (``cluster_id``, ``request_id``, ``target_level``)
  and the order above; outcome rows by (``cluster_id``, ``request_id``, ``feature``).
- ``truth_*``: the first matching ``feature_update`` event by ``event_id``; ``matches_truth`` compares
  acceptance (``ACCEPTED``/``VALIDATED`` vs ``accepted``) and the request-level ``error_message`` (null =
  null counts as equal).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from typing import Any

MV = "metadata.version"
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
CONTROLLER_REGISTRATION_LEVEL = 15  # 3.7-IV0
MIN_BOOTSTRAP_LEVEL = 4  # 3.3-IV0

# level -> (version string, didMetadataChange), facts §6.1 / §6.1b
MV_LEVELS: dict[int, tuple[str, bool]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True), 16: ("3.7-IV1", False),
    17: ("3.7-IV2", True), 18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False), 22: ("4.0-IV0", False), 23: ("4.0-IV1", True), 24: ("4.0-IV2", False),
    25: ("4.0-IV3", False), 26: ("4.1-IV0", False), 27: ("4.1-IV1", False), 28: ("4.2-IV0", False),
    29: ("4.2-IV1", False), 30: ("4.3-IV0", True), 31: ("4.4-IV0", False), 32: ("4.4-IV1", True),
    33: ("4.4-IV2", True), 34: ("4.5-IV0", False),
}

# step 7: known features and their defined levels
DEFINED_LEVELS: dict[str, range] = {
    "kraft.version": range(0, 2), "group.version": range(0, 2), "eligible.leader.replicas.version": range(0, 2),
    "share.version": range(0, 2), "transaction.version": range(0, 3), "test.feature.version": range(0, 3),
}
DECLARED_DEPENDENCIES = {("kraft.version", 1): 21}

UPGRADE_TYPES = {1: "UPGRADE", 2: "SAFE_DOWNGRADE", 3: "UNSAFE_DOWNGRADE"}
REQUEST_PREFIX = "The update failed for all features since the following feature had an error: "

TRANSITION_COLUMNS = [
    "cluster_id", "feature", "offset", "record_offset", "snapshot_end_offset", "time", "from_level", "to_level",
    "from_version", "to_version", "kind", "metadata_changed", "nodes", "unsupported_nodes",
]
VIOLATION_COLUMNS = [
    "cluster_id", "broker_id", "feature", "finalized_level", "min_supported", "max_supported", "listed",
    "from_offset", "to_offset", "from_time", "to_time",
]
OUTCOME_COLUMNS = [
    "cluster_id", "request_id", "request_time", "client_id", "request_version", "feature", "max_version_level",
    "upgrade_type", "upgrade_type_code", "validate_only", "as_of_offset", "metadata_version_level",
    "current_level", "active_controller", "failed_check", "feature_error_message", "skipped_checks",
    "error_code", "error_message", "outcome", "rule_followed", "kip1155_outcome", "kip1155_failed_check",
    "kip1155_error_message", "loss_count", "truth_accepted", "truth_error_code", "truth_error_message",
    "matches_truth",
]
LOSS_COLUMNS = ["cluster_id", "request_id", "as_of_offset", "target_level", "domain", "entity", "field", "what"]
LOSS_DOMAINS = ["partitions", "brokers", "controllers", "scram_credentials", "delegation_tokens",
                "zk_migration_state", "features"]


# --- versions and "as of offset" ---------------------------------------------------------------------

def _visible(v: dict) -> bool:
    return v["valid_from_offset"] != v["valid_to_offset"]


def _sort_key(v: dict) -> tuple:
    return (v["valid_from_offset"], -1 if v.get("record_offset") is None else v["record_offset"])


class _History:
    """The visible versions of one versioned table of one cluster, per entity key, in offset order."""

    def __init__(self, rows: list[dict], cid: str, key_cols: tuple[str, ...]) -> None:
        self.key_cols = key_cols
        self.by: dict[tuple, list[dict]] = {}
        for v in rows:
            if v["cluster_id"] == cid and _visible(v):
                self.by.setdefault(tuple(v[c] for c in key_cols), []).append(v)
        for vs in self.by.values():
            vs.sort(key=_sort_key)
        self.starts = {k: [v["valid_from_offset"] for v in vs] for k, vs in self.by.items()}

    def keys(self) -> list[tuple]:
        return sorted(self.by, key=lambda k: tuple((x is None, x) for x in k))

    def at(self, key: tuple, o: int) -> dict | None:
        """The version visible at o (a tombstone included), None when none is."""
        i = bisect_right(self.starts.get(key, []), o) - 1
        if i < 0:
            return None
        v = self.by[key][i]
        return v if v["valid_to_offset"] is None or o < v["valid_to_offset"] else None

    def live(self, key: tuple, o: int) -> dict | None:
        v = self.at(key, o)
        return None if v is None or v["deleted"] else v

    def all_live(self, o: int) -> list[tuple[tuple, dict]]:
        out = []
        for k in self.keys():
            v = self.live(k, o)
            if v is not None:
                out.append((k, v))
        return out


def _clusters(*tables: list[dict] | None) -> list[str]:
    return sorted({r["cluster_id"] for t in tables if t for r in t})


def _range(reg: dict, feature: str) -> tuple[int, int, bool]:
    """(min, max, listed) of a feature in a node's registration; unlisted = [0, 0] (facts §7.3)."""
    for f in reg.get("features") or []:
        if f["name"] == feature:
            return f["min_supported_version"], f["max_supported_version"], True
    return 0, 0, False


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _mv_name(level: int | None) -> str | None:
    return MV_LEVELS[level][0] if level in MV_LEVELS else None


def _metadata_changed(a: int, b: int) -> bool:
    """Some V with min(a, b) < V <= max(a, b) has didMetadataChange (facts §6.1)."""
    lo, hi = min(a, b), max(a, b)
    return any(MV_LEVELS[v][1] for v in range(lo + 1, hi + 1) if v in MV_LEVELS)


def _level(v: dict | None) -> int:
    return 0 if v is None or v["deleted"] else v["feature_level"]


# --- feature_transitions -----------------------------------------------------------------------------

def feature_transitions(features: list[dict], brokers: list[dict], controllers: list[dict]) -> list[dict]:
    out: list[dict] = []
    for cid in _clusters(features):
        feats = _History(features, cid, ("name",))
        brk = _History(brokers, cid, ("broker_id",))
        ctl = _History(controllers, cid, ("controller_id",))
        for (name,) in feats.keys():
            prev: dict | None = None
            for v in feats.by[(name,)]:
                o = v["valid_from_offset"]
                to_level = _level(v)
                if name == MV:
                    from_level = None if prev is None else _level(prev)
                else:
                    from_level = _level(prev)  # 0 for a previous tombstone or none
                # choice: the kinds are tried in the listed order (to = from = 0 is a REMOVAL)
                if name == MV and prev is None:
                    kind = "INITIAL"
                elif to_level > from_level:
                    kind = "UPGRADE"
                elif 0 < to_level < from_level:
                    kind = "DOWNGRADE"
                elif to_level == 0:
                    kind = "REMOVAL"
                else:
                    kind = "UNCHANGED"
                changed = None
                if name == MV and kind != "INITIAL":
                    changed = _metadata_changed(from_level, to_level)
                nodes, unsupported = [], []
                for node_type, hist in (("broker", brk), ("controller", ctl)):
                    for (nid,), reg in hist.all_live(o):
                        lo, hi, _ = _range(reg, name)
                        ok = lo <= to_level <= hi
                        nodes.append({"node_type": node_type, "node_id": nid,
                                      "fenced": reg.get("fenced") if node_type == "broker" else None,
                                      "min_supported": lo, "max_supported": hi, "supports": ok})
                        if not ok:
                            unsupported.append(f"{node_type} {nid} [{lo}-{hi}]")  # choice: always [min-max]
                out.append({
                    "cluster_id": cid, "feature": name, "offset": o, "record_offset": v.get("record_offset"),
                    "snapshot_end_offset": v.get("snapshot_end_offset"), "time": v["valid_from_time"],
                    "from_level": from_level, "to_level": to_level,
                    "from_version": _mv_name(from_level) if name == MV else None,
                    "to_version": _mv_name(to_level) if name == MV else None,
                    "kind": kind, "metadata_changed": changed, "nodes": nodes, "unsupported_nodes": unsupported,
                })
                prev = v
    return out


# --- feature_protection_violations -------------------------------------------------------------------

def feature_protection_violations(features: list[dict], brokers: list[dict]) -> list[dict]:
    out: list[dict] = []
    for cid in _clusters(brokers):
        feats = _History(features, cid, ("name",))
        brk = _History(brokers, cid, ("broker_id",))
        names = {k[0] for k in feats.keys()} | {MV}
        for (bid,) in brk.keys():
            bvs = brk.by[(bid,)]
            listed_any = {f["name"] for v in bvs if not v["deleted"] for f in (v.get("features") or [])}
            for name in sorted(names | listed_any):
                fvs = feats.by.get((name,), [])
                times: dict[int, Any] = {}
                for v in fvs + bvs:  # choice: the broker's version's time first when both start there
                    times[v["valid_from_offset"]] = v["valid_from_time"]
                bounds = sorted(times)
                cur: dict | None = None
                for o in bounds:
                    reg = brk.live((bid,), o)
                    fv = feats.at((name,), o)
                    level = (1 if fv is None or fv["deleted"] else fv["feature_level"]) if name == MV else _level(fv)
                    piece = None
                    if reg is not None:
                        lo, hi, listed = _range(reg, name)
                        checked = listed or name == MV or level > 0
                        if checked and not lo <= level <= hi:
                            piece = (level, lo, hi, listed)
                    if cur is not None and (piece is None or piece[:3] != (cur["finalized_level"],
                                                                          cur["min_supported"],
                                                                          cur["max_supported"])):
                        cur["to_offset"], cur["to_time"] = o, times[o]
                        out.append(cur)
                        cur = None
                    if piece is not None and cur is None:
                        cur = {"cluster_id": cid, "broker_id": bid, "feature": name, "finalized_level": piece[0],
                               "min_supported": piece[1], "max_supported": piece[2], "listed": piece[3],
                               "from_offset": o, "to_offset": None, "from_time": times[o], "to_time": None}
                if cur is not None:
                    out.append(cur)
    out.sort(key=lambda r: (r["cluster_id"], r["broker_id"], r["feature"], r["from_offset"]))
    return out


# --- feature_update_outcomes, downgrade_losses -------------------------------------------------------

class _Context:
    """The controller's image as of offset O (design: "Context at as_of_offset O")."""

    def __init__(self, cl: _Cluster, o: int) -> None:
        self.o = o
        self.cl = cl
        self.mv = 1
        mvv = cl.features.live((MV,), o)
        if mvv is not None:
            self.mv = mvv["feature_level"]
        self.finalized = {k[0]: v["feature_level"] for k, v in cl.features.all_live(o) if k[0] != MV}
        self.brokers = {k[0]: v for k, v in cl.brokers.all_live(o)}
        self.controllers = {k[0]: v for k, v in cl.controllers.all_live(o)}
        zk = cl.zk.live((), o)
        self.zk = zk["zk_migration_state_name"] if zk is not None else "NONE"  # choice: none = NONE
        self.zk_row = zk
        self.active: int | None = None
        lc = [r for r in cl.control if r["control_type"] == "LEADER_CHANGE" and r["offset"] <= o]
        kv = [r for r in cl.control if r["control_type"] == "KRAFT_VOTERS" and r["offset"] <= o]
        voters: list[int] = []
        if lc:
            last_lc = max(lc, key=lambda r: r["offset"])
            self.active = last_lc["leader_change"]["leader_id"]
            voters = [x["voter_id"] for x in last_lc["leader_change"].get("voters") or []]
        if kv:
            last_kv = max(kv, key=lambda r: r["offset"])
            voters = [x["voter_id"] for x in last_kv["kraft_voters"].get("voters") or []]
        self.voters = sorted(set(voters))


class _Cluster:
    def __init__(self, cid: str, features, brokers, controllers, zk, log_batches, control, partitions, scram,
                 tokens) -> None:
        self.cid = cid
        self.features = _History(features, cid, ("name",))
        self.brokers = _History(brokers, cid, ("broker_id",))
        self.controllers = _History(controllers, cid, ("controller_id",))
        self.zk = _History(zk, cid, ())
        self.partitions = _History(partitions, cid, ("topic_id", "partition_id"))
        self.scram = _History(scram, cid, ("name", "mechanism"))
        self.tokens = _History(tokens, cid, ("token_id",))
        self.control = [r for r in control if r["cluster_id"] == cid and r.get("source_kind") == "log"
                        and r.get("offset") is not None]
        # append times need not grow with offsets: a running max of last offsets in append-time order
        bs = sorted((b["append_time"], b["batch_last_offset"]) for b in log_batches if b["cluster_id"] == cid)
        self.batch_times = [t for t, _ in bs]
        self.batch_ends: list[int] = []
        for _, e in bs:
            self.batch_ends.append(max(e, self.batch_ends[-1]) if self.batch_ends else e)
        self._ctx: dict[int, _Context] = {}

    def as_of(self, t) -> int:
        """The largest batch_last_offset of the batches appended strictly before t; -1 when none."""
        i = bisect_left(self.batch_times, t) - 1
        return self.batch_ends[i] if i >= 0 else -1

    def context(self, o: int) -> _Context:
        if o not in self._ctx:
            self._ctx[o] = _Context(self, o)
        return self._ctx[o]


def _entity(cols: tuple[str, ...], key: tuple) -> str:
    return json.dumps(dict(zip(cols, key, strict=True)), sort_keys=True, separators=(",", ":"))


def _losses(ctx: _Context, t: int) -> list[tuple[str, str, str | None, str]]:
    """(domain, entity, field, what) the image at O cannot keep when written at level t, in order."""
    cl = ctx.cl
    out: list[tuple[str, str, str | None, str]] = []
    for key, p in cl.partitions.all_live(ctx.o):
        e = _entity(cl.partitions.key_cols, key)
        if t < 17 and any(d != ZERO_UUID for d in p.get("directories") or []):
            out.append(("partitions", e, "directories", "the directory assignment state of one or more replicas"))
        if t < 23:
            for f in ("eligible_leader_replicas", "last_known_elr"):
                if p.get(f):
                    out.append(("partitions", e, f, "the eligible leader replicas"))
    for key, b in cl.brokers.all_live(ctx.o):
        e = _entity(cl.brokers.key_cols, key)
        if t < 7 and b.get("in_controlled_shutdown"):
            out.append(("brokers", e, "in_controlled_shutdown",
                        "the inControlledShutdown state of one or more brokers"))
        if t < 8 and b.get("is_migrating_zk_broker"):
            out.append(("brokers", e, "is_migrating_zk_broker",
                        "the isMigratingZkBroker state of one or more brokers"))
        if t < 17 and b.get("log_dirs"):
            out.append(("brokers", e, "log_dirs", "the online log directories of one or more brokers"))
    if t < 15:
        for key, _ in cl.controllers.all_live(ctx.o):
            out.append(("controllers", _entity(cl.controllers.key_cols, key), None, "controller registration data"))
    if t < 11:
        for key, _ in cl.scram.all_live(ctx.o):
            out.append(("scram_credentials", _entity(cl.scram.key_cols, key), None, "SCRAM credentials"))
    if t < 14:
        for key, _ in cl.tokens.all_live(ctx.o):
            out.append(("delegation_tokens", _entity(cl.tokens.key_cols, key), None, "delegation tokens"))
    if t < 8 and ctx.zk != "NONE":
        # choice: field null (the state is the whole entity)
        out.append(("zk_migration_state", "{}", None, f"the ZK Migration state which was {ctx.zk}"))
    if t < 4:
        for key, _ in cl.features.all_live(ctx.o):
            if key[0] != MV:
                out.append(("features", _entity(cl.features.key_cols, key), None, "feature flag(s)"))
    return out


def _validate(feature: str, level: int, code: int, ctx: _Context, proposed_mv: int, *, kip: bool = False,
              losses: list | None = None, capable: int | None = None) -> tuple[str | None, str | None, list[str]]:
    """(failed_check, feature_error_message, skipped_checks) of one update; (None, None, …) = passes.
    ``kip``: the KIP-1155 rule for a metadata.version downgrade (replaces METADATA_CHANGED)."""
    skipped: list[str] = []
    is_mv = feature == MV

    def fail(check: str, reason: str, mv_form: bool = False) -> tuple[str, str, list[str]]:
        head = (f"Invalid metadata.version {level}. " if mv_form
                else f"Invalid update version {level} for feature {feature}. ")
        return check, head + reason, skipped

    # 1
    if code not in UPGRADE_TYPES:
        return fail("UPGRADE_TYPE", "The controller does not support the given upgrade type.")
    # 2
    current = ctx.mv if is_mv else ctx.finalized.get(feature, 0)
    # 3
    if level < 0:
        return fail("NEGATIVE_LEVEL", "A feature version cannot be less than 0.")
    # 4: local controller, every registered broker, every voter (from 3.7-IV0)
    reg = ctx.controllers.get(ctx.active) if ctx.active is not None else None
    if ctx.active is None:
        skipped.append("no active controller")  # choice
    elif reg is None:
        skipped.append(f"local controller {ctx.active} not registered")
    else:
        lo, hi, _ = _range(reg, feature)
        if not lo <= level <= hi:
            if hi == 0:
                return fail("LOCAL_CONTROLLER", f"Local controller {ctx.active} does not support this feature.")
            return fail("LOCAL_CONTROLLER",
                        f"Local controller {ctx.active} only supports versions {_range_text(lo, hi)}")
    for bid in sorted(ctx.brokers):
        lo, hi, _ = _range(ctx.brokers[bid], feature)
        if not lo <= level <= hi:
            if hi == 0:
                return fail("BROKER", f"Broker {bid} does not support this feature.")
            return fail("BROKER", f"Broker {bid} only supports versions {_range_text(lo, hi)}")
    if ctx.mv >= CONTROLLER_REGISTRATION_LEVEL:
        for cid in ctx.voters:
            creg = ctx.controllers.get(cid)
            if creg is None:
                return fail("CONTROLLER", f"controller {cid} has not registered, and may not support this feature")
            lo, hi, _ = _range(creg, feature)
            if not lo <= level <= hi:
                if hi == 0:
                    return fail("CONTROLLER", f"Controller {cid} does not support this feature.")
                return fail("CONTROLLER", f"Controller {cid} only supports versions {_range_text(lo, hi)}")
    # 5
    if level < current and code == 1:
        return fail("DIRECTION", "Can't downgrade the version of this feature without setting the upgrade type to "
                                 "either safe or unsafe downgrade.")
    if level > current and code in (2, 3):
        return fail("DIRECTION", "Can't downgrade to a newer version.")
    # 6
    if is_mv:
        if level not in MV_LEVELS:
            return fail("UNKNOWN_METADATA_VERSION", "Unknown metadata.version.", True)
        if ctx.zk in ("PRE_MIGRATION", "MIGRATION"):
            return fail("ZK_MIGRATION", "Unable to modify metadata.version while a ZK migration is in progress.", True)
        if level < MIN_BOOTSTRAP_LEVEL:
            return fail("METADATA_VERSION_FLOOR", "Unable to set a metadata.version less than 3.3-IV0", True)
        if not kip:
            if level < current and _metadata_changed(level, current):
                if code == 2:
                    return fail("METADATA_CHANGED", "Refusing to perform the requested downgrade because it might "
                                                    "delete metadata information.", True)
                return fail("METADATA_CHANGED", "Unsafe metadata downgrade is not supported in this version.", True)
            return None, None, skipped
        if level < CONTROLLER_REGISTRATION_LEVEL:
            return fail("DOWNGRADE_FLOOR", "Unable to downgrade metadata.version below 3.7-IV0", True)
        if capable is not None:
            for bid in sorted(ctx.brokers):
                if _range(ctx.brokers[bid], MV)[1] < capable:
                    return fail("DOWNGRADE_SUPPORT", f"Broker {bid} does not support metadata.version downgrade", True)
            for cid in ctx.voters:
                creg = ctx.controllers.get(cid)
                if creg is None or _range(creg, MV)[1] < capable:  # choice: unregistered = not capable
                    return fail("DOWNGRADE_SUPPORT", f"Controller {cid} does not support metadata.version downgrade",
                                True)
        for name in sorted(ctx.finalized):
            flevel = ctx.finalized[name]
            need = _failed_dependency(name, flevel, level)
            if need is not None:
                return fail("FEATURE_DEPENDENCY", f"{name} level {flevel} depends on metadata.version level {need}",
                            True)
        losses = losses or []
        if code == 2 and losses:
            d, e, f, _ = losses[0]
            first = " ".join(x for x in (d, e, f) if x is not None)
            return fail("LOSS", f"Refusing to perform the requested downgrade because it would lose metadata: "
                                f"{len(losses)} item(s), first: {first}", True)
        return None, None, skipped
    # 7
    if feature not in DEFINED_LEVELS:
        return fail("UNKNOWN_FEATURE", f"Feature {feature} not found.")
    if level not in DEFINED_LEVELS[feature]:
        return fail("UNDEFINED_LEVEL", f"Feature {feature} has no level {level}.")
    if level >= 1 and proposed_mv < MIN_BOOTSTRAP_LEVEL:
        return fail("DEPENDENCY", f"{feature} could not be set to {level} because it depends on "
                                  f"metadata.version=4 (3.3-IV0)")
    need = DECLARED_DEPENDENCIES.get((feature, level))
    if need is not None and proposed_mv < need:
        return fail("DEPENDENCY", f"{feature} could not be set to {level} because it depends on "
                                  f"metadata.version level {need}")
    return None, None, skipped


def _failed_dependency(name: str, level: int, mv_level: int) -> int | None:
    """The metadata.version level a finalized feature at ``level`` needs and ``mv_level`` is below, or None."""
    needs = []
    if level >= 1:
        needs.append(MIN_BOOTSTRAP_LEVEL)
    if (name, level) in DECLARED_DEPENDENCIES:
        needs.append(DECLARED_DEPENDENCIES[(name, level)])
    failing = [n for n in needs if mv_level < n]
    return max(failing) if failing else None


def _request_order(row: dict) -> tuple:
    return (row["feature"] == MV, row["feature"])


def feature_update_outcomes(requests: list[dict], features: list[dict], brokers: list[dict],
                            controllers: list[dict], zk_migration_state: list[dict], log_batches: list[dict],
                            metadata_control: list[dict], partitions: list[dict], scram_credentials: list[dict],
                            delegation_tokens: list[dict], scenario_events: list[dict] | None = None,
                            downgrade_capable_level: int | None = None) -> tuple[list[dict], list[dict]]:
    clusters = {cid: _Cluster(cid, features, brokers, controllers, zk_migration_state, log_batches,
                              metadata_control, partitions, scram_credentials, delegation_tokens)
                for cid in _clusters(requests)}
    truth = _truth_index(scenario_events)
    by_request: dict[tuple, list[dict]] = {}
    for r in requests:
        by_request.setdefault((r["cluster_id"], r["request_id"]), []).append(r)

    out_rows: list[dict] = []
    loss_rows: list[dict] = []
    for (cid, rid), rows in by_request.items():
        cl = clusters[cid]
        mv_rows = [r for r in rows if r["feature"] == MV]
        judged = []  # (request row, out row, today's failure, kip failure or None, is_kip_row)
        for r in rows:
            o = cl.as_of(r["request_time"])
            out = {c: r.get(c) for c in OUTCOME_COLUMNS if c in r}
            out.update({"as_of_offset": o, "metadata_version_level": None, "current_level": None,
                        "active_controller": None, "failed_check": None, "feature_error_message": None,
                        "skipped_checks": None, "error_code": None, "error_message": None, "outcome": "BEFORE_LOG",
                        "rule_followed": "kafka", "kip1155_outcome": None, "kip1155_failed_check": None,
                        "kip1155_error_message": None, "loss_count": None})
            if o == -1:
                out_rows.append(out)
                _fill_truth(out, truth, r, None)
                continue
            ctx = cl.context(o)
            feature, level, code = r["feature"], r["max_version_level"], r["upgrade_type_code"]
            proposed_mv = mv_rows[-1]["max_version_level"] if mv_rows else ctx.mv
            check, msg, skipped = _validate(feature, level, code, ctx, proposed_mv)
            current = ctx.mv if feature == MV else ctx.finalized.get(feature, 0)
            out.update({"metadata_version_level": ctx.mv, "current_level": current, "active_controller": ctx.active,
                        "failed_check": check, "feature_error_message": msg, "skipped_checks": skipped})
            kip = None
            if feature == MV and level < current:
                losses = _losses(ctx, level)
                out["loss_count"] = len(losses)
                order = {d: i for i, d in enumerate(LOSS_DOMAINS)}
                for d, e, f, w in losses:
                    loss_rows.append({"cluster_id": cid, "request_id": rid, "as_of_offset": o, "target_level": level,
                                      "domain": d, "entity": e, "field": f, "what": w, "_order": order[d]})
                kcheck, kmsg, _ = _validate(feature, level, code, ctx, proposed_mv, kip=True, losses=losses,
                                            capable=downgrade_capable_level)
                kip = (kcheck, kmsg)
                out["kip1155_failed_check"] = kcheck
            judged.append((r, out, (check, msg), kip))
            out_rows.append(out)

        # request level (facts §7.1): the first failing update in feature-name order, metadata.version last
        today_fail = [(_request_order(r), m) for r, _, (c, m), _ in judged if c is not None]
        first = min(today_fail)[1] if today_fail else None
        kip_fail = [(_request_order(r), (k if k is not None else t)[1]) for r, _, t, k in judged
                    if (k if k is not None else t)[0] is not None]
        kfirst = min(kip_fail)[1] if kip_fail else None
        for r, out, _, k in judged:
            if first is None:
                out.update({"error_code": 0, "error_message": None,
                            "outcome": "VALIDATED" if r.get("validate_only") else "ACCEPTED"})
            else:
                out.update({"error_code": 95, "error_message": REQUEST_PREFIX + first, "outcome": "REJECTED"})
            if k is not None:
                if kfirst is not None:
                    out.update({"kip1155_outcome": "REJECTED", "kip1155_error_message": REQUEST_PREFIX + kfirst})
                elif r["upgrade_type_code"] == 3 and out["loss_count"]:
                    out["kip1155_outcome"] = "ACCEPTED_WITH_LOSS"
                else:
                    out["kip1155_outcome"] = "ACCEPTED"
            _fill_truth(out, truth, r, out["outcome"])

    out_rows = [{c: o.get(c) for c in OUTCOME_COLUMNS} for o in out_rows]
    out_rows.sort(key=lambda o: (o["cluster_id"], o["request_id"], o["feature"]))
    # stable sort: inside one domain, _losses' order (entity keys, then the fields as listed) is kept
    loss_rows.sort(key=lambda x: (x["cluster_id"], x["request_id"], x["target_level"], x["_order"]))
    return out_rows, [{c: x[c] for c in LOSS_COLUMNS} for x in loss_rows]


def _truth_index(events: list[dict] | None) -> dict[tuple, dict] | None:
    if events is None:
        return None
    idx: dict[tuple, dict] = {}
    for e in sorted((e for e in events if e.get("event_type") == "feature_update"), key=lambda e: e["event_id"]):
        d = json.loads(e["details"]) if isinstance(e["details"], str) else (e["details"] or {})
        key = (e["cluster_id"], e["start_time"], d.get("feature"), d.get("target_level"))
        idx.setdefault(key, d)  # choice: the first by event_id
    return idx


def _fill_truth(out: dict, truth: dict | None, r: dict, outcome: str | None) -> None:
    out.update({"truth_accepted": None, "truth_error_code": None, "truth_error_message": None, "matches_truth": None})
    if truth is None:
        return
    d = truth.get((r["cluster_id"], r["request_time"], r["feature"], r["max_version_level"]))
    if d is None:
        return
    out.update({"truth_accepted": d.get("accepted"), "truth_error_code": d.get("error_code"),
                "truth_error_message": d.get("error_message")})
    if outcome is not None and outcome != "BEFORE_LOG":
        accepted = outcome in ("ACCEPTED", "VALIDATED")
        out["matches_truth"] = accepted == bool(d.get("accepted")) and out["error_message"] == d.get("error_message")
