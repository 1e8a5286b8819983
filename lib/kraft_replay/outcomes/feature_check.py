"""The what-if checker's engine (``kraft-replay features check``; seeds 004 and 001, facts §6, §7): one
UpdateFeatures request validated against the image of one offset, on the driver, without Spark.

An image is a handful of rows — the finalized features, the registered brokers and controllers, the ZK
migration state, the quorum's last LEADER_CHANGE / KRAFT_VOTERS — plus the entities the lossy check
reads. :func:`read_image` reads the versions in force at the offset through delta-rs (files pruned by
cluster, row groups by their offset statistics); :func:`check_request` applies the controller's checks
in the controller's order to them. The rules are those of the gold ``feature_update_outcomes``
(:func:`kraft_replay.outcomes.features.check_updates` and ``downgrade_losses``), with the same
constants, messages and loss rules (:data:`kraft_replay.replay.losses.LOSSES`, evaluated on Arrow
columns); tests/outcomes/test_feature_check.py holds the two equal, request by request, on a grid
of requests at the offsets where images change, on a hand-built cluster and on the replayed tiny
cluster. Why a second evaluator: one request through Spark costs seconds of planning and a JVM start,
and an operator runs this check at a prompt before ``kafka-features.sh downgrade`` (docs/design.md,
"The what-if checker runs without Spark").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.lake.reader import LakeReader
from kraft_replay.outcomes.features import (
    CONTROLLER_REGISTRATION_MV, DEFINED_LEVELS, KIP1155_FLOOR, KRAFT_V1_MV, METADATA_CHANGED_LEVELS,
    MIN_FEATURE_MV, UPDATE_ERROR_PREFIX, UPGRADE_TYPES, FeaturesPolicy,
)
from kraft_replay.replay.features import DEFAULT_MV_LEVEL, METADATA_VERSION, MV_NAMES
from kraft_replay.replay.losses import LOSS_DOMAINS, LOSS_KEYS, LOSSES, loss_columns

__all__ = ["IMAGE_COLUMNS", "Image", "Node", "Update", "check_request", "image_at", "image_losses", "read_image"]

#: a node's supported ranges as registered: [(name, min, max)] in registration order
Ranges = list[tuple[str, int | None, int | None]]


@dataclass(frozen=True)
class Node:
    """A registration in force: ``node_id``, ``fenced`` (brokers) and its supported feature ranges."""

    node_id: int
    fenced: bool | None
    ranges: Ranges

    def range_of(self, name: str) -> tuple[int, int]:
        """§7.3: ``(min, max)`` of feature ``name``; a feature the node does not list is ``(0, 0)``."""
        for n, lo, hi in self.ranges:
            if n == name:
                return (lo or 0, hi or 0)
        return (0, 0)


@dataclass
class Image:
    """What the controller validates against at ``offset`` (facts §7.2, §7.3): metadata.version ``mv``
    (1 when unset, §5.4), the other finalized features, the registrations in force (by id), the ZK
    migration state, the active controller and the voters; ``domains``: the loss domains' entities in
    force (Arrow tables, the key and the columns the loss rules read)."""

    cluster_id: str
    offset: int
    mv: int = DEFAULT_MV_LEVEL
    finalized: dict[str, int] = field(default_factory=dict)
    brokers: list[Node] = field(default_factory=list)
    controllers: list[Node] = field(default_factory=list)
    zk: str | None = None
    leader: int | None = None
    voters: list[int] = field(default_factory=list)
    domains: dict[str, pa.Table] = field(default_factory=dict)


@dataclass(frozen=True)
class Update:
    """One feature update of a request: ``feature`` to ``level`` by ``upgrade_type_code`` (1 upgrade,
    2 safe downgrade, 3 unsafe downgrade)."""

    feature: str
    level: int
    upgrade_type_code: int
    validate_only: bool = True


# -- reading the image ------------------------------------------------------------------------------------------

_VERSIONS = ["cluster_id", "valid_from_offset", "valid_to_offset", "deleted"]
_NODE_COLUMNS = {"brokers": ["broker_id", "fenced", "features"], "controllers": ["controller_id", "features"]}
#: the columns the check reads of each table (besides :data:`_VERSIONS`)
IMAGE_COLUMNS: dict[str, list[str]] = {
    d: list(dict.fromkeys([*LOSS_KEYS[d], *loss_columns(d), *_NODE_COLUMNS.get(d, [])]))
    for d in LOSS_DOMAINS} | {"features": ["name", "feature_level"]}
_CONTROL_COLUMNS = ["cluster_id", "source_kind", "offset", "control_type", "leader_change", "kraft_voters"]


def _live(offset: int) -> pc.Expression:
    return (pc.field("valid_from_offset") <= offset) & (
        pc.field("valid_to_offset").is_null() | (pc.field("valid_to_offset") > offset))


def _quorum(offset: int) -> pc.Expression:
    return ((pc.field("source_kind") == "log") & pc.field("control_type").isin(["LEADER_CHANGE", "KRAFT_VOTERS"])
            & (pc.field("offset") <= offset))


def read_image(reader: LakeReader, cluster_id: str, offset: int) -> Image:
    """The image of ``cluster_id`` at ``offset`` from a lake: only the versions in force there (files
    pruned by cluster, row groups by their offset statistics) and the quorum's control records up to it."""
    where = [("cluster_id", "=", cluster_id)]
    tables = {t: reader.scan(t, columns=[*_VERSIONS, *cols], partitions=where, filter=_live(offset))
              for t, cols in IMAGE_COLUMNS.items()}
    tables["metadata_control"] = reader.scan("metadata_control", columns=_CONTROL_COLUMNS, partitions=where,
                                             filter=_quorum(offset))
    return image_at(cluster_id, offset, {t: v for t, v in tables.items() if v is not None})


