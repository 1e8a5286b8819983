"""Credential material of the metadata log replaced by keyed fingerprints, on Arrow batches of records.

Rules (kafka-kraft-facts §12):

* ``UserScramCredentialRecord`` (api key 11): ``salt``, ``stored_key`` and ``server_key`` are key
  material (salt + stored key allow an offline dictionary attack, the server key lets one pose as the
  server). Each is replaced by its fingerprint; ``iterations``, ``name`` and ``mechanism`` are kept —
  what Kafka's own record redactor prints, with a fingerprint where it prints ``(redacted)``.
* ``ConfigRecord`` (api key 4): the value of a **sensitive** config is replaced by its fingerprint (a
  null value, a deletion, stays null). A config is sensitive unless Kafka defines its name for the
  record's resource type with a type other than PASSWORD (:func:`config_is_sensitive`): PASSWORD-type
  configs (``ssl.keystore.password``, ``sasl.jaas.config``, ...), their ``listener.name.<l>.[<mech>.]``
  prefixed forms (not defined literally), names Kafka does not define and every config of a resource
  type Kafka has no definitions for are all sensitive, as Kafka's config schema treats them. The
  defined, non-sensitive names are the data file ``kafka_config_names.txt`` (its header names the
  Kafka release they come from).
* The fingerprint is HMAC-SHA-256 under the lake's key (:mod:`kraft_replay.lake.keys`) of the value's
  bytes (a string's UTF-8): equal values give equal fingerprints within one lake, and nothing about a
  value can be learnt from it without the key. It names itself: a bytes field holds the ASCII bytes
  ``hmac-sha256:`` and the 32-byte digest (44 bytes, same column type), a config value the text
  ``hmac-sha256:<64 hex digits>`` (:data:`CONFIG_PREFIX`). A value that already has that form is kept,
  so redaction is idempotent: a lake redacted twice, or fed records a generator or another lake
  already fingerprinted, holds each fingerprint once.
* ``payload_json`` of a redacted row is rendered again from the redacted payload (the dump tool's
  rendering: the SCRAM fields print as the base64 of their digests), so no column holds the value.

:func:`redact_records` applies this to any Arrow batch with the record columns (``api_key``,
``record_version``, ``config``, ``user_scram_credential``, ``payload_json``): the decoder's data
records, every bronze record table, the generator's rows. Only the rows of those two record types are
touched; a batch without them is returned as it is.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from importlib import resources

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CONFIG",
    "BYTES_PREFIX",
    "CONFIG_PREFIX",
    "SCRAM",
    "SCRAM_FIELDS",
    "config_is_sensitive",
    "defined_config_names",
    "fingerprint",
    "fingerprint_text",
    "is_fingerprint",
    "redact_records",
]

CONFIG = 4                 # ConfigRecord
SCRAM = 11                 # UserScramCredentialRecord
SCRAM_FIELDS = ("salt", "stored_key", "server_key")
#: a fingerprinted config value: this prefix and the digest in lower-case hex
CONFIG_PREFIX = "hmac-sha256:"
#: a fingerprinted bytes field: these bytes and the 32-byte digest
BYTES_PREFIX = CONFIG_PREFIX.encode("ascii")
_NAMES_FILE = "kafka_config_names.txt"


@functools.lru_cache(maxsize=1)
def defined_config_names() -> dict[int, frozenset[str]]:
    """Config names Kafka defines with a non-sensitive type, per ConfigResource type id (the data file)."""
    text = resources.files("kraft_replay.codec").joinpath(_NAMES_FILE).read_text(encoding="utf-8")
    out: dict[int, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = out.setdefault(int(line.strip("[]").split()[-1]), set())
        elif current is not None:
            current.add(line)
    return {k: frozenset(v) for k, v in out.items()}


def config_is_sensitive(resource_type: int | None, name: str | None) -> bool:
    """Facts §12: sensitive unless Kafka defines ``name`` for ``resource_type`` with a non-sensitive
    type; an undefined name, a listener-prefixed form or a resource type without definitions is
    sensitive."""
    if name is None or resource_type is None:
        return True
    return name not in defined_config_names().get(int(resource_type), frozenset())


def fingerprint(key: bytes, value: bytes) -> bytes:
    """The keyed fingerprint of a bytes value as stored in its place: :data:`BYTES_PREFIX` and
    HMAC-SHA-256 under the lake key (a value already of that form is returned as it is)."""
    if is_fingerprint(value):
        return value
    return BYTES_PREFIX + hmac.new(key, value, hashlib.sha256).digest()


def fingerprint_text(key: bytes, value: str) -> str:
    """The fingerprint of a config value as the text stored in its place (kept when it is one)."""
    if is_fingerprint(value):
        return value
    return CONFIG_PREFIX + hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()


def is_fingerprint(value: bytes | str | None) -> bool:
    """Whether ``value`` is a fingerprint of this module (its prefix and a digest of the right size)."""
    if isinstance(value, bytes):
        return len(value) == len(BYTES_PREFIX) + 32 and value.startswith(BYTES_PREFIX)
    if isinstance(value, str):
        return len(value) == len(CONFIG_PREFIX) + 64 and value.startswith(CONFIG_PREFIX)
    return False


def _replace_field(struct: pa.StructArray, rows: np.ndarray, name: str, new_values: list) -> pa.StructArray:
    """``struct`` with field ``name`` set to ``new_values`` at ``rows`` (the other rows unchanged)."""
    t = struct.type
    if struct.offset:
        struct = pa.concat_arrays([struct])
    children = []
    for i in range(t.num_fields):
        child = struct.field(i)
        if t.field(i).name == name:
            child = _put(child, rows, pa.array(new_values, t.field(i).type))
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(t), mask=struct.is_null())


def redact_records(batch: pa.RecordBatch, key: bytes) -> pa.RecordBatch:
    """The rules of the module docstring applied to ``batch`` (returned unchanged when it holds no
    ConfigRecord or UserScramCredentialRecord row)."""
    names = batch.schema.names
    if not batch.num_rows or "api_key" not in names:
        return batch
    api = batch.column("api_key")
    hit = pc.is_in(api, pa.array([CONFIG, SCRAM], api.type))
    if not pc.any(hit).as_py():
        return batch
    keys = api.to_numpy(zero_copy_only=False)
    cols = {n: batch.column(n) for n in names}
    touched = np.zeros(batch.num_rows, dtype=bool)
    if "user_scram_credential" in cols:
        scram = cols["user_scram_credential"]
        rows = np.flatnonzero((keys == SCRAM) & scram.is_valid().to_numpy(zero_copy_only=False))
        if len(rows):
            sub = scram.take(pa.array(rows))
            clear = [any(v is not None and not is_fingerprint(v) for v in vs)
                     for vs in zip(*(sub.field(f).to_pylist() for f in SCRAM_FIELDS))]
            rows = rows[np.asarray(clear, dtype=bool)]
        if len(rows):
            for f in SCRAM_FIELDS:
                values = scram.field(f).take(pa.array(rows)).to_pylist()
                scram = _replace_field(scram, rows, f, [None if v is None else fingerprint(key, v) for v in values])
            cols["user_scram_credential"] = scram
            touched[rows] = True
    if "config" in cols:
        cfg = cols["config"]
        rows = np.flatnonzero((keys == CONFIG) & cfg.is_valid().to_numpy(zero_copy_only=False))
        if len(rows):
            sub = cfg.take(pa.array(rows))
            rtypes, cnames = sub.field("resource_type").to_pylist(), sub.field("name").to_pylist()
            values = sub.field("value").to_pylist()
            pick = [i for i, (rt, n, v) in enumerate(zip(rtypes, cnames, values))
                    if v is not None and not is_fingerprint(v) and config_is_sensitive(rt, n)]
            if pick:
                at = rows[pick]
                cols["config"] = _replace_field(cfg, at, "value", [fingerprint_text(key, values[i]) for i in pick])
                touched[at] = True
    if not touched.any():
        return batch
    if "payload_json" in cols and "record_version" in cols:
        cols["payload_json"] = _rendered_again(cols, np.flatnonzero(touched))
    return pa.RecordBatch.from_arrays([cols[n] for n in names], schema=batch.schema)


def _rendered_again(cols: dict[str, pa.Array], rows: np.ndarray) -> pa.Array:
    """``payload_json`` with the rows ``rows`` rendered again from their (redacted) payload columns."""
    from kraft_replay.codec.jsonfmt import to_dump_json
    from kraft_replay.codec.records import MetadataRecord

    idx = pa.array(rows)
    api = cols["api_key"].take(idx).to_pylist()
    ver = cols["record_version"].take(idx).to_pylist()
    payload = {CONFIG: cols["config"].take(idx).to_pylist() if "config" in cols else None,
               SCRAM: cols["user_scram_credential"].take(idx).to_pylist() if "user_scram_credential" in cols else None}
    texts = [to_dump_json(MetadataRecord(api[j], ver[j], payload[api[j]][j])) for j in range(len(rows))]
    return _put(cols["payload_json"], rows, pa.array(texts, pa.string()))


def _put(arr: pa.Array, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """``arr`` with ``values`` at ``rows`` (ascending), the other rows as they are."""
    mask = np.zeros(len(arr), dtype=bool)
    mask[rows] = True
    return pc.replace_with_mask(arr, pa.array(mask), values)
