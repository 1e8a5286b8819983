"""``kraft-replay live`` under kill -9: a node dir written while it runs (byte runs cut anywhere, so
polls meet half-written batches), its log follower and its stream killed with SIGKILL at random
points — one, the other, then both at once, each while the node is still being written (the writer
waits at a quarter of its runs for the kill before it, so that a slow machine's rounds keep up) — and
started again by the supervisor. At the end the bronze rows are exactly those one uninterrupted
follow of the finished files writes (no duplicate, no gap), the silver tables equal a whole
sequential replay of them, and every restarted stream went on from its state store checkpoint (the
cluster is new to the stream once, in the first micro-batch that brings its rows).
Real processes: the supervisor, its followers and their JVM."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.ingest.follow import FOLLOW_POSITIONS, follow
from kraft_replay.lake import Lake
from kraft_replay.replay.schemas import SILVER_TABLES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "oracle"))
sys.path.insert(0, str(ROOT / "tests" / "ingest"))

from replay_oracle import first_difference, replay  # noqa: E402
from test_ingest_follow import ROW_TABLES, _assert_same_rows  # noqa: E402


def _children(pid: int) -> dict[str, int]:
    """The supervisor's children by role (``ingest`` / ``replay``), from /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == pid:
            for role in (b"ingest", b"replay"):
                if role in argv:
                    out[role.decode()] = int(d.name)
    return out


def _write_node(src: Path, node: Path, rnd: random.Random, seconds: float, kills: list[threading.Event],
                holding: threading.Event) -> None:
    """The tiny cluster's files written into ``node`` over about ``seconds``: each log segment in byte
    runs cut anywhere, a snapshot once the log passed its end offset. Before the (k+1)-th quarter of
    the runs it waits for ``kills[k]`` (``holding`` set meanwhile), so every kill comes mid-write."""
    part = node / "__cluster_metadata-0"
    shutil.copy(src / "bootstrap.checkpoint", node / "bootstrap.checkpoint")
    names = sorted(p.name for p in (src / "__cluster_metadata-0").iterdir())
    logs = [n for n in names if n.endswith(".log")]
    snaps = sorted((int(n.split("-")[0]), n) for n in names if n.endswith(".checkpoint"))
    runs = [(n, chunk) for n in logs for chunk in _cuts((src / "__cluster_metadata-0" / n).read_bytes(), rnd)]
    for i, (n, chunk) in enumerate(runs):
        for k, kill in enumerate(kills):
            if i == (k + 1) * len(runs) // (len(kills) + 1) and not kill.is_set():
                holding.set()
                kill.wait(timeout=900)
                holding.clear()
        with open(part / n, "ab") as f:
            f.write(chunk)
        base = int(n.split(".")[0])
        while snaps and snaps[0][0] <= base:  # the segment holding a snapshot's end has begun
            shutil.copy(src / "__cluster_metadata-0" / snaps[0][1], part / snaps[0][1])
            snaps.pop(0)
        time.sleep(seconds / len(runs))
    for _, n in snaps:
        shutil.copy(src / "__cluster_metadata-0" / n, part / n)


def _cuts(data: bytes, rnd: random.Random) -> list[bytes]:
    at, out = 0, []
    while at < len(data):
        n = rnd.randint(1, 40_000)
        out.append(data[at:at + n])
        at += n
    return out


def _last_offset(lake: Lake, cid: str) -> int | None:
    try:
        rows = lake.read_arrow("log_commit", ["cluster_id", "last_offset"]).to_pylist()
    except Exception:  # noqa: BLE001 - not made or published yet
        return None
    return next((r["last_offset"] for r in rows if r["cluster_id"] == cid), None)


