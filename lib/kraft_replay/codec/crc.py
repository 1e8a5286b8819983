"""CRC-32C (Castagnoli) as used by record batch format v2 (facts §1.2).

The batch checksum covers the bytes from the attributes field (byte 21 of the batch) to the end of
the batch; it excludes baseOffset, batchLength, partitionLeaderEpoch, magic and the CRC itself.
"""

from __future__ import annotations

import google_crc32c

# Byte position of the attributes field inside a batch: the CRC starts here.
CRC_START = 21


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return the CRC-32C (reflected 0x82F63B78, init/final xor 0xFFFFFFFF) of ``data`` as an unsigned int."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


def batch_crc(buf: bytes | bytearray | memoryview, start: int, end: int) -> int:
    """CRC-32C of a batch occupying ``buf[start:end]``: computed over ``buf[start + 21 : end]``."""
    return google_crc32c.value(bytes(buf[start + CRC_START : end]) if isinstance(buf, memoryview) else buf[start + CRC_START : end])
