"""``kraft-replay ingest`` as users run it: a subprocess, real Spark, real lake, exit codes.

The runs that prove the process (the console script's exit codes 0 and 2, ``--json`` alone on stdout,
stderr holding one error line and nothing else) are subprocesses; the re-run and the quarantine
summary, which check what the command prints on stdout and writes to the lake, run ``main`` in this
process on the session's Spark (a cold JVM each saved; the lake they read was written by another
process, or is new)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", *args],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def _main(capsys, *args: str) -> tuple[int, str, str]:  # noqa: ANN001 - pytest's capsys
    """``kraft-replay --profile test ARGS`` through the CLI's ``main`` in this process (the session's
    Spark): exit code, stdout, stderr."""
    from kraft_replay.serve.cli import main

    capsys.readouterr()
    rc = main(["--profile", "test", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_ingests_samples_then_is_idempotent(spark, tmp_path: Path, capsys) -> None:
    lake = str(tmp_path / "lake")
    out = _cli("ingest", str(ROOT / "data" / "samples" / "node1"), "--lake", lake, "--strict", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)  # --json: the summary as one object on stdout
    assert len(doc["files"]) == 4 and doc["rows"]["metadata_log"] > 0 and doc["quarantined"] == 0
    assert doc["records"] >= doc["rows"]["metadata_log"] and set(doc["published"]) >= {"metadata_log", "ingest_files"}
    assert "decoding 4 file(s)" in out.stderr  # progress lines
    # the re-run, in this process: it knows the lake only from the files the first process wrote
    rc, stdout, stderr = _main(capsys, "ingest", str(ROOT / "data" / "samples" / "node1"), "--lake", lake)
    assert rc == 0 and stdout.count("already ingested") == 4 and "metadata_log=0" in stdout, stderr[-2000:]


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


def _kraft_replay(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as users run it."""
    exe = Path(sys.executable).with_name("kraft-replay")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    return subprocess.run([str(exe), "--profile", "test", *args], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def _truncated_node(tmp_path: Path, real_kraft_dir: Path) -> tuple[Path, int, int]:
    """A node whose active segment was copied mid-write: its last batch is cut short."""
    from kraft_replay.codec.batch import scan_batch_headers

    data = (real_kraft_dir / "hiage__kafka-raft__kafka1__00000000000000000000.log").read_bytes()
    last = scan_batch_headers(data)[0][-1]
    cut = data[: last.position + last.size - 20]
    part = tmp_path / "node" / "__cluster_metadata-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(cut)
    return tmp_path / "node", last.position, len(cut) - last.position


def _table_rows(lake: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    return {t.name: DeltaTable(str(t)).to_pyarrow_table().num_rows for t in sorted(lake.iterdir())
            if (t / "_delta_log").is_dir()}


def test_cli_truncated_tail_exits_0_naming_the_quarantined_bytes(spark, tmp_path: Path, real_kraft_dir: Path,
                                                                 capsys) -> None:
    node, pos, nbytes = _truncated_node(tmp_path, real_kraft_dir)
    lake = tmp_path / "lake"
    rc, stdout, stderr = _main(capsys, "ingest", str(node), "--lake", str(lake))
    assert rc == 0, stderr[-2000:]
    assert f"quarantined: 1 range(s), {nbytes} bytes; see table ingest_quarantine" in stdout
    assert (f"00000000000000000000.log: 1 range(s), {nbytes} bytes quarantined, first at byte {pos} (TRUNCATED_BATCH); "
            f"offsets 0..2980 ingested") in stdout
    rows = _table_rows(lake)
    assert rows["metadata_log"] == 2980 and rows["ingest_quarantine"] == 1 and rows["ingest_files"] == 1


def test_cli_strict_truncated_tail_is_one_line_error_and_commits_nothing(tmp_path: Path, real_kraft_dir: Path) -> None:
    node, pos, nbytes = _truncated_node(tmp_path, real_kraft_dir)
    lake = tmp_path / "lake"
    out = _kraft_replay("ingest", str(node), "--lake", str(lake), "--strict")
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if "error" in line.lower()]
    assert errors == [f"kraft-replay ingest: error: --strict: 1 range(s), {nbytes} bytes could not be decoded (first: "
                      f"00000000000000000000.log at byte {pos}: TRUNCATED_BATCH); nothing committed. Re-run without "
                      "--strict to ingest the valid batches and quarantine the rest"]
    assert out.stdout == ""
    rows = _table_rows(lake)
    assert rows and set(rows.values()) == {0}  # the bronze tables exist, empty: nothing was committed
    assert not list(lake.rglob("*.parquet"))  # staged files were aborted too
