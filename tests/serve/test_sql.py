"""``kraft-replay sql``: every table a view, ``<table>@vN`` time travel, the image functions
(``<table>_as_of``, ``<table>_broker_view``, ``broker_offset``) equal to the image API, the shell on
piped input, one-line errors; and every worked query of docs/tables.md runs on the tiny cluster."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from pathlib import Path

import pytest

from kraft_replay.replay.images import broker_offset, image, image_json
from kraft_replay.serve.cli import main
from kraft_replay.serve.cmd_sql import Session, SqlError, shell, statements

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tables.md"
CLUSTER = "tInYcLuStEr0000000000A"


def _sql(capsys, lake, *args: str) -> tuple[int, str, str]:
    code = main(["--profile", "test", "sql", "--lake", lake.root, *args])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_statement_table_json_and_time_travel(gold_tiny, capsys) -> None:
    code, out, _ = _sql(capsys, gold_tiny, "SELECT broker_id, count(*) AS buckets FROM cache_lag GROUP BY broker_id ORDER BY broker_id")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["broker_id", "buckets"] and re.fullmatch(r"\(\d+ rows\)", lines[-1])
    assert len(lines) - 3 == gold_tiny.read("cache_lag").select("broker_id").distinct().count()

    first = min(v for v in range(gold_tiny.version("metadata_log") + 1)
                if gold_tiny.read("metadata_log", version=v).count() > 0)
    code, out, _ = _sql(capsys, gold_tiny, "--json", f"SELECT count(*) AS n FROM metadata_log@v{first}; "
                        f"SELECT count(*) AS n FROM `metadata_log@v0`")
    assert code == 0
    docs = [json.loads(part) for part in re.split(r"(?<=\])\n(?=\[)", out.strip())]
    assert docs == [[{"n": gold_tiny.read("metadata_log", version=first).count()}], [{"n": 0}]]


@pytest.mark.parametrize("statement, message", [
    ("SELECT nope FROM cache_lag", "UNRESOLVED_COLUMN"),
    ("SELECT * FROM nosuch@v1", "no table 'nosuch' in the lake"),
    ("SELECT * FROM topics@v999", "table 'topics' has versions 0.."),
    ("SELEC 1", "PARSE_SYNTAX_ERROR"),
])
def test_errors_are_one_line(gold_tiny, capsys, statement, message) -> None:
    code, out, err = _sql(capsys, gold_tiny, statement)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and err.startswith("kraft-replay sql: error: "), err


def test_image_functions_equal_the_image_api(spark, gold_tiny) -> None:
    session = Session(spark, gold_tiny)
    assert {"partitions_as_of", "partitions_broker_view", "broker_offset"} <= set(session.functions)
    for at in (200, 3000):
        cols, rows = session.run(f"SELECT * FROM partitions_as_of('{CLUSTER}', {at})")
        want = image_json(image(gold_tiny, CLUSTER, offset=at, domains=["partitions"]), CLUSTER, at)["partitions"]
        key = lambda r: (r["topic_id"], r["partition_id"])  # noqa: E731
        assert sorted(({c: r[c] for c in want[0]} for r in rows), key=key) == sorted(want, key=key)
        assert {r["image_offset"] for r in rows} == {at}

    applied = gold_tiny.read("broker_applied").where(f"cluster_id = '{CLUSTER}' AND state = 'APPLIED'").orderBy("from_time").collect()
    iv = applied[len(applied) // 2]
    t = iv.from_time + dt.timedelta(milliseconds=1)
    _, [row] = session.run(f"SELECT broker_offset('{CLUSTER}', {iv.broker_id}, TIMESTAMP'{t.isoformat()}') AS o")
    assert row["o"] == broker_offset(gold_tiny, CLUSTER, iv.broker_id, t) == iv.applied_offset
    _, rows = session.run(f"SELECT topic_id, partition_id, leader, leader_epoch, image_offset FROM "
                          f"partitions_broker_view('{CLUSTER}', {iv.broker_id}, TIMESTAMP'{t.isoformat()}')")
    cache = image_json(image(gold_tiny, CLUSTER, time=t, broker=iv.broker_id, domains=["partitions"]), CLUSTER, iv.applied_offset)
    assert sorted((r["topic_id"], r["partition_id"], r["leader"], r["leader_epoch"]) for r in rows) == sorted(
        (p["topic_id"], p["partition_id"], p["leader"], p["leader_epoch"]) for p in cache["partitions"])
    assert rows and {r["image_offset"] for r in rows} == {iv.applied_offset}
    # before the broker's first sample its cache is unknown: no offset, no rows
    early = applied[0].from_time - dt.timedelta(days=1)
    _, [none] = session.run(f"SELECT broker_offset('{CLUSTER}', {iv.broker_id}, TIMESTAMP'{early.isoformat()}') AS o")
    assert none["o"] is None
    assert session.run(f"SELECT * FROM partitions_broker_view('{CLUSTER}', {iv.broker_id}, TIMESTAMP'{early.isoformat()}')")[1] == []
    with pytest.raises(SqlError, match="PARSE_SYNTAX_ERROR"):
        session.run("SELEC 1")


def test_shell_runs_piped_statements(spark, gold_tiny, capsys) -> None:
    session = Session(spark, gold_tiny)
    out = io.StringIO()
    script = "SELECT 1 AS a;\n\\tables\nSELECT count(*) AS n\n  FROM topics;\nSELECT 'x;y' AS s; SELECT nope;\nSELECT 2 AS b"
    assert shell(session, "csv", inp=io.StringIO(script), out=out) == 2  # one statement failed
    n = gold_tiny.read("topics").count()
    text = out.getvalue()
    assert text.startswith("a\n1\nacls\n") and f"n\n{n}\n" in text and "s\nx;y\n" in text and text.endswith("b\n2\n")
    assert "UNRESOLVED_COLUMN" in capsys.readouterr().err
    assert shell(session, "table", inp=io.StringIO("SELECT 1 AS a;"), out=io.StringIO()) == 0


def test_every_worked_query_in_the_tables_doc_runs(spark, gold_tiny) -> None:
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 4, "docs/tables.md has its worked queries in ```sql blocks"
    session = Session(spark, gold_tiny)
    for block in blocks:
        [statement] = statements(block)
        try:
            _, rows = session.run(statement)
        except SqlError as exc:
            pytest.fail(f"docs/tables.md query fails: {exc}\n{statement}")
        assert rows, f"docs/tables.md query returns no rows on the tiny cluster:\n{statement}"
