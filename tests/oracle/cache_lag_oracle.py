"""A plain sequential ``cache_lag`` (lib/kraft_replay/outcomes/cache_lag.py's rules, written again from
docs/design.md): per sample, the log end at its time (the committed end where a quorum capture says
it), both lags, the stall, the registration at the
log end and the partitions with a leader-affecting version (created, deleted, new leader or leader epoch)
between the applied offset and the log end, partition by partition."""

from __future__ import annotations

import math
from datetime import datetime, timedelta


def sample_lag(samples: list[dict], batches: list[dict], brokers: list[dict], partitions: list[dict],
               stall_after_s: float = 2.0, status: list[dict] | None = None) -> list[dict]:
    for p in partitions:
        p["_key"] = (p["cluster_id"], p["topic_id"], p["partition_id"])
    out = []
    by_broker: dict[tuple, list[dict]] = {}
    for s in samples:
        by_broker.setdefault((s["cluster_id"], s["broker_id"]), []).append(s)
    for (cid, bid), rows in by_broker.items():
        rows = sorted({r["observed_at"]: r for r in rows}.values(), key=lambda r: r["observed_at"])
        bs = [b for b in batches if b["cluster_id"] == cid]
        parts = [p for p in partitions if p["cluster_id"] == cid]
        changes = {k: _change_offsets(parts, k) for k in {p["_key"] for p in parts}}
        since = None
        prev = None
        for r in rows:
            t, a = r["observed_at"], r["applied_offset"]
            if prev is None or prev != a:
                since = t
            prev = a
            end = max([b["batch_last_offset"] for b in bs if b["append_time"] <= t], default=-1)
            # the committed end where a quorum capture (a known high watermark) is at or before t: its
            # high watermark - 1, or the log's end if batches appended since the capture moved it on
            caps = [q for q in status or [] if q["cluster_id"] == cid and q["high_watermark"] is not None
                    and q["observed_at"] <= t]
            if caps:
                q = max(caps, key=lambda q: q["observed_at"])
                at_capture = max([b["batch_last_offset"] for b in bs if b["append_time"] <= q["observed_at"]], default=-1)
                end = max(q["high_watermark"] - 1, end) if end > at_capture else q["high_watermark"] - 1
            nxt = [b for b in bs if b["batch_last_offset"] > a]
            first = min(nxt, key=lambda b: b["batch_last_offset"]) if nxt else None
            lag = max(end - a, 0)
            time_lag = 0
            if lag > 0 and first is not None and first["append_time"] <= t:
                time_lag = math.floor((t - first["append_time"]) / timedelta(milliseconds=1))
            reg = [v for v in brokers if v["cluster_id"] == cid and v["broker_id"] == bid and v["valid_from_offset"] <= end
                   and (v["valid_to_offset"] is None or end < v["valid_to_offset"])]
            registered = bool(reg) and not reg[0]["deleted"]
            div = sum(1 for offs in changes.values() if any(a < o <= end for o in offs)) if end > a else 0
            out.append({"cluster_id": cid, "broker_id": bid, "observed_at": t, "applied_offset": a, "applied_since": since,
                        "log_end_offset": end, "offset_lag": lag, "time_lag_ms": time_lag,
                        "stalled": lag > 0 and (t - since) >= timedelta(seconds=stall_after_s),
                        "registered": registered, "fenced": reg[0]["fenced"] if registered else None,
                        "image_divergence": div})
    return out


def _change_offsets(parts: list[dict], key: tuple) -> list[int]:
    """The offsets of ``key``'s leader-affecting versions (its first, a deletion or re-creation, a new
    leader or leader epoch), versions never visible left out."""
    vs = sorted((v for v in parts if v["_key"] == key and (v["valid_to_offset"] is None or v["valid_to_offset"] > v["valid_from_offset"])),
                key=lambda v: (v["valid_from_offset"], v["record_offset"] if v["record_offset"] is not None else -1))
    out = []
    for i, v in enumerate(vs):
        prev = vs[i - 1] if i else None
        if prev is None or (v["deleted"], v["leader"], v["leader_epoch"]) != (prev["deleted"], prev["leader"], prev["leader_epoch"]):
            out.append(v["valid_from_offset"])
    return out


__all__ = ["sample_lag", "datetime"]
