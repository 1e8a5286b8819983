"""Gold tables: what each proposal's rules decide, as DataFrame transformations over the replay's
tables (docs/design.md, "Gold tables (outcomes)"), one module per proposal:

* :mod:`.cache_lag` — per-broker cache lag (seed 002);
* :mod:`.consistency` — consistency tokens for metadata reads (seed 000);
* :mod:`.fencing` — leader-epoch fencing of produce requests (seed 003);
* :mod:`.features` — feature-level transitions, protection violations, UpdateFeatures validation today
  and under KIP-1155 with the downgrade loss report (seeds 004, 001);
* :mod:`.broker_states` — each broker's OFFLINE / FENCED / ONLINE / STOPPING intervals, heartbeat gaps
  (seed 002);
* :mod:`.lookups` — the as-of lookups they share; :mod:`.run` — the batch job (``kraft-replay outcomes``).
"""
