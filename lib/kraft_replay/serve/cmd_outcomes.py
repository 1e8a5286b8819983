"""``kraft-replay outcomes --lake DIR [--cluster-id C] [--only PROPOSAL] [--policy FILE] [--features-policy
FILE]``: the proposals' outcome tables (gold) from the replay's tables and the client request tables
(:mod:`kraft_replay.outcomes.run`): ``consistency_outcomes`` / ``consistency_summary`` (seed 000),
``fencing_outcomes`` / ``fencing_summary`` (seed 003), ``feature_transitions`` /
``feature_protection_violations`` / ``feature_update_outcomes`` / ``downgrade_losses`` (seeds 004, 001)
``broker_states`` (seed 002) and ``feature_discovery`` / ``feature_discovery_summary`` (seed 004), published
at once. Exit 0 with a summary; exit 2
with one line on bad input (no replay yet, an unknown cluster, a bad policy file), nothing published.
"""

from __future__ import annotations

import argparse
import sys

from kraft_replay.serve.common import add_json_option

EPILOG = """examples:
  kraft-replay outcomes --lake /tmp/lake
  kraft-replay outcomes --lake /tmp/lake --cluster-id MkU3OEVBNTcwNTJENDM2Qg --only fencing
  kraft-replay outcomes --lake /tmp/lake --only discovery      # ApiVersions answers and feature regressions
  kraft-replay outcomes --lake /tmp/lake --policy my-retries.yaml     # max_attempts, retry_backoff_ms, retry_target
then: kraft-replay tables --lake /tmp/lake   (the tables and their published versions)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "outcomes", help="what the proposals' rules decide (consistency tokens, produce fencing, feature levels, "
                         "broker states, feature discovery)",
        description="Compute the outcome tables: per metadata read, what consistency tokens decide (seed 000: "
                    "INCONSISTENT_CLUSTER_ID / STALE_METADATA / ADMITTED, fail and wait policies, retries, and what "
                    "eventually consistent reads got wrong); per produce request, leader-epoch fencing (seed 003) with "
                    "and without the check; feature-level transitions, brokers serving a level outside their range "
                    "and every UpdateFeatures request validated as the controller does, with KIP-1155's verdict and "
                    "loss report for metadata.version downgrades (seeds 004, 001); broker states over time (seed "
                    "002); what every ApiVersions answer advertised and where a client's view of the finalized "
                    "features went backwards (seed 004). Needs `kraft-replay replay` first (with broker metrics for tokens, fencing and discovery).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--cluster-id", default=None, metavar="C", help="only this cluster (default: every replayed cluster)")
    p.add_argument("--only", choices=("consistency", "fencing", "features", "broker_states", "discovery"), default=None,
                   help="compute one proposal's tables only (default: all, each when its input tables exist)")
    p.add_argument("--policy", default=None, metavar="FILE",
                   help="client retry policy for STALE_METADATA (YAML: max_attempts, retry_backoff_ms, retry_target "
                        "same|next; default conf/policies/consistency.yaml)")
    p.add_argument("--features-policy", default=None, metavar="FILE",
                   help="feature policy for KIP-1155 verdicts (YAML: downgrade_capable_level; default "
                        "conf/policies/features.yaml)")
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.cli import UserError

    from kraft_replay.outcomes.consistency import load_retry_policy

    from kraft_replay.outcomes.features import load_features_policy

    try:
        policy = load_retry_policy(args.policy)
    except (OSError, ValueError) as exc:
        raise UserError(f"--policy: {exc}") from None
    try:
        features_policy = load_features_policy(args.features_policy)
    except (OSError, ValueError) as exc:
        raise UserError(f"--features-policy: {exc}") from None
    from kraft_replay.outcomes.run import OutcomesError, run_outcomes
    from kraft_replay.serve.common import open_lake

    spark, lake = open_lake(args)
    try:
        summary = run_outcomes(spark, lake, cluster_id=args.cluster_id, policy=policy, only=args.only,
                               features_policy=features_policy, say=lambda s: print(s, file=sys.stderr, flush=True))
    except OutcomesError as exc:
        raise UserError(str(exc)) from None
    from kraft_replay.serve.common import print_summary

    return print_summary(summary, args.json)
