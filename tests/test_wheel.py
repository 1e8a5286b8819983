"""A non-editable install works from any directory: the wheel carries ``conf/`` and ``data/samples/``.

The wheel is built from this checkout, installed with ``--no-deps`` into a fresh virtualenv whose
dependencies come from the test environment's site-packages (a ``.pth`` line: nothing downloaded, and
the checkout's ``lib/`` is not on the path), and ``kraft-replay demo`` runs from an empty directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRAFT_REPLAY_CONF", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; returns its bin/ directory."""
    base = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(ROOT)], cwd=base)
    assert built.returncode == 0, built.stderr[-3000:]
    wheels = list((base / "dist").glob("kraft_replay-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    site = next(env_dir.glob("lib/python3*/site-packages"))
    (site / "test-env-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    py = env_dir / "bin" / "python"
    inst = _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheels[0])], cwd=base)
    assert inst.returncode == 0, inst.stderr[-3000:]
    return env_dir / "bin"


def test_the_wheel_carries_profiles_scenarios_policies_and_samples(installed, tmp_path):
    probe = _run([str(installed / "python"), "-c",
                  "import json, kraft_replay, kraft_replay.config as c, kraft_replay.resources as r;"
                  "print(json.dumps([kraft_replay.__file__, str(c.CONF_DIR), str(r.samples_dir()),"
                  " sorted(p.name for p in c.CONF_DIR.rglob('*.yaml'))]))"], cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-3000:]
    module, conf, samples, yamls = json.loads(probe.stdout)
    venv_dir = str(installed.parent)
    assert module.startswith(venv_dir) and conf.startswith(venv_dir) and samples.startswith(venv_dir), (module, conf, samples)
    shipped = sorted(p.name for p in (ROOT / "conf").rglob("*.yaml"))
    assert yamls == shipped
    assert (Path(samples) / "node1" / "__cluster_metadata-0").is_dir()

    version = _run([str(installed / "kraft-replay"), "--version"], cwd=tmp_path)
    assert version.returncode == 0 and re.fullmatch(r"kraft-replay \d+\.\d+\.\d+\S*\n", version.stdout), version


@pytest.mark.slow
def test_demo_then_tables_from_an_empty_directory(installed, tmp_path):
    """The installed CLI's demo on the tiny scenario, from an empty directory: generate, ingest, replay,
    outcomes and report, then the tables it published and the report it wrote."""
    from deltalake import DeltaTable

    from kraft_replay.outcomes.run import OUTCOME_TABLES
    from kraft_replay.replay.schemas import SILVER_TABLES

    cwd = tmp_path / "empty"
    cwd.mkdir()
    cli = [str(installed / "kraft-replay"), "--profile", "test"]
    demo = _run([*cli, "demo", "--lake", "lake", "--scenario", "tiny"], cwd=cwd, timeout=900)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert "demo OK" in out
    for step in ("[1/5 generate]", "[2/5 ingest]", "[3/5 replay]", "[4/5 outcomes]", "[5/5 report]"):
        assert step in out, step
    assert f"kraft-replay dashboard --lake {cwd / 'lake'}" in out
    report = cwd / "lake" / "report.html"
    assert report.is_file() and "cache lag" in report.read_text().lower()

    listing = _run([*cli, "tables", "--lake", "lake", "--json"], cwd=cwd)
    assert listing.returncode == 0, listing.stderr[-3000:]
    tables = {t["name"]: t for t in json.loads(listing.stdout)}
    assert set(SILVER_TABLES) | set(OUTCOME_TABLES) | {"metadata_log", "cache_lag", "broker_applied"} <= set(tables)
    assert not any(name.startswith("_") for name in tables)  # the demo's scratch lake stays out of sight
    assert tables["ingest_quarantine"]["rows"] == 0
    # the log in the lake came from the node's files: as many records as the segments hold
    assert tables["metadata_log"]["rows"] == _log_records(cwd / "lake" / "_demo" / "node") > 0
    for name in ("partitions", "cache_lag", "consistency_outcomes", "fencing_outcomes", "feature_transitions"):
        assert tables[name]["rows"] > 0, name
    assert DeltaTable(str(cwd / "lake" / "cache_lag")).to_pyarrow_table().num_rows == tables["cache_lag"]["rows"]


def _log_records(node: Path) -> int:
    """Data records in a node's log segments, counted by the codec (not by the pipeline)."""
    from kraft_replay.codec.batch import iter_batches

    total = 0
    for seg in sorted((node / "__cluster_metadata-0").glob("*.log")):
        for item in iter_batches(seg.read_bytes()):
            assert not getattr(item, "reason_code", None), f"{seg.name} has a corrupt batch"
            if not item.is_control:
                total += len(item.records)
    return total
