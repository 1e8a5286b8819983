"""Flat Spark schemas from a short ``"name type, ..."`` text without a running session."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_TYPES: dict[str, DataType] = {
    "string": StringType(), "long": LongType(), "int": IntegerType(), "boolean": BooleanType(),
    "timestamp": TimestampType(), "double": DoubleType(), "array<int>": ArrayType(IntegerType()),
}


def schema(text: str) -> StructType:
    """``"a string, b long"`` -> StructType (nullable fields; the types in ``_TYPES`` only)."""
    fields = []
    for part in text.split(","):
        name, typ = part.split()
        fields.append(StructField(name, _TYPES[typ], True))
    return StructType(fields)