def _nodes(t: pa.Table | None, id_col: str) -> list[Node]:
    if t is None:
        return []
    out = [Node(r[id_col], r.get("fenced"), [(f["name"], f["min_supported_version"], f["max_supported_version"])
                                           for f in r["features"] or []])
           for r in t.select([c for c in ("fenced", id_col, "features") if c in t.column_names]).to_pylist()]
    return sorted(out, key=lambda n: n.node_id)


def image_at(cluster_id: str, offset: int, tables: dict[str, pa.Table]) -> Image:
    """The image of ``cluster_id`` at ``offset`` from Arrow ``tables``: versioned tables (``features``,
    ``brokers``, ``controllers`` and the loss domains; any rows, only those in force at ``offset`` and not
    deleted count) and ``metadata_control``. A table that is absent holds nothing."""
    img = Image(cluster_id, offset)
    got: dict[str, pa.Table] = {}
    for t, cols in IMAGE_COLUMNS.items():
        v = tables.get(t)
        if v is None:
            continue
        v = v.filter((pc.field("cluster_id") == cluster_id) & _live(offset)).select([*cols, "deleted"])
        got[t] = v.filter(pc.fill_null(pc.invert(v.column("deleted")), False)).drop_columns(["deleted"])
    mv = []
    for r in got["features"].to_pylist() if "features" in got else []:
        if r["name"] == METADATA_VERSION:
            mv.append(int(r["feature_level"]))
        else:
            img.finalized[r["name"]] = int(r["feature_level"])
    img.mv = max(mv, default=DEFAULT_MV_LEVEL)
    img.domains = {d: got[d] for d in LOSS_DOMAINS if d in got}
    img.brokers = _nodes(got.get("brokers"), "broker_id")
    img.controllers = _nodes(got.get("controllers"), "controller_id")
    zk = got.get("zk_migration_state")
    img.zk = max((v for v in zk.column("zk_migration_state_name").to_pylist() if v is not None), default=None) \
        if zk is not None else None
    ctl = tables.get("metadata_control")
    last: dict[str, dict] = {}
    if ctl is not None:
        ctl = ctl.filter((pc.field("cluster_id") == cluster_id) & _quorum(offset))
        for r in sorted(ctl.select(_CONTROL_COLUMNS).to_pylist(), key=lambda r: r["offset"]):
            last[r["control_type"]] = r
    lc = (last.get("LEADER_CHANGE") or {}).get("leader_change") or {}
    kv = (last.get("KRAFT_VOTERS") or {}).get("kraft_voters") or {}
    img.leader = lc.get("leader_id")
    voters = kv.get("voters") if kv.get("voters") is not None else lc.get("voters")
    img.voters = sorted(v["voter_id"] for v in voters or [])
    return img


