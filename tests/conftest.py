"""Shared fixtures: one SparkSession for the whole test session, tmp lakes, the reference dir, and the
``tiny`` scenario generated once, end to end through the CLI (``kraft-replay generate --scenario tiny
--lake DIR --segments-out DIR`` as a subprocess), into a temporary lake the tests open in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KRAFT_REPLAY_SHARED", ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"


@pytest.fixture(scope="session")
def spark():
    from kraft_replay.spark import get_spark

    session = get_spark("test")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference (third-party data; never copied into the project)."""
    if not (REFERENCE / "kafka-kraft-facts.md").is_file():
        pytest.skip(f"reference data not found at {REFERENCE}: clone the project with ../shared beside it")
    return REFERENCE


@pytest.fixture(scope="session")
def schemas_dir(reference_dir: Path) -> Path:
    return reference_dir / "kafka-metadata-schemas"


@pytest.fixture(scope="session")
def real_kraft_dir(reference_dir: Path) -> Path:
    return reference_dir / "real-kraft"

@dataclass
class CliResult:
    """What the tests need of a generate run: the plan (rebuilt: planning is deterministic) and the row
    counts the CLI printed."""

    plan: object
    rows: dict[str, int] = field(default_factory=dict)


@dataclass
class Generated:
    lake: object
    result: CliResult
    segments_dir: Path
    cluster_id: str
    lake_dir: Path
    process: subprocess.CompletedProcess


def run_generate_cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("kraft-replay")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "kraft_replay.serve.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    return subprocess.run([*cmd, "generate", *args], capture_output=True, text=True, env=env, timeout=1200, cwd=ROOT)


@pytest.fixture(scope="session")
def tiny_generated(spark, tmp_path_factory) -> Generated:
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.lake import Lake

    root = tmp_path_factory.mktemp("gen")
    proc = run_generate_cli("--scenario", "tiny", "--lake", str(root / "lake"), "--segments-out", str(root / "segments"),
                            "--json")
    assert proc.returncode == 0, f"kraft-replay generate failed ({proc.returncode}): {proc.stderr[-3000:]}"
    doc = json.loads(proc.stdout)  # --json: the summary is the only thing on stdout
    assert (doc["scenario"], doc["lake"], len(doc["segment_files"])) == ("tiny", str(root / "lake"), 9), doc
    rows = doc["rows"]
    lake = Lake(str(root / "lake"), spark, backend="deltars")
    sc = load_scenario("tiny")
    return Generated(lake, CliResult(build_plan(sc), rows), root / "segments", sc.cluster_id, root / "lake", proc)


# --- the tiny cluster replayed (outcome, SQL and report tests) ---------------------------------------

@pytest.fixture(scope="session")
def replayed_tiny(spark, tiny_generated, tmp_path_factory) -> "Lake":  # noqa: F821 - kraft_replay.lake.Lake
    """The ``tiny`` scenario (the session's CLI-generated lake, copied) replayed in-process, once."""
    import shutil

    from kraft_replay.lake import Lake
    from kraft_replay.replay import run_replay

    root = tmp_path_factory.mktemp("replayed-tiny") / "lake"
    shutil.copytree(tiny_generated.lake_dir, root)
    lk = Lake(str(root), spark, backend="deltars")
    run_replay(spark, lk, say=lambda _: None)
    return lk


@dataclass
class GoldRun:
    lake: object
    outcomes_stdout: str  # what ``kraft-replay outcomes`` printed


@pytest.fixture(scope="session")
def gold_tiny_run(spark, replayed_tiny, tmp_path_factory) -> GoldRun:
    """A copy of ``replayed_tiny`` with every gold table written with the defaults: the outcomes by
    ``kraft-replay outcomes`` (default policy; its stdout kept) and ``cache_lag`` (1 s buckets). Tests
    that rewrite ``replayed_tiny``'s gold tables with other settings do not reach this copy; it is
    read only."""
    import contextlib
    import io
    import shutil

    from kraft_replay.lake import Lake
    from kraft_replay.outcomes.cache_lag import write_cache_lag
    from kraft_replay.serve.cli import main

    root = tmp_path_factory.mktemp("gold-tiny") / "lake"
    shutil.copytree(replayed_tiny.root, root)
    lake = Lake(str(root), spark, backend="deltars")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--profile", "test", "outcomes", "--lake", lake.root]) == 0
    clusters = [r.cluster_id for r in lake.read("log_commit").select("cluster_id").distinct().collect()]
    write_cache_lag(lake, clusters, say=lambda _: None)
    return GoldRun(lake, out.getvalue())


@pytest.fixture(scope="session")
def gold_tiny(gold_tiny_run) -> "Lake":  # noqa: F821 - kraft_replay.lake.Lake
    """The lake of :func:`gold_tiny_run`: replayed tiny cluster with every gold table (read only)."""
    return gold_tiny_run.lake


# --- the browser tests: Debian's chromium driven by playwright, one browser for the test run --------

CHROMIUM = os.environ.get("KRAFT_REPLAY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (``make test`` installs Debian's chromium when missing; never skipped)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests need Debian's chromium (tools/ensure_chromium.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where tests leave screenshots for people to look at (``$KRAFT_REPLAY_ARTIFACTS``, else .artifacts/)."""
    path = Path(os.environ.get("KRAFT_REPLAY_ARTIFACTS", ROOT / ".artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path
