"""Metadata record values: the frame plus the body in Kafka's message encoding.

Rules implemented (facts §2, schemas README "Types and their encodings" / "Tagged fields"):

- Frame (data records of the metadata log and snapshots): unsigned varint frame version (must
  be 1; 0 is the unsupported 2.8-preview frame), unsigned varint api key (record type id),
  unsigned varint record version, then the body at that version; nothing may follow.
- Body: the non-tagged fields present in the version, in schema order; flexible versions use
  compact strings/bytes/arrays (unsigned varint length + 1, 0 = null) and end every struct —
  the message, each nested struct and each element of an array of structs — with a
  tagged-field section. Known tagged fields are written in ascending tag order only when they
  differ from their default; unknown tagged fields read are kept under ``"_unknown_tagged"`` as
  ``[(tag, bytes), ...]`` and written back interleaved by tag, so re-encoding is byte-exact.
  Nullable non-tagged structs carry a leading signed byte (−1 null, 1 present).
- UUIDs are carried in Kafka's text form (URL-safe base64 without padding, 22 characters).

Speed: decoding by interpreting the field tables per record is too slow for real logs, so a
specialised decode and encode function is generated per (message, version) from the tables
(source text compiled once, lazily, then cached); fixed-size runs of fields are read with one
precompiled ``struct.Struct``, and the empty ``NoOpRecord`` has a dedicated fast path.

Errors: every decoding failure raises :class:`RecordDecodeError` with ``code`` one of
``UNKNOWN_RECORD_TYPE``, ``UNSUPPORTED_RECORD_VERSION``, ``BAD_FRAME_VERSION``,
``RECORD_DECODE_ERROR``, ``TRAILING_BYTES``. Lengths and counts are checked against the bytes
that remain before anything is allocated. Encoding failures raise :class:`RecordEncodeError`.
"""

from __future__ import annotations

import base64
import copy
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraft_replay.codec.schema import (
    FIXED_SIZES,
    MESSAGE_SCHEMAS,
    RECORD_TYPES,
    ZERO_UUID,
    FieldSpec,
    MessageSchema,
)
from kraft_replay.codec.varint import VarintError, read_uvarint, write_uvarint

__all__ = [
    "FRAME_VERSION",
    "DECODE_ERROR_CODES",
    "MetadataRecord",
    "RecordDecodeError",
    "RecordEncodeError",
    "decode_message",
    "decode_record_value",
    "encode_message",
    "encode_record_value",
    "uuid_from_bytes",
    "uuid_to_bytes",
]

#: The only frame version KRaft writes and accepts.
FRAME_VERSION = 1

DECODE_ERROR_CODES = frozenset(
    {
        "UNKNOWN_RECORD_TYPE",
        "UNSUPPORTED_RECORD_VERSION",
        "BAD_FRAME_VERSION",
        "RECORD_DECODE_ERROR",
        "TRAILING_BYTES",
    }
)

_MAX_STRING = 32767  # a decoded string longer than this is rejected


class RecordDecodeError(Exception):
    """A record value (or message body) could not be decoded; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        if code not in DECODE_ERROR_CODES:
            raise ValueError(f"unknown decode error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RecordEncodeError(ValueError):
    """A record could not be encoded (unknown type/version, bad field name or value)."""


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One metadata record: type id, record version and the decoded body.

    ``data`` maps snake_case field names to values: every field present in ``version`` (tagged
    fields not on the wire hold their default), plus ``"_unknown_tagged"`` when the wire carried
    tags the schema does not know. Nested structs are dicts, arrays lists.
    """

    api_key: int
    version: int
    data: dict[str, Any]

    @property
    def type_name(self) -> str:
        """Record type as Kafka's tools print it, e.g. ``PARTITION_CHANGE_RECORD``."""
        rt = RECORD_TYPES.get(self.api_key)
        return rt.tool_name if rt is not None else f"UNKNOWN_{self.api_key}"


# ----------------------------------------------------------------------------------------------
# UUID text form, with small caches (topic ids and directory ids repeat a lot in real logs)
# ----------------------------------------------------------------------------------------------

_UUID_TEXT: dict[bytes, str] = {}
_UUID_BYTES: dict[str, bytes] = {}
_UUID_CACHE_MAX = 1 << 16
_b64e = base64.urlsafe_b64encode
_b64d = base64.urlsafe_b64decode


