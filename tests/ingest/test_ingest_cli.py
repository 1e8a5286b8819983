"""``kraft-replay ingest`` as users run it: a subprocess, real Spark, real lake, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def test_cli_ingests_samples_then_is_idempotent(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    out = _cli("ingest", str(ROOT / "data" / "samples" / "node1"), "--lake", lake, "--strict")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "4 file(s)" in out.stdout and "metadata_log=" in out.stdout
    assert "decoding 4 file(s)" in out.stderr  # progress lines
    again = _cli("ingest", str(ROOT / "data" / "samples" / "node1"), "--lake", lake)
    assert again.returncode == 0 and again.stdout.count("already ingested") == 4 and "metadata_log=0" in again.stdout


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    out = _cli("ingest", str(tmp_path / "nope"), "--lake", str(tmp_path / "lake"))
    assert out.returncode == 2
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert err == [f"kraft-replay ingest: error: {tmp_path / 'nope'}: no such file or directory; check the path"]


def test_job_entry_point_takes_the_same_arguments(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ingest_job", ROOT / "jobs" / "ingest.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)  # type: ignore[union-attr]
    assert job.to_cli_argv(["a", "--profile", "test", "--lake", "L", "--backend=deltars", "--strict"]) == [
        "--profile", "test", "--backend=deltars", "ingest", "a", "--lake", "L", "--strict"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    out = subprocess.run([sys.executable, str(ROOT / "jobs" / "ingest.py"), str(tmp_path / "missing"), "--lake",
                          str(tmp_path / "lake"), "--profile", "test"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "no such file or directory" in out.stderr
