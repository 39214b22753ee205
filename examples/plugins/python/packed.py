# The packed strings of the plugin boundary (wit/types.wit: packed-strings, key-fields-batch),
# for the Python plugins whose batch exports take them (aggregate key, message combiner, spam
# key): a module beside the plugin's app (componentize-py -p DIR finds it). A key-fields batch
# has 13 strings per event, in the order of types.key-fields-batch.
from componentize_py_types import Err

FIELDS = 13


def unpack(events) -> list[list[str]]:
    """The events of a key-fields batch as lists of 13 strings; raises Err when malformed."""
    data, ends = events.bytes, events.ends
    if len(ends) % FIELDS != 0:
        raise Err(f"len(ends) = {len(ends)} is not a multiple of {FIELDS}")
    if (ends[-1] if ends else 0) != len(data):
        raise Err("the last offset is not len(bytes)")
    out, fields, start = [], [], 0
    for end in ends:
        if end < start or end > len(data):
            raise Err("offsets decrease or pass len(bytes)")
        try:
            fields.append(data[start:end].decode("utf-8"))
        except UnicodeDecodeError:
            raise Err("bytes are not UTF-8 split at character boundaries")
        start = end
        if len(fields) == FIELDS:
            out.append(fields)
            fields = []
    return out


def pack(strings) -> tuple[bytes, list[int]]:
    """Strings as (bytes, ends) of packed-strings."""
    data, ends = bytearray(), []
    for s in strings:
        data += s.encode("utf-8")
        ends.append(len(data))
    return bytes(data), ends