def uuid_from_bytes(raw: bytes) -> str:
    """16 bytes (most-significant half first) -> Kafka's 22-character text form."""
    s = _UUID_TEXT.get(raw)
    if s is None:
        if len(raw) != 16:
            raise ValueError(f"uuid needs 16 bytes, got {len(raw)}")
        s = _b64e(raw)[:22].decode("ascii")
        if len(_UUID_TEXT) >= _UUID_CACHE_MAX:
            _UUID_TEXT.clear()
        _UUID_TEXT[bytes(raw)] = s
    return s


def uuid_to_bytes(text: str) -> bytes:
    """Kafka's 22-character UUID text form -> 16 bytes; ValueError for anything else."""
    b = _UUID_BYTES.get(text)
    if b is None:
        if not isinstance(text, str) or len(text) != 22:
            raise ValueError(f"uuid text must be 22 characters of URL-safe base64, got {text!r}")
        try:
            b = _b64d(text + "==")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"bad uuid text {text!r}") from exc
        if len(b) != 16 or _b64e(b)[:22].decode("ascii") != text:
            raise ValueError(f"bad uuid text {text!r}")
        if len(_UUID_BYTES) >= _UUID_CACHE_MAX:
            _UUID_BYTES.clear()
        _UUID_BYTES[text] = b
    return b


_SMALL_UV = [bytes((i,)) for i in range(128)]


def _uvb(n: int) -> bytes:
    return _SMALL_UV[n] if 0 <= n < 128 else write_uvarint(n)


def _dec_err(msg: str) -> RecordDecodeError:
    return RecordDecodeError("RECORD_DECODE_ERROR", msg)


# ----------------------------------------------------------------------------------------------
# Code generation
# ----------------------------------------------------------------------------------------------

_FMT = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}


