"""Two lakes' tables compared row by row on the driver: each table as readers see it (its published
version), read with ``Lake.read_arrow`` (delta-rs on the embedded backend: no Spark job), every row as
sorted JSON. For tests whose subject is what a run wrote, not how Spark reads it back: a lake's Spark
reads are tested in tests/lake, and chispa compares DataFrames where a test builds them."""

from __future__ import annotations

import json
from collections.abc import Collection


def json_rows(table) -> list[str]:  # noqa: ANN001 - a pyarrow Table
    """Each row of ``table`` as JSON with sorted keys, sorted: two tables hold the same rows when these are equal."""
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in table.to_pylist())


def table_rows(lake, name: str, columns: list[str]) -> list[str]:  # noqa: ANN001 - a Lake
    """The ``columns`` of ``name`` as readers see it, as :func:`json_rows`."""
    return json_rows(lake.read_arrow(name, columns))


def assert_same_tables(got, want, tables, ignore: Collection[str] = ()) -> dict[str, int]:  # noqa: ANN001 - two Lakes, table names
    """Each of ``tables`` exists in both lakes or in neither, with the same columns, and holds the same
    rows in both (any order, duplicates counted; the columns ``ignore`` names left out: a run's own
    stamps); a mismatch names the table, the row counts and a row found on one side only. Returns the
    rows of each table that exists."""
    rows: dict[str, int] = {}
    for name in tables:
        assert got.exists(name) == want.exists(name), f"{name}: exists {got.exists(name)}, expected {want.exists(name)}"
        if not want.exists(name):
            continue
        columns = want.columns(name)  # read once per side: the check, then the rows
        assert got.columns(name) == columns, (name, got.columns(name), columns)
        keep = [c for c in columns if c not in ignore]
        a, b = table_rows(got, name, keep), table_rows(want, name, keep)
        if a != b:
            only_got, only_want = sorted(set(a) - set(b)), sorted(set(b) - set(a))
            raise AssertionError(f"{name}: {len(a)} rows, expected {len(b)}; "
                                 f"first row only expected: {only_want[:1]}; first row only got: {only_got[:1]}")
        rows[name] = len(b)
    return rows
