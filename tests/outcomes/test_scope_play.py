"""The numpy side of ``consistency_outcomes`` (``outcomes/scope_play.py``): the as-of lookups on a
broker's step function, hand-computed, and the rounds limit. The rules themselves are tested through
``consistency_outcomes`` (test_consistency.py) and against the sequential reference."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kraft_replay.outcomes.consistency import STALE_DOMAINS
from kraft_replay.outcomes.scope_play import DOMAIN_TAGS, OUTCOME_NAMES, RoundsExceeded, play_scope
from kraft_replay.outcomes.steps import NULL, cluster_steps

S = 1_000_000  # µs


@pytest.fixture(scope="module")
def steps():
    # broker 1: offset 10 over [0, 5 s), no samples over [5 s, 6 s), 30 from 6 s (open);
    # broker 2: 50 over [0, 2 s), restarted: 20 over [2 s, 4 s), 40 over [4 s, 7 s), 60 from 7 s;
    # broker 3 is known but has no interval; batches at offsets 0, 10, 20 appended at 0, 1, 2 s
    iv = pa.table({"cluster_id": ["C"] * 7, "broker_id": [1, 1, 1, 2, 2, 2, 2],
                   "start": [0, 5 * S, 6 * S, 0, 2 * S, 4 * S, 7 * S],
                   "end": [5 * S, 6 * S, None, 2 * S, 4 * S, 7 * S, None],
                   "offset": [10, None, 30, 50, 20, 40, 60]})
    known = pa.table({"cluster_id": ["C"] * 3, "broker_id": [3, 1, 2]})
    spans = pa.table({"cluster_id": ["C"], "span_start": [0], "span_end": [10 * S]})
    batches = pa.table({"cluster_id": ["C"] * 3, "base": [20, 0, 10], "last": [29, 9, 19], "time": [2 * S, 0, 1 * S]})
    return cluster_steps(iv, known, spans, batches)["C"]


def test_applied_offset_as_of_a_time(steps) -> None:
    b = np.array([1, 1, 1, 1, 2, 3, 9])
    t = np.array([0, 4 * S, 5 * S, 6 * S, 3 * S, S, S])
    assert steps.applied_at(b, t).tolist() == [10, 10, NULL, 30, 20, NULL, NULL]


def test_catch_up_within_the_timeout(steps) -> None:
    # broker 1 from 1 s: 30 at 6 s (within 10 s), not within 4 s; broker 2 from 2.5 s wants 45: its
    # offset went back after 50, so the intervals are looked at one by one: 60 at 7 s; wants 35: 40 at 4 s
    b = np.array([1, 1, 2, 2, 2])
    t = np.array([S, S, 2 * S + S // 2, 2 * S + S // 2, 2 * S + S // 2])
    until = t + np.array([10 * S, 4 * S, 10 * S, 10 * S, S])
    tok = np.array([30, 30, 45, 35, 35])
    at, off = steps.caught_up(b, t, until, tok)
    assert at.tolist() == [6 * S, NULL, 7 * S, 4 * S, NULL]
    assert off.tolist() == [30, NULL, 60, 40, NULL]


def test_next_broker_is_cyclic_and_batches_by_offset(steps) -> None:
    assert steps.next_broker(np.array([1, 2, 3])).tolist() == [2, 3, 1]
    assert steps.batch_time_at(np.array([-1, 0, 9, 10, 25])).tolist() == [NULL, 0, 0, S, 2 * S]


def test_a_scope_that_does_not_settle_is_an_error(steps) -> None:
    reqs = pa.table({"cluster_id": ["C"], "scope": ["s"], "request_id": [1], "_t": [S], "client_id": ["a"],
                     "context_group": [None], "uses_consistency_token": [True], "api_key": [3], "target_broker": [1],
                     "cluster_id_sent": ["C"], "request_timeout_ms": [1000]},
                    schema=pa.schema([("cluster_id", pa.string()), ("scope", pa.string()), ("request_id", pa.int64()),
                                      ("_t", pa.int64()), ("client_id", pa.string()), ("context_group", pa.string()),
                                      ("uses_consistency_token", pa.bool_()), ("api_key", pa.int32()),
                                      ("target_broker", pa.int32()), ("cluster_id_sent", pa.string()),
                                      ("request_timeout_ms", pa.int64())]))
    out = play_scope(reqs, {"C": steps}, 3, 100, False, 100)
    assert [OUTCOME_NAMES[i] for i in out.column("_outcome").to_pylist()] == ["ADMITTED"] * 3  # one per policy
    assert out.column("applied_offset").to_pylist() == [10] * 3
    with pytest.raises(RoundsExceeded, match="scope 's', policy none: the attempts did not settle in 1 rounds"):
        play_scope(reqs, {"C": steps}, 3, 100, False, 1)


def test_the_domain_tags_are_the_domains_read_and_the_leader_changes() -> None:
    assert DOMAIN_TAGS == (*STALE_DOMAINS, "partitions_leader")


def test_log_end_as_of_a_time(steps) -> None:
    # batches appended at 0, 1, 2 s ending at offsets 9, 19, 29: the end is the largest last offset
    # appended at or before the time; -1 before any batch
    t = np.array([-1, 0, S - 1, S, 5 * S, NULL])
    assert steps.log_end_at(t).tolist() == [-1, 9, 9, 19, 29, -1]


def test_spans_from_the_batches_and_the_intervals() -> None:
    # no spans given: first batch append time to the later of the last batch and the last interval start;
    # rows out of order are sorted; a cluster without batches has no span
    iv = pa.table({"cluster_id": ["C", "C", "D"], "broker_id": [1, 1, 1], "start": [9 * S, 0, 0], "end": [None, 9 * S, None],
                   "offset": [20, 10, 5]})
    known = pa.table({"cluster_id": ["C"], "broker_id": [1]})
    batches = pa.table({"cluster_id": ["C", "C"], "base": [10, 0], "last": [19, 9], "time": [3 * S, 2 * S]})
    got = cluster_steps(iv, known, None, batches)
    assert got["C"].span == (2 * S, 9 * S) and got["D"].span is None
    assert got["C"].applied_at(np.array([1, 1]), np.array([S, 9 * S])).tolist() == [10, 20]
    assert got["C"].batch_time_at(np.array([5, 15])).tolist() == [2 * S, 3 * S]