def test_kill_9_of_the_followers_at_random_points(tiny_generated, tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    cid = tiny_generated.cluster_id
    node, root = tmp_path / "node", tmp_path / "lake"
    (node / "__cluster_metadata-0").mkdir(parents=True)
    want_last = max(pc.max(tiny_generated.lake.read_arrow("metadata_log", ["offset"]).column("offset")).as_py(),
                    pc.max(tiny_generated.lake.read_arrow("metadata_control", ["offset"]).column("offset")).as_py())
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    sup = subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", "live", str(node),
                            "--lake", str(root), "--cluster-id", cid, "--interval", "0.5", "--trigger", "1",
                            "--derive-every", "3600"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sup.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    rounds = (["ingest"], ["replay"], ["ingest", "replay"])
    kills, holding = [threading.Event() for _ in rounds], threading.Event()
    writer = threading.Thread(target=_write_node, args=(tiny_generated.segments_dir, node, rnd, 80.0, kills, holding),
                              daemon=True)
    lake = Lake(str(root), None, backend="deltars")
    killed: list[str] = []

    def batches() -> int:
        return sum(1 for ln in list(lines) if ln.startswith("[replay] batch "))

    def stream_started() -> bool:  # the stream running now has started its query (each one says so once)
        return "".join(lines).count("[replay] replay stream: checkpoint ") == 1 + killed.count("replay")

    def wait(what, timeout: float = 240.0) -> None:  # noqa: ANN001 - a predicate
        end = time.monotonic() + timeout
        while not what():
            assert sup.poll() is None and time.monotonic() < end, f"seed {seed}: " + "".join(lines[-30:])
            time.sleep(0.2)

    try:
        writer.start()
        for roles, kill in zip(rounds, kills):
            # two micro-batches since the last kill (or the writer waiting for this one: nothing new comes),
            # and a stream to be killed past its start
            seen = batches()
            wait(lambda seen=seen, roles=roles: (batches() >= seen + 2 or holding.is_set())
                 and set(roles) <= set(_children(sup.pid)) and ("replay" not in roles or stream_started()))
            time.sleep(rnd.uniform(0.0, 3.0))  # a random point: mid-poll, mid-micro-batch, between them
            kids = _children(sup.pid)
            for role in roles:
                os.killpg(kids[role], signal.SIGKILL)
                killed.append(role)
            kill.set()
        # each death seen and the process started again, then everything written replayed
        wait(lambda: all("".join(lines).count(f"kraft-replay live: {r} was killed by SIGKILL") == killed.count(r)
                         for r in ("ingest", "replay")))
        writer.join()
        wait(lambda: _last_offset(lake, cid) == want_last, timeout=300.0)
    finally:
        for kill in kills:  # a failed wait: the writer stops holding
            kill.set()
        sup.send_signal(signal.SIGINT)
        sup.wait(timeout=120)
        reader.join(timeout=10)
    said = "".join(lines)
    assert sup.returncode == 0, f"seed {seed}: {said[-3000:]}"

    # bronze: what one uninterrupted follow of the finished files writes
    clean = Lake(str(tmp_path / "clean"), None, backend="deltars")
    follow(clean, [str(node)], cluster_id=cid, polls=1, say=lambda _: None)
    _assert_same_rows(lake, clean, (*ROW_TABLES, FOLLOW_POSITIONS))
    # silver: a whole sequential replay of that bronze
    bronze = [lake.read_arrow(t, lake.schema(t).fieldNames()) for t in ("metadata_log", "metadata_control", "snapshot_records")]
    want = replay(*bronze)
    for t in SILVER_TABLES:
        got = lake.read_arrow(t, SILVER_TABLES[t].schema.names).cast(SILVER_TABLES[t].schema)
        keys = [(f.name, "ascending") for f in got.schema if not pa.types.is_nested(f.type)]
        if not want[t].sort_by(keys).equals(got.sort_by(keys)):
            assert first_difference(t, want[t], got) is None, f"seed {seed}: {t}"
    # the restarted streams went on from their state store checkpoint: the cluster is new to the stream
    # once, in the first micro-batch that brought it rows (batch 0 brings none when the follower's first
    # poll made the tables from a half-written batch; a later leader's rewrite of the tail is replayed
    # whole as well, for another reason)
    first = [ln for ln in lines if "replayed whole (the cluster's first rows in this stream)" in ln]
    printed = [ln for ln in lines if ln.startswith("[replay] batch ")]
    assert len(first) == 1 and first[0] == printed[0], f"seed {seed}: {first} {printed[:3]}"
    assert stream_started(), f"seed {seed}: {said[-3000:]}"  # one query start per stream: none killed before it
