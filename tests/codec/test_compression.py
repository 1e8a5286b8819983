"""Compression codecs (facts §1.3): round trips through real libraries, framing, bounded output."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kraft_replay.codec.batch import RecordBatch, build_batch, encode_batch, iter_batches
from kraft_replay.codec.compression import DEFAULT_LIMIT, XERIAL_MAGIC, Compression, DecompressionError, compress, decompress
from kraft_replay.ingest.bronze import decode_to_arrow

NOOP = bytes.fromhex("01140000")
DATA = b"".join(bytes([i % 251]) * (i % 97) for i in range(3000))


@pytest.mark.parametrize("codec", list(Compression))
def test_roundtrip_each_codec(codec: Compression) -> None:
    assert decompress(codec, compress(codec, DATA)) == DATA
    assert decompress(codec, compress(codec, b"")) == b""


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_compressed_batch_roundtrip(codec: Compression) -> None:
    values = [NOOP] * 500 + [bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")]
    data = build_batch(values, base_offset=7, leader_epoch=3, timestamp_ms=99, compression=codec)
    assert len(data) < 61 + 11 * len(values)  # actually compressed
    (b,) = list(iter_batches(data))
    assert isinstance(b, RecordBatch) and b.compression == codec
    assert [r.value for r in b.records] == values
    assert list(iter_batches(encode_batch(b)))[0].records == b.records


def test_reads_streams_written_by_other_writers() -> None:
    assert decompress(Compression.GZIP, gzip.compress(DATA)) == DATA
    assert decompress(Compression.GZIP, gzip.compress(DATA[:100]) + gzip.compress(DATA[100:])) == DATA
    assert decompress(Compression.LZ4, lz4.frame.compress(DATA)) == DATA
    assert decompress(Compression.ZSTD, zstandard.ZstdCompressor(level=5).compress(DATA)) == DATA
    # raw snappy (no xerial header) is accepted on read
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA


def test_xerial_framing_layout() -> None:
    out = compress(Compression.SNAPPY, DATA * 20)
    assert out.startswith(XERIAL_MAGIC) and struct.unpack_from(">ii", out, 8) == (1, 1)
    (first_len,) = struct.unpack_from(">i", out, 16)
    assert bytes(cramjam.snappy.decompress_raw(out[20 : 20 + first_len])) == (DATA * 20)[: 32 * 1024]


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_zip_bomb_is_bounded(codec: Compression) -> None:
    bomb = compress(codec, b"\x00" * (4 * 1024 * 1024))
    assert len(bomb) < 300_000
    with pytest.raises(DecompressionError, match="exceeds the limit"):
        decompress(codec, bomb, limit=1024 * 1024)
    assert len(decompress(codec, bomb, limit=4 * 1024 * 1024)) == 4 * 1024 * 1024


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_garbage_raises_decompression_error(codec: Compression) -> None:
    for junk in (b"", b"\x00", b"not compressed at all" * 3, compress(codec, DATA)[:-7]):
        try:
            out = decompress(codec, junk)
        except DecompressionError:
            continue
        # an empty input, and for raw snappy the empty block b"\x00", are valid empty streams
        assert out == b"" and (junk == b"" or (codec == Compression.SNAPPY and junk == b"\x00")), (codec, junk)


def test_unknown_codec() -> None:
    with pytest.raises(DecompressionError, match="unknown compression codec id 5"):
        decompress(5, b"x")
    with pytest.raises(ValueError):
        compress(7, b"x")


def test_corrupt_compressed_batch_is_quarantined() -> None:
    data = bytearray(build_batch([NOOP] * 50, base_offset=0, leader_epoch=0, timestamp_ms=0, compression=Compression.GZIP))
    data[70:74] = b"\xff\xff\xff\xff"
    from kraft_replay.codec.crc import crc32c

    data[17:21] = struct.pack(">I", crc32c(bytes(data[21:])))
    (item,) = list(iter_batches(bytes(data)))
    assert item.reason_code == "DECOMPRESSION_ERROR"
    assert zlib  # stdlib gzip/zlib are the real gzip implementation


# ---- memory: decompression reserves what the output needs, not the limit ---------------------------

def _batch_with_section(section: bytes, codec: Compression, count: int) -> bytes:
    """A v2 batch whose (compressed) records section is ``section``, with a valid CRC-32C."""
    from kraft_replay.codec.crc import crc32c

    after_crc = struct.pack(">hiqqqhii", int(codec), count - 1, 5, 5, -1, -1, -1, count) + section
    return struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), 1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


def _bomb(codec: Compression, size: int) -> bytes:
    """A stream of ``size`` zero bytes, compressed piecewise (the test never holds the output)."""
    zeros = b"\x00" * (1024 * 1024)
    if codec == Compression.ZSTD:
        c = zstandard.ZstdCompressor().compressobj()
        return b"".join(c.compress(zeros) for _ in range(size // len(zeros))) + c.flush()
    if codec == Compression.LZ4:
        c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
        return c.begin() + b"".join(c.compress(zeros) for _ in range(size // len(zeros))) + c.flush()
    c = zlib.compressobj(1, wbits=31)
    return b"".join(c.compress(zeros) for _ in range(size // len(zeros))) + c.flush()


def _peak(fn):  # noqa: ANN001, ANN202
    import tracemalloc

    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_small_compressed_batch_decodes_in_little_memory(codec: Compression) -> None:
    values = [NOOP] * 300 + [bytes.fromhex("010c00116d657461646174612e76657273696f6e001500")]
    data = build_batch(values, base_offset=0, leader_epoch=1, timestamp_ms=5, compression=codec)
    decode_to_arrow(data, cluster_id="c", source_file="f", file_kind="segment")  # lazy imports outside the measure
    items, peak = _peak(lambda: list(iter_batches(data)))
    assert isinstance(items[0], RecordBatch) and len(items[0].records) == 301
    assert peak < 32 * 1024 * 1024, f"{codec.name}: {peak / 1e6:.0f} MB peak for a {len(data)}-byte batch"
    chunk, peak = _peak(lambda: decode_to_arrow(data, cluster_id="c", source_file="f", file_kind="segment"))
    assert chunk.log.num_rows == 301 and chunk.quarantine.num_rows == 0
    assert peak < 32 * 1024 * 1024, f"{codec.name}: {peak / 1e6:.0f} MB peak in decode_to_arrow"


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD, Compression.GZIP])
def test_zip_bomb_batch_is_quarantined_with_memory_bounded_by_the_limit(codec: Compression) -> None:

    size = DEFAULT_LIMIT + 2 * 1024 * 1024
    section = _bomb(codec, size)
    assert len(section) < 2 * 1024 * 1024
    data = _batch_with_section(section, codec, 1)
    chunk, peak = _peak(lambda: decode_to_arrow(data, cluster_id="c", source_file="f", file_kind="segment"))
    q = chunk.quarantine.to_pylist()
    assert chunk.log.num_rows == 0 and [r["reason_code"] for r in q] == ["DECOMPRESSION_ERROR"]
    assert "exceeds the limit" in q[0]["reason"] and q[0]["raw"] == data
    # the output is held at most once, and only up to the limit (never limit + a reservation)
    assert peak < DEFAULT_LIMIT + 48 * 1024 * 1024, f"{codec.name}: {peak / 1e6:.0f} MB peak"


def test_truncated_and_corrupt_zstd_frames_are_refused() -> None:
    whole = zstandard.ZstdCompressor(write_checksum=True).compress(DATA * 10)
    assert decompress(Compression.ZSTD, whole + whole) == DATA * 20
    for cut in (len(whole) - 1, len(whole) - 4, len(whole) // 2, 10):
        with pytest.raises(DecompressionError, match="zstd"):
            decompress(Compression.ZSTD, whole[:cut])
    with pytest.raises(DecompressionError, match="zstd"):
        decompress(Compression.ZSTD, whole + b"\x00" * 9)
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    assert decompress(Compression.ZSTD, skippable + whole) == DATA * 10


def test_snappy_block_declaring_impossible_output_is_refused_before_allocating() -> None:
    # raw snappy: an unsigned varint of the output length, then ops; 10 MB (under the cap) from 4 bytes
    # is impossible
    fake = _uvarint(10_000_000) + b"\x00a"
    _, peak = _peak(lambda: pytest.raises(DecompressionError, decompress, Compression.SNAPPY, fake))
    assert peak < 8 * 1024 * 1024
    with pytest.raises(DecompressionError, match="more than snappy can encode"):
        decompress(Compression.SNAPPY, fake)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
