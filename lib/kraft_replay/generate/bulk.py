"""Closed-form layout of the bulk of the log, shared by the driver plan and the Spark expressions.

The bulk is a sequence of batches ``j = 0 .. n_batches-1`` spread evenly over ``[start_ms, end_ms)``.
Batch ``j`` has the size and kind of entry ``j mod CYCLE`` of a seeded pattern, so record counts
before any batch are closed-form (no scan): ``prefix(j) = (j div CYCLE) * cycle_sum + partial[j mod CYCLE]``.
Two prefix variants exist: over all batches, and over partition-change ("churn") batches only —
used where metadata.version < 3.3-IV1 forbids NoOp records and NoOp batches are left out.

Churn record number ``r`` (counted over the whole run) touches stable partition
``k = (r * stride + shift) mod P``. The live replicas are the partition's replicas minus the brokers
that are down in that stretch of the log; the leader is the first live replica. Replicas of stable
partition ``k`` are ``brokers[(k + i) mod B]``, ``i < RF``.

A touch always changes something (Kafka never writes a PartitionChangeRecord that changes nothing):
every structural change of a broker's liveness (isolate / rejoin in the plan) leaves the ISR of each
partition it replicates *full* (= the live replicas) — a "reset" of those partitions at churn count
``R`` (the churn records before that structural group). The ``m``-th touch of ``k`` since its last
reset, ``m = (r - R) div P``, shrinks the ISR (drops the last live replica) when ``m`` is even and
restores it when odd. A partition whose live replicas cannot shrink without leaving fewer than
``max(1, min.insync.replicas)`` in the ISR is *stuck* until its next reset: its touches are NoOp
records where metadata.version allows them, else a leader re-election of the current leader (an
epoch bump). Resets are per broker, so the last reset of ``k`` is the greatest reset of its replicas.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

CYCLE = 97


@dataclass(frozen=True)
class BulkLayout:
    n_batches: int
    start_ms: int
    end_ms: int
    sizes: tuple[int, ...]          # records per batch, per cycle entry
    noop: tuple[bool, ...]          # NoOp batch (one record) or churn batch, per cycle entry
    partitions: int                 # stable partitions P
    stride: int                     # coprime with P
    shift: int

    @staticmethod
    def make(seed: int, target_records: int, start_ms: int, end_ms: int, bmin: int, bmax: int,
             noop_fraction: float, partitions: int) -> BulkLayout:
        rng = random.Random(f"bulk-{seed}")
        noop = tuple(rng.random() < noop_fraction for _ in range(CYCLE))
        sizes = tuple(1 if n else rng.randint(bmin, bmax) for n in noop)
        mean = sum(sizes) / CYCLE
        n_batches = max(1, math.ceil(max(target_records, 1) / mean))
        stride = rng.randrange(1, max(partitions, 2))
        while math.gcd(stride, partitions) != 1:
            stride += 1
        return BulkLayout(n_batches, start_ms, end_ms, sizes, noop, partitions, stride % max(partitions, 1) or 1,
                          rng.randrange(partitions))

    def with_batches(self, n_batches: int) -> BulkLayout:
        return BulkLayout(max(n_batches, 0), self.start_ms, self.end_ms, self.sizes, self.noop, self.partitions,
                          self.stride, self.shift)

    # -- prefix sums -----------------------------------------------------------------------
    @property
    def partial_all(self) -> list[int]:
        out, s = [], 0
        for x in self.sizes:
            out.append(s)
            s += x
        return out + [s]

    @property
    def partial_churn(self) -> list[int]:
        out, s = [], 0
        for x, n in zip(self.sizes, self.noop, strict=True):
            out.append(s)
            s += 0 if n else x
        return out + [s]

    def prefix(self, j: int, churn_only: bool) -> int:
        """Records in bulk batches ``0 .. j-1`` (churn batches only if ``churn_only``)."""
        part = self.partial_churn if churn_only else self.partial_all
        return (j // CYCLE) * part[CYCLE] + part[j % CYCLE]

    # -- time ------------------------------------------------------------------------------
    @property
    def span_ms(self) -> int:
        return max(self.end_ms - self.start_ms, 1)

    def time_of(self, j: int) -> int:
        """Append time (ms) of bulk batch ``j``."""
        return self.start_ms + (j * self.span_ms) // max(self.n_batches, 1)

    def position(self, t_ms: int) -> int:
        """Number of bulk batches whose time is < ``t_ms``."""
        if t_ms <= self.start_ms:
            return 0
        n = max(self.n_batches, 1)
        j = min(((t_ms - self.start_ms) * n + self.span_ms - 1) // self.span_ms, self.n_batches)
        while j > 0 and self.time_of(j - 1) >= t_ms:
            j -= 1
        while j < self.n_batches and self.time_of(j) < t_ms:
            j += 1
        return j


def stable_replicas(k: int, broker_ids: list[int], rf: int) -> list[int]:
    """Replicas of stable partition ``k`` (round-robin over the broker list)."""
    b = len(broker_ids)
    return [broker_ids[(k + i) % b] for i in range(rf)]


def live_replicas(replicas: list[int], down: set[int] | frozenset[int]) -> list[int]:
    return [r for r in replicas if r not in down]


def shrink_possible(n_live: int, min_isr: int) -> bool:
    """A bulk shrink may drop the last live replica: at least 2 live and the ISR stays >= min.insync.replicas
    (so bulk records never touch ELR, KIP-966: ELR is non-empty only while the ISR is below min ISR)."""
    return n_live >= 2 and n_live - 1 >= max(1, min_isr)


def first_touch(layout: BulkLayout, k: int) -> int:
    """Smallest churn record number touching stable partition ``k``: ``r ≡ (k - shift) * stride⁻¹ (mod P)``."""
    P = layout.partitions
    if P <= 1:
        return 0
    return ((k - layout.shift) * _inverse(layout.stride, P)) % P


@functools.lru_cache(maxsize=64)
def _inverse(a: int, n: int) -> int:
    return pow(a, -1, n)


def touches_between(layout: BulkLayout, k: int, lo: int, hi: int) -> int:
    """Number of churn records ``r`` in ``[lo, hi)`` touching stable partition ``k``."""
    if hi <= lo:
        return 0
    P = max(layout.partitions, 1)
    r0 = first_touch(layout, k)
    return (hi - 1 - r0) // P - (lo - 1 - r0) // P
