"""Arrow helpers for ``mapInArrow`` functions (know nothing of Kafka): the flat DDL schemas their
frames are declared with, as (name, type) pairs and as Arrow schemas, and dictionary codes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ddl_fields", "arrow_schema", "codes"]

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
