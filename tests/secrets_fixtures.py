"""Credential-bearing KRaft files written by the project's encoder, and a scan of a directory for them
(the secrets tests of tests/codec and tests/ingest)."""

from __future__ import annotations

import base64
from pathlib import Path

from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.control import CONTROL_TYPE_IDS, ControlRecord, encode_control_record
from kraft_replay.codec.files import segment_name, snapshot_name
from kraft_replay.codec.records import MetadataRecord, encode_record_value

# distinct, recognisable values (high entropy where Kafka's are random)
SALT_1, STORED_1, SERVER_1 = b"salt-alice-0001!", b"stored-key-alice-version-one-32b", b"server-key-alice-version-one-32b"
SALT_2, STORED_2, SERVER_2 = b"salt-alice-0002!", b"stored-key-alice-version-two-32b", b"server-key-alice-version-two-32b"
KEYSTORE_PW = "keystore-pw-Tr0ub4dor&3"
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="jaas-pw-Xy9";'
SECRETS: list[bytes] = [SALT_1, STORED_1, SERVER_1, SALT_2, STORED_2, SERVER_2, KEYSTORE_PW.encode(), b"jaas-pw-Xy9"]


def scram(salt: bytes, stored: bytes, server: bytes, version: int = 0) -> MetadataRecord:
    return MetadataRecord(11, version, {"name": "alice", "mechanism": 1, "salt": salt, "stored_key": stored,
                                        "server_key": server, "iterations": 4096})


def config(rtype: int, rname: str, name: str, value: str | None) -> MetadataRecord:
    return MetadataRecord(4, 0, {"resource_type": rtype, "resource_name": rname, "name": name, "value": value})


def log_records() -> list[MetadataRecord]:
    """A credential, a sensitive broker config, a listener-prefixed JAAS config, a defined topic config,
    then the credential changed."""
    return [
        MetadataRecord(12, 0, {"name": "metadata.version", "feature_level": 21}),
        scram(SALT_1, STORED_1, SERVER_1),
        config(4, "", "ssl.keystore.password", KEYSTORE_PW),
        config(4, "1", "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", JAAS),
        config(2, "orders", "retention.ms", "3600000"),
        scram(SALT_2, STORED_2, SERVER_2),
    ]


def _control(name: str, data: dict, base: int, epoch: int, ts: int) -> bytes:
    k, v = encode_control_record(ControlRecord(CONTROL_TYPE_IDS[name], 0, data))
    return build_batch([v], keys=[k], base_offset=base, leader_epoch=epoch, timestamp_ms=ts, control=True)


def snapshot_bytes(records: list[MetadataRecord], epoch: int, ts: int) -> bytes:
    parts = [_control("SNAPSHOT_HEADER", {"version": 0, "last_contained_log_timestamp": ts}, 0, epoch, ts)]
    parts.append(build_batch([encode_record_value(r) for r in records], base_offset=1, leader_epoch=epoch, timestamp_ms=ts))
    parts.append(_control("SNAPSHOT_FOOTER", {"version": 0}, len(records) + 1, epoch, ts))
    return b"".join(parts)


def write_node(root: Path, ts: int = 1_750_000_000_000) -> dict[str, Path]:
    """A node's metadata dir holding the records in a segment, a snapshot and ``bootstrap.checkpoint``,
    plus the dump-log text of the segment beside it. Returns the paths by kind."""
    from kraft_replay.ingest.dumptext import render_dump_text

    part = root / "node" / "__cluster_metadata-0"
    part.mkdir(parents=True)
    (root / "node" / "meta.properties").write_text("cluster.id=SeCrEtSCluster000000000A\nnode.id=1\nversion=1\n")
    recs = log_records()
    seg = b"".join(build_batch([encode_record_value(r)], base_offset=i, leader_epoch=1, timestamp_ms=ts + i)
                   for i, r in enumerate(recs))
    (part / segment_name(0)).write_bytes(seg)
    (part / snapshot_name(2, 1)).write_bytes(snapshot_bytes(recs[:2], 1, ts))   # replay starts there
    (root / "node" / "bootstrap.checkpoint").write_bytes(snapshot_bytes([recs[0], recs[1]], 0, ts))
    text = root / "dump" / "dump-log.txt"
    text.parent.mkdir()
    text.write_text(render_dump_text(seg, file_name=str(part / segment_name(0))))
    return {"node": root / "node", "segment": part / segment_name(0), "dump": text}


def forms(secret: bytes) -> list[bytes]:
    """The raw bytes and the text forms a secret could take in a file: hex (both cases), base64
    (standard and URL-safe, at each alignment inside a longer text: the characters that depend on the
    secret's bytes alone)."""
    out = {secret, secret.hex().encode(), secret.hex().upper().encode()}
    for shift in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(b"\0" * shift + secret)
            out.add(text[4:-4] if shift else text[:-4])
    return sorted(out)


def values_of(v: object, out: list[bytes]) -> None:
    if isinstance(v, bytes):
        out.append(v)
    elif isinstance(v, str):
        out.append(v.encode("utf-8", "surrogateescape"))
    elif isinstance(v, dict):
        for x in v.values():
            values_of(x, out)
    elif isinstance(v, (list, tuple)):
        for x in v:
            values_of(x, out)


def file_contents(path: Path) -> bytes:
    """A file's bytes; for a Parquet file also every value it holds (its pages are compressed)."""
    data = path.read_bytes()
    if path.suffix == ".parquet" or data[:4] == b"PAR1":
        import pyarrow.parquet as pq

        values: list[bytes] = []
        values_of(pq.read_table(path).to_pylist(), values)
        data += b"\n".join(values)
    return data


def scan(root: Path, secrets: list[bytes] = SECRETS) -> list[tuple[str, bytes]]:
    """Every (file, form) where a form of a secret occurs in a file under ``root`` (Parquet values included)."""
    needles = [f for s in secrets for f in forms(s)]
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = file_contents(path)
        hits += [(str(path.relative_to(root)), form) for form in needles if form in data]
    return hits
