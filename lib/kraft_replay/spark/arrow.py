"""Arrow helpers for ``mapInArrow`` functions (know nothing of Kafka): the flat DDL schemas their
frames are declared with, as (name, type) pairs and as Arrow schemas, dictionary codes, and a
function of a task's rows at once made a ``mapInArrow`` function."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ddl_fields", "arrow_schema", "codes", "longs", "per_task"]

_BASE = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_()}


def ddl_fields(ddl: str) -> list[tuple[str, str]]:
    """``"a long, b array<int>"`` -> ``[("a", "long"), ("b", "array<int>")]`` (no commas inside a type)."""
    return [tuple(f.strip().split(" ", 1)) for f in ddl.split(",")]  # type: ignore[misc]


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a flat DDL schema of strings, ints, longs, booleans and arrays of them."""
    def typ(s: str) -> pa.DataType:
        return pa.list_(_BASE[s[6:-1]]) if s.startswith("array<") else _BASE[s]
    return pa.schema([(n, typ(s)) for n, s in ddl_fields(ddl)])


def codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary codes of a string column (-1: null) and the dictionary."""
    d = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return d.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64), d.dictionary.to_pylist()


def longs(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer or timestamp column as int64 (timestamps in their unit) and its validity (nulls read 0)."""
    c = pc.cast(col, pa.int64())
    return c.fill_null(0).to_numpy(zero_copy_only=False), c.is_valid().to_numpy(zero_copy_only=False).astype(bool)


def per_task(f: Callable[[pa.Table], pa.Table]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``f`` of a task's rows at once (one table), for ``mapInArrow``; nothing for a task without rows."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        if got:
            yield from f(pa.Table.from_batches(got).combine_chunks()).to_batches(1 << 16)
    return run
