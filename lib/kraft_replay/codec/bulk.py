"""The batch accelerator: runs of framed batches recognised with numpy, their records framed in lockstep.

An accelerator in the sense of :mod:`kraft_replay.codec.columnar`: it recognises the batches it fully
understands and leaves every other one to the general decoder (:func:`kraft_replay.codec.batch.decode_batch`),
which is the authority. A batch is recognised when

* its header (facts §1.1) says magic 2, no compression, not a control batch, 1 to
  :data:`~kraft_replay.codec.batch.MAX_BATCH_RECORDS` records, base and last offset in
  ``[0, OFFSET_LIMIT)`` and a maxTimestamp in the timestamp range (the checks of
  :func:`~kraft_replay.codec.batch.batch_problem`), and its CRC-32C verifies (§1.2);
* every record has KRaft's usual shape (§1.4, §1.7): non-negative length, attributes 0, timestamp
  delta 0, non-negative offset delta, null key, a value, no headers, the records filling the section
  exactly, every record offset below ``OFFSET_LIMIT`` (varints are read by
  :mod:`kraft_replay.codec.varint`: ``read_uvarint_array`` in lockstep, up to four bytes — longer ones
  are left to the general decoder — and ``read_uvarint`` one by one).

For those batches the general decoder would give one data row per record, with exactly the offsets
and value bytes returned here (tests compare the two in tests/codec/test_decode_paths.py).

Record *k* of every batch is framed at once (the records of one batch follow one another); when fewer
than ``_LOCKSTEP_MIN`` batches still have records, the rest are framed one by one in Python
(:func:`_frame_one`): a numpy step costs tens of microseconds whatever its width, so a few long
batches would otherwise cost one step per record.
"""

from __future__ import annotations

from dataclasses import dataclass

import google_crc32c
import numpy as np

from kraft_replay.codec.batch import (
    HEADER_SIZE,
    MAX_BATCH_RECORDS,
    MAX_TIMESTAMP_MS,
    MIN_RECORD_SIZE,
    MIN_TIMESTAMP_MS,
    OFFSET_LIMIT,
)
from kraft_replay.codec.columnar import Reader
from kraft_replay.codec.crc import CRC_START
from kraft_replay.codec.varint import VarintError, read_uvarint

__all__ = ["Recognised", "recognise"]

# The batch header as the accelerator reads it: bytes 0..60 of each batch (facts §1.1).
_HEADER_BYTES = np.arange(HEADER_SIZE, dtype=np.int64)
_HEADER_DTYPE = np.dtype({
    "names": ["base", "epoch", "magic", "crc", "attr", "ldelta", "maxts", "count"],
    "formats": [">i8", ">i4", "u1", ">u4", ">i2", ">i4", ">i8", ">i4"],
    "offsets": [0, 12, 16, 17, 21, 23, 35, 57],
    "itemsize": HEADER_SIZE,
})
# attribute bits that make a batch the general decoder's: compression codec (0-2) and control (5)
_NOT_PLAIN = 0x27
# batches read at a time (bounds the temporaries: ~0.5 KB a batch)
_PIECE = 8192
# the lockstep framing goes on while at least this many batches still have records
_LOCKSTEP_MIN = 64


@dataclass(slots=True)
class Recognised:
    """The recognised batches of a run (``batch`` indexes the run's batches, ascending) with their
    header fields, and their records in batch order: ``rows`` per batch, then per record its offset
    and where its value lies in the buffer."""

    batch: np.ndarray
    base: np.ndarray
    last: np.ndarray
    epoch: np.ndarray
    max_timestamp: np.ndarray
    rows: np.ndarray
    offset: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray

    @staticmethod
    def concat(parts: list[Recognised]) -> Recognised:
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return Recognised(z, z, z, z, z, z, z, z, z)
        return Recognised(*(np.concatenate([getattr(p, f) for p in parts]) for f in Recognised.__slots__))

    def without(self, drop: np.ndarray) -> Recognised:
        """The same minus the batches whose ``batch`` index is in ``drop``."""
        keep_b = ~np.isin(self.batch, drop)
        keep_r = np.repeat(keep_b, self.rows)
        return Recognised(self.batch[keep_b], self.base[keep_b], self.last[keep_b], self.epoch[keep_b],
                          self.max_timestamp[keep_b], self.rows[keep_b], self.offset[keep_r],
                          self.value_start[keep_r], self.value_length[keep_r])


