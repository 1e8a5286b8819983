"""``s3a://`` / ``s3n://`` inputs (Hadoop's S3 schemes, as Spark jobs name S3 paths) are read through
pyarrow's S3 filesystem. Here the ingest's URI resolution (``sources._from_uri``, which receives the
mapped ``s3://`` URI) is pointed at a local directory standing in for the bucket, so discovery,
checksums, planning and the decode tasks run their real code on ``s3a://`` paths."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyarrow import fs as pafs

from kraft_replay.ingest.bronze import decode_to_arrow
from kraft_replay.ingest.pipeline import _read_stats, decode_tasks
from kraft_replay.ingest.plan import plan_ranges, sha256_of
from kraft_replay.ingest import sources
from kraft_replay.ingest.sources import discover, pyarrow_uri

SEGMENT = "rjmfernandes__flink-on-prem__00000000000000000000.log"


def test_hadoop_s3_schemes_map_to_pyarrow_s3() -> None:
    assert pyarrow_uri("s3a://bucket/a/b.log") == "s3://bucket/a/b.log"
    assert pyarrow_uri("s3n://bucket/x") == "s3://bucket/x"
    assert pyarrow_uri("s3://bucket/x") == "s3://bucket/x" and pyarrow_uri("/local/s3a://x") == "/local/s3a://x"


def test_s3a_node_dir_is_discovered_and_decoded(tmp_path: Path, real_kraft_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = tmp_path / "buckets"
    part = bucket / "kraft-backups" / "node1" / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(real_kraft_dir / SEGMENT, part / "00000000000000000000.log")
    (part.parent / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=S3aCluster\n")
    seen: list[str] = []

    def from_uri(uri: str):  # noqa: ANN202 - stands in for S3: bucket/key under a local directory
        seen.append(uri)
        assert uri.startswith("s3://"), uri
        return pafs.SubTreeFileSystem(str(bucket), pafs.LocalFileSystem()), uri[len("s3://"):].rstrip("/")

    monkeypatch.setattr(sources, "_from_uri", from_uri)  # the one place sources hand a URI to pyarrow
    files, skipped = discover(["s3a://kraft-backups/node1"])
    assert [f.path for f in files] == ["s3a://kraft-backups/node1/__cluster_metadata-0/00000000000000000000.log"]
    assert files[0].cluster_id == "S3aCluster" and [p for p, _ in skipped] == ["s3a://kraft-backups/node1/meta.properties"]
    assert seen and all(u.startswith("s3://") for u in seen)
    data = (real_kraft_dir / SEGMENT).read_bytes()
    assert sha256_of(files[0].path) == sha256_of(str(real_kraft_dir / SEGMENT))
    tasks = plan_ranges(files, 300_000)
    assert len(tasks) == 5
    staging = str(tmp_path / "staging")
    rows = 0
    for t in tasks:
        row = {"task_id": t.task_id, "path": t.path, "source_file": t.source_file, "file_kind": t.file_kind,
               "cluster_id": t.cluster_id, "start": t.start, "end": t.end, "snapshot_end_offset": None,
               "snapshot_epoch": None, "aligned": t.aligned, "file_size": t.file_size}
        rows += sum(b.num_rows for b in decode_tasks([row], datetime.now(timezone.utc), staging))
    want = decode_to_arrow(data, cluster_id="c", source_file="x", file_kind="segment").log.num_rows
    assert rows == want == 17026
    stats = sorted(_read_stats(staging), key=lambda s: s["task_id"])
    assert all(a["end_pos"] == b["first_pos"] for a, b in zip(stats, stats[1:])) and stats[-1]["end_pos"] == len(data)