class _Gen:
    """Builds specialised decode/encode functions from the field tables.

    Generated functions: ``dec(buf, pos, blen) -> (dict, pos)`` reading one struct (message
    body or nested struct) and ``enc(d, out)`` appending one struct to a bytearray.
    """

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_uv": read_uvarint,
            "_uvb": _uvb,
            "_SM": _SMALL_UV,
            "_UT": _UUID_TEXT,
            "_UB": _UUID_BYTES,
            "_uuid_t": uuid_from_bytes,
            "_uuid_b": uuid_to_bytes,
            "_unpack": struct.unpack_from,
            "_pack": struct.pack,
            "_E": _dec_err,
            "_EE": RecordEncodeError,
            "_deepcopy": copy.deepcopy,
            "_first": lambda t: t[0],
            "_keys_err": _keys_err,
            "_Z": ZERO_UUID,
            "_EMPTY": {},
        }
        self.n = 0
        self.cache: dict[tuple[int, int, bool, str], tuple[str, str]] = {}

    def _name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value: Any, prefix: str = "_C") -> str:
        name = self._name(prefix)
        self.ns[name] = value
        return name

    def compile(self, src: str, name: str) -> Callable[..., Any]:
        code = compile(src, f"<kraft_replay.codec generated {name}>", "exec")
        exec(code, self.ns)  # noqa: S102 - source built from our own field tables
        return self.ns[name]  # type: ignore[no-any-return]

    # -- default expressions ---------------------------------------------------------------
    def default_expr(self, f: FieldSpec, version: int) -> str:
        v = f.default_value(version)
        if v is None or isinstance(v, (bool, int, float, str)):
            return repr(v)
        if v == []:
            return "[]"
        return f"_deepcopy({self.const(v, '_D')})"

    # -- struct functions -------------------------------------------------------------------
    def struct_funcs(self, fields: tuple[FieldSpec, ...], version: int, flex: bool, where: str) -> tuple[str, str]:
        """Names of (decoder, encoder) for a struct with ``fields`` at ``version``."""
        key = (id(fields), version, flex, where)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        dname = self._name("_dec")
        ename = self._name("_enc")
        self.cache[key] = (dname, ename)
        self.compile(self._dec_src(dname, fields, version, flex, where), dname)
        self.compile(self._enc_src(ename, fields, version, flex, where), ename)
        return dname, ename

    # ---------------------------------------------------------------------------- decoding
    def _dec_src(self, fname: str, fields: tuple[FieldSpec, ...], version: int, flex: bool, where: str) -> str:
        present = [f for f in fields if f.present_in(version)]
        regular = [f for f in present if not f.tagged_in(version)]
        tagged = [f for f in present if f.tagged_in(version)]
        L: list[str] = [f"def {fname}(buf, pos, blen):"]
        ind = "    "
        local = {f.snake: f"v{i}" for i, f in enumerate(present)}
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in _FMT:
                run = [f]
                j = i + 1
                while j < len(regular) and regular[j].type in _FMT:
                    run.append(regular[j])
                    j += 1
                fmt = ">" + "".join(_FMT[g.type] for g in run)
                st = self.const(struct.Struct(fmt), "_S")
                size = struct.calcsize(fmt)
                names = [local[g.snake] for g in run]
                L.append(f"{ind}{', '.join(names)}, = {st}.unpack_from(buf, pos)")
                L.append(f"{ind}pos += {size}")
                for g in run:
                    if g.type == "uuid":
                        v = local[g.snake]
                        L.append(f"{ind}{v} = _UT.get({v}) or _uuid_t({v})")
                i = j
                continue
            L.extend(self._dec_value(f, version, flex, local[f.snake], ind, f"{where}.{f.name}"))
            i += 1
        if flex:
            for f in tagged:
                L.append(f"{ind}{local[f.snake]} = {self.default_expr(f, version)}")
            L.append(f"{ind}unk = None")
            L.extend(self._read_uv("nt", ind))
            L.append(f"{ind}if nt:")
            i2 = ind + "    "
            L.append(f"{i2}if nt > blen - pos:")
            L.append(f"{i2}    raise _E('{where}: tagged-field count ' + str(nt) + ' exceeds the remaining bytes')")
            L.append(f"{i2}for _ in range(nt):")
            i3 = i2 + "    "
            L.extend(self._read_uv("tag", i3))
            L.extend(self._read_uv("sz", i3))
            L.append(f"{i3}tend = pos + sz")
            L.append(f"{i3}if tend > blen:")
            L.append(f"{i3}    raise _E('{where}: tagged field ' + str(tag) + ' runs past the end')")
            kw = "if"
            for f in sorted(tagged, key=lambda g: g.tag or 0):
                L.append(f"{i3}{kw} tag == {f.tag}:")
                L.extend(
                    self._dec_value(f, version, True, local[f.snake], i3 + "    ", f"{where}.{f.name}", tagged=True)
                )
                L.append(f"{i3}    if pos != tend:")
                L.append(f"{i3}        raise _E('{where}: tagged field {f.name} size mismatch')")
                kw = "elif"
            invalid = sorted(
                {g.tag for g in fields if g.tag is not None and not (g.present_in(version) and g.tagged_in(version))}
            )
            if invalid:
                L.append(f"{i3}{kw} tag in {set(invalid)!r}:")
                L.append(f"{i3}    raise _E('{where}: tag ' + str(tag) + ' is not valid for version {version}')")
                kw = "elif"
            if kw == "if":
                L.append(f"{i3}if True:")
            else:
                L.append(f"{i3}else:")
            L.append(f"{i3}    if unk is None:")
            L.append(f"{i3}        unk = []")
            L.append(f"{i3}    unk.append((tag, buf[pos:tend]))")
            L.append(f"{i3}    pos = tend")
        items = ", ".join(f"{f.snake!r}: {local[f.snake]}" for f in present)
        L.append(f"{ind}d = {{{items}}}")
        if flex:
            L.append(f"{ind}if unk:")
            L.append(f"{ind}    d['_unknown_tagged'] = unk")
        L.append(f"{ind}return d, pos")
        return "\n".join(L) + "\n"

    @staticmethod
    def _read_uv(var: str, ind: str) -> list[str]:
        return [
            f"{ind}{var} = buf[pos]",
            f"{ind}pos += 1",
            f"{ind}if {var} > 127:",
            f"{ind}    {var}, pos = _uv(buf, pos - 1)",
        ]

    def _read_len(self, var: str, ind: str, flex: bool, wide: bool) -> list[str]:
        """Length/count prefix into ``var`` with -1 meaning null."""
        if flex:
            return self._read_uv(var, ind) + [f"{ind}{var} -= 1"]
        fmt = ">i" if wide else ">h"
        size = 4 if wide else 2
        st = self.const(struct.Struct(fmt), "_S")
        return [
            f"{ind}{var}, = {st}.unpack_from(buf, pos)",
            f"{ind}pos += {size}",
            f"{ind}if {var} < -1:",
            f"{ind}    raise _E('negative length ' + str({var}))",
        ]

    def _dec_value(
        self, f: FieldSpec, version: int, flex: bool, var: str, ind: str, where: str, tagged: bool = False
    ) -> list[str]:
        """Lines reading one field value (any type) at ``pos`` into ``var``."""
        t = f.type
        nullable = f.nullable_in(version)
        L: list[str] = []
        if t in _FMT:
            st = self.const(struct.Struct(">" + _FMT[t]), "_S")
            L.append(f"{ind}{var}, = {st}.unpack_from(buf, pos)")
            L.append(f"{ind}pos += {FIXED_SIZES[t]}")
            if t == "uuid":
                L.append(f"{ind}{var} = _UT.get({var}) or _uuid_t({var})")
            return L
        if t in ("string", "bytes", "records"):
            sflex = f.flexible_in(version, flex)
            n = var + "_n"
            L.extend(self._read_len(n, ind, sflex, wide=(t != "string")))
            L.append(f"{ind}if {n} < 0:")
            if nullable:
                L.append(f"{ind}    {var} = None")
            else:
                L.append(f"{ind}    raise _E('{where}: non-nullable field is null')")
            L.append(f"{ind}else:")
            if t == "string":
                L.append(f"{ind}    if {n} > {_MAX_STRING}:")
                L.append(
                    f"{ind}        raise _E('{where}: string of ' + str({n}) + ' bytes is longer than {_MAX_STRING}')"
                )
            L.append(f"{ind}    e = pos + {n}")
            L.append(f"{ind}    if e > blen:")
            L.append(f"{ind}        raise _E('{where}: length ' + str({n}) + ' runs past the end')")
            if t == "string":
                L.append(f"{ind}    {var} = buf[pos:e].decode()")
            else:
                L.append(f"{ind}    {var} = buf[pos:e]")
            L.append(f"{ind}    pos = e")
            return L
        if f.is_array:
            n = var + "_n"
            L.extend(self._read_len(n, ind, flex, wide=True))
            L.append(f"{ind}if {n} < 0:")
            if nullable:
                L.append(f"{ind}    {var} = None")
            else:
                L.append(f"{ind}    raise _E('{where}: non-nullable array is null')")
            L.append(f"{ind}else:")
            i2 = ind + "    "
            et = f.element_type
            if f.fields is not None:
                minsize = 1
            elif et in FIXED_SIZES:
                minsize = FIXED_SIZES[et]
            else:
                minsize = 1 if flex else 2
            L.append(f"{i2}if {n} * {minsize} > blen - pos:")
            L.append(f"{i2}    raise _E('{where}: array count ' + str({n}) + ' exceeds the remaining bytes')")
            if et == "uuid":
                L.append(f"{i2}e = pos + 16 * {n}")
                L.append(f"{i2}{var} = [_UT.get(buf[p:p + 16]) or _uuid_t(buf[p:p + 16]) for p in range(pos, e, 16)]")
                L.append(f"{i2}pos = e")
            elif et in _FMT:
                ch = _FMT[et]
                size = FIXED_SIZES[et]
                L.append(f"{i2}{var} = list(_unpack('>' + str({n}) + '{ch}', buf, pos)) if {n} else []")
                L.append(f"{i2}pos += {size} * {n}")
            elif f.fields is not None:
                dname, _ = self.struct_funcs(f.fields, version, flex, f"{where}[]")
                L.append(f"{i2}{var} = []")
                L.append(f"{i2}for _ in range({n}):")
                L.append(f"{i2}    el, pos = {dname}(buf, pos, blen)")
                L.append(f"{i2}    {var}.append(el)")
            elif et in ("string", "bytes", "records"):
                elem = FieldSpec(
                    name=f.name + "[]",
                    snake="_el",
                    json_name="",
                    type=et,
                    struct_name=None,
                    versions=f.versions,
                    nullable_versions=None,
                    tagged_versions=None,
                    tag=None,
                    default_raw=None,
                    flexible_versions=None,
                    ignorable=False,
                    fields=None,
                )
                L.append(f"{i2}{var} = []")
                L.append(f"{i2}for _ in range({n}):")
                L.extend(self._dec_value(elem, version, flex, "el", i2 + "    ", f"{where}[]"))
                L.append(f"{i2}    {var}.append(el)")
            else:
                raise ValueError(f"{where}: unsupported array element type {et!r}")
            return L
        if f.fields is not None:
            dname, _ = self.struct_funcs(f.fields, version, flex, where)
            if tagged and nullable:
                L.extend(self._read_uv(var + "_m", ind))
                L.append(f"{ind}if {var}_m == 0:")
                L.append(f"{ind}    {var} = None")
                L.append(f"{ind}else:")
                L.append(f"{ind}    {var}, pos = {dname}(buf, pos, blen)")
            elif nullable:
                L.append(f"{ind}{var}_m = buf[pos]")
                L.append(f"{ind}pos += 1")
                L.append(f"{ind}if {var}_m > 127:")
                L.append(f"{ind}    {var} = None")
                L.append(f"{ind}else:")
                L.append(f"{ind}    {var}, pos = {dname}(buf, pos, blen)")
            else:
                L.append(f"{ind}{var}, pos = {dname}(buf, pos, blen)")
            return L
        raise ValueError(f"{where}: unsupported type {t!r}")

    # ---------------------------------------------------------------------------- encoding
    def _enc_src(self, fname: str, fields: tuple[FieldSpec, ...], version: int, flex: bool, where: str) -> str:
        present = [f for f in fields if f.present_in(version)]
        absent = [f for f in fields if not f.present_in(version)]
        regular = [f for f in present if not f.tagged_in(version)]
        tagged = [f for f in present if f.tagged_in(version)]
        allowed = frozenset(f.snake for f in fields) | ({"_unknown_tagged"} if flex else set())
        kname = self.const(allowed, "_K")
        L: list[str] = [f"def {fname}(d, out):"]
        ind = "    "
        L.append(f"{ind}if not {kname}.issuperset(d):")
        L.append(f"{ind}    _keys_err(d, {kname}, {where!r}, {version})")
        for f in absent:
            dflt = self.const(f.default_value(version), "_D")
            L.append(f"{ind}x = d.get({f.snake!r})")
            L.append(f"{ind}if x is not None and x != {dflt}:")
            if f.ignorable:
                L.append(f"{ind}    pass")
            else:
                msg = f"{where}: field {f.snake} does not exist in version {version} (value "
                L.append(f"{ind}    raise _EE('{msg}' + repr(x) + ')')")
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in _FMT:
                run = [f]
                j = i + 1
                while j < len(regular) and regular[j].type in _FMT:
                    run.append(regular[j])
                    j += 1
                st = self.const(struct.Struct(">" + "".join(_FMT[g.type] for g in run)), "_S")
                args = []
                for k, g in enumerate(run):
                    get = f"d.get({g.snake!r}, {self.default_expr(g, version)})"
                    if g.type == "uuid":  # text -> 16 bytes, evaluated once per field
                        L.append(f"{ind}u{k} = {get}")
                        L.append(f"{ind}u{k} = _UB.get(u{k}) or _uuid_b(u{k})")
                        args.append(f"u{k}")
                    else:
                        args.append(get)
                L.append(f"{ind}out += {st}.pack({', '.join(args)})")
                i = j
                continue
            L.append(f"{ind}v = d.get({f.snake!r}, {self._enc_default(f, version)})")
            L.extend(self._enc_value(f, version, flex, "v", "out", ind, f"{where}.{f.name}"))
            i += 1
        if flex:
            L.append(f"{ind}tg = None")
            for f in sorted(tagged, key=lambda g: g.tag or 0):
                dv = f.default_value(version)
                L.append(f"{ind}v = d.get({f.snake!r}, {self._enc_default(f, version)})")
                if dv is None:
                    cond = "v is not None"
                elif dv == []:
                    cond = "v"
                elif isinstance(dv, dict):
                    cond = f"v != {self.const(dv, '_D')}"
                else:
                    cond = f"v != {dv!r}"
                L.append(f"{ind}if {cond}:")
                L.append(f"{ind}    t = bytearray()")
                L.extend(self._enc_value(f, version, True, "v", "t", ind + "    ", f"{where}.{f.name}", tagged=True))
                L.append(f"{ind}    if tg is None:")
                L.append(f"{ind}        tg = []")
                L.append(f"{ind}    tg.append(({f.tag}, t))")
            L.append(f"{ind}unk = d.get('_unknown_tagged')")
            L.append(f"{ind}if unk:")
            L.append(f"{ind}    tg = (tg or []) + [(int(a), bytes(b)) for a, b in unk]")
            L.append(f"{ind}    tg.sort(key=_first)")
            L.append(f"{ind}if tg is None:")
            L.append(f"{ind}    out.append(0)")
            L.append(f"{ind}else:")
            L.append(f"{ind}    out += _uvb(len(tg))")
            L.append(f"{ind}    for a, b in tg:")
            L.append(f"{ind}        out += _uvb(a)")
            L.append(f"{ind}        out += _uvb(len(b))")
            L.append(f"{ind}        out += b")
        return "\n".join(L) + "\n"

    def _enc_default(self, f: FieldSpec, version: int) -> str:
        dv = f.default_value(version)
        if dv == []:
            return "()"
        if isinstance(dv, dict):
            return "_EMPTY"
        return repr(dv)

    def _write_len(self, n_expr: str, out: str, ind: str, flex: bool, wide: bool) -> list[str]:
        if flex:
            return [f"{ind}{out} += _uvb({n_expr} + 1)"]
        st = self.const(struct.Struct(">i" if wide else ">h"), "_S")
        return [f"{ind}{out} += {st}.pack({n_expr})"]

    def _enc_value(
        self, f: FieldSpec, version: int, flex: bool, v: str, out: str, ind: str, where: str, tagged: bool = False
    ) -> list[str]:
        t = f.type
        nullable = f.nullable_in(version)
        L: list[str] = []
        if t in _FMT:
            st = self.const(struct.Struct(">" + _FMT[t]), "_S")
            if t == "uuid":
                L.append(f"{ind}{out} += _UB.get({v}) or _uuid_b({v})")
            else:
                L.append(f"{ind}{out} += {st}.pack({v})")
            return L
        null_lines: list[str]
        if t in ("string", "bytes", "records") or f.is_array:
            sflex = f.flexible_in(version, flex) if not f.is_array else flex
            wide = t != "string"
            if nullable:
                null_lines = self._write_len("-1", out, ind + "    ", sflex, wide)
            else:
                null_lines = [f"{ind}    raise _EE('{where}: non-nullable field is None')"]
            L.append(f"{ind}if {v} is None:")
            L.extend(null_lines)
            L.append(f"{ind}else:")
            i2 = ind + "    "
            if t == "string":
                L.append(f"{i2}b = {v}.encode()")
                L.append(f"{i2}if len(b) > {_MAX_STRING}:")
                L.append(f"{i2}    raise _EE('{where}: string longer than {_MAX_STRING} bytes')")
                L.extend(self._write_len("len(b)", out, i2, sflex, wide=False))
                L.append(f"{i2}{out} += b")
                return L
            if t in ("bytes", "records"):
                L.append(f"{i2}b = bytes({v})")
                L.extend(self._write_len("len(b)", out, i2, sflex, wide=True))
                L.append(f"{i2}{out} += b")
                return L
            et = f.element_type
            L.extend(self._write_len(f"len({v})", out, i2, flex, wide=True))
            if et == "uuid":
                L.append(f"{i2}for x in {v}:")
                L.append(f"{i2}    {out} += _UB.get(x) or _uuid_b(x)")
            elif et in _FMT:
                L.append(f"{i2}if {v}:")
                L.append(f"{i2}    {out} += _pack('>' + str(len({v})) + '{_FMT[et]}', *{v})")
            elif f.fields is not None:
                _, ename = self.struct_funcs(f.fields, version, flex, f"{where}[]")
                L.append(f"{i2}for x in {v}:")
                L.append(f"{i2}    {ename}(x, {out})")
            elif et in ("string", "bytes", "records"):
                elem = FieldSpec(
                    name=f.name + "[]",
                    snake="_el",
                    json_name="",
                    type=et,
                    struct_name=None,
                    versions=f.versions,
                    nullable_versions=None,
                    tagged_versions=None,
                    tag=None,
                    default_raw=None,
                    flexible_versions=None,
                    ignorable=False,
                    fields=None,
                )
                L.append(f"{i2}for x in {v}:")
                L.extend(self._enc_value(elem, version, flex, "x", out, i2 + "    ", f"{where}[]"))
            else:
                raise ValueError(f"{where}: unsupported array element type {et!r}")
            return L
        if f.fields is not None:
            _, ename = self.struct_funcs(f.fields, version, flex, where)
            if nullable:
                L.append(f"{ind}if {v} is None:")
                L.append(f"{ind}    {out}.append(0)" if tagged else f"{ind}    {out}.append(255)")
                L.append(f"{ind}else:")
                L.append(f"{ind}    {out}.append(1)")
                L.append(f"{ind}    {ename}({v}, {out})")
            else:
                L.append(f"{ind}if {v} is None:")
                L.append(f"{ind}    raise _EE('{where}: non-nullable struct is None')")
                L.append(f"{ind}{ename}({v}, {out})")
            return L
        raise ValueError(f"{where}: unsupported type {t!r}")


