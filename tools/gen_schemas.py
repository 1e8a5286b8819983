#!/usr/bin/env python3
"""Generate ``lib/kraft_replay/codec/_generated_schemas.py`` from Kafka's message-definition files.

Reads every ``*.json`` of type ``metadata`` (the metadata-log records) and the five KRaft
control/data schemas from a schema directory (default ``../shared/reference/kafka-metadata-schemas``
next to the project), strips the ``//`` line comments of the schema language, resolves
``commonStructs`` into the fields that use them and writes plain Python data tables:

    MESSAGES: dict[str, dict]   # message name -> table, in (api key, name) order

Each table holds ``name``, ``file``, ``kind`` (``metadata``/``data``), ``api_key`` (None for data
schemas), ``valid_versions``, ``flexible_versions`` and ``fields``. Version ranges are
``(low, high)`` tuples with ``high`` None for open-ended ranges, or None for ``"none"``.
Each field holds ``name``, ``snake`` (snake_case), ``json`` (camelCase, the dump tool's key),
``type`` (as written, e.g. ``int32``, ``[]int32``, ``[]BrokerEndpoint``), ``struct`` (the struct
type name for struct / array-of-struct fields), ``versions``, ``nullable_versions``,
``tagged_versions``, ``tag``, ``default`` (the schema's default string or None),
``flexible_versions`` (field override or None), ``ignorable`` and nested ``fields``.

The output is deterministic; run ``python tools/gen_schemas.py --check`` to verify that the
committed file is up to date.

Usage: python tools/gen_schemas.py [--schemas DIR] [--out FILE] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCHEMAS = ROOT.parent / "shared" / "reference" / "kafka-metadata-schemas"
DEFAULT_OUT = ROOT / "lib" / "kraft_replay" / "codec" / "_generated_schemas.py"

#: The KRaft control-record value schemas (type "data") the codec needs besides metadata records.
CONTROL_SCHEMA_NAMES = (
    "LeaderChangeMessage",
    "SnapshotHeaderRecord",
    "SnapshotFooterRecord",
    "KRaftVersionRecord",
    "VotersRecord",
)

_PRIMITIVES = {
    "bool",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "float64",
    "uuid",
    "string",
    "bytes",
    "records",
}


class SchemaError(ValueError):
    """A schema file could not be read or uses something this generator does not know."""


def strip_comments(text: str) -> str:
    """Remove ``//`` comments (outside JSON strings) so the text parses as strict JSON."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            out.append(c)
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_versions(spec: str | None) -> tuple[int, int | None] | None:
    """Version-range string of the schema language: ``"3"``, ``"0-2"``, ``"1+"`` or ``"none"``."""
    if spec is None:
        return None
    spec = spec.strip()
    if spec == "none":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), None)
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return (int(lo), int(hi))
    v = int(spec)
    return (v, v)


def snake_case(name: str) -> str:
    """``PartitionChangeRecord`` -> ``partition_change_record``; ``KRaftVersion`` -> ``kraft_version``."""
    name = name.replace("KRaft", "Kraft")
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return s.lower()


def camel_case(name: str) -> str:
    """The JSON key the dump tool prints: the field name with its first letter lower-cased."""
    return name[:1].lower() + name[1:]


def _field(raw: dict[str, Any], common: dict[str, list[dict[str, Any]]], where: str) -> dict[str, Any]:
    name = raw["name"]
    ftype: str = raw["type"]
    base = ftype[2:] if ftype.startswith("[]") else ftype
    struct_name: str | None = None
    sub_raw: list[dict[str, Any]] | None = None
    if base not in _PRIMITIVES:
        struct_name = base
        if "fields" in raw:
            sub_raw = raw["fields"]
        elif base in common:
            sub_raw = common[base]
        else:
            raise SchemaError(f"{where}.{name}: struct type {base!r} has no fields and no commonStruct")
    tag = raw.get("tag")
    tagged = parse_versions(raw.get("taggedVersions"))
    if tagged is not None and tag is None:
        raise SchemaError(f"{where}.{name}: taggedVersions without tag")
    return {
        "name": name,
        "snake": snake_case(name),
        "json": camel_case(name),
        "type": ftype,
        "struct": struct_name,
        "versions": parse_versions(raw.get("versions")),
        "nullable_versions": parse_versions(raw.get("nullableVersions")),
        "tagged_versions": tagged,
        "tag": None if tag is None else int(tag),
        "default": raw.get("default"),
        "flexible_versions": parse_versions(raw["flexibleVersions"]) if "flexibleVersions" in raw else None,
        "ignorable": bool(raw.get("ignorable", False)),
        "fields": [_field(f, common, f"{where}.{name}") for f in sub_raw] if sub_raw is not None else None,
    }


