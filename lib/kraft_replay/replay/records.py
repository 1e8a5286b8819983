"""Record type ids (facts §2.2) and the bronze payload columns replay reads (docs/design.md, "Bronze
tables")."""

from __future__ import annotations

__all__ = ["API", "PAYLOAD_COLUMNS", "ZERO_UUID"]

#: facts §2.2: record name -> api key
API = {
    "REGISTER_BROKER": 0, "UNREGISTER_BROKER": 1, "TOPIC": 2, "PARTITION": 3, "CONFIG": 4, "PARTITION_CHANGE": 5,
    "FENCE_BROKER": 7, "UNFENCE_BROKER": 8, "REMOVE_TOPIC": 9, "DELEGATION_TOKEN": 10, "USER_SCRAM_CREDENTIAL": 11,
    "FEATURE_LEVEL": 12, "CLIENT_QUOTA": 14, "PRODUCER_IDS": 15, "BROKER_REGISTRATION_CHANGE": 17,
    "ACCESS_CONTROL_ENTRY": 18, "REMOVE_ACCESS_CONTROL_ENTRY": 19, "NO_OP": 20, "ZK_MIGRATION_STATE": 21,
    "REMOVE_USER_SCRAM_CREDENTIAL": 22, "BEGIN_TRANSACTION": 23, "END_TRANSACTION": 24, "ABORT_TRANSACTION": 25,
    "REMOVE_DELEGATION_TOKEN": 26, "REGISTER_CONTROLLER": 27,
}

#: the payload struct columns of the bronze record tables (one per record type with a body)
PAYLOAD_COLUMNS = (
    "register_broker", "unregister_broker", "topic", "partition", "config", "partition_change", "fence_broker",
    "unfence_broker", "remove_topic", "delegation_token", "user_scram_credential", "feature_level", "client_quota",
    "producer_ids", "broker_registration_change", "access_control_entry", "remove_access_control_entry",
    "zk_migration_state", "remove_user_scram_credential", "begin_transaction", "abort_transaction",
    "remove_delegation_token", "register_controller",
)

#: Kafka's text form of the all-zero UUID: the "MIGRATING" directory (facts §5.2)
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