# -- the lossy check --------------------------------------------------------------------------------------------

def image_losses(image: Image, target: int) -> list[dict[str, Any]]:
    """Seed 001's lossy check (facts §6.2/§6.3, the rules of :mod:`kraft_replay.replay.losses`): what
    ``image`` cannot keep written at metadata.version ``target`` — one dict per (domain, entity, field),
    ordered by domain (:data:`LOSS_DOMAINS`), entity (JSON of its keys) and field (null = the whole
    entity, first)."""
    out = []
    for order, d in enumerate(LOSS_DOMAINS):
        t = image.domains.get(d)
        rules = [x for x in LOSSES if x.domain == d and target < x.below]
        if t is None or not t.num_rows or not rules:
            continue
        masks = [x.holds_arrow(t) for x in rules]
        hit = np.flatnonzero(np.logical_or.reduce(masks))
        if not len(hit):
            continue
        rows = t.take(pa.array(hit)).to_pylist()
        keys = sorted(LOSS_KEYS[d])
        for i, row in zip(hit, rows, strict=True):
            entity = json.dumps({k: row[k] for k in keys if row[k] is not None}, separators=(",", ":"),
                                ensure_ascii=False)
            out += [{"_dorder": order, "domain": d, "entity": entity, "field": x.field, "what": x.what_row(row)}
                    for x, m in zip(rules, masks, strict=True) if m[i]]
    return sorted(out, key=lambda r: (r["_dorder"], r["entity"], r["field"] is not None, r["field"] or ""))


# -- the checks -------------------------------------------------------------------------------------------------

def _unsupported(head: str, rng: tuple[int, int]) -> str:
    """§7.3's reason for a node whose range excludes the level."""
    lo, hi = rng
    if hi == 0:
        return f"{head} does not support this feature."
    return f"{head} only supports versions " + (str(lo) if lo == hi else f"{lo}-{hi}")


def _excludes(rng: tuple[int, int], level: int) -> bool:
    return level < rng[0] or level > rng[1]


def _first(checks: list[tuple[bool, str, Any]]) -> tuple[str, str] | None:
    """(check, message) of the first check whose condition holds (messages are built lazily)."""
    for cond, name, msg in checks:
        if cond:
            return name, (msg() if callable(msg) else msg)
    return None


class _Verdict(NamedTuple):
    update: Update
    current: int
    today: tuple[str, str] | None    # today's first failure: (check, message)
    kip: tuple[str, str] | None      # KIP-1155's (metadata.version downgrades only)
    is_down: bool                    # a metadata.version downgrade of an image in the log
    skipped: list[str]
    loss_count: int | None


