"""How the sequential rules turn their version dicts into a silver table (:func:`table_rows`): sorted by
the table's sort key in the order Python's ``sorted()`` with :func:`sort_tuple` gives (nulls first,
strings in code point order, ties kept in the order given), which the Arrow sort it uses must equal."""

from __future__ import annotations

import random

from kraft_replay.replay.schemas import SILVER_TABLES
from kraft_replay.replay.sequential import sort_tuple, table_rows


def _version(rng: random.Random, i: int) -> dict:
    pick = lambda *xs: rng.choice(xs)  # noqa: E731
    return {
        "cluster_id": pick("c1", "c2", "Ω-cluster", "ä"),
        "topic_id": pick("AAAA", "AAAb", "zz", "é", "日本", "a\u0301"),
        "partition_id": pick(0, 1, 2, 10),
        "topic_name": f"t{i}",  # the row's identity: ties must keep their order
        "replicas": [1, 2], "isr": [1], "removing_replicas": [], "adding_replicas": [],
        "leader": i, "leader_recovery_state": 0, "leader_epoch": 0, "partition_epoch": 0,
        "directories": None, "eligible_leader_replicas": [], "last_known_elr": [], "changed_fields": None,
        "deleted": False,
        "valid_from_offset": pick(0, 5, 7),
        "valid_to_offset": None, "valid_from_time": 1_000_000 * i, "valid_to_time": None,
        "record_offset": pick(None, 3, 5, 7),
        "record_type": "PARTITION_RECORD", "snapshot_end_offset": None,
    }


def test_table_rows_sorts_as_sorted_with_sort_tuple_does() -> None:
    rng = random.Random(47)
    rows = [_version(rng, i) for i in range(600)]
    keys = SILVER_TABLES["partitions"].sort_key
    expected = [r["topic_name"] for r in sorted(rows, key=lambda r: sort_tuple(r[c] for c in keys))]
    got = table_rows("partitions", rows)
    assert got.column("topic_name").to_pylist() == expected
    assert got.column("record_offset").null_count > 0  # nulls were among the keys sorted
    unsorted = table_rows("partitions", rows, sort=False)
    assert unsorted.column("topic_name").to_pylist() == [r["topic_name"] for r in rows]


def test_table_rows_takes_a_missing_column_as_null() -> None:
    rows = [{"cluster_id": "c", "offset": 3, "reason_code": "X", "message": "m"},
            {"cluster_id": "c", "offset": None, "reason_code": "Y", "message": "n", "entity": "e"}]
    got = table_rows("replay_anomalies", rows).to_pylist()
    assert [r["reason_code"] for r in got] == ["Y", "X"]  # the null offset first
    assert got[1]["entity"] is None and got[0]["entity"] == "e"


def test_a_silver_tables_entity_names_leave_changed_fields_out() -> None:
    spec = SILVER_TABLES["partitions"]
    assert "changed_fields" in spec.field_names and "changed_fields" not in spec.entity_names
    assert spec.entity_names == tuple(n for n in spec.field_names if n != "changed_fields")
    assert spec.field_names is spec.field_names  # computed once: each version's dict shares its key strings
    assert SILVER_TABLES["topics"].entity_names == SILVER_TABLES["topics"].field_names
