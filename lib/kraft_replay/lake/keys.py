"""The lake's fingerprint key, and whether the lake holds credential material in the clear.

Rules:

* Every lake has one secret key for keyed fingerprints (HMAC-SHA-256) of the values it must not hold
  in the clear. It is kept **outside the tables**: for a local lake in ``<lake>/_keys/fingerprint.key``
  (64 hex digits; the directory mode 0700, the file 0600), made at the first write that needs it; for
  a lake on an object store (no file modes there) from the environment variable
  :data:`KEY_ENV` (64 hex digits), which also overrides the file of a local lake. Fingerprints made
  under one key can be compared with each other only: a lake copied with its ``_keys/`` keeps
  comparing equal, another lake's do not.
* Whether the lake holds that material in the clear is recorded in the lake itself, in
  ``<lake>/_secrets.json`` (``{"secrets": "fingerprinted" | "clear", "updated_at": ..., "runs": [...]}``):
  each writing run records how it wrote (a run that keeps secrets turns the lake ``clear``; only
  ``kraft-replay redact`` turns it back). Readers (``sql``, ``report``, ``dashboard``) warn on a clear
  lake (:func:`clear_secrets_warning`).
"""

from __future__ import annotations

import json
import os
import secrets as _random
from datetime import datetime, timezone

import pyarrow.fs as pafs

from kraft_replay.lake.errors import InvalidArgumentError
from kraft_replay.lake.files import Location, table_dirs

__all__ = ["KEY_ENV", "KEY_DIR", "KEY_FILE", "SECRETS_FILE", "lake_key", "record_secrets", "secrets_state",
           "clear_secrets_warning"]

KEY_ENV = "KRAFT_REPLAY_LAKE_KEY"
KEY_DIR = "_keys"
KEY_FILE = "fingerprint.key"
SECRETS_FILE = "_secrets.json"
FINGERPRINTED, CLEAR = "fingerprinted", "clear"


def _parse_key(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise InvalidArgumentError(f"{where} must hold the lake key as 64 hex digits (make one with "
                                   f"`python -c 'import secrets; print(secrets.token_hex(32))'`)")
    return key


def lake_key(root: str, create: bool = True) -> bytes:
    """The fingerprint key of the lake at ``root`` (32 bytes): ``$KRAFT_REPLAY_LAKE_KEY``, else the
    local key file, made (``create``) when missing. One-line errors: an object-store lake without the
    variable, a key file others can read, a malformed key."""
    env = os.environ.get(KEY_ENV)
    if env:
        return _parse_key(env, f"${KEY_ENV}")
    loc = Location.of(root)
    if not isinstance(loc.fs, pafs.LocalFileSystem):
        raise InvalidArgumentError(
            f"lake {root} is on an object store, where no key file is kept: set ${KEY_ENV} to the lake's fingerprint "
            f"key (64 hex digits; keep it as you keep the store's credentials, the same value for every run on this lake)")
    directory = os.path.join(loc.fs_path, KEY_DIR)
    path = os.path.join(directory, KEY_FILE)
    if os.path.exists(path):
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            raise InvalidArgumentError(f"lake key {path} is readable by others (mode {mode:o}): chmod 600 {path}")
        with open(path, encoding="ascii") as fh:
            return _parse_key(fh.read(), f"lake key file {path}")
    if not create:
        raise InvalidArgumentError(f"lake {root} has no fingerprint key ({path}); set ${KEY_ENV} or run ingest first")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(_random.token_hex(32) + "\n")
    try:
        os.link(tmp, path)          # never replaces a key another writer made meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    with open(path, encoding="ascii") as fh:
        return _parse_key(fh.read(), f"lake key file {path}")


def secrets_state(root: str) -> dict | None:
    """The lake's ``_secrets.json`` record (None when it has none: a lake no run of this version wrote)."""
    loc = Location.of(root)
    try:
        with loc.fs.open_input_stream(f"{loc.fs_path}/{SECRETS_FILE}") as fh:
            return json.loads(fh.read().decode("utf-8"))
    except (FileNotFoundError, OSError, ValueError):
        return None


def record_secrets(root: str, run_id: str, keep: bool, command: str) -> dict:
    """Record how run ``run_id`` (``command``) wrote: fingerprinted, or in the clear (``keep``). A lake
    once clear stays clear until ``redact`` records ``keep=False`` with ``command="redact"``."""
    old = secrets_state(root) or {}
    clear = keep or (old.get("secrets") == CLEAR and command != "redact")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    runs = (old.get("runs") or [])[-49:] + [{"run_id": run_id, "command": command, "kept_secrets": keep, "at": now}]
    doc = {"secrets": CLEAR if clear else FINGERPRINTED, "updated_at": now, "runs": runs}
    loc = Location.of(root)
    loc.fs.create_dir(loc.fs_path, recursive=True)
    tmp = f"{loc.fs_path}/{SECRETS_FILE}.{run_id}.tmp"
    with loc.fs.open_output_stream(tmp) as fh:
        fh.write(json.dumps(doc, indent=1).encode("utf-8"))
    loc.fs.move(tmp, f"{loc.fs_path}/{SECRETS_FILE}")
    return doc


#: the bronze tables a lake written before fingerprinting holds credentials in (the silver ones come from them)
_CREDENTIAL_TABLES = ("metadata_log", "snapshot_records")


def clear_secrets_warning(root: str) -> str | None:
    """One line for readers of a lake that holds credential material in the clear, else None: a lake
    ingested with ``--keep-secrets``, or one whose log tables were written before fingerprinting (no
    ``_secrets.json`` beside them: no run of this version wrote it, so every value is as Kafka stored it)."""
    state = secrets_state(root)
    if state is None:
        if not set(_CREDENTIAL_TABLES) & set(table_dirs(root) or ()):
            return None
        return (f"warning: lake {root} was written before credentials were fingerprinted and may hold SCRAM credentials "
                f"and sensitive config values in the clear; `kraft-replay redact --lake {root}` fingerprints them")
    if state.get("secrets") != CLEAR:
        return None
    return (f"warning: lake {root} holds SCRAM credentials and sensitive config values in the clear (ingested with "
            f"--keep-secrets); `kraft-replay redact --lake {root}` fingerprints them")
