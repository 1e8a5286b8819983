"""Fuzz campaign against the decoder's promise (issue 15): mutated copies of every real Kafka file.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/fuzz.py [--inputs 1000000] [--seed 1] [--workers 2]
        [--files SUBSTRING ...] [--real DIR] [--quick]
    .venv/bin/python bench/fuzz.py --replay bench/out/fuzz/<class>.json

Each input is a window of 1-48 batches of a real segment, snapshot or bootstrap file mutated as an
attacker would (CRC-valid semantic mutations with the CRC-32C recomputed, byte flips, truncations,
inserted/deleted runs, extreme length/offset/count/timestamp fields; ``tests/fuzz/mutations.py``),
made deterministically from ``(seed, index)``, and checked by ``mutations.check``: no exception,
every declared record decoded or counted by a quarantine row, unframeable bytes quarantined, one
quarantine row per bad range and reason, no wrapped or negative values, and the production loop
(accelerated, split into pieces) == the reference decode (``accelerate=False``) — on a difference
the accelerated whole decode says whether the accelerators or the split broke (``--full``: every
input decoded all three ways). An input whose decode takes longer than ``--slow-ms`` is a ``slow``
failure.

Prints inputs tried, inputs per mutator, failures by class (0 expected) with one reproducer per class
saved under ``bench/out/fuzz/`` (``<class>.json``: the case, its problems, seed and index; ``.bin``:
the bytes), p50/p99/max of the decode time of an input (the accelerated production loop, all its
calls) and the peak RSS of a worker.
Exit 1 if anything failed. Not a timed test: speed is only reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

import mutations as mu  # noqa: E402

SHARED = Path(os.environ.get("KRAFT_REPLAY_SHARED", ROOT.parent / "shared"))
OUT = ROOT / "bench" / "out" / "fuzz"
CHUNK = 250  # inputs per worker task

_SOURCES: list[mu.Source] = []
_ARGS: dict = {}


def _init(real: str, files: list[str] | None, seed: int, slow_ms: float, full: bool) -> None:
    _SOURCES[:] = mu.load_sources(Path(real), files)
    _ARGS.update(seed=seed, slow=slow_ms / 1000.0, full=full)


_STEP = re.compile(r"^(?:batch \d+: ([a-z_]+):|raw ([a-z_]+):)")


def _run(span: tuple[int, int]) -> dict:
    """Inputs ``[a, b)``: their decode times, failures by class (first reproducer each) and mutators."""
    a, b = span
    times: list[float] = []
    fails: dict[str, list] = {}
    mutators: Counter = Counter()
    slowest = (0.0, -1)
    for i in range(a, b):
        case = mu.make_case(random.Random(f"{_ARGS['seed']}/{i}"), _SOURCES)
        for st in case.steps[1:]:
            m = _STEP.match(st)
            if m:
                mutators[m.group(1) or "raw " + m.group(2)] += 1
        t = []
        try:
            probs = mu.check(case, t, full=_ARGS["full"])
        except Exception as exc:  # noqa: BLE001 - a bug of the checker is reported, not fatal
            probs = [f"checker error: {type(exc).__name__}: {exc}"]
        if t:
            times.append(t[0])
            if t[0] > slowest[0]:
                slowest = (t[0], i)
            if t[0] > _ARGS["slow"]:
                probs.append(f"slow: decoding {len(case.buf)} bytes took {t[0] * 1000:.0f} ms")
        for cls in mu.classes(probs):
            f = fails.get(cls)
            if f is None:
                fails[cls] = [1, i, [p for p in probs if mu.problem_class(p) == cls][:5] + probs[:3], case.to_json()]
            else:
                f[0] += 1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return dict(n=b - a, times=np.asarray(times, dtype=np.float64), fails=fails, mutators=mutators, rss=rss,
                slowest=slowest)


def _slug(cls: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", cls.lower()).strip("-")


def _replay(path: Path) -> int:
    doc = json.loads(path.read_text())
    case = mu.Case.from_json(doc["case"])
    print(f"{path}: seed {doc.get('seed')} index {doc.get('index')}, {len(case.buf)} bytes of {case.source}")
    for st in case.steps:
        print(f"  step: {st}")
    probs = mu.check(case, full=True)
    for p in probs:
        print(f"  {p}")
    print("no problem" if not probs else f"{len(probs)} problems")
    return 1 if probs else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--files", nargs="*", default=None, help="only the real files whose names contain one of these")
    ap.add_argument("--real", type=Path, default=SHARED / "reference" / "real-kraft", help="directory of the real Kafka files")
    ap.add_argument("--quick", action="store_true", help="20,000 inputs (a smoke run)")
    ap.add_argument("--slow-ms", type=float, default=2000.0, help="an input decoding slower than this is a failure (class slow)")
    ap.add_argument("--full", action="store_true", help="decode every input all three ways (accelerated whole too)")
    ap.add_argument("--out", type=Path, default=OUT, help="where reproducers are saved")
    ap.add_argument("--replay", type=Path, default=None, help="re-check a saved reproducer and print its problems")
    args = ap.parse_args(argv)
    if args.replay:
        return _replay(args.replay)
    if not args.real.is_dir():
        print(f"fuzz: real Kafka files not found at {args.real}: put ../shared beside the project or pass --real DIR",
              file=sys.stderr)
        return 2
    n = 20_000 if args.quick else args.inputs
    sources = mu.load_sources(args.real, args.files)
    if not sources:
        print(f"fuzz: no segment/snapshot/bootstrap file in {args.real} matches {args.files}", file=sys.stderr)
        return 2
    print(f"fuzz: {n:,} inputs from {len(sources)} real files ({sum(len(s.data) for s in sources):,} bytes), seed {args.seed}, "
          f"{args.workers} workers, decoder {mu.DECODER_NAME}", flush=True)
    spans = [(a, min(n, a + CHUNK)) for a in range(0, n, CHUNK)]
    t0 = time.time()
    last = t0
    done = 0
    times: list[np.ndarray] = []
    fails: dict[str, list] = {}
    mutators: Counter = Counter()
    rss = 0
    slowest = (0.0, -1)
    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers, initializer=_init, initargs=(str(args.real), args.files, args.seed, args.slow_ms, args.full)) as pool:
        for r in pool.imap_unordered(_run, spans):
            done += r["n"]
            times.append(r["times"])
            mutators.update(r["mutators"])
            rss = max(rss, r["rss"])
            slowest = max(slowest, r["slowest"])
            for cls, f in r["fails"].items():
                g = fails.get(cls)
                if g is None:
                    fails[cls] = f
                else:
                    g[0] += f[0]
                    if f[1] < g[1]:
                        g[1:] = f[1:]
            now = time.time()
            if now - last >= 5 or done == n:
                last = now
                rate = done / (now - t0)
                bad = sum(f[0] for f in fails.values())
                print(f"fuzz: {done:,}/{n:,} inputs, {rate:,.0f}/s, failing inputs {bad:,}, "
                      f"eta {(n - done) / rate:,.0f} s", flush=True)
    elapsed = time.time() - t0
    t = np.concatenate(times) * 1000 if times else np.zeros(1)
    print(f"\ninputs tried: {done:,} in {elapsed:,.0f} s ({done / elapsed:,.0f} inputs/s on {args.workers} workers)")
    print("mutations applied (semantic ones by name, raw ones as \"raw <name>\"):")
    for name, k in sorted(mutators.items(), key=lambda kv: -kv[1]):
        print(f"  {name:20s} {k:>10,}")
    print(f"decode time of an input (accelerated production loop): p50 {np.percentile(t, 50):.2f} ms, p99 {np.percentile(t, 99):.2f} ms, "
          f"max {t.max():.1f} ms (input {slowest[1]})")
    print(f"peak RSS of a worker: {rss / 2**20:,.0f} MiB")
    if not fails:
        print("failures by class: none")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print("failures by class (inputs; first reproducer):")
    for cls, (k, i, probs, case_json) in sorted(fails.items(), key=lambda kv: -kv[1][0]):
        path = args.out / f"{_slug(cls)}.json"
        path.write_text(json.dumps({"class": cls, "seed": args.seed, "index": i, "problems": probs, "case": case_json},
                                   indent=1))
        path.with_suffix(".bin").write_bytes(mu.Case.from_json(case_json).buf)
        print(f"  {cls}: {k:,}  -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} (input {i})")
        print(f"      {probs[0][:300]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
