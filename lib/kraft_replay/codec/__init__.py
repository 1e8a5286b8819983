"""Codec: bytes <-> KRaft metadata records and Arrow columns (see docs/design.md, "codec").

Explicit imports grouped by module; add new names in the group of their module.
"""

# schema: field tables
from kraft_replay.codec.schema import CONTROL_SCHEMAS as CONTROL_SCHEMAS
from kraft_replay.codec.schema import MESSAGE_SCHEMAS as MESSAGE_SCHEMAS
from kraft_replay.codec.schema import RECORD_TYPES as RECORD_TYPES
from kraft_replay.codec.schema import RECORD_TYPES_BY_TOOL_NAME as RECORD_TYPES_BY_TOOL_NAME
from kraft_replay.codec.schema import FieldSpec as FieldSpec
from kraft_replay.codec.schema import MessageSchema as MessageSchema
from kraft_replay.codec.schema import RecordType as RecordType
from kraft_replay.codec.schema import fields_for as fields_for

# varint
from kraft_replay.codec.varint import VarintError as VarintError
from kraft_replay.codec.varint import read_uvarint as read_uvarint
from kraft_replay.codec.varint import read_varint as read_varint
from kraft_replay.codec.varint import read_varlong as read_varlong
from kraft_replay.codec.varint import write_uvarint as write_uvarint
from kraft_replay.codec.varint import write_varint as write_varint
from kraft_replay.codec.varint import write_varlong as write_varlong

# records: framed metadata record values and unframed message bodies
from kraft_replay.codec.records import MetadataRecord as MetadataRecord
from kraft_replay.codec.records import RecordDecodeError as RecordDecodeError
from kraft_replay.codec.records import RecordEncodeError as RecordEncodeError
from kraft_replay.codec.records import decode_message as decode_message
from kraft_replay.codec.records import decode_record_value as decode_record_value
from kraft_replay.codec.records import encode_message as encode_message
from kraft_replay.codec.records import encode_record_value as encode_record_value
from kraft_replay.codec.records import uuid_from_bytes as uuid_from_bytes
from kraft_replay.codec.records import uuid_to_bytes as uuid_to_bytes

# jsonfmt: the dump tool's payload JSON
from kraft_replay.codec.jsonfmt import DumpJsonError as DumpJsonError
from kraft_replay.codec.jsonfmt import from_dump_json as from_dump_json
from kraft_replay.codec.jsonfmt import message_from_json as message_from_json
from kraft_replay.codec.jsonfmt import message_json as message_json
from kraft_replay.codec.jsonfmt import to_dump_json as to_dump_json

# arrow_payload: payload / control struct columns
from kraft_replay.codec.arrow_payload import CONTROL_FIELDS as CONTROL_FIELDS
from kraft_replay.codec.arrow_payload import CONTROL_STRUCT_TYPES as CONTROL_STRUCT_TYPES
from kraft_replay.codec.arrow_payload import PAYLOAD_COLUMN_BY_API_KEY as PAYLOAD_COLUMN_BY_API_KEY
from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS as PAYLOAD_FIELDS
from kraft_replay.codec.arrow_payload import PayloadError as PayloadError
from kraft_replay.codec.arrow_payload import build_payload_columns as build_payload_columns
from kraft_replay.codec.arrow_payload import build_struct_array as build_struct_array
from kraft_replay.codec.arrow_payload import records_from_payload_columns as records_from_payload_columns
from kraft_replay.codec.arrow_payload import build_control_columns as build_control_columns

# errors: quarantine reason codes
from kraft_replay.codec.errors import REASON_CODES as REASON_CODES

# decode: bytes of a file -> data records, control records and quarantined ranges as Arrow
from kraft_replay.codec.decode import CONTROL_RECORDS_SCHEMA as CONTROL_RECORDS_SCHEMA
from kraft_replay.codec.decode import DATA_SCHEMA as DATA_SCHEMA
from kraft_replay.codec.decode import QUARANTINE_RANGES_SCHEMA as QUARANTINE_RANGES_SCHEMA
from kraft_replay.codec.decode import ChunkStats as ChunkStats
from kraft_replay.codec.decode import DecodedRecords as DecodedRecords
from kraft_replay.codec.decode import decode_records as decode_records
