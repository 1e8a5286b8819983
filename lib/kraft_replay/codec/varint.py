"""Base-128 varints as used by Kafka's record format and message encoding.

Rules (facts §1.5):
- unsigned varint: 7 value bits per byte, least-significant group first, the high bit of a
  byte says "more bytes follow"; a 32-bit value takes at most 5 bytes, a 64-bit value at
  most 10. A longer encoding, or bits beyond the value's width, is an error.
- signed (zigzag) varint/varlong: ``n`` is mapped to ``(n << 1) ^ (n >> 31)`` (``>> 63`` for
  64-bit) before the unsigned encoding; decoding maps ``u`` back with ``(u >> 1) ^ -(u & 1)``.

Decoders take ``(buf, pos)`` and return ``(value, new_pos)``; they raise :class:`VarintError`
(a ``ValueError``) on truncated, overlong or out-of-range input, never anything else.

This module is the project's only varint reader: the record parser, the record-value decoders
(generated code reads the first byte in line and calls :func:`read_uvarint` for longer ones) and
the batch accelerator use these functions; :func:`read_uvarint_array` is the same rule for many
positions of one numpy buffer at once (the column-wise decoders).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "VarintError",
    "read_uvarint",
    "read_uvarlong",
    "read_varint",
    "read_varlong",
    "write_uvarint",
    "write_uvarlong",
    "write_varint",
    "write_varlong",
    "uvarint_size",
    "varint_size",
    "read_uvarint_array",
]

_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class VarintError(ValueError):
    """A varint was truncated, longer than its width allows, or out of range."""


def _read_unsigned(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, limit: int) -> tuple[int, int]:
    """Unsigned base-128 decode of at most ``max_bytes`` bytes whose value must not exceed ``limit``."""
    result = 0
    shift = 0
    end = len(buf)
    if pos < 0:
        raise VarintError(f"negative position {pos}")
    for _ in range(max_bytes):
        if pos >= end:
            raise VarintError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result > limit:
                raise VarintError(f"varint value {result} exceeds {limit.bit_length()}-bit range")
            return result, pos
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes ending at byte {pos}")


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Unsigned 32-bit varint (at most 5 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        b = 0x80            # the general reader reports the truncation
    if b < 0x80 and pos >= 0:
        return b, pos + 1
    return _read_unsigned(buf, pos, 5, _U32_MAX)


def read_uvarlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Unsigned 64-bit varint (at most 10 bytes)."""
    return _read_unsigned(buf, pos, 10, _U64_MAX)


def read_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Signed 32-bit zigzag varint (at most 5 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        b = 0x80
    if b < 0x80 and pos >= 0:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 5, _U32_MAX)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Signed 64-bit zigzag varlong (at most 10 bytes)."""
    try:
        b = buf[pos]
    except IndexError:
        b = 0x80
    if b < 0x80 and pos >= 0:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 10, _U64_MAX)
    return (u >> 1) ^ -(u & 1), pos


def _write_unsigned(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Single-byte encodings are by far the most common; precompute them.
_SMALL = [bytes((i,)) for i in range(0x80)]


def write_uvarint(value: int) -> bytes:
    """Unsigned 32-bit varint encoding of ``value`` (0 ≤ value < 2**32)."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    if not 0 <= value <= _U32_MAX:
        raise VarintError(f"unsigned varint out of range: {value}")
    return _write_unsigned(value)


def write_uvarlong(value: int) -> bytes:
    """Unsigned 64-bit varint encoding of ``value`` (0 ≤ value < 2**64)."""
    if not 0 <= value <= _U64_MAX:
        raise VarintError(f"unsigned varlong out of range: {value}")
    return _write_unsigned(value)


def write_varint(value: int) -> bytes:
    """Signed 32-bit zigzag varint encoding of ``value``."""
    if not _I32_MIN <= value <= _I32_MAX:
        raise VarintError(f"signed varint out of 32-bit range: {value}")
    return _write_unsigned(((value << 1) ^ (value >> 31)) & _U32_MAX)


def write_varlong(value: int) -> bytes:
    """Signed 64-bit zigzag varlong encoding of ``value``."""
    if not _I64_MIN <= value <= _I64_MAX:
        raise VarintError(f"signed varlong out of 64-bit range: {value}")
    return _write_unsigned(((value << 1) ^ (value >> 63)) & _U64_MAX)


def uvarint_size(value: int) -> int:
    """Number of bytes the unsigned varint encoding of ``value`` takes."""
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def varint_size(value: int) -> int:
    """Number of bytes the signed 64-bit zigzag encoding of ``value`` takes."""
    return uvarint_size(((value << 1) ^ (value >> 63)) & _U64_MAX)


def read_uvarint_array(arr: np.ndarray, p: np.ndarray, lim: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsigned varints at positions ``p`` of the uint8 array ``arr``, each to end before ``lim``:
    ``(values, new positions, ok)``. Reads at most four bytes (values below 2**28, which is every
    length and count the column-wise decoders accept); a longer varint, or one running past ``lim``,
    has ``ok`` false and its value must not be used. Positions past the end of ``arr`` read its last
    byte (the caller's ``lim`` check rejects them). Most varints are one byte: only the others read on."""
    val = arr.take(p, mode="clip").astype(np.int64)
    long_ = np.flatnonzero(val >= 128)
    np_ = p + 1
    if not len(long_):
        return val, np_, np_ <= lim
    ok = np.ones(len(p), dtype=bool)
    g = arr.take((p[long_] + 1)[:, None] + _ARANGE3, mode="clip").astype(np.int64)
    m1 = g[:, 0] >= 128
    m2 = m1 & (g[:, 1] >= 128)
    m3 = m2 & (g[:, 2] >= 128)
    g &= 0x7F
    val[long_] = (val[long_] & 0x7F) + (g[:, 0] << 7) + ((g[:, 1] << 14) * m1) + ((g[:, 2] << 21) * m2)
    np_[long_] += 1 + m1 + m2
    ok[long_] = ~m3
    return val, np_, ok & (np_ <= lim)


_ARANGE3 = np.arange(3, dtype=np.int64)
