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


# -- other features (facts §7.2, §7.3) ---------------------------------------------------------------
# Defined levels of the features other than metadata.version (``Features``: test.feature.version,
# kraft.version, transaction.version, group.version).
FEATURE_DEFINED_LEVELS: dict[str, tuple[int, ...]] = {
    "kraft.version": (0, 1), "group.version": (0, 1), "transaction.version": (0, 1, 2),
    "test.feature.version": (0, 1, 2),
    # Known from 4.1: the real Kafka 4.1 registrations in real-kraft/ list them with range [0, 1].
    "eligible.leader.replicas.version": (0, 1), "share.version": (0, 1),
}
# Declared dependencies: (feature, level) -> lowest metadata.version level it needs (§7.2 step 7).
FEATURE_MV_DEPENDENCY: dict[tuple[str, int], int] = {("kraft.version", 1): 21}
MIN_FEATURE_MV_LEVEL = 4       # every level >= 1 of another feature needs metadata.version >= 3.3-IV0


def software_feature_ranges(software: str) -> dict[str, tuple[int, int]]:
    """The supported ranges a node of this software version advertises (``QuorumFeatures.defaultFeatureMap``
    / ``BrokerFeatures``, facts §7.3): metadata.version [1, its highest production level], and each
    production feature with latest level > 0 as [first level, latest production level].

    Modelling (the facts give the 4.0 snapshot's ranges: kraft.version [0, 1], group.version [0, 1],
    transaction.version [0, 0] i.e. omitted): kraft.version exists from 3.9 (its dependency on
    3.9-IV0), group.version from 4.0 (4.0-IV0 is its bootstrap MV), transaction.version [0, 2] from 4.1
    (§6.1b: levels 23-25, including transaction.version's 4.0-IV2, are production in the newer enum).
    From 4.1 the ranges are those a real Kafka 4.1 node registered with (real-kraft/ dkoh12 files):
    metadata.version [7, 27] (3.3-IV3 is the newer enum's MINIMUM_VERSION, §6.1b), kraft.version,
    group.version, eligible.leader.replicas.version and share.version [0, 1], transaction.version [0, 2]."""
    major = tuple(int(x) for x in software.split("."))
    out = {"metadata.version": (7 if major >= (4, 1) else 1, SOFTWARE_MAX_LEVEL[software])}
    if major >= (3, 9):
        out["kraft.version"] = (0, 1)
    if major >= (4, 0):
        out["group.version"] = (0, 1)
    if major >= (4, 1):
        out["transaction.version"] = (0, 2)
        out["eligible.leader.replicas.version"] = (0, 1)
        out["share.version"] = (0, 1)
    return out


def broker_registration_request_version(controller_software: str) -> int:
    """BrokerRegistration request version a broker sends: the highest the (active) controller accepts.
    Modelling: v4 from controller software 4.0, else v3 (or lower)."""
    return 4 if tuple(int(x) for x in controller_software.split(".")) >= (4, 0) else 3


def registered_broker_features(software: str, controller_software: str) -> dict[str, tuple[int, int]]:
    """The ranges that reach a broker's RegisterBrokerRecord. KAFKA-17492 workaround (facts §7.3): a
    BrokerRegistration request sent at version 0-3 drops every feature whose MinSupportedVersion is 0."""
    ranges = software_feature_ranges(software)
    if broker_registration_request_version(controller_software) <= 3:
        ranges = {k: v for k, v in ranges.items() if v[0] != 0}
    return ranges


def features_list(ranges: dict[str, tuple[int, int]]) -> list[dict[str, int | str]]:
    """The Features array of a registration record: metadata.version first, then by name."""
    names = sorted(ranges, key=lambda n: (n != "metadata.version", n))
    return [{"name": n, "min_supported_version": ranges[n][0], "max_supported_version": ranges[n][1]} for n in names]


def range_text(lo: int, hi: int) -> str:
    """Range notation of the controller's messages: "N" for a single value, "A-B" otherwise (§7.3)."""
    return str(lo) if lo == hi else f"{lo}-{hi}"
