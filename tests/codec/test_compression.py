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
from kraft_replay.codec.compression import XERIAL_MAGIC, Compression, DecompressionError, compress, decompress

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