def _validate(img: Image, u: Update, proposed_mv: int, loss_count: int | None, first_loss: str | None,
              policy: FeaturesPolicy) -> _Verdict:
    """One update, facts §7.1–§7.3 and seed 001 in the controller's order."""
    feat, lvl, code = u.feature, u.level, u.upgrade_type_code
    is_mv = feat == METADATA_VERSION
    cur = img.mv if is_mv else img.finalized.get(feat, 0)
    upd = lambda s: f"Invalid update version {lvl} for feature {feat}. {s}"  # noqa: E731
    mvm = lambda s: f"Invalid metadata.version {lvl}. {s}"  # noqa: E731
    leader_reg = next((c for c in img.controllers if img.leader is not None and c.node_id == img.leader), None)
    local = None
    if leader_reg is not None and _excludes(leader_reg.range_of(feat), lvl):
        local = _unsupported(f"Local controller {img.leader}", leader_reg.range_of(feat))
    bad_broker = next((b for b in img.brokers if _excludes(b.range_of(feat), lvl)), None)
    broker = _unsupported(f"Broker {bad_broker.node_id}", bad_broker.range_of(feat)) if bad_broker else None
    voter = None
    if img.mv >= CONTROLLER_REGISTRATION_MV:
        regs = {c.node_id: c for c in img.controllers}
        v = next((v for v in img.voters if v not in regs or _excludes(regs[v].range_of(feat), lvl)), None)
        if v is not None:
            voter = (f"controller {v} has not registered, and may not support this feature" if v not in regs
                     else _unsupported(f"Controller {v}", regs[v].range_of(feat)))
    common = [
        (code not in UPGRADE_TYPES, "UPGRADE_TYPE",
         lambda: upd("The controller does not support the given upgrade type.")),
        (lvl < 0, "NEGATIVE_LEVEL", lambda: upd("A feature version cannot be less than 0.")),
        (local is not None, "LOCAL_CONTROLLER", lambda: upd(local)),
        (broker is not None, "BROKER", lambda: upd(broker)),
        (voter is not None, "CONTROLLER", lambda: upd(voter)),
        (lvl < cur and code == 1, "DIRECTION", lambda: upd(
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
            "downgrade.")),
        (lvl > cur and code != 1, "DIRECTION", lambda: upd("Can't downgrade to a newer version.")),
    ]
    mv_common = [
        (is_mv and lvl not in MV_NAMES, "UNKNOWN_METADATA_VERSION", lambda: mvm("Unknown metadata.version.")),
        (is_mv and img.zk in ("PRE_MIGRATION", "MIGRATION"), "ZK_MIGRATION",
         lambda: mvm("Unable to modify metadata.version while a ZK migration is in progress.")),
        (is_mv and lvl < MIN_FEATURE_MV, "METADATA_VERSION_FLOOR",
         lambda: mvm("Unable to set a metadata.version less than 3.3-IV0")),
    ]
    changed = any(lvl < v <= cur for v in METADATA_CHANGED_LEVELS)
    today_mv = [
        (is_mv and lvl < cur and changed, "METADATA_CHANGED", lambda: mvm(
            "Refusing to perform the requested downgrade because it might delete metadata information." if code == 2
            else "Unsafe metadata downgrade is not supported in this version.")),
    ]
    defined = DEFINED_LEVELS.get(feat)
    others = [
        (not is_mv and defined is None, "UNKNOWN_FEATURE", lambda: upd(f"Feature {feat} not found.")),
        (not is_mv and lvl not in (defined or ()), "UNDEFINED_LEVEL",
         lambda: upd(f"Feature {feat} has no level {lvl}.")),
        (not is_mv and lvl >= 1 and proposed_mv < MIN_FEATURE_MV, "DEPENDENCY", lambda: upd(
            f"{feat} could not be set to {lvl} because it depends on metadata.version={MIN_FEATURE_MV} (3.3-IV0)")),
        (not is_mv and feat == "kraft.version" and lvl == 1 and proposed_mv < KRAFT_V1_MV, "DEPENDENCY", lambda: upd(
            f"{feat} could not be set to {lvl} because it depends on metadata.version level {KRAFT_V1_MV}")),
    ]
    today = _first(common + mv_common + today_mv + others)
    is_down = is_mv and lvl < cur and img.offset >= 0
    kip = None
    if is_down:
        cap = policy.downgrade_capable_level
        incapable = None
        if cap is not None:
            regs = {c.node_id: c for c in img.controllers}
            nodes = [("Broker", b) for b in img.brokers] + [
                ("Controller", regs.get(v, Node(v, None, []))) for v in img.voters]
            bad = next(((k, n) for k, n in nodes if n.range_of(METADATA_VERSION)[1] < cap), None)
            if bad is not None:
                incapable = f"{bad[0]} {bad[1].node_id} does not support metadata.version downgrade"
        need = sorted((k, v) for k, v in img.finalized.items()
                      if (v >= 1 and lvl < MIN_FEATURE_MV) or (k == "kraft.version" and v == 1 and lvl < KRAFT_V1_MV))
        dep = None
        if need:
            k, v = need[0]
            dep = f"{k} level {v} depends on metadata.version level " + str(
                KRAFT_V1_MV if k == "kraft.version" and v == 1 and lvl < KRAFT_V1_MV else MIN_FEATURE_MV)
        kip_mv = [
            (lvl < KIP1155_FLOOR, "DOWNGRADE_FLOOR", lambda: mvm("Unable to downgrade metadata.version below 3.7-IV0")),
            (incapable is not None, "DOWNGRADE_SUPPORT", lambda: mvm(incapable)),
            (dep is not None, "FEATURE_DEPENDENCY", lambda: mvm(dep)),
            (code == 2 and (loss_count or 0) > 0, "LOSS", lambda: mvm(
                f"Refusing to perform the requested downgrade because it would lose metadata: {loss_count} item(s), "
                f"first: {first_loss}")),
        ]
        kip = _first(common + mv_common + kip_mv + others)
    reached = today is None or today[0] not in ("UPGRADE_TYPE", "NEGATIVE_LEVEL")
    skipped = []
    if reached and img.leader is None:
        skipped = ["no active controller"]
    elif reached and leader_reg is None:
        skipped = [f"local controller {img.leader} not registered"]
    return _Verdict(u, cur, today, kip, is_down, skipped, loss_count)


