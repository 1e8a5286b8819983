"""``image_snapshots`` rows on Arrow, from the sequential replay's versions: what the live path's kernel
emits with each step (:meth:`kraft_replay.replay.live.LiveCluster.step`), so that the stream writes
each image as it passes a metadata.version change instead of a Spark job recomputing it from every
versioned table. The batch replay keeps its own implementation
(:func:`kraft_replay.replay.images.image_snapshots`); the stream tests hold the two equal row by row,
and tests/replay/test_image_rows.py holds the JSON text equal to Spark's ``to_json``.

* :func:`mv_changes` — facts §6 / §5.6: the offsets at which the finalized metadata.version took a new
  level (the visible, not deleted ``metadata.version`` versions whose level differs from the visible
  version before; never-visible versions skipped).
* :func:`image_rows` — the full image at each of those offsets, one row per live entity of every
  domain: ``entity_key`` / ``entity`` as the JSON text Spark's ``to_json`` writes for the key columns /
  the entity's columns (null fields left out), ``dropped`` by the loss rules of seed 001 at the image's
  level.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.replay.features import METADATA_VERSION
from kraft_replay.replay.images import entity_columns
from kraft_replay.replay.losses import LOSSES
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS_SCHEMA, MV_CHANGE, SILVER_TABLES
from kraft_replay.replay.sequential import sort_tuple

__all__ = ["mv_changes", "image_rows", "json_text"]


def mv_changes(features: pa.Table, after: int | None = None, level_before: int | None = None) -> list[tuple[int, int]]:
    """Facts §6 / §5.6: ``(image_offset, level)`` of each offset at which one cluster's finalized
    metadata.version took a new level, in offset order: the visible (``valid_from_offset <
    valid_to_offset`` or open), not deleted ``metadata.version`` versions of ``features``, ordered by
    ``(valid_from_offset, record_offset)``, whose level differs from the version before. ``after``: only
    the changes at offsets after it, the level visible at ``after`` being the one of the version among
    ``features`` visible there, else ``level_before`` (None: no level yet)."""
    if features is None or not features.num_rows:
        return []
    vf, vt = features.column("valid_from_offset"), features.column("valid_to_offset")
    keep = pc.and_(pc.and_(pc.equal(features.column("name"), METADATA_VERSION), pc.invert(features.column("deleted"))),
                   pc.or_kleene(pc.is_null(vt), pc.less(vf, vt)))
    rows = features.filter(pc.fill_null(keep, False)).select(
        ["valid_from_offset", "record_offset", "valid_to_offset", "feature_level"]).to_pylist()
    rows.sort(key=lambda r: sort_tuple((r["valid_from_offset"], r["record_offset"])))
    prev, out = level_before, []
    for r in rows:
        level, frm = r["feature_level"], r["valid_from_offset"]
        if after is not None and frm <= after:
            if r["valid_to_offset"] is None or after < r["valid_to_offset"]:
                prev = level  # the version visible where the changes start
            continue
        if prev is None or level != prev:
            out.append((frm, level))
        prev = level
    return out


def _visible(t: pa.Table, offset: int) -> pa.Table:
    """The versions of ``t`` visible at ``offset`` (one per live entity)."""
    vt = t.column("valid_to_offset")
    at = pc.and_(pc.less_equal(t.column("valid_from_offset"), offset),
                 pc.or_kleene(pc.is_null(vt), pc.less(offset, vt)))
    return t.filter(pc.and_(pc.fill_null(at, False), pc.invert(t.column("deleted"))))


def image_rows(cluster_id: str, versions: Mapping[str, pa.Table], at: Iterable[tuple[int, int]],
               trigger: str = MV_CHANGE) -> pa.Table:
    """The ``image_snapshots`` rows (schemas.IMAGE_SNAPSHOTS_SCHEMA) of cluster ``cluster_id`` at each
    ``(image_offset, metadata_version_level)`` of ``at``: per domain of ``versions`` (that cluster's
    versions: at least every version visible at those offsets), each entity visible at the offset;
    ``dropped`` (seed 001, facts §6.3) what the snapshot written at the image's level leaves out of it."""
    cols: dict[str, list[Any]] = {f.name: [] for f in IMAGE_SNAPSHOTS_SCHEMA}
    for offset, level in at:
        for domain, t in versions.items():
            if t is None or not t.num_rows:
                continue
            live = _visible(t, offset)
            if not live.num_rows:
                continue
            keys, names = list(SILVER_TABLES[domain].key_names), entity_columns(domain)
            key_text, entity_text = _object_writer(live.schema, keys), _object_writer(live.schema, names)
            rules = [x for x in LOSSES if x.domain == domain and level < x.below]
            held = [x.holds_arrow(live) for x in rules]
            for i, row in enumerate(live.select(names).to_pylist()):
                cols["entity_key"].append(key_text(row))
                cols["entity"].append(entity_text(row))
                cols["dropped"].append([{"field": x.field, "what": x.what_row(row)} for x, h in zip(rules, held) if h[i]])
            n = live.num_rows
            cols["cluster_id"] += [cluster_id] * n
            cols["image_offset"] += [offset] * n
            cols["trigger"] += [trigger] * n
            cols["metadata_version_level"] += [level] * n
            cols["domain"] += [domain] * n
    return pa.Table.from_pydict(cols, schema=IMAGE_SNAPSHOTS_SCHEMA)