def recognise(buf: bytes, arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> Recognised:
    """The batches ``buf[starts[i] : starts[i] + sizes[i]]`` (framed, ascending) that this module
    recognises (see the module docstring); ``arr`` is ``buf`` as a uint8 array."""
    reader = Reader(arr)
    parts = []
    for a in range(0, len(starts), _PIECE):
        parts.append(_recognise_piece(buf, arr, reader, starts[a:a + _PIECE], sizes[a:a + _PIECE], a))
    return Recognised.concat(parts)


def _recognise_piece(buf: bytes, arr: np.ndarray, reader: Reader, starts: np.ndarray, sizes: np.ndarray,
                     first: int) -> Recognised:
    whole = np.flatnonzero(sizes >= HEADER_SIZE)       # a magic-2 header fits (else: the general decoder)
    h = arr[starts[whole][:, None] + _HEADER_BYTES].view(_HEADER_DTYPE).ravel()
    cnt = h["count"].astype(np.int64)
    base = h["base"].astype(np.int64)
    last = base + h["ldelta"].astype(np.int64)           # wraps only where base is out of range (refused below)
    maxts = h["maxts"].astype(np.int64)
    size = sizes[whole]
    ok = ((h["magic"] == 2) & (h["attr"] & _NOT_PLAIN == 0) & (cnt >= 1) & (cnt <= MAX_BATCH_RECORDS)
          & (cnt * MIN_RECORD_SIZE <= size - HEADER_SIZE)
          & (base >= 0) & (base < OFFSET_LIMIT) & (last >= 0) & (last < OFFSET_LIMIT)
          & (maxts >= MIN_TIMESTAMP_MS) & (maxts <= MAX_TIMESTAMP_MS))
    cand = np.flatnonzero(ok)
    s = starts[whole][cand]
    crc = google_crc32c.value
    stored = h["crc"][cand]
    crcs = [crc(buf[a + CRC_START : b]) for a, b in zip(s.tolist(), (s + size[cand]).tolist())]
    cand = cand[np.array(crcs, dtype=np.uint32) == stored]
    s = starts[whole][cand]
    good, vs, vl, od = _frame_records(reader, buf, s + HEADER_SIZE, s + size[cand], cnt[cand])
    # every record offset below OFFSET_LIMIT (base is; offset deltas are non-negative here)
    per_rec_base = np.repeat(base[cand], cnt[cand])
    high = (per_rec_base + od) >= OFFSET_LIMIT
    if high.any():
        bad_batches = np.unique(np.repeat(np.arange(len(cand)), cnt[cand])[high])
        good[bad_batches] = False
    keep_r = np.repeat(good, cnt[cand])
    sel = cand[good]
    return Recognised(
        batch=whole[sel] + first,
        base=base[sel],
        last=last[sel],
        epoch=h["epoch"][sel].astype(np.int64),
        max_timestamp=maxts[sel],
        rows=cnt[sel],
        offset=(per_rec_base + od)[keep_r],
        value_start=vs[keep_r],
        value_length=vl[keep_r],
    )


def _frame_records(r: Reader, buf: bytes, start: np.ndarray, end: np.ndarray, count: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Frame the records of batches whose records sections are ``buf[start[i]:end[i]]`` holding
    ``count[i]`` records: ``(good, value_start, value_length, offset_delta)``, the last three per record
    in batch order (``count[i]`` slots per batch). ``good[i]``: every record of batch ``i`` has the usual
    shape (module docstring) and the records fill the section."""
    nb = len(start)
    slot0 = np.cumsum(count) - count
    total = int(count.sum()) if nb else 0
    vs = np.zeros(total, dtype=np.int64)
    vl = np.zeros(total, dtype=np.int64)
    od = np.zeros(total, dtype=np.int64)
    good = np.ones(nb, dtype=bool)
    p_all = start.copy()
    k = 0
    while True:
        act = np.flatnonzero(good & (count > k))
        if len(act) < _LOCKSTEP_MIN or not len(act):
            for b in act.tolist():
                spans = _frame_one(buf, int(p_all[b]), int(end[b]), int(count[b] - k))
                if spans is None:
                    good[b] = False
                    continue
                s = int(slot0[b]) + k
                for j, (d, a, m) in enumerate(spans):
                    od[s + j], vs[s + j], vl[s + j] = d, a, m
                p_all[b] = end[b]
            break
        p, e = p_all[act], end[act]
        ln, p, ok = r.uvarint(p, e)
        rend = p + (ln >> 1)
        ok &= ((ln & 1) == 0) & (rend <= e)
        g = r.gather(p, 2)
        ok &= (g[:, 0] == 0) & (g[:, 1] == 0)                  # attributes, timestamp delta
        d, p, ok2 = r.uvarint(p + 2, rend)
        ok &= ok2 & ((d & 1) == 0)
        ok &= r.gather(p, 1)[:, 0] == 1                        # key length -1: null key
        v, p, ok3 = r.uvarint(p + 1, rend)
        vend = p + (v >> 1)
        ok &= ok3 & ((v & 1) == 0) & (vend + 1 == rend)
        ok &= r.gather(vend, 1)[:, 0] == 0                     # no headers
        s = slot0[act] + k
        vs[s] = p
        vl[s] = v >> 1
        od[s] = d >> 1
        good[act] &= ok
        p_all[act] = rend
        k += 1
    good &= p_all == end
    return good, vs, vl, od


def _frame_one(buf: bytes, p: int, bend: int, count: int) -> list[tuple[int, int, int]] | None:
    """``(offset_delta, value start, value length)`` of the next ``count`` records at ``buf[p:bend]``
    when they have the usual shape and fill it exactly; None for anything else."""
    out: list[tuple[int, int, int]] = []
    try:
        for _ in range(count):
            ln, p = read_uvarint(buf, p)                            # zigzag: even = non-negative
            body_end = p + (ln >> 1)
            if ln & 1 or body_end > bend or buf[p] or buf[p + 1]:   # attributes 0, timestamp delta 0
                return None
            od, q = read_uvarint(buf, p + 2)
            if od & 1 or buf[q] != 1:                               # offset delta >= 0; null key
                return None
            vl, q = read_uvarint(buf, q + 1)
            vend = q + (vl >> 1)
            if vl & 1 or vend + 1 != body_end or buf[vend]:         # a value, then header count 0
                return None
            out.append((od >> 1, q, vl >> 1))
            p = body_end
    except (IndexError, VarintError):
        return None
    return out if p == bend else None
