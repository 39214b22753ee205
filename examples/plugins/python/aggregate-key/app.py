# namespace-reason (Python, componentize-py): an aggregate-key function that groups similar
# events per namespace instead of per object.
#   aggregate key = source.component|involvedObject.kind|involvedObject.namespace|type|reason
#   local key     = message (as client-go)
# The correlator calls aggregate_key_batch with a packed batch of the 13 key fields per event
# (wit/types.wit, key-fields-batch) and expects 2 packed strings per event back.
# World aggregate-key-projected: key_fields names the 5 fields the aggregate key reads, and
# local_key_field says the local key is the message as it is; the host then fills only those 5
# (every other field, the message too, arrives as "") and answers events that repeat them from
# its memo without calling Python.
import wit_world
from wit_world.imports import types
from packed import unpack, pack  # the packed strings of a batch (packed.py)

READS = bytes([0, 2, 3, 8, 9])  # source.component, kind, namespace, type, reason
MESSAGE = 10


def _keys(f: list[str]) -> tuple[str, str]:
    # f[0] source.component, f[2] kind, f[3] namespace, f[8] type, f[9] reason, f[10] message
    return "|".join((f[0], f[2], f[3], f[8], f[9])), f[10]


class WitWorld(wit_world.WitWorld):
    def key_fields(self) -> bytes:
        return READS

    def local_key_field(self) -> int | None:
        return MESSAGE

    def aggregate_key(self, event: types.Event) -> types.AggregateKeyPair:
        o = event.involved_object
        agg = "|".join((event.source.component, o.kind, o.namespace, event.type, event.reason))
        return types.AggregateKeyPair(agg, event.message)

    def aggregate_key_batch(self, events: types.PackedStrings) -> types.PackedStrings:
        data, ends = pack(key for f in unpack(events) for key in _keys(f))
        return types.PackedStrings(data, ends)