def check_request(image: Image, updates: list[Update], policy: FeaturesPolicy | None = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One UpdateFeatures request (``updates``, one per feature) on ``image``: ``(per-update verdicts,
    losses)``. Each verdict carries the ``feature_update_outcomes`` columns of the check
    (``metadata_version_level`` … ``loss_count``); the request fails as a whole on its first failing
    update, in feature-name order with metadata.version last (§7.1). ``losses``: :func:`image_losses` of a
    metadata.version downgrade, with ``target_level``."""
    policy = policy or FeaturesPolicy()
    mv_levels = [u.level for u in updates if u.feature == METADATA_VERSION]
    proposed_mv = max(mv_levels) if mv_levels else image.mv
    verdicts, losses = [], []
    for u in updates:
        down = u.feature == METADATA_VERSION and image.offset >= 0 and u.level < image.mv
        lost = [x | {"target_level": u.level} for x in image_losses(image, u.level)] if down else []
        first = " ".join(x for x in (lost[0]["domain"], lost[0]["entity"], lost[0]["field"]) if x) if lost else None
        verdicts.append(_validate(image, u, proposed_mv, len(lost) if down else None, first, policy))
        losses += lost
    order = sorted(verdicts, key=lambda v: (v.update.feature == METADATA_VERSION, v.update.feature))
    req_msg = next((v.today[1] for v in order if v.today is not None), None)
    kip_fail = next((f for f in ((v.kip if v.is_down else v.today) for v in order) if f is not None), None)
    kip_msg = kip_fail[1] if kip_fail else None
    live = image.offset >= 0  # an offset before the log: BEFORE_LOG, nothing judged
    out = []
    for v in verdicts:
        u, today = v.update, v.today
        out.append({
            "feature": u.feature, "max_version_level": u.level, "upgrade_type": UPGRADE_TYPES.get(u.upgrade_type_code),
            "upgrade_type_code": u.upgrade_type_code, "validate_only": u.validate_only, "as_of_offset": image.offset,
            "metadata_version_level": image.mv if live else None, "current_level": v.current if live else None,
            "active_controller": image.leader if live else None,
            "failed_check": today[0] if live and today else None,
            "feature_error_message": today[1] if live and today else None,
            "skipped_checks": v.skipped if live else None,
            "error_code": (95 if req_msg is not None else 0) if live else None,
            "error_message": UPDATE_ERROR_PREFIX + req_msg if live and req_msg is not None else None,
            "outcome": "BEFORE_LOG" if not live else "REJECTED" if req_msg is not None else
            "VALIDATED" if u.validate_only else "ACCEPTED",
            "rule_followed": "kafka",
            "kip1155_outcome": None if not v.is_down else "REJECTED" if kip_msg is not None else
            "ACCEPTED_WITH_LOSS" if (v.loss_count or 0) > 0 else "ACCEPTED",
            "kip1155_failed_check": v.kip[0] if v.is_down and v.kip else None,
            "kip1155_error_message": UPDATE_ERROR_PREFIX + kip_msg if v.is_down and kip_msg is not None else None,
            "loss_count": v.loss_count if live else None,
        })
    return out, losses
