"""``kraft-replay live``: its supervisor runs the processes together (their lines prefixed with their
names), starts one that exits again and says so, and stops them all on Ctrl-C without a traceback;
the command builds the follower, stream and dashboard commands and refuses bad input in one line.
No Spark: the supervised processes here are small Python scripts."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

from kraft_replay.serve.cli import main
from kraft_replay.serve.cmd_live import Child, Supervisor, commands

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def test_a_process_that_exits_is_started_again_and_said(tmp_path: Path) -> None:
    lines: list[str] = []
    steady = Child("steady", [PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    crash = Child("crash", [PY, "-c", "print('boom', flush=True); raise SystemExit(3)"])
    sup = Supervisor([steady, crash], say=lines.append, backoff=0.2, grace=5)
    sup.run(until=lambda: crash.starts >= 3, tick=0.05)
    assert crash.exits[:2] == [3, 3] and steady.starts == 1
    assert "[steady] up" in lines and lines.count("[crash] boom") >= 2
    said = [ln for ln in lines if ln.startswith("kraft-replay live: crash exited")]
    assert said[0] == "kraft-replay live: crash exited with code 3; starting it again in 0.2 s"
    assert said[1].endswith("starting it again in 0.4 s")  # exits in a row wait longer
    assert steady.proc.poll() is not None  # stopped with the supervisor


def test_ctrl_c_stops_every_process_without_a_traceback(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    child = (f"import signal, sys, time\n"
             f"def bye(*_):\n    open({str(marker)!r}, 'a').write('x'); sys.exit(0)\n"
             f"signal.signal(signal.SIGINT, bye)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    script = (f"import sys\nfrom kraft_replay.serve.cmd_live import Child, Supervisor\n"
              f"kids = [Child(f'c{{i}}', [sys.executable, '-c', {child!r}]) for i in range(2)]\n"
              f"Supervisor(kids, say=lambda s: print(s, flush=True)).run(tick=0.05)\nprint('done', flush=True)\n")
    proc = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(ROOT / "lib")})
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line.strip())
        if sum(ln.endswith("] ready") for ln in seen) == 2:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "kraft-replay live: interrupted; stopping every process" in out and out.strip().endswith("done")
    assert "Traceback" not in err + out
    assert marker.read_text() == "xx"  # each child got its SIGINT and stopped cleanly


def test_the_commands_and_bad_input(tmp_path: Path, capsys) -> None:
    args = argparse.Namespace(node_dir=["/n"], lake="/l", metrics=["http://b:7071/metrics"], cluster_id="c",
                              interval=0.5, trigger=1.0, derive_every=30.0, dashboard=True, port=8060,
                              profile="local", backend=None, catch_up_records=None)
    got = {c.name: c.argv for c in commands(args)}
    assert list(got) == ["ingest", "metrics", "replay", "dashboard"]
    assert got["ingest"][got["ingest"].index("ingest"):] == ["ingest", "/n", "--lake", "/l", "--follow", "--interval",
                                                             "0.5", "--cluster-id", "c"]
    assert got["replay"][got["replay"].index("replay"):] == ["replay", "--lake", "/l", "--mode", "stream", "--trigger",
                                                             "1", "--derive-every", "30"]
    assert "http://b:7071/metrics" in got["metrics"] and got["dashboard"][-2:] == ["--port", "8060"]
    args.catch_up_records = 0
    assert {c.name: c.argv for c in commands(args)}["replay"][-2:] == ["--catch-up-records", "0"]
    args.metrics, args.dashboard = [], False
    assert [c.name for c in commands(args)] == ["ingest", "replay"]
    for argv, msg in ((["live", str(tmp_path / "none"), "--lake", str(tmp_path)], "no such node directory"),
                      (["live", str(tmp_path), "--lake", str(tmp_path), "--trigger", "0"], "--trigger must be > 0"),
                      (["live", str(tmp_path), "--lake", str(tmp_path), "--catch-up-records", "-1"],
                       "--catch-up-records must be >= 0")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err
