"""Metadata record values decoded column-wise with numpy: many values of a buffer at once.

:func:`decode_values` reads the record values ``buf[start[i] : start[i] + length[i]]`` and gives,
per (record type, version), one Arrow struct column of the values (the payload column type of
:mod:`kraft_replay.codec.arrow_payload`). It follows the same rules as the row-wise decoder
(:func:`kraft_replay.codec.records.decode_record_value`; facts §2, schemas README "Types and their
encodings" / "Tagged fields"), one field at a time for every value of a group:

- frame: version 1, api key and record version as one-byte unsigned varints;
- body (flexible versions only): the non-tagged fields of the version in schema order, then the
  tagged-field section (unsigned varint count, then per field tag, size and value); a tagged field
  not on the wire holds its default; nothing may follow the body;
- integers big-endian (uint16 widened to int32, uint32 to int64), bool any non-zero byte,
  UUIDs in Kafka's text form (URL-safe base64 without padding, 22 characters), compact strings and
  arrays (unsigned varint length + 1, 0 = null, a null only where the version allows it), strings
  UTF-8 of at most 32,767 bytes.

It is an accelerator, never the authority: a value it does not fully recognise is **not** decoded
here but flagged (``ok`` false) for the row-wise decoder, which then gives the row or the
quarantine reason. That covers: a record type or version the columnar renderer of ``payload_json``
(:func:`kraft_replay.codec.arrow_json.supports`) does not handle or whose fields this module does not
(nested structs, bytes, floats, arrays of strings), unknown or invalid tags, tags out of ascending
order, varints longer than four bytes, any length or count that runs past the value, trailing
bytes, invalid UTF-8. So the rows it gives are exactly the row-wise decoder's for the values it
accepts (tests compare both on real files, random records of every type and version, and mutated
values).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kraft_replay.codec.arrow_json import supports as _json_supports
from kraft_replay.codec.arrow_payload import PAYLOAD_COLUMN_BY_API_KEY, PAYLOAD_STRUCT_TYPES
from kraft_replay.codec.records import uuid_to_bytes
from kraft_replay.codec.schema import FIXED_SIZES, RECORD_TYPES, FieldSpec
from kraft_replay.codec.varint import read_uvarint_array

__all__ = ["ColumnarGroup", "ColumnarValues", "Reader", "decode_values", "supports"]

_MAX_STRING = 32767
_MAX_TAGS = 64
_ARANGE = np.arange(16, dtype=np.int64)

# numpy dtype (big-endian on the wire) and Arrow type of each fixed-size scalar
_FIXED: dict[str, tuple[str, pa.DataType]] = {
    "bool": ("u1", pa.bool_()),
    "int8": ("i1", pa.int8()),
    "int16": (">i2", pa.int16()),
    "uint16": (">u2", pa.int32()),
    "int32": (">i4", pa.int32()),
    "uint32": (">u4", pa.int64()),
    "int64": (">i8", pa.int64()),
}


def _field_ok(f: FieldSpec, version: int) -> bool:
    if f.fields is not None:
        return False
    t = f.element_type
    if f.is_array:
        return t in _FIXED or t == "uuid"
    if t == "string":
        dv = f.default_value(version)
        return dv is None or dv == ""
    return t in _FIXED or t == "uuid"


_SUPPORTED: dict[tuple[int, int], bool] = {}


def supports(api_key: int, version: int) -> bool:
    """Whether values of this record type and version are decoded here (else: the row-wise decoder)."""
    ok = _SUPPORTED.get((api_key, version))
    if ok is None:
        rt = RECORD_TYPES.get(api_key)
        ok = (rt is not None and rt.schema.is_valid_version(version) and rt.schema.is_flexible(version)
              and _json_supports(api_key, version)
              and all(_field_ok(f, version) for f in rt.schema.fields_in(version)))
        _SUPPORTED[(api_key, version)] = ok
    return ok


@dataclass(slots=True)
class _Col:
    """One field's values for the items of a group: ``kind`` fixed (``values``), uuid (``values`` an
    (n, 16) byte matrix), str (byte ``start``/``count``) or list / uuidlist (element ``start``/``count``);
    ``valid`` false where null."""

    kind: str
    values: np.ndarray | None = None
    start: np.ndarray | None = None
    count: np.ndarray | None = None
    valid: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> _Col:
        return _Col(self.kind, *(None if a is None else a[idx] for a in (self.values, self.start, self.count, self.valid)))


@dataclass(slots=True)
class ColumnarGroup:
    """The values of one (record type, version) decoded here: ``rows`` index the input values,
    ``payload`` is their payload struct column (None for types without a body)."""

    api_key: int
    version: int
    rows: np.ndarray
    payload: pa.StructArray | None


@dataclass(slots=True)
class ColumnarValues:
    """Result of :func:`decode_values`: ``ok[i]`` says value ``i`` was decoded here (in one of ``groups``);
    the others are left to the row-wise decoder."""

    ok: np.ndarray
    groups: list[ColumnarGroup]


class Reader:
    """Column-wise reads from one byte buffer; each read takes item positions ``p`` and limits ``lim``
    (arrays) and returns values, new positions and a mask of the items that read cleanly."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.top = len(arr) - 1

    def gather(self, p: np.ndarray, k: int) -> np.ndarray:
        return self.arr.take(p[:, None] + _ARANGE[:k], mode="clip")

    def fixed(self, p: np.ndarray, lim: np.ndarray, t: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = FIXED_SIZES[t]
        raw = self.gather(p, size)
        vals = raw.view(_FIXED[t][0]).reshape(len(p))
        if t == "bool":
            vals = vals != 0
        return vals, p + size, p + size <= lim

    def uvarint(self, p: np.ndarray, lim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unsigned varints of at most four bytes (longer ones: not ok); see
        :func:`kraft_replay.codec.varint.read_uvarint_array`."""
        return read_uvarint_array(self.arr, p, lim)

    def uuid(self, p: np.ndarray, lim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.gather(p, 16), p + 16, p + 16 <= lim


def _kind(f: FieldSpec) -> str:
    """How :class:`_Col` holds the field: fixed, uuid, str, list or uuidlist."""
    t = f.element_type
    if f.is_array:
        return "uuidlist" if t == "uuid" else "list"
    return "str" if t == "string" else ("uuid" if t == "uuid" else "fixed")


def _read_field(r: Reader, f: FieldSpec, version: int, p: np.ndarray, lim: np.ndarray) -> tuple[_Col, np.ndarray, np.ndarray]:
    """Read field ``f`` for every item: (column, new positions, ok)."""
    t = f.element_type
    if not f.is_array and t in _FIXED:
        vals, p2, ok = r.fixed(p, lim, t)
        return _Col("fixed", values=vals), p2, ok
    if not f.is_array and t == "uuid":
        vals, p2, ok = r.uuid(p, lim)
        return _Col("uuid", values=vals), p2, ok
    # compact string or array: unsigned varint length + 1, 0 = null
    n, p2, ok = r.uvarint(p, lim)
    n -= 1
    valid = n >= 0
    if not f.nullable_in(version):
        ok &= valid
    cnt = np.maximum(n, 0)
    if f.is_array:
        size = 16 if t == "uuid" else FIXED_SIZES[t]
        end = p2 + cnt * size
        ok &= end <= lim
        return _Col(_kind(f), start=p2, count=cnt, valid=valid), end, ok
    end = p2 + cnt
    ok &= (end <= lim) & (n <= _MAX_STRING)
    return _Col("str", start=p2, count=cnt, valid=valid), end, ok


def _default_col(f: FieldSpec, version: int, n: int) -> _Col:
    """Column of ``n`` items holding the field's default (a tagged field not on the wire)."""
    dv = f.default_value(version)
    t = f.element_type
    if f.is_array or t == "string":
        z = np.zeros(n, dtype=np.int64)
        return _Col(_kind(f), start=z, count=z.copy(), valid=np.full(n, dv is not None))
    if t == "uuid":
        raw = np.frombuffer(uuid_to_bytes(dv), dtype=np.uint8)
        return _Col("uuid", values=np.tile(raw, (n, 1)))
    dt = np.dtype(_FIXED[t][0]).newbyteorder("=") if t != "bool" else np.dtype(bool)
    return _Col("fixed", values=np.full(n, dv, dtype=dt))


def _scatter(dst: _Col, at: np.ndarray, src: _Col) -> None:
    if dst.values is not None:
        dst.values[at] = src.values
    if dst.start is not None:
        dst.start[at] = src.start
        dst.count[at] = src.count
        dst.valid[at] = src.valid


def _read_message(r: Reader, fields: tuple[FieldSpec, ...], version: int, p: np.ndarray, lim: np.ndarray,
                  ok: np.ndarray) -> tuple[dict[str, _Col], np.ndarray]:
    """Read a flexible message body for every item; ``ok`` is narrowed in place."""
    present = [f for f in fields if f.present_in(version)]
    cols: dict[str, _Col] = {}
    for f in present:
        if f.tagged_in(version):
            continue
        col, p, fok = _read_field(r, f, version, p, lim)
        ok &= fok
        cols[f.snake] = col
    n = len(p)
    tagged = {f.tag: f for f in present if f.tagged_in(version)}
    for f in tagged.values():
        cols[f.snake] = _default_col(f, version, n)
    nt, p, tok = r.uvarint(p, lim)
    ok &= tok & (nt <= _MAX_TAGS) & (nt <= lim - p)
    prev = np.full(n, -1, dtype=np.int64)
    k = 0
    while True:
        act = np.flatnonzero(ok & (nt > k))
        if not len(act):
            break
        pa_, la = p[act], lim[act]
        tag, pa_, aok = r.uvarint(pa_, la)
        sz, pa_, sok = r.uvarint(pa_, la)
        tend = pa_ + sz
        aok &= sok & (tag > prev[act]) & (tend <= la)
        known = np.zeros(len(act), dtype=bool)
        for t, f in tagged.items():
            sel = np.flatnonzero(aok & (tag == t))
            if not len(sel):
                continue
            known[sel] = True
            col, end, fok = _read_field(r, f, version, pa_[sel], tend[sel])
            fok &= end == tend[sel]
            aok[sel] &= fok
            _scatter(cols[f.snake], act[sel], col)
        aok &= known
        ok[act] &= aok
        prev[act] = tag
        p[act] = tend
        k += 1
    ok &= p == lim
    return cols, p


def _packed(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _uuid_text(m: np.ndarray) -> pa.Array:
    """(n, 16) bytes -> Kafka's 22-character URL-safe base64 text, as an Arrow string array. Each
    UUID padded to 18 bytes encodes to 24 characters on its own (18 is a multiple of 3); the first 22
    are its text."""
    n = len(m)
    b = np.zeros((n, 18), dtype=np.uint8)
    b[:, :16] = m
    text = np.frombuffer(base64.urlsafe_b64encode(b.tobytes()), dtype=np.uint8).reshape(n, 24)[:, :22]
    offsets = np.arange(0, 22 * n + 1, 22, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])


def _ranges(start: np.ndarray, count: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte indexes of the elements ``start[i] + width * j`` (j < count[i]), and the list offsets."""
    offs = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=offs[1:])
    total = int(offs[-1])
    idx = np.repeat(start - offs[:-1] * width, count) + np.arange(total, dtype=np.int64) * width
    return idx, offs


def _to_arrow(r: Reader, f: FieldSpec, col: _Col, atype: pa.DataType) -> pa.Array:
    n = len(col.values) if col.values is not None else len(col.start)
    if col.kind == "fixed":
        vals = col.values
        if f.element_type != "bool":
            vals = vals.astype(atype.to_pandas_dtype(), copy=False)
        return pa.array(vals, atype)
    if col.kind == "uuid":
        return _uuid_text(col.values)
    if col.kind == "str":
        idx, offs = _ranges(col.start, col.count, 1)
        data = r.arr[idx]
        return pa.Array.from_buffers(pa.string(), n, [_packed(col.valid), pa.py_buffer(offs.astype(np.int32)),
                                                      pa.py_buffer(data.tobytes())])
    width = 16 if col.kind == "uuidlist" else FIXED_SIZES[f.element_type]
    idx, offs = _ranges(col.start, col.count, width)
    if col.kind == "uuidlist":
        values = _uuid_text(r.gather(idx, 16))
    else:
        et = _FIXED[f.element_type]
        raw = r.gather(idx, width).view(et[0]).reshape(len(idx))
        values = pa.array(raw.astype(et[1].to_pandas_dtype(), copy=False) if f.element_type != "bool" else raw != 0,
                          et[1])
    return pa.Array.from_buffers(atype, n, [_packed(col.valid), pa.py_buffer(offs.astype(np.int32))], children=[values])


def _utf8_ok(r: Reader, col: _Col) -> np.ndarray:
    """Items whose string is valid UTF-8 (only non-ASCII strings are checked, one by one)."""
    ok = np.ones(len(col.start), dtype=bool)
    idx, offs = _ranges(col.start, col.count, 1)
    if not len(idx):
        return ok
    high = r.arr[idx] >= 0x80
    if not high.any():
        return ok
    per = np.add.reduceat(high, np.minimum(offs[:-1], len(idx) - 1)) * (col.count > 0)
    for i in np.flatnonzero(per).tolist():
        s = int(col.start[i])
        try:
            r.arr[s : s + int(col.count[i])].tobytes().decode()
        except UnicodeDecodeError:
            ok[i] = False
    return ok


def decode_values(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> ColumnarValues:
    """Decode the record values ``arr[start[i] : start[i] + length[i]]`` (``arr`` a uint8 array) column-wise.

    Values this module does not handle, or that do not decode cleanly, have ``ok`` false; the caller
    decodes those row by row (see the module docstring)."""
    r = Reader(arr)
    n = len(start)
    ok = np.zeros(n, dtype=bool)
    groups: list[ColumnarGroup] = []
    if not n:
        return ColumnarValues(ok, groups)
    start = np.asarray(start, dtype=np.int64)
    lim = start + np.asarray(length, dtype=np.int64)
    head = r.gather(start, 3).astype(np.int64)
    framed = (length >= 4) & (head[:, 0] == 1) & (head[:, 1] < 128) & (head[:, 2] < 128)
    key = np.where(framed, head[:, 1] * 128 + head[:, 2], -1)
    for kv in np.unique(key[framed]).tolist():
        api_key, version = divmod(kv, 128)
        if not supports(api_key, version):
            continue
        rows = np.flatnonzero(key == kv)
        rt = RECORD_TYPES[api_key]
        gok = np.ones(len(rows), dtype=bool)
        cols, _ = _read_message(r, rt.schema.fields, version, start[rows] + 3, lim[rows], gok)
        for f in rt.schema.fields_in(version):
            if f.element_type == "string" and not f.is_array:
                sel = np.flatnonzero(gok)
                gok[sel] &= _utf8_ok(r, cols[f.snake].take(sel))
        keep = np.flatnonzero(gok)
        if not len(keep):
            continue
        rows = rows[keep]
        ok[rows] = True
        payload = None
        if rt.has_body:
            stype = PAYLOAD_STRUCT_TYPES[PAYLOAD_COLUMN_BY_API_KEY[api_key]]
            children = []
            for f in rt.schema.fields:
                atype = stype.field(f.snake).type
                col = cols.get(f.snake)
                children.append(pa.nulls(len(keep), atype) if col is None else _to_arrow(r, f, col.take(keep), atype))
            payload = pa.StructArray.from_arrays(children, fields=list(stype))
        groups.append(ColumnarGroup(api_key, version, rows, payload))
    return ColumnarValues(ok, groups)
