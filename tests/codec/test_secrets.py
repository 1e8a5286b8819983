"""Credential material fingerprinted on Arrow batches of records (kafka-kraft-facts §12): which configs
are sensitive, the fingerprints, every record path of the decoder and the dump-text parser."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from kraft_replay.codec.batch import build_batch
from kraft_replay.codec.decode import decode_records
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.records import MetadataRecord, encode_record_value
from kraft_replay.codec.secrets import (
    BYTES_PREFIX,
    config_is_sensitive,
    defined_config_names,
    fingerprint,
    fingerprint_text,
    is_fingerprint,
    redact_records,
)
from kraft_replay.ingest.bronze import decode_to_arrow, redact_chunk
from kraft_replay.ingest.dumptext import parse_dump_text, render_dump_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/secrets_fixtures.py
from secrets_fixtures import JAAS, KEYSTORE_PW, SECRETS, values_of, forms, log_records  # noqa: E402

KEY_A, KEY_B = b"A" * 32, b"B" * 32


@pytest.mark.parametrize(("rtype", "name", "sensitive"), [
    (4, "ssl.keystore.password", True),            # PASSWORD type
    (4, "ssl.key.password", True),
    (4, "ssl.truststore.password", True),
    (4, "sasl.jaas.config", True),
    (4, "listener.name.sasl_ssl.ssl.keystore.password", True),            # listener-prefixed
    (4, "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", True),   # listener and mechanism
    (4, "some.plugin.secret", True),               # not defined by Kafka
    (4, "log.retention.hours", False),             # defined, not PASSWORD
    (4, "min.insync.replicas", False),
    (2, "retention.ms", False),
    (2, "cleanup.policy", False),
    (2, "my.custom.topic.config", True),           # the cost: a custom topic config is fingerprinted
    (2, "ssl.keystore.password", True),            # a broker name is not a topic config
    (16, "interval.ms", True),                     # a resource type without definitions
    (32, "consumer.session.timeout.ms", True),
])
def test_which_configs_are_sensitive(rtype, name, sensitive):
    assert config_is_sensitive(rtype, name) is sensitive


def test_the_defined_names_exclude_every_password_type_config():
    names = defined_config_names()
    assert len(names[4]) > 250 and len(names[2]) > 30
    assert not {"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "sasl.jaas.config",
                "password.encoder.secret", "delegation.token.secret.key"} & names[4]


def test_fingerprints_equal_under_one_key_differ_across_keys_and_name_themselves():
    a, b = fingerprint(KEY_A, b"salt"), fingerprint(KEY_B, b"salt")
    assert a == fingerprint(KEY_A, b"salt") != b and a != fingerprint(KEY_A, b"salt2")
    assert a.startswith(BYTES_PREFIX) and len(a) == 44 and is_fingerprint(a) and fingerprint(KEY_B, a) == a
    t = fingerprint_text(KEY_A, "pw")
    assert t.startswith("hmac-sha256:") and len(t) == 76 and is_fingerprint(t) and fingerprint_text(KEY_B, t) == t
    assert t != fingerprint_text(KEY_B, "pw")


def _segment(records: list[MetadataRecord], copies: int = 1) -> bytes:
    recs = records * copies
    return b"".join(build_batch([encode_record_value(r)], base_offset=i, leader_epoch=1, timestamp_ms=1000 + i)
                    for i, r in enumerate(recs))


def _no_secret_in(batch: pa.RecordBatch) -> None:
    values: list[bytes] = []
    values_of(batch.to_pylist(), values)
    blob = b"\n".join(values)
    for s in SECRETS:
        for form in forms(s):
            assert form not in blob, form


@pytest.mark.parametrize("accelerate", [True, False])
def test_decoded_records_are_fingerprinted_in_columns_and_json(accelerate):
    """Both decoder paths (the accelerator's needs >= 16 batches: the records are repeated)."""
    data = decode_records(_segment(log_records(), copies=4), accelerate=accelerate).data
    out = redact_records(data, KEY_A)
    _no_secret_in(out)
    rows = out.to_pylist()
    for r in rows:  # payload_json is the dump tool's rendering of the (redacted) payload
        col = {4: "config", 11: "user_scram_credential"}.get(r["api_key"])
        if col:
            assert r["payload_json"] == to_dump_json(MetadataRecord(r["api_key"], r["record_version"], r[col]))
    scram = [r["user_scram_credential"] for r in rows if r["api_key"] == 11]
    assert all(is_fingerprint(s[f]) for s in scram for f in ("salt", "stored_key", "server_key"))
    assert scram[0]["iterations"] == 4096 and scram[0]["stored_key"] != scram[1]["stored_key"]
    assert scram[0]["stored_key"] == scram[2]["stored_key"]                  # equal values, one key
    configs = {(r["config"]["name"]): r["config"]["value"] for r in rows if r["api_key"] == 4}
    assert configs["retention.ms"] == "3600000"
    assert configs["ssl.keystore.password"] == fingerprint_text(KEY_A, KEYSTORE_PW)
    assert configs["listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"] == fingerprint_text(KEY_A, JAAS)
    assert redact_records(out, KEY_B).equals(out)                          # idempotent, whatever the key
    other = redact_records(data, KEY_B).to_pylist()
    assert [r["user_scram_credential"] for r in other if r["api_key"] == 11][0]["salt"] != scram[0]["salt"]


def test_both_decoder_paths_give_the_same_redacted_rows():
    buf = _segment(log_records(), copies=4)
    fast = redact_records(decode_records(buf, accelerate=True).data, KEY_A)
    slow = redact_records(decode_records(buf, accelerate=False).data, KEY_A)
    assert fast.equals(slow)


def test_a_batch_without_credentials_is_returned_as_is():
    data = decode_records(_segment([log_records()[0], log_records()[4]])).data
    assert redact_records(data, KEY_A) is data


def test_segment_snapshot_and_dump_text_chunks_are_fingerprinted():
    seg = _segment(log_records())
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    chunks = [decode_to_arrow(seg, cluster_id="C", source_file="0.log", file_kind="segment", ingested_at=now),
              decode_to_arrow(seg, cluster_id="C", source_file="1-1.checkpoint", file_kind="snapshot",
                              snapshot_end_offset=6, snapshot_epoch=1, ingested_at=now),
              parse_dump_text(render_dump_text(seg), cluster_id="C", source_file="dump.txt", ingested_at=now)]
    for c in chunks:
        assert c.log.num_rows + c.snapshot.num_rows == len(log_records())
        r = redact_chunk(c, KEY_A)
        for batch in (r.log, r.snapshot):
            if batch.num_rows:
                _no_secret_in(batch)
    kept = redact_chunk(chunks[0], None)                                 # --keep-secrets
    assert kept.log.column("config").field("value").to_pylist()[2] == KEYSTORE_PW


def test_readers_warn_on_a_lake_written_before_fingerprinting_or_with_keep_secrets(tmp_path):
    """No ``_secrets.json`` beside the log tables: the lake predates fingerprinting (warned, with the
    redact command); a run that fingerprinted: silent; ``--keep-secrets``: warned; redact: silent again."""
    from kraft_replay.lake.keys import clear_secrets_warning, record_secrets

    root = str(tmp_path / "lake")
    (tmp_path / "lake" / "broker_progress" / "_delta_log").mkdir(parents=True)
    assert clear_secrets_warning(root) is None  # metrics only: no table that carries credentials
    (tmp_path / "lake" / "metadata_log" / "_delta_log").mkdir(parents=True)
    assert clear_secrets_warning(root) == (
        f"warning: lake {root} was written before credentials were fingerprinted and may hold SCRAM credentials and "
        f"sensitive config values in the clear; `kraft-replay redact --lake {root}` fingerprints them")
    record_secrets(root, "r1", False, "ingest")
    assert clear_secrets_warning(root) is None
    record_secrets(root, "r2", True, "ingest")
    assert clear_secrets_warning(root).startswith(f"warning: lake {root} holds SCRAM credentials")
    record_secrets(root, "r3", False, "redact")
    assert clear_secrets_warning(root) is None
