"""Test oracle for split planning: the batch chain walked from byte 0 (the sequential semantics the
range tasks' resynchronisation must reproduce)."""

from __future__ import annotations

import struct

_HEAD17 = struct.Struct(">qiib")


def first_batch_at_or_after(path: str, size: int, target: int) -> int | None:
    """The first batch boundary at or after ``target`` on the chain from byte 0 of the first ``size``
    bytes of ``path``, or None when the chain ends before ``target`` (a tail of 17 bytes or fewer, a
    batch length below 14, or below 49 with magic 2, or a batch running past the end; facts §1.6)."""
    if target <= 0:
        return 0
    with open(path, "rb") as f:
        data = f.read(size)
    pos = 0
    while pos < target:
        if size - pos <= 17:
            return None
        _base, length, _epoch, magic = _HEAD17.unpack_from(data, pos)
        if length < 14 or (magic == 2 and length < 49) or 12 + length > size - pos:
            return None
        pos += 12 + length
    return pos
