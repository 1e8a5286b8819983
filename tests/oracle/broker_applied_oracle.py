"""A plain sequential ``broker_applied`` (docs/design.md, "broker_applied"): samples of one broker in
time order, one interval per run of equal offsets, NO_SAMPLES for gaps longer than gap_factor x the
broker's median sample interval (the lower median, as Spark's exact percentile_approx gives)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta


def broker_applied(samples: list[dict], gap_factor: float = 3.0) -> list[dict]:
    """``samples``: dicts with cluster_id, broker_id, observed_at (datetime), applied_offset,
    applied_record_time. Returns the interval dicts."""
    by: dict[tuple, dict[datetime, dict]] = {}
    for s in samples:
        by.setdefault((s["cluster_id"], s["broker_id"]), {}).setdefault(s["observed_at"], s)
    out: list[dict] = []
    for (cid, bid), at in by.items():
        rows = [at[t] for t in sorted(at)]
        gaps = sorted(b["observed_at"] - a["observed_at"] for a, b in zip(rows, rows[1:]))
        med = gaps[max(0, math.ceil(0.5 * len(gaps)) - 1)] if gaps else None
        runs: list[dict] = []
        for i, s in enumerate(rows):
            gap = i > 0 and med is not None and (s["observed_at"] - rows[i - 1]["observed_at"]) > med * gap_factor
            if not runs or gap or s["applied_offset"] != runs[-1]["applied_offset"]:
                runs.append({"first": s["observed_at"], "last": s["observed_at"], "applied_offset": s["applied_offset"],
                             "applied_record_time": s["applied_record_time"], "samples": 1, "gap_before": gap})
            else:
                r = runs[-1]
                r["last"], r["applied_record_time"], r["samples"] = s["observed_at"], s["applied_record_time"], r["samples"] + 1
        for j, r in enumerate(runs):
            nxt = runs[j + 1] if j + 1 < len(runs) else None
            prev = runs[j - 1] if j > 0 else None
            end = (r["last"] + med if nxt is not None and nxt["gap_before"] else nxt["first"] if nxt else None)
            out.append({"cluster_id": cid, "broker_id": bid, "from_time": r["first"], "to_time": end, "state": "APPLIED",
                        "applied_offset": r["applied_offset"], "applied_record_time": r["applied_record_time"],
                        "samples": r["samples"],
                        "restarted": r["gap_before"] or (prev is not None and r["applied_offset"] < prev["applied_offset"])})
            if nxt is not None and nxt["gap_before"]:
                out.append({"cluster_id": cid, "broker_id": bid, "from_time": r["last"] + med, "to_time": nxt["first"],
                            "state": "NO_SAMPLES", "applied_offset": None, "applied_record_time": None, "samples": 0,
                            "restarted": False})
    return out


__all__ = ["broker_applied", "timedelta"]
