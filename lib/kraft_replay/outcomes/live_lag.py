"""``cache_lag`` kept current, sample by sample: the live path's sequential implementation of the
rules :mod:`kraft_replay.outcomes.cache_lag` computes with DataFrames (seed 002, facts §5.1, §9.1;
docs/design.md, "Stream mode"). A :class:`LiveLag` is one cluster's share of the stream's state: it
is advanced with each micro-batch's new ``broker_progress`` samples and ``quorum_status`` captures
and with the silver rows the live replay's step emitted (``log_batches``, ``brokers``,
``partitions``), and it returns the ``cache_lag`` rows of every bucket whose value changed. After
each step, the cluster's ``cache_lag`` rows with those merged in equal the batch job's
(tests/outcomes/test_live_lag.py holds the two equal).

Why a sample's value can change after it was first computed, and how that stays exact: a sample at
time t depends on the batches appended at or before t, the versions up to its log end and the
latest quorum capture at or before t — any of which may reach the lake after the sample (the log
and metrics followers run apart). So a step recomputes every sample from the earliest moment its
new inputs touch (the smallest of: the new samples' and captures' times, the new batches' append
times, the append time of the first batch at or past the lowest offset a new or closed version
starts or ends at) and returns the buckets from there on.

What the state keeps, bounded by ``window_s`` (10 minutes by default) behind the newest sample: the
samples of the window (and, per broker, the last one before it), the batches appended in it or
above the lowest applied offset of its samples (the greatest last offset of the others), the
captures of the window (and the latest before it), each broker's versions, per partition its last
visible version and leader-affecting change, and the changes above that lowest applied offset.
What would need more — a sample, capture or batch older than the window, a sample applied below the
offsets kept, a version that is not newer than the partition's last — raises :class:`LagUnabsorbable`
before anything changes: the caller computes the cluster whole (:meth:`LiveLag.whole`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.outcomes.cache_lag import CACHE_LAG_COLUMNS, CACHE_LAG_SCHEMA, STALL_AFTER_S, percentile_rank

__all__ = ["LiveLag", "LagUnabsorbable", "CACHE_LAG_SCHEMA", "CACHE_LAG_KEY"]

_TS = pa.timestamp("us", tz="UTC")
#: the key of a ``cache_lag`` row
CACHE_LAG_KEY = ["cluster_id", "broker_id", "bucket_start"]
_NONE = -(2 ** 62)   # "no bound yet"


class LagUnabsorbable(Exception):
    """The new inputs reach behind the state's window: compute the cluster whole (the message says why)."""