def _keys_err(d: dict[str, Any], allowed: frozenset[str], where: str, version: int) -> None:
    bad = sorted(str(k) for k in d if k not in allowed)
    raise RecordEncodeError(
        f"{where} v{version}: unknown field(s) {', '.join(bad)}; known: {', '.join(sorted(allowed))}"
    )


_GEN = _Gen()
_GEN_LOCK = threading.Lock()  # code generation runs once per (message, version); guard it for threads
_Codec = tuple[Callable[[bytes, int, int], tuple[dict[str, Any], int]], Callable[[dict[str, Any], bytearray], None]]
_CODECS: dict[tuple[str, int], _Codec] = {}


def _codec(schema: MessageSchema, version: int) -> _Codec:
    """The generated (decoder, encoder) of ``schema`` at ``version`` (built on first use)."""
    key = (schema.name, version)
    c = _CODECS.get(key)
    if c is None:
        with _GEN_LOCK:
            c = _CODECS.get(key)
            if c is None:
                dname, ename = _GEN.struct_funcs(schema.fields, version, schema.is_flexible(version), schema.name)
                c = (_GEN.ns[dname], _GEN.ns[ename])
                _CODECS[key] = c
    return c


# Record decoders by (api_key << 16 | version), filled on first use of each pair.
_DEC_BY_KEY: dict[int, Callable[[bytes, int, int], tuple[dict[str, Any], int]]] = {}


