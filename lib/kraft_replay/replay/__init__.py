"""Replay: the bronze record tables (metadata_log, metadata_control, snapshot_records) replayed into
the versioned silver tables of the metadata image (facts §5, §6). Table contracts:
:mod:`kraft_replay.replay.schemas` and docs/design.md, "Silver tables (replay)".

* :func:`run_replay` — the batch job: every silver table written (``kraft-replay replay``);
* :func:`replay_tables` — the same as DataFrames, without writing (:mod:`.engine`);
* :func:`image` / :func:`image_json` — the image as of an offset or a time (``kraft-replay image``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_replay", "replay_tables", "image", "image_json", "as_of"]


def __getattr__(name: str) -> Any:  # lazy: importing the package does not import pyspark
    if name == "run_replay":
        from kraft_replay.replay.run import run_replay

        return run_replay
    if name == "replay_tables":
        from kraft_replay.replay.engine import replay_tables

        return replay_tables
    if name in ("image", "image_json", "as_of"):
        from kraft_replay.replay import images as _image

        return getattr(_image, name)
    raise AttributeError(name)
