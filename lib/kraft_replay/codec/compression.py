"""Record-batch compression codecs (facts §1.3): none, gzip, snappy, lz4, zstd.

Each codec uses the real library (zlib, cramjam's snappy, the ``lz4`` frame binding, ``zstandard``).
Decompression is bounded: it never produces more than ``limit`` bytes, so a hostile stream (a zip
bomb) fails with :class:`DecompressionError` instead of exhausting memory. Output is produced in
chunks of at most :data:`CHUNK` bytes (no codec is asked for ``limit`` bytes at once, which would
make the library reserve that much), so memory follows the real output size: a small batch costs
about twice its decompressed size, a bomb at most about ``limit``. A snappy block declaring more
output than its bytes can encode (snappy expands at most ~21x) is refused before allocating.
zstd frames are checked for completeness by walking their block headers (no second decompression).

Snappy in Kafka uses snappy-java's stream framing ("xerial"): an 16-byte header
(``\\x82SNAPPY\\x00`` + version + compatible version, big-endian int32s) followed by blocks, each a
big-endian int32 length and a raw snappy block. A stream without that header is read as one raw
snappy block.
"""

from __future__ import annotations

import io
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

# Default ceiling for one batch's decompressed records section. KRaft's batches are at most 8 MiB
# (facts §1.7); twice that leaves room while bounding what one batch can expand into: with it, no
# records section (a bomb, or one huge value) can take a decode task past its memory budget.
DEFAULT_LIMIT = 16 * 1024 * 1024

# Most output bytes requested from a codec in one call.
CHUNK = 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024


class Compression(IntEnum):
    """Codec id stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(ValueError):
    """The compressed records section is malformed, uses an unknown codec, or exceeds the size limit."""


def _too_big(codec: str, limit: int) -> DecompressionError:
    return DecompressionError(f"{codec}: decompressed size exceeds the limit of {limit} bytes")


def _gunzip(data: bytes, limit: int) -> bytes:
    try:
        return _gunzip_members(data, limit)
    except zlib.error as exc:
        raise DecompressionError(f"gzip: {exc}") from None


def _gunzip_members(data: bytes, limit: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        d = zlib.decompressobj(wbits=31)
        chunk = rest
        while True:
            piece = d.decompress(chunk, min(CHUNK, limit + 1 - len(out)))
            out += piece
            if len(out) > limit:
                raise _too_big("gzip", limit)
            if d.eof:
                break
            chunk = d.unconsumed_tail
            if not chunk and not piece:
                raise DecompressionError("gzip: stream ends before its trailer")
        rest = d.unused_data
    if not out and not data:
        raise DecompressionError("gzip: empty stream")
    return bytes(out)


# A snappy copy op of 3 bytes produces at most 64 bytes; no valid block expands more than this.
_SNAPPY_MAX_RATIO = 22


def _snappy_raw(block: bytes, limit: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:  # cramjam raises its own error type
        raise DecompressionError(f"snappy: bad block header: {exc}") from None
    if size > limit:
        raise _too_big("snappy", limit)
    if size > _SNAPPY_MAX_RATIO * len(block) + 64:
        raise DecompressionError(f"snappy: block of {len(block)} bytes declares {size} bytes of output, "
                                 "more than snappy can encode in it")
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        raise DecompressionError(f"snappy: corrupt block: {exc}") from None


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data, limit)
    if len(data) < _XERIAL_HEADER.size:
        raise DecompressionError("snappy: truncated xerial stream header")
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError(f"snappy: truncated block length at byte {pos}")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise DecompressionError(f"snappy: block length {n} at byte {pos - 4} runs past the stream")
        out += _snappy_raw(data[pos : pos + n], limit - len(out))
        pos += n
    return bytes(out)


def _unlz4(data: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest:
            d = lz4.frame.LZ4FrameDecompressor()
            piece = d.decompress(rest, max_length=min(CHUNK, limit + 1 - total))
            while True:
                parts.append(piece)
                total += len(piece)
                if total > limit:
                    raise _too_big("lz4", limit)
                if d.eof or d.needs_input:
                    break
                piece = d.decompress(b"", max_length=min(CHUNK, limit + 1 - total))
            if not d.eof:
                raise DecompressionError("lz4: frame ends before its end mark")
            rest = d.unused_data
    except DecompressionError:
        raise
    except Exception as exc:  # lz4 raises RuntimeError on corrupt frames
        raise DecompressionError(f"lz4: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_check_frames(data: bytes) -> None:
    """Raise unless ``data`` is a sequence of complete zstd frames (skippable frames allowed): walks
    each frame's header and block headers (RFC 8878 §3.1) without decompressing."""
    n = len(data)
    pos = 0
    while pos < n:
        if n - pos < 8:
            raise DecompressionError(f"zstd: {n - pos} trailing bytes are too few for a frame")
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame: magic, 4-byte size, content
            pos += 8 + int.from_bytes(data[pos + 4:pos + 8], "little")
            if pos > n:
                raise DecompressionError("zstd: stream ends inside a skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise DecompressionError(f"zstd: bad frame magic {magic:#010x} at byte {pos}")
        head = data[pos:pos + 18]
        try:
            hsize = zstandard.frame_header_size(head)
            checksum = zstandard.get_frame_parameters(head).has_checksum
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd: bad frame header at byte {pos}: {exc}") from None
        pos += hsize
        while True:
            if n - pos < 3:
                raise DecompressionError("zstd: stream ends inside a frame")
            bh = int.from_bytes(data[pos:pos + 3], "little")
            btype = (bh >> 1) & 3
            if btype == 3:
                raise DecompressionError(f"zstd: reserved block type at byte {pos}")
            pos += 3 + (1 if btype == 1 else bh >> 3)
            if pos > n:
                raise DecompressionError("zstd: stream ends inside a frame")
            if bh & 1:
                break
        if checksum:
            pos += 4
            if pos > n:
                raise DecompressionError("zstd: stream ends inside a frame")


def _unzstd(data: bytes, limit: int) -> bytes:
    _zstd_check_frames(data)
    parts: list[bytes] = []
    total = 0
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        while True:
            piece = reader.read(min(CHUNK, limit + 1 - total))
            if not piece:
                break
            parts.append(piece)
            total += len(piece)
            if total > limit:
                raise _too_big("zstd", limit)
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"zstd: {exc}") from None
    return b"".join(parts)


def decompress(codec: int, data: bytes, limit: int = DEFAULT_LIMIT) -> bytes:
    """Decompress a batch's records section written with ``codec``; at most ``limit`` bytes of output."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return _gunzip(data, limit)
    if codec == Compression.SNAPPY:
        return _unsnappy(data, limit)
    if codec == Compression.LZ4:
        return _unlz4(data, limit)
    if codec == Compression.ZSTD:
        return _unzstd(data, limit)
    raise DecompressionError(f"unknown compression codec id {codec} (attributes bits 0-2 must be 0-4)")


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section with ``codec`` in the stream framing Kafka reads (gzip member,
    xerial snappy, LZ4 frame with independent blocks, zstd frame)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        c = zlib.compressobj(wbits=31)
        return c.compress(data) + c.flush()
    if codec == Compression.SNAPPY:
        parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec id {codec} (must be 0-4)")
