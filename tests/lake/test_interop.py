"""Interop with an independent Delta implementation (delta-rs's own reader and writer)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
from chispa import assert_df_equality
from deltalake import DeltaTable, write_deltalake

from lake_helpers import EVENTS, events
from kraft_replay.lake import Lake


def test_embedded_tables_read_by_deltalake(spark, lake, events_table):
    df = events(spark, 0, 700)
    lake.append(events_table, df)
    lake.merge(events_table, spark.createDataFrame([(5, "five", None, 2)], EVENTS), keys=["id"])
    lake.overwrite(events_table, events(spark, 2000, 2010).where("part = 1"), replace_where="part = 1")
    table = DeltaTable(f"{lake.root}/{events_table}").to_pyarrow_table()
    ours = lake.read(events_table)
    assert table.num_rows == ours.count()
    theirs = spark.createDataFrame(table.to_pandas(), ours.schema)
    assert_df_equality(theirs, ours, ignore_row_order=True, ignore_nullable=True)
    assert table.filter(pa.compute.equal(table["id"], 5))["name"].to_pylist() == ["five"]


def test_deltalake_tables_read_by_embedded_backend(spark, tmp_path):
    root = tmp_path / "lake"
    frame = pd.DataFrame({
        "k": [1, 2, 3, 4, 5, 6],
        "s": ["a", "b b", "c:c", None, "e", "f"],
        "when": pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", None, "2024-01-06"], utc=True),
        "p": ["x", "y", "x", "y", "z w", "x"],
    })
    write_deltalake(str(root / "foreign"), frame, partition_by=["p"])
    write_deltalake(str(root / "foreign"), frame.assign(k=frame.k + 10), mode="append")
    lake = Lake(str(root), spark, backend="deltars", target_file_rows=1000)
    got = lake.read("foreign")
    assert got.count() == 12
    assert got.columns == ["k", "s", "when", "p"]
    rows = {r.k: r for r in got.collect()}
    assert rows[5].p == "z w" and rows[3].s == "c:c" and rows[4].s is None
    assert rows[2].when == dt.datetime(2024, 1, 2)
    assert lake.read("foreign", version=0).count() == 6
    assert got.where("p = 'x'").count() == 6
    # Our backend can keep writing the foreign table, and delta-rs still reads it.
    lake.append("foreign", got.where("k < 3"))
    assert DeltaTable(str(root / "foreign")).to_pyarrow_table().num_rows == 14
    assert lake.read("foreign").count() == 14


def test_tables_needing_unsupported_reader_features_are_refused(spark, tmp_path):
    import pytest

    from kraft_replay.lake import LakeError

    frame = pd.DataFrame({"k": [1, 2, 3]})
    write_deltalake(str(tmp_path / "dv"), frame, configuration={"delta.enableDeletionVectors": "true"})
    assert "deletionVectors" in (DeltaTable(str(tmp_path / "dv")).protocol().reader_features or [])
    lake = Lake(str(tmp_path), spark, backend="deltars")
    with pytest.raises(LakeError) as exc:
        lake.read("dv")
    msg = str(exc.value)
    assert "\n" not in msg and "deletionVectors" in msg and "delta-spark" in msg
