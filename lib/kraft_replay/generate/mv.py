"""metadata.version facts the generator plans with (kafka-kraft-facts §6).

- :data:`MV_LEVELS` — feature level -> (version string, didMetadataChange), levels 1-34 (§6.1, §6.1b).
- Record versions chosen by the metadata.version in force (§6.3) and the gates on which records may
  be written at all (NoOp from 3.3-IV1, BrokerRegistrationChange from 3.3-IV2, ...).
- :func:`downgrade_allowed` — today's rule for lowering metadata.version (§6.1b, §7.2 step 6).
"""

from __future__ import annotations

# level -> (version string, didMetadataChange)
MV_LEVELS: dict[int, tuple[str, bool]] = {
    1: ("3.0-IV1", True), 2: ("3.1-IV0", False), 3: ("3.2-IV0", True), 4: ("3.3-IV0", False),
    5: ("3.3-IV1", True), 6: ("3.3-IV2", True), 7: ("3.3-IV3", True), 8: ("3.4-IV0", True),
    9: ("3.5-IV0", False), 10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True), 16: ("3.7-IV1", False),
    17: ("3.7-IV2", True), 18: ("3.7-IV3", False), 19: ("3.7-IV4", False), 20: ("3.8-IV0", False),
    21: ("3.9-IV0", False), 22: ("4.0-IV0", False), 23: ("4.0-IV1", True), 24: ("4.0-IV2", False),
    25: ("4.0-IV3", False), 26: ("4.1-IV0", False), 27: ("4.1-IV1", False), 28: ("4.2-IV0", False),
    29: ("4.2-IV1", False), 30: ("4.3-IV0", True), 31: ("4.4-IV0", False), 32: ("4.4-IV1", True),
    33: ("4.4-IV2", True), 34: ("4.5-IV0", False),
}
MV_BY_NAME: dict[str, int] = {name: level for level, (name, _) in MV_LEVELS.items()}

MIN_BOOTSTRAP_LEVEL = 4        # 3.3-IV0
NOOP_LEVEL = 5                 # 3.3-IV1
BRCR_LEVEL = 6                 # 3.3-IV2: BrokerRegistrationChangeRecord replaces Fence/Unfence
CONTROLLED_SHUTDOWN_LEVEL = 7  # 3.3-IV3
ZK_MIGRATION_LEVEL = 8         # 3.4-IV0
SCRAM_LEVEL = 11               # 3.5-IV2
NO_EPOCH_BUMP_ON_SHRINK_LEVEL = 12  # 3.6-IV0
TRANSACTIONS_LEVEL = 13        # 3.6-IV1
DELEGATION_TOKEN_LEVEL = 14    # 3.6-IV2
CONTROLLER_REGISTRATION_LEVEL = 15  # 3.7-IV0
DIRECTORY_LEVEL = 17           # 3.7-IV2
ELR_LEVEL = 23                 # 4.0-IV1

# Highest metadata.version level a software release supports (its production levels, §6.1/§6.1b).
SOFTWARE_MAX_LEVEL: dict[str, int] = {
    "3.3": 7, "3.4": 8, "3.5": 11, "3.6": 14, "3.7": 19, "3.8": 20, "3.9": 21,
    "4.0": 22, "4.1": 27, "4.2": 29, "4.3": 30, "4.4": 33,
}


def parse_level(value: int | str) -> int:
    """A metadata.version given as a feature level or a version string (``"3.9-IV0"``, ``"3.9"``)."""
    if isinstance(value, int):
        if value not in MV_LEVELS:
            raise ValueError(f"unknown metadata.version level {value} (known: 1-{max(MV_LEVELS)})")
        return value
    text = str(value).strip()
    if text in MV_BY_NAME:
        return MV_BY_NAME[text]
    if text in SOFTWARE_MAX_LEVEL:
        return SOFTWARE_MAX_LEVEL[text]
    if text.isdigit():
        return parse_level(int(text))
    raise ValueError(f"unknown metadata.version {text!r} (use a level 1-{max(MV_LEVELS)} or a string like 3.9-IV0)")


def register_broker_version(level: int) -> int:
    """RegisterBrokerRecord version for the metadata.version in force (§6.3)."""
    if level <= 6:
        return 0
    if level == 7:
        return 1
    if level <= 16:
        return 2
    return 3


def partition_record_version(level: int) -> int:
    """PartitionRecord / PartitionChangeRecord version for the metadata.version in force (§6.3)."""
    if level <= 16:
        return 0
    if level <= 22:
        return 1
    return 2


def metadata_changed_between(low: int, high: int) -> bool:
    """True iff some level V with low < V <= high changed metadata (§6.1 ``checkIfMetadataChanged``)."""
    return any(MV_LEVELS[v][1] for v in range(low + 1, high + 1))


def downgrade_allowed(current: int, target: int) -> bool:
    """Today's rule: a metadata.version downgrade is allowed only if no level in (target, current] changed metadata."""
    return target < current and not metadata_changed_between(target, current)