# -- Spark's to_json, on Python values ------------------------------------------------------------------

_HEX_ESCAPE = re.compile(r"\\\\|\\u([0-9a-f]{4})")


def _string(s: str) -> str:
    """A JSON string as Jackson writes it: the short escapes, other control characters as ``\\u00XX``
    with upper-case hex digits, everything else as is."""
    text = json.dumps(s, ensure_ascii=False)
    if "\\u" not in text:
        return text
    return _HEX_ESCAPE.sub(lambda m: m.group(0) if m.group(1) is None else "\\u" + m.group(1).upper(), text)


def _double(x: float) -> str:
    """A double as Java's ``Double.toString`` writes it (and so Jackson, and so Spark's ``to_json``):
    plain between 10^-3 and 10^7 with at least one digit after the point, else ``d.dddE<n>``."""
    if x != x or x in (float("inf"), float("-inf")):
        return '"NaN"' if x != x else ('"Infinity"' if x > 0 else '"-Infinity"')
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign = "-" if x < 0 else ""
    t = decimal.Decimal(repr(abs(x))).normalize().as_tuple()  # the shortest digits that read back as x
    digits = "".join(map(str, t.digits))
    exp = len(digits) + t.exponent - 1  # the value is d.ddd x 10^exp
    if len(digits) == 1:  # Java writes two digits at least, the two nearest x (4.9E-324, not 5.0E-324)
        mantissa, e = f"{abs(x):.1e}".split("e")
        digits, exp = mantissa.replace(".", "").rstrip("0") or "0", int(e)
    if 1e-3 <= abs(x) < 1e7:
        if exp >= 0:
            whole, frac = digits[:exp + 1].ljust(exp + 1, "0"), digits[exp + 1:]
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def _writer(t: pa.DataType) -> Callable[[Any], str]:
    """The JSON text of a non-null value of Arrow type ``t``, as Spark's ``to_json`` writes it."""
    if pa.types.is_boolean(t):
        return lambda v: "true" if v else "false"
    if pa.types.is_integer(t):
        return str
    if pa.types.is_floating(t):
        return lambda v: _double(float(v))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _writer(t.value_type)
        return lambda v: "[" + ",".join("null" if x is None else item(x) for x in v) + "]"
    if pa.types.is_struct(t):
        return _object_writer(pa.schema(list(t)), [t.field(i).name for i in range(t.num_fields)])
    raise TypeError(f"no JSON writer for Arrow type {t}")


def _object_writer(schema: pa.Schema, names: list[str]) -> Callable[[Mapping[str, Any]], str]:
    """The JSON object of ``names`` (in that order) of a row, null fields left out."""
    parts = [(n, _string(n) + ":", _writer(schema.field(n).type)) for n in names]

    def write(row: Mapping[str, Any]) -> str:
        return "{" + ",".join(head + w(row[n]) for n, head, w in parts if row[n] is not None) + "}"
    return write


def json_text(value: Any, t: pa.DataType) -> str:
    """The JSON text of ``value`` (of Arrow type ``t``; a struct as a dict) as Spark's ``to_json`` of
    a struct writes it (structs, lists and their values; a null field left out)."""
    return "null" if value is None else _writer(t)(value)
