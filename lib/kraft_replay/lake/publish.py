"""Published versions: the state of the lake readers see, and runs whose commits become visible together.

Delta commits one table at a time; a job that writes several tables (ingest, generate) cannot make
its commits visible in one Delta transaction. Rule: visibility is by **published versions**. A small
lake-internal Delta table ``_published`` holds, per table, the version readers see (``table_name``,
``version``, ``run_id``, ``published_at``: one row per table ever published). :meth:`Lake.publish`
rewrites it in ONE commit: that commit is the atomic visibility point of every table it names.
The rewrite re-reads ``_published`` under an exclusive lock (``_published.lock`` in a local lake's
root) and changes only the rows of its own tables, so concurrent writers never lose each other's
publishes.

* Readers (``Lake.read`` without ``version``/``timestamp``, ``register_views``, ``tables``,
  ``read_stream``) read a table that has ever been published at its published version; a table
  never published is read at its head as before.
* A **run** is every commit between :meth:`Lake.start_run` and :meth:`Lake.publish`. Commits past a
  table's published version belong to a run that has not published (in flight, killed or failed).
  The lake assumes **one writer per table at a time** (writers of different tables run side by
  side: ``ingest --follow`` writes bronze while ``replay --mode stream`` writes silver and gold):
  when a run starts, any such commit of a table the run writes belongs to a dead run, and
  ``start_run`` rolls that table back to its published version (a Delta RESTORE), deletes
  the data files the dead commits added, and publishes the restore commit (same rows as before).
  The embedded backend's restore commit also sets every Delta ``txn`` app id the dead commits
  recorded back to its published value (-1 when it had none), so a rolled-back commit never makes
  its retry look "already committed"; delta-spark's RESTORE cannot do that, so callers inside a run
  use txn app ids unique to the run (ingest puts its run id in them).
* Inside a run, the first write to a table that was never published first publishes the heads of
  every such table of the run (their state before the run), so a killed first run is invisible too.
* Outside a run, a write to a published table (append, overwrite, merge, staged commit, compact,
  vacuum) is a run of its own: roll back, write, publish.

This module holds the pieces both backends share: the ``_published`` schema, the commit-log reading
a rollback needs (files and txn app ids of the dead commits) and the ``Rollback`` record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from kraft_replay.lake import files as _files

PUBLISHED = "_published"
#: lock file (in a local lake's root) serialising the rewrites of ``_published`` by concurrent writers
PUBLISHED_LOCK = "_published.lock"
PUBLISHED_SCHEMA = pa.schema([
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("version", pa.int64(), nullable=False),
    pa.field("run_id", pa.string()),
    pa.field("published_at", pa.timestamp("us", tz="UTC")),
])
# commitInfo key the embedded backend writes on its rollback (RESTORE) commits.
ROLLBACK_KEY = "kraft_replay.rollbackTo"


@dataclass(frozen=True)
class Rollback:
    """One table rolled back at the start of a run: its head before, the published version it was
    restored to, the restore commit's version and the data files of the dead commits deleted."""

    table: str
    head: int
    published: int
    version: int
    files_removed: int

    @property
    def commits(self) -> int:
        return self.head - self.published


def rollback_line(rollbacks: list[Rollback]) -> str | None:
    """One line saying what a run start rolled back (None when nothing)."""
    if not rollbacks:
        return None
    parts = ", ".join(f"{r.table} v{r.head}->v{r.published} ({r.commits} commit(s), {r.files_removed} file(s) removed)"
                      for r in rollbacks)
    return (f"rolled back the unpublished commits of an earlier run that did not finish (killed or failed; "
            f"readers never saw them): {parts}")


def commit_actions(loc: _files.Location, version: int) -> list[dict] | None:
    """The actions of commit ``version`` of the table at ``loc`` (None if its JSON file is gone)."""
    try:
        with loc.fs.open_input_stream(f"{loc.fs_path}/_delta_log/{version:020d}.json") as fh:
            text = fh.read().decode("utf-8")
    except (FileNotFoundError, OSError):
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class DeadCommits:
    """What commits ``(published, head]`` of a table did: data files added (paths relative to the
    table, decoded), txn app ids set, and whether every commit file could be read."""

    added: set[str]
    app_ids: set[str]
    complete: bool


def dead_commits(loc: _files.Location, after: int, head: int) -> DeadCommits:
    out = DeadCommits(set(), set(), True)
    for v in range(after + 1, head + 1):
        actions = commit_actions(loc, v)
        if actions is None:
            out.complete = False
            continue
        for a in actions:
            if "add" in a:
                out.added.add(unquote(a["add"]["path"]))
            elif "txn" in a:
                out.app_ids.add(a["txn"]["appId"])
    return out


def restore_target(actions: list[dict]) -> int | None:
    """The version a RESTORE commit (any Delta writer's, e.g. a lake rollback) restored its table to."""
    for a in actions:
        info = a.get("commitInfo")
        if not info:
            continue
        if ROLLBACK_KEY in info:
            return int(info[ROLLBACK_KEY])
        if str(info.get("operation", "")).upper() == "RESTORE":
            params = info.get("operationParameters") or {}
            raw = params.get("version")
            if raw is None:
                return None
            try:
                return int(json.loads(raw) if isinstance(raw, str) else raw)
            except (TypeError, ValueError):
                return None
    return None


def delete_files(loc: _files.Location, paths: set[str]) -> int:
    """Delete data files of a table (relative paths); missing ones are skipped. Returns how many went."""
    n = 0
    for rel in sorted(paths):
        if "://" in rel or rel.startswith("/"):
            continue  # absolute paths (shallow clones, other writers) are never ours to delete
        try:
            if loc.fs.get_file_info(f"{loc.fs_path}/{rel}").type == pafs.FileType.File:
                loc.fs.delete_file(f"{loc.fs_path}/{rel}")
                n += 1
        except (FileNotFoundError, OSError):
            pass
    return n
