"""A non-editable install works from any directory: the wheel carries ``conf/`` and ``data/samples/``.

The wheel is built from this checkout, installed with ``--no-deps`` into a fresh virtualenv whose
dependencies come from the test environment's site-packages (a ``.pth`` line: nothing downloaded, and
the checkout's ``lib/`` is not on the path), and the README's quick start (``make demo`` and every command
after it) runs as written from an empty directory.
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


def _quick_start() -> tuple[list[str], str]:
    """The README's quick start: the lines of the ``bash`` block under its "## Quick start" heading, and
    the prose after it (up to the next heading)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()], section.split("```bash\n", 1)[1].split("```", 1)[1]


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written_from_an_empty_directory(installed, tmp_path):
    """The README's quick start, line by line, with the installed wheel's CLI in place of
    ``.venv/bin/kraft-replay``, from an empty directory: ``make demo`` (what the Makefile runs:
    generate, ingest, replay, outcomes, report of the demo scenario), the report it wrote, every
    command of the block (exit 0), the tables the demo published, and the dashboard the text after
    the block starts."""
    import shlex
    import time
    import urllib.request

    from deltalake import DeltaTable

    from kraft_replay.outcomes.run import OUTCOME_TABLES
    from kraft_replay.replay.schemas import SILVER_TABLES

    cwd = tmp_path / "empty"
    cwd.mkdir()
    venv_cli = ".venv/bin/kraft-replay"
    lines, after = _quick_start()
    assert shlex.split(lines[0], comments=True) == ["make", "demo"], lines[0]
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1].strip()
    assert recipe == "$(VENV)/bin/kraft-replay --lake ./lake demo", recipe
    ran = []
    for line in lines:
        argv = shlex.split(line, comments=True)
        if argv == ["make", "demo"]:
            argv = [venv_cli, "--lake", "./lake", "demo"]
        if argv[0] == "xdg-open":  # a file the demo wrote, opened in the user's browser
            assert len(argv) == 2 and (cwd / argv[1]).is_file(), line
            continue
        assert argv[0] == venv_cli, f"the README's quick start runs {argv[0]!r}: only make demo and the CLI are tested"
        proc = _run([str(installed / "kraft-replay"), *argv[1:]], cwd=cwd, timeout=900)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        ran.append((argv, proc))
    demo = ran[0][1]
    assert "demo OK" in demo.stdout
    for step in ("[1/5 generate]", "[2/5 ingest]", "[3/5 replay]", "[4/5 outcomes]", "[5/5 report]"):
        assert step in demo.stdout, step
    assert "cache lag" in (cwd / "lake" / "report.html").read_text().lower()
    assert len(ran) >= 4, "the quick start shows the demo and at least three commands on its lake"

    # the tables the demo published, as the quick start's `tables` listed them
    listing = next(proc.stdout for argv, proc in ran if "tables" in argv[1:3])
    tables = {m.group(1): {"rows": int(m.group(2))}
              for m in re.finditer(r"^(\S+)  version \d+  rows (\d+)  files", listing, re.M)}
    assert set(SILVER_TABLES) | set(OUTCOME_TABLES) | {"metadata_log", "cache_lag", "broker_applied"} <= set(tables)
    assert not any(name.startswith("_") for name in tables)  # the demo's scratch lake stays out of sight
    assert tables["ingest_quarantine"]["rows"] == 0
    # the log in the lake came from the node's files: as many records as the segments hold
    assert tables["metadata_log"]["rows"] == _log_records(cwd / "lake" / "_demo" / "node") > 0
    for name in ("partitions", "cache_lag", "consistency_outcomes", "fencing_outcomes", "feature_transitions"):
        assert tables[name]["rows"] > 0, name
    assert DeltaTable(str(cwd / "lake" / "cache_lag")).to_pyarrow_table().num_rows == tables["cache_lag"]["rows"]

    # the dashboard, as the text after the block starts it, answers on the address it names
    command = re.search(r"`(\.venv/bin/kraft-replay dashboard[^`]*)`", after).group(1)
    url = re.search(r"http://127\.0\.0\.1:\d+", after).group(0)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KRAFT_REPLAY_CONF", "VIRTUAL_ENV")}
    server = subprocess.Popen([str(installed / "kraft-replay"), *shlex.split(command)[1:]], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, page = time.time() + 60, None
        while page is None:
            assert server.poll() is None, server.stdout.read()[-3000:]
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    page = r.read().decode()
            except OSError:
                assert time.time() < deadline, f"{command}: nothing answers on {url} after 60 s"
                time.sleep(0.5)
        assert "kraft-replay" in page.lower()
    finally:
        server.terminate()
        server.wait(timeout=30)


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
