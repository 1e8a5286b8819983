"""Varint rules of facts §1.5: base-128 unsigned, zigzag signed, 5/10-byte limits, strict errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_replay.codec.varint import (
    VarintError,
    read_uvarint,
    read_uvarint_array,
    read_uvarlong,
    read_varint,
    read_varlong,
    uvarint_size,
    varint_size,
    write_uvarint,
    write_uvarlong,
    write_varint,
    write_varlong,
)


@pytest.mark.parametrize(
    ("value", "hexstr"),
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**32 - 1, "ffffffff0f")],
)
def test_unsigned_vectors(value: int, hexstr: str) -> None:
    assert write_uvarint(value).hex() == hexstr
    assert read_uvarint(bytes.fromhex(hexstr)) == (value, len(hexstr) // 2)
    assert uvarint_size(value) == len(hexstr) // 2


@pytest.mark.parametrize(("value", "hexstr"), [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (23, "2e"), (29, "3a")])
def test_zigzag_vectors(value: int, hexstr: str) -> None:
    assert write_varint(value).hex() == hexstr
    assert write_varlong(value).hex() == hexstr
    assert read_varint(bytes.fromhex(hexstr)) == (value, 1)
    assert read_varlong(bytes.fromhex(hexstr)) == (value, 1)


def test_reads_at_offset() -> None:
    buf = b"\xff" + write_uvarint(300) + write_varint(-70000)
    v, pos = read_uvarint(buf, 1)
    assert (v, pos) == (300, 3)
    assert read_varint(buf, pos) == (-70000, len(buf))


def test_32bit_limits() -> None:
    # a 5th byte with its high bit set is an error
    with pytest.raises(VarintError, match="longer than 5"):
        read_uvarint(bytes.fromhex("ffffffff8f01"))
    # bits beyond 32
    with pytest.raises(VarintError, match="range"):
        read_uvarint(bytes.fromhex("ffffffff1f"))
    assert read_varint(bytes.fromhex("feffffff0f"))[0] == 2**31 - 1
    assert read_varint(bytes.fromhex("ffffffff0f"))[0] == -(2**31)


def test_64bit_limits() -> None:
    assert read_uvarlong(bytes.fromhex("ffffffffffffffffff01")) == (2**64 - 1, 10)
    with pytest.raises(VarintError, match="longer than 10"):
        read_uvarlong(bytes.fromhex("ffffffffffffffffff8101"))
    with pytest.raises(VarintError, match="range"):
        read_uvarlong(bytes.fromhex("ffffffffffffffffff02"))
    assert read_varlong(write_varlong(-(2**63))) == (-(2**63), 10)


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated(data: bytes) -> None:
    for fn in (read_uvarint, read_varint, read_uvarlong, read_varlong):
        with pytest.raises(VarintError, match="truncated"):
            fn(data)


def test_write_range_errors() -> None:
    for fn, bad in (
        (write_uvarint, -1),
        (write_uvarint, 2**32),
        (write_varint, 2**31),
        (write_varint, -(2**31) - 1),
        (write_uvarlong, 2**64),
        (write_varlong, 2**63),
    ):
        with pytest.raises(VarintError):
            fn(bad)


@settings(deadline=None)
@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(n: int) -> None:
    b = write_varint(n)
    assert read_varint(b) == (n, len(b))
    assert len(b) <= 5


@settings(deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    b = write_varlong(n)
    assert read_varlong(b) == (n, len(b))
    assert len(b) == varint_size(n) <= 10


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_uvarlong_round_trip(n: int) -> None:
    b = write_uvarlong(n)
    assert read_uvarlong(b) == (n, len(b))
    if n < 2**32:
        assert write_uvarint(n) == b
        assert read_uvarint(b) == (n, len(b))


@settings(deadline=None)
@given(st.binary(max_size=12))
def test_random_bytes_never_raise_other_errors(data: bytes) -> None:
    for fn in (read_uvarint, read_varint, read_uvarlong, read_varlong):
        try:
            v, pos = fn(data)
        except VarintError:
            continue
        assert 0 < pos <= len(data)


@settings(deadline=None)
@given(st.binary(max_size=40), st.lists(st.tuples(st.integers(0, 45), st.integers(0, 45)), min_size=1, max_size=20))
def test_the_array_reader_agrees_with_the_scalar_reader(data: bytes, spans: list[tuple[int, int]]) -> None:
    """``read_uvarint_array`` reads what ``read_uvarint`` reads, where it reads at most four bytes
    ending before the limit; anything else it reports as not ok (never a wrong value marked ok)."""
    if not data:
        return
    arr = np.frombuffer(data, dtype=np.uint8)
    p = np.array([a for a, _ in spans], dtype=np.int64)
    lim = np.array([min(b, len(data)) for _, b in spans], dtype=np.int64)
    vals, ends, ok = read_uvarint_array(arr, p, lim)
    for i, (a, _) in enumerate(spans):
        try:
            v, end = read_uvarint(data[: lim[i]], a)
        except VarintError:
            v = end = None
        if ok[i]:
            assert (v, end) == (int(vals[i]), int(ends[i]))
        elif v is not None:
            assert end - a > 4 or end > lim[i]