def _us(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.cast(col, _TS).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _col(t: pa.Table, name: str) -> list:
    return t.column(name).to_pylist()


def _pct(sorted_values: list[int], p: float) -> int:
    """The lower ``p`` percentile of ``sorted_values`` (:func:`~kraft_replay.outcomes.cache_lag.percentile_rank`)."""
    return sorted_values[int(percentile_rank(len(sorted_values), p)) - 1]


class LiveLag:
    """One cluster's ``cache_lag`` kept current (see the module docstring). Picklable: stream state."""

    def __init__(self, cluster_id: str, *, bucket_s: float = 1.0, stall_after_s: float = STALL_AFTER_S,
                 window_s: float = 600.0) -> None:
        self.cluster_id = cluster_id
        self.bucket_us = int(bucket_s * 1_000_000)
        self.stall_us = int(stall_after_s * 1_000_000)
        self.window_us = int(window_s * 1_000_000)
        self.horizon = _NONE          # nothing older than this may arrive (µs, a bucket boundary)
        self.floor_a = _NONE          # batches and changes at or below this offset are dropped
        self.b_t = np.empty(0, np.int64)      # kept batches: append time (µs) and last offset
        self.b_last = np.empty(0, np.int64)
        self.end_before = -1          # the greatest last offset of the dropped batches
        self.max_last = -1            # the greatest batch last offset taken (re-emitted rows skipped)
        self.regs: dict[int, dict[tuple[int, int], tuple[int | None, bool, bool | None]]] = {}
        self.part_last: dict[tuple[str, int], tuple[int, int, bool, int | None, int | None, int]] = {}
        self.ch_v: list[int] = []     # leader-affecting changes: offset, and the partition's previous one
        self.ch_p: list[int] = []
        self.caps: list[tuple[int, int]] = []               # captures in the window: (time µs, high watermark)
        self.cap_before: tuple[int, int, int] | None = None  # the latest before it: (time, hw, log end then)
        self.samples: dict[int, dict[int, int]] = {}       # broker -> time µs -> applied offset
        self.anchor: dict[int, tuple[int, int, int]] = {}  # broker -> (time, applied, since) of the last dropped

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def whole(cls, cluster_id: str, batches: pa.Table | None, brokers: pa.Table | None, partitions: pa.Table | None,
              samples: pa.Table | None, status: pa.Table | None, **kw: float) -> tuple[LiveLag, pa.Table]:
        """Every input of the cluster at once: the state, and every ``cache_lag`` row of the cluster."""
        lag = cls(cluster_id, **kw)
        return lag, lag.step(batches, brokers, partitions, samples, status)

    def step(self, batches: pa.Table | None = None, brokers: pa.Table | None = None, partitions: pa.Table | None = None,
             samples: pa.Table | None = None, status: pa.Table | None = None) -> pa.Table:
        """Take the new inputs (the live replay step's ``log_batches``, ``brokers`` and ``partitions``
        rows, new ``broker_progress`` samples and ``quorum_status`` captures of the cluster) and return
        the ``cache_lag`` rows of the buckets they changed. Raises :class:`LagUnabsorbable` (nothing
        changed) when they reach behind the window."""
        touched: list[int] = []
        # -- checks and what is new, before anything changes ----------------------------------------
        new_b = self._new_batches(batches)
        if len(new_b[0]):
            old = new_b[0] < self.horizon
            if old.any():
                raise LagUnabsorbable(f"a log batch appended {self._ago(int(new_b[0][old].min()))} before the window")
            touched.append(int(new_b[0].min()))
        new_s = self._new_samples(samples)
        if new_s:
            t0 = min(t for _b, t, _a in new_s)
            if t0 < self.horizon:
                raise LagUnabsorbable(f"a broker_progress sample {self._ago(t0)} before the window")
            low = min(a for _b, _t, a in new_s)
            if low < self.floor_a:
                raise LagUnabsorbable(f"a sample applied at offset {low}, below the offsets kept ({self.floor_a})")
            touched.append(t0)
        new_c = self._new_captures(status)
        if new_c:
            t0 = min(t for t, _h in new_c)
            if t0 < self.horizon:
                raise LagUnabsorbable(f"a quorum_status capture {self._ago(t0)} before the window")
            touched.append(t0)
        reg_rows, reg_low = self._new_registrations(brokers)
        part_rows, part_low = self._new_partition_versions(partitions)
        low_off = min(reg_low, part_low)
        if low_off < 2 ** 62:  # versions from an offset on change the samples whose log end reaches it
            t0 = self._time_of_offset(low_off, np.concatenate([self.b_t, new_b[0]]),
                                      np.concatenate([self.b_last, new_b[1]]),
                                      [*self.caps, *new_c, *([self.cap_before[:2]] if self.cap_before else [])])
            if t0 < self.horizon:
                raise LagUnabsorbable(f"versions from offset {low_off} on, which samples {self._ago(t0)} before the "
                                      "window reached")
            touched.append(t0)
        # -- the step --------------------------------------------------------------------------------
        if len(new_b[0]):
            self.b_t = np.concatenate([self.b_t, new_b[0]])
            self.b_last = np.concatenate([self.b_last, new_b[1]])
            self.max_last = max(self.max_last, int(new_b[1].max()))
        for bid, key, val in reg_rows:
            self.regs.setdefault(bid, {})[key] = val
        self._take_partition_versions(part_rows)
        for b, t, a in new_s:
            self.samples.setdefault(b, {})[t] = a
        self.caps = sorted({**dict(self.caps), **dict(new_c)}.items())
        if not touched or not self.samples:
            self._prune()
            return CACHE_LAG_SCHEMA.empty_table()
        since = min(touched)
        out = self._rows(since - since % self.bucket_us)
        self._prune()
        return out

    # -- the new inputs ----------------------------------------------------------------------------
    def _ago(self, t: int) -> str:
        return f"{(self.horizon - t) / 1e6:.1f} s"

    def _new_batches(self, batches: pa.Table | None) -> tuple[np.ndarray, np.ndarray]:
        if batches is None or batches.num_rows == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        last = batches.column("batch_last_offset").to_numpy(zero_copy_only=False).astype(np.int64)
        t = _us(batches.column("append_time"))
        new = last > self.max_last  # the live replay re-emits rows whose commit certainty moved
        return t[new], last[new]

    def _new_samples(self, samples: pa.Table | None) -> list[tuple[int, int, int]]:
        if samples is None or samples.num_rows == 0:
            return []
        return list(zip(_col(samples, "broker_id"), _us(samples.column("observed_at")).tolist(),
                        _col(samples, "applied_offset"), strict=True))

    def _new_captures(self, status: pa.Table | None) -> list[tuple[int, int]]:
        if status is None or status.num_rows == 0:
            return []
        return [(t, h) for t, h in zip(_us(status.column("observed_at")).tolist(), _col(status, "high_watermark"),
                                       strict=True) if h is not None]

    def _new_registrations(self, brokers: pa.Table | None) -> tuple[list, int]:
        """The broker versions that are new or whose end moved, and the lowest offset they change."""
        rows, low = [], 2 ** 63
        if brokers is None or brokers.num_rows == 0:
            return rows, low
        for bid, f, rec, to, deleted, fenced in zip(*(_col(brokers, c) for c in (
                "broker_id", "valid_from_offset", "record_offset", "valid_to_offset", "deleted", "fenced")), strict=True):
            key = (f, -1 if rec is None else rec)
            val = (to, bool(deleted), fenced)
            held = self.regs.get(bid, {}).get(key)
            if held == val:
                continue
            rows.append((bid, key, val))
            low = min(low, f if held is None else min((x for x in (to, held[0]) if x is not None), default=f))
        return rows, low

    def _new_partition_versions(self, partitions: pa.Table | None) -> tuple[list, int]:
        """The partition versions newer than each partition's last one taken, in order; the lowest
        offset among them."""
        if partitions is None or partitions.num_rows == 0:
            return [], 2 ** 63
        cols = [_col(partitions, c) for c in ("topic_id", "partition_id", "valid_from_offset", "record_offset",
                                              "valid_to_offset", "deleted", "leader", "leader_epoch")]
        rows = []
        for tid, pid, f, rec, to, deleted, leader, epoch in zip(*cols, strict=True):
            ident = (f, -1 if rec is None else rec)
            held = self.part_last.get((tid, pid))
            if held is not None and ident <= held[:2]:
                continue  # taken already (an open version re-emitted, or closed since)
            rows.append((ident, (tid, pid), to, bool(deleted), leader, epoch))
        rows.sort(key=lambda r: r[0])
        return rows, min((r[0][0] for r in rows), default=2 ** 63)

    def _take_partition_versions(self, rows: list) -> None:
        """Seed 002's image divergence: a visible version (one that was the image at some offset) is a
        leader-affecting change when it is the partition's first, or its deletion, leader or leader
        epoch differs from the previous visible version's."""
        for ident, key, to, deleted, leader, epoch in rows:
            if to is not None and to <= ident[0]:
                continue  # never visible
            held = self.part_last.get(key)
            if held is None or (deleted, leader, epoch) != held[2:5]:
                self.ch_v.append(ident[0])
                self.ch_p.append(-2 if held is None else held[5])
                changed_at = ident[0]
            else:
                changed_at = held[5]
            self.part_last[key] = (*ident, deleted, leader, epoch, changed_at)

    # -- the rules ---------------------------------------------------------------------------------
    @staticmethod
    def _time_of_offset(offset: int, b_t: np.ndarray, b_last: np.ndarray, caps: list[tuple[int, int]]) -> int:
        """The earliest moment a sample's log end can reach ``offset``: the earliest append time of a
        batch ending at or past it, or of a capture whose committed end reaches it (``2**62``: none
        yet, so no sample reaches it)."""
        at = b_last >= offset
        ts = [int(b_t[at].min())] if at.any() else []
        ts += [t for t, h in caps if h - 1 >= offset]
        return min(ts, default=2 ** 62)

    def _rows(self, from_us: int) -> pa.Table:
        """The ``cache_lag`` rows of every broker's buckets from ``from_us`` on, from its samples."""
        end_at = self._log_end()
        order = np.argsort(self.b_last, kind="stable")
        by_last, next_t = self.b_last[order], self.b_t[order]
        ch_v, ch_p = np.asarray(self.ch_v, np.int64), np.asarray(self.ch_p, np.int64)

        caps = ([self.cap_before] if self.cap_before else []) + [(t, h, end_at(t)) for t, h in self.caps]
        cap_t = [c[0] for c in caps]
        out: dict[str, list] = {c: [] for c in CACHE_LAG_COLUMNS}
        for bid in sorted(self.samples):
            kept = self.samples[bid]
            times = sorted(kept)
            anchor = self.anchor.get(bid)
            prev_a, since = (anchor[1], anchor[2]) if anchor else (None, None)
            buckets: dict[int, list[tuple]] = {}
            for t in times:
                a = kept[t]
                if prev_a is None or prev_a != a:
                    since = t
                prev_a = a
                bucket = t - t % self.bucket_us
                if bucket < from_us:
                    continue
                end = end_at(t)
                j = int(np.searchsorted(cap_t, t, side="right")) - 1
                if j >= 0:
                    _tq, h, at_capture = caps[j]
                    end = max(h - 1, end) if end > at_capture else h - 1
                lag = max(end - a, 0)
                i = int(np.searchsorted(by_last, a, side="right"))
                nxt = int(next_t[i]) if i < len(by_last) else None
                time_lag = (t - nxt) // 1000 if lag > 0 and nxt is not None and nxt <= t else 0
                registered, fenced = self._registration(bid, end)
                div = int(((ch_v > a) & (ch_v <= end) & (ch_p <= a)).sum()) if end > a else 0
                buckets.setdefault(bucket, []).append(
                    (t, a, end, lag, time_lag, lag > 0 and t - since >= self.stall_us, registered, fenced, div))
            for bucket, s in sorted(buckets.items()):
                last = s[-1]
                lags, times_ms = sorted(x[3] for x in s), sorted(x[4] for x in s)
                for c, v in zip(CACHE_LAG_COLUMNS, (
                        self.cluster_id, bid, bucket, len(s), last[1], last[2], _pct(lags, 0.5), _pct(lags, 0.99), lags[-1],
                        _pct(times_ms, 0.5), _pct(times_ms, 0.99), times_ms[-1], last[6], last[7],
                        any(x[5] for x in s), max(x[8] for x in s)), strict=True):
                    out[c].append(v)
        out["bucket_start"] = pa.array(out["bucket_start"], pa.int64()).cast(_TS)
        return pa.table(out, schema=CACHE_LAG_SCHEMA)

    def _log_end(self) -> Callable[[int], int]:
        """The log's end at a time (µs): the greatest last offset of the batches appended at or before
        it (-1 before any; facts §5.1: control batches count)."""
        order = np.argsort(self.b_t, kind="stable")
        by_t, end_t = self.b_t[order], np.maximum.accumulate(self.b_last[order]) if len(order) else self.b_last
        end_before = self.end_before

        def end_at(t: int) -> int:
            i = int(np.searchsorted(by_t, t, side="right")) - 1
            return max(end_before, int(end_t[i]) if i >= 0 else -1)

        return end_at

    def _registration(self, bid: int, end: int) -> tuple[bool, bool | None]:
        """``registered`` / ``fenced`` of the broker in the image at offset ``end``."""
        for (f, _rec), (to, deleted, fenced) in self.regs.get(bid, {}).items():
            if f <= end and (to is None or end < to):
                return (False, None) if deleted else (True, fenced)
        return False, None

    # -- the window --------------------------------------------------------------------------------
    def _prune(self) -> None:
        """Drop what no sample of the window, nor any later one, can need (see the module docstring)."""
        newest = max((max(s) for s in self.samples.values() if s), default=None)
        if newest is None:
            return
        horizon = newest - self.window_us
        horizon -= horizon % self.bucket_us
        if horizon <= self.horizon:
            return
        end_at = self._log_end()
        before = [c for c in self.caps if c[0] < horizon]
        if before:
            t, h = before[-1]
            self.cap_before = (t, h, end_at(t))
        self.caps = [c for c in self.caps if c[0] >= horizon]
        for bid, kept in self.samples.items():
            prev_a, since = (self.anchor[bid][1], self.anchor[bid][2]) if bid in self.anchor else (None, None)
            for t in sorted(kept):
                if t >= horizon:
                    break
                a = kept.pop(t)
                if prev_a is None or prev_a != a:
                    since = t
                prev_a = a
                self.anchor[bid] = (t, a, since)
        self.horizon = horizon
        applied = [a for kept in self.samples.values() for a in kept.values()]
        if not applied:
            return
        floor_a = max(self.floor_a, min(applied))
        drop = (self.b_t < horizon) & (self.b_last <= floor_a)
        if drop.any():
            self.end_before = max(self.end_before, int(self.b_last[drop].max()))
            self.b_t, self.b_last = self.b_t[~drop], self.b_last[~drop]
        keep = [i for i, v in enumerate(self.ch_v) if v > floor_a]
        self.ch_v, self.ch_p = [self.ch_v[i] for i in keep], [self.ch_p[i] for i in keep]
        self.floor_a = floor_a