def load_message(path: Path) -> dict[str, Any]:
    """Parse one schema file into the generator's table form."""
    try:
        doc = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: cannot parse schema ({exc})") from exc
    common = {s["name"]: s["fields"] for s in doc.get("commonStructs", [])}
    name = doc["name"]
    return {
        "name": name,
        "file": path.name,
        "kind": doc["type"],
        "api_key": doc.get("apiKey") if doc["type"] == "metadata" else None,
        "valid_versions": parse_versions(doc["validVersions"]),
        "flexible_versions": parse_versions(doc.get("flexibleVersions", "none")),
        "fields": [_field(f, common, name) for f in doc.get("fields", [])],
    }


def load_all(schemas_dir: Path) -> dict[str, dict[str, Any]]:
    """Every metadata record schema plus the control schemas, ordered by (api key, name)."""
    if not schemas_dir.is_dir():
        raise SchemaError(f"schema directory not found: {schemas_dir} (pass --schemas DIR)")
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(schemas_dir.glob("*.json")):
        msg = load_message(path)
        if msg["kind"] == "metadata" or msg["name"] in CONTROL_SCHEMA_NAMES:
            if msg["name"] in found:
                raise SchemaError(f"{path}: duplicate message name {msg['name']}")
            found[msg["name"]] = msg
    missing = [n for n in CONTROL_SCHEMA_NAMES if n not in found]
    if missing:
        raise SchemaError(f"{schemas_dir}: control schemas missing: {', '.join(missing)}")

    def order(m: dict[str, Any]) -> tuple[int, int, str]:
        return (0 if m["api_key"] is not None else 1, m["api_key"] or 0, m["name"])

    return {m["name"]: m for m in sorted(found.values(), key=order)}


def _render_fields(fields: list[dict[str, Any]], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for f in fields:
        flat = {k: v for k, v in f.items() if k != "fields"}
        head = pad + "{" + ", ".join(f"{k!r}: {v!r}" for k, v in flat.items())
        if f["fields"] is None:
            lines.append(head + ", 'fields': None},")
        else:
            lines.append(head + ", 'fields': [")
            lines.extend(_render_fields(f["fields"], indent + 4))
            lines.append(pad + "]},")
    return lines


def render(messages: dict[str, dict[str, Any]], source: str) -> str:
    """Python source of the generated module: one line per field, nested fields indented."""
    lines = [
        '"""Field tables of the KRaft metadata records and control schemas.',
        "",
        "GENERATED by tools/gen_schemas.py from the schema files named in SOURCE; do not edit.",
        "Regenerate with: python tools/gen_schemas.py",
        '"""',
        "",
        "# fmt: off",
        "# ruff: noqa: E501",
        "from typing import Any",
        "",
        f"SOURCE = {source!r}",
        "",
        "MESSAGES: dict[str, dict[str, Any]] = {",
    ]
    for name, m in messages.items():
        lines.append(f"    {name!r}: {{")
        for key in ("name", "file", "kind", "api_key", "valid_versions", "flexible_versions"):
            lines.append(f"        {key!r}: {m[key]!r},")
        lines.append("        'fields': [")
        lines.extend(_render_fields(m["fields"], 12))
        lines.append("        ],")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=Path, default=DEFAULT_SCHEMAS, help="directory of schema *.json files")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="generated module to write")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out differs from what would be generated")
    args = ap.parse_args(argv)
    try:
        messages = load_all(args.schemas)
    except SchemaError as exc:
        print(f"gen_schemas: {exc}", file=sys.stderr)
        return 2
    text = render(messages, "kafka-metadata-schemas (" + ", ".join(sorted(m["file"] for m in messages.values())) + ")")
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"gen_schemas: {args.out} is out of date; run python tools/gen_schemas.py", file=sys.stderr)
            return 1
        print(f"gen_schemas: {args.out} is up to date ({len(messages)} messages)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"gen_schemas: wrote {args.out} ({len(messages)} messages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