def _record_decoder(api_key: int, version: int) -> Callable[[bytes, int, int], tuple[dict[str, Any], int]]:
    rt = RECORD_TYPES.get(api_key)
    if rt is None:
        raise RecordDecodeError("UNKNOWN_RECORD_TYPE", f"unknown metadata record type id {api_key}")
    if not rt.schema.is_valid_version(version):
        raise RecordDecodeError(
            "UNSUPPORTED_RECORD_VERSION",
            f"{rt.name} version {version} is outside its valid versions {rt.valid_versions}",
        )
    dec = _codec(rt.schema, version)[0]
    _DEC_BY_KEY[(api_key << 16) | version] = dec
    return dec


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------

_NOOP_VALUE = b"\x01\x14\x00\x00"
_NOOP_KEY = 20


def decode_record_value(value: bytes | bytearray | memoryview) -> MetadataRecord:
    """Decode a framed metadata record value (frame version 1, api key, version, body; nothing after)."""
    if value.__class__ is not bytes:
        if not isinstance(value, (bytearray, memoryview)):
            raise RecordDecodeError("RECORD_DECODE_ERROR", f"record value must be bytes, got {type(value).__name__}")
        value = bytes(value)
    if value == _NOOP_VALUE:
        return MetadataRecord(_NOOP_KEY, 0, {})
    n = len(value)
    try:
        if n >= 3 and value[0] == 1 and value[1] < 128 and value[2] < 128:
            api_key = value[1]
            version = value[2]
            pos = 3
        else:
            if n == 0:
                raise RecordDecodeError("RECORD_DECODE_ERROR", "empty record value")
            frame, pos = read_uvarint(value, 0)
            if frame != FRAME_VERSION:
                if frame == 0:
                    raise RecordDecodeError(
                        "BAD_FRAME_VERSION",
                        "frame version 0 (the 2.8 KRaft preview format) is not supported",
                    )
                raise RecordDecodeError("BAD_FRAME_VERSION", f"unknown frame version {frame} (expected 1)")
            api_key, pos = read_uvarint(value, pos)
            version, pos = read_uvarint(value, pos)
    except VarintError as exc:
        raise RecordDecodeError("RECORD_DECODE_ERROR", f"bad record frame: {exc}") from None
    dec = _DEC_BY_KEY.get((api_key << 16) | version)
    if dec is None:
        dec = _record_decoder(api_key, version)
    try:
        data, pos = dec(value, pos, n)
    except RecordDecodeError as exc:
        rt = RECORD_TYPES[api_key]
        raise RecordDecodeError(exc.code, f"{rt.name} v{version}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - any failure inside the body decoder is a decode error
        rt = RECORD_TYPES[api_key]
        raise RecordDecodeError(
            "RECORD_DECODE_ERROR", f"{rt.name} v{version}: truncated or malformed body ({type(exc).__name__}: {exc})"
        ) from None
    if pos != n:
        rt = RECORD_TYPES[api_key]
        raise RecordDecodeError("TRAILING_BYTES", f"{rt.name} v{version}: {n - pos} byte(s) after the body")
    return MetadataRecord(api_key, version, data)


def encode_record_value(record: MetadataRecord) -> bytes:
    """Encode a record as a framed metadata record value (the exact inverse of decoding)."""
    api_key, version = record.api_key, record.version
    rt = RECORD_TYPES.get(api_key)
    if rt is None:
        raise RecordEncodeError(f"unknown metadata record type id {api_key}")
    if not rt.schema.is_valid_version(version):
        raise RecordEncodeError(f"{rt.name} version {version} is outside its valid versions {rt.valid_versions}")
    if api_key == _NOOP_KEY and not record.data:
        return _NOOP_VALUE
    out = bytearray((FRAME_VERSION,))
    out += _uvb(api_key)
    out += _uvb(version)
    _encode_into(rt.schema, version, record.data, out)
    return bytes(out)


def _encode_into(schema: MessageSchema, version: int, data: dict[str, Any], out: bytearray) -> None:
    if not isinstance(data, dict):
        raise RecordEncodeError(f"{schema.name} v{version}: data must be a dict, got {type(data).__name__}")
    enc = _codec(schema, version)[1]
    try:
        enc(data, out)
    except RecordEncodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - bad values surface as one encode error
        raise RecordEncodeError(f"{schema.name} v{version}: cannot encode ({type(exc).__name__}: {exc})") from None


def _schema(schema: MessageSchema | str) -> MessageSchema:
    if isinstance(schema, MessageSchema):
        return schema
    try:
        return MESSAGE_SCHEMAS[schema]
    except KeyError:
        raise KeyError(f"unknown message schema {schema!r}") from None


def decode_message(
    schema: MessageSchema | str, version: int, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> tuple[dict[str, Any], int]:
    """Decode one unframed message body (e.g. a control-record value at schema version 0).

    Reads ``buf[pos:end]`` (``end`` defaults to the end of ``buf``) and returns ``(data, new_pos)``
    where ``new_pos`` is relative to ``buf``; the caller checks for trailing bytes. Versions
    outside the schema's valid versions raise UNSUPPORTED_RECORD_VERSION.
    """
    s = _schema(schema)
    if not s.is_valid_version(version):
        raise RecordDecodeError(
            "UNSUPPORTED_RECORD_VERSION", f"{s.name} version {version} is outside its valid versions {s.valid_versions}"
        )
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise RecordDecodeError("RECORD_DECODE_ERROR", f"{s.name}: buffer must be bytes, got {type(buf).__name__}")
    if end is None:
        end = len(buf)
    if pos < 0 or end > len(buf) or pos > end:
        raise RecordDecodeError(
            "RECORD_DECODE_ERROR", f"{s.name}: bad range [{pos}, {end}) of a {len(buf)}-byte buffer"
        )
    if buf.__class__ is bytes and pos == 0 and end == len(buf):
        view = buf
        base = 0
    else:
        view = bytes(buf[pos:end])
        base = pos
    dec = _codec(s, version)[0]
    try:
        data, p = dec(view, 0, len(view))
    except RecordDecodeError as exc:
        raise RecordDecodeError(exc.code, f"{s.name} v{version}: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001
        raise RecordDecodeError(
            "RECORD_DECODE_ERROR", f"{s.name} v{version}: truncated or malformed body ({type(exc).__name__}: {exc})"
        ) from None
    return data, base + p


def encode_message(schema: MessageSchema | str, version: int, data: dict[str, Any]) -> bytes:
    """Encode one unframed message body at ``version`` (inverse of :func:`decode_message`)."""
    s = _schema(schema)
    if not s.is_valid_version(version):
        raise RecordEncodeError(f"{s.name} version {version} is outside its valid versions {s.valid_versions}")
    out = bytearray()
    _encode_into(s, version, data, out)
    return bytes(out)
