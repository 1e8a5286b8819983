"""``kraft-replay report``: the tiny cluster's page — headline figures equal to the gold tables, charts with
data drawn by the embedded plotly.js in a real headless Chromium (screenshot kept as a test artifact), one
file that needs no network; an empty lake says so; bad input is one line, exit 2."""

from __future__ import annotations

import json
import re

from pyspark.sql import functions as F

from kraft_replay.serve.cli import main

PLOTS_JS = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => (g.data || []).length)"


def test_report_of_the_tiny_cluster(gold_tiny, tmp_path, capsys, browser, artifacts) -> None:
    out = tmp_path / "nested" / "report.html"
    assert main(["report", "--lake", gold_tiny.root, "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [cluster] = doc["clusters"]
    facts = doc["facts"][cluster]
    lag = gold_tiny.read("cache_lag").where(F.col("cluster_id") == cluster)
    fen = gold_tiny.read("fencing_summary").where(F.col("cluster_id") == cluster)
    cons = gold_tiny.read("consistency_summary").where(F.col("cluster_id") == cluster)
    assert facts["max_offset_lag"] == lag.agg(F.max("offset_lag_max")).first()[0] > 0
    assert facts["max_time_lag_ms"] == lag.agg(F.max("time_lag_ms_max")).first()[0]
    assert facts["brokers"] == lag.select("broker_id").distinct().count()
    assert facts["stale_leader_accepts"] == fen.agg(F.sum("stale_leader_accepts")).first()[0] > 0
    assert facts["lost_writes"] == fen.agg(F.sum(F.col("lost_acks_0_1") + F.col("lost_acks_all"))).first()[0]
    assert facts["violations_avoided"] == cons.where("policy = 'fail'").agg(F.sum("violations_avoided")).first()[0]
    assert facts["feature_transitions"] == gold_tiny.read("feature_transitions").where(F.col("cluster_id") == cluster).count()

    page_html = out.read_text()
    assert not re.search(r"<script[^>]+src=", page_html), "the report must not load scripts from the network"
    assert f"cluster {cluster}" in page_html and "3.5-IV2 → 3.9-IV0" in page_html

    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.goto(out.as_uri())
        page.wait_for_function(f"() => ({PLOTS_JS})().length === 7", timeout=30_000)
        traces = page.evaluate(PLOTS_JS)
        assert all(n > 0 for n in traces), traces
        assert "no data yet" not in page.inner_text("body")
        shot = artifacts / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        page.close()


def test_empty_lake_and_bad_input(tmp_path, capsys) -> None:
    (tmp_path / "lake").mkdir()
    out = tmp_path / "r.html"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--out", str(out)]) == 0
    assert "no data yet" in out.read_text() and "0 cluster(s)" in capsys.readouterr().out
    assert main(["report", "--lake", str(tmp_path / "nolake"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kraft-replay report: error: no lake at") and len(err.strip().splitlines()) == 1
    assert main(["report", "--lake", str(tmp_path / "lake"), "--out", str(out), "--cluster-id", "nope"]) == 2
    assert "cluster 'nope' has no replay or outcome tables" in capsys.readouterr().err
