"""The decoder's promise under hostile input (issue 15): never raises on malformed bytes, and every
declared record and every unframeable byte range is accounted for in its output.

Inputs are mutated windows of the real Kafka files (``tests/fuzz/mutations.py``: CRC-valid semantic
mutations with the CRC-32C recomputed, and raw byte mutations); ``mutations.check`` states the rules
(no exception; decoded + quarantined = declared records; unframeable bytes tiled by quarantine
rows; one quarantine row per bad range; no wrapped or negative values; accelerated == reference;
split decode == whole decode). Hypothesis draws the mutators' choices (``st.randoms``), derandomized
and without an example database, so CI runs the same examples every time and a failure shrinks to
a small list of mutations. The million-input campaign is ``bench/fuzz.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mutations as mu  # tests/fuzz is on sys.path (pytest prepend mode)

BOUNDED = settings(max_examples=1200, derandomize=True, database=None, deadline=None, print_blob=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def sources(real_kraft_dir: Path) -> list[mu.Source]:
    found = mu.load_sources(real_kraft_dir)
    assert {s.file_kind for s in found} == {"segment", "snapshot", "bootstrap"}
    return found


def _report(case: mu.Case, problems: list[str]) -> str:
    return "\n".join([*problems[:8], "made by:", *case.steps])


def test_clean_real_files_pass_the_checker(sources: list[mu.Source]) -> None:
    """The checker finds nothing to say about the unmodified files (the batches in the first 64 KiB of
    each segment, whole snapshots and bootstrap files), decoded whole and in pieces, and nothing of
    them is quarantined."""
    for s in sources:
        data = s.data[: max(p for p in s.starts if p <= 65536)] if s.file_kind == "segment" else s.data
        case = mu.Case(data, s.file_kind, s.snapshot_end_offset, s.snapshot_epoch, 0, piece=max(1, len(data) // 3),
                       slack=100, source=s.name)
        assert mu.check(case, full=True) == [], s.name
        assert mu.DECODE(data, **case.decode_kwargs()).quarantine.num_rows == 0, s.name


def test_semantic_mutations_keep_every_batch_crc_valid(sources: list[mu.Source]) -> None:
    """Semantic mutations re-encode batches with the CRC-32C recomputed: every batch of the result is
    framed and passes the CRC check, so the decoder has to look past it."""
    import random

    changed = 0
    for i in range(300):
        case = mu.make_case(random.Random(f"crc/{i}"), sources, raw=False)
        framed, tail = mu.frame(case.buf)
        assert tail == len(case.buf), case.steps
        for p, size in framed:
            h = mu._header(case.buf, p, size)
            assert size < mu.HEADER_SIZE or h["crc_ok"], case.steps
        window = sources[[s.name for s in sources].index(case.source)].data
        changed += case.buf not in window
    assert changed >= 250


def test_checker_catches_a_lost_batch_and_a_wrapped_value(sources: list[mu.Source]) -> None:
    """The checker can fail: a decode that lost a quarantine row, or whose append_time wrapped, is
    reported."""
    s = next(x for x in sources if x.file_kind == "segment" and len(x.starts) > 7)
    buf = bytearray(s.data[: s.starts[6]])
    buf[s.starts[3] + 30] ^= 0xFF  # the 4th batch's CRC fails
    case = mu.Case(bytes(buf), source=s.name)
    chunk = mu.DECODE(case.buf, base_position=0, **case.decode_kwargs())
    assert chunk.quarantine.num_rows == 1 and mu.accounting(case, chunk) == []
    lost = dataclasses.replace(chunk, quarantine=chunk.quarantine.slice(0, 0))
    assert "accounting (bytes)" in mu.classes(mu.accounting(case, lost))
    t = chunk.log.schema.get_field_index("append_time")
    wrapped = chunk.log.set_column(t, "append_time", pa.array([1] * chunk.log.num_rows, chunk.log.schema.field(t).type))
    assert "wrong value (append_time)" in mu.classes(mu.accounting(case, dataclasses.replace(chunk, log=wrapped)))


@pytest.mark.parametrize("name", ["empty records section, last batch of the buffer",
                                  "empty records section at the end of a split read",
                                  "one-byte records section, last batch of the buffer",
                                  "base offset near 2^63-1 on a multi-record batch",
                                  "negative base offset",
                                  "maxTimestamp 10^16 ms",
                                  "gzip batch of 200,000 empty values"])
def test_regression(sources: list[mu.Source], name: str) -> None:
    """One input per class of issue 15 (uncaught IndexError, OverflowError, negative offsets,
    wrapped append_time, a quarantine row per record)."""
    case = mu.regression_cases(sources)[name]
    problems = mu.check(case, full=True)
    assert problems == [], _report(case, problems)


def test_hostile_inputs(sources: list[mu.Source]) -> None:
    """Semantic and raw mutations of real windows."""

    @BOUNDED
    @given(st.randoms(use_true_random=False))
    def run(rng) -> None:  # noqa: ANN001
        case = mu.make_case(rng, sources)
        problems = mu.check(case, full=True)
        assert problems == [], _report(case, problems)

    run()


def test_crc_valid_semantic_inputs(sources: list[mu.Source]) -> None:
    """CRC-valid semantic mutations only: every batch passes the CRC check, so the decoder's record
    and value rules are all that stands between them and the tables."""

    @BOUNDED
    @given(st.randoms(use_true_random=False))
    def run(rng) -> None:  # noqa: ANN001
        case = mu.make_case(rng, sources, raw=False)
        problems = mu.check(case, full=True)
        assert problems == [], _report(case, problems)

    run()
