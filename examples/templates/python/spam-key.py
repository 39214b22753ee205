# {{name}} (Python, componentize-py): a spam key function: events with equal keys share one
# token bucket. This one is client-go's v0.26 getSpamKey: source + involved object.
import wit_world
from wit_world.imports import types
from packed import unpack, pack


def key(f: list[str]) -> str:
    # source.component, source.host, kind, namespace, name, uid, api-version
    return "".join((f[0], f[1], f[2], f[3], f[4], f[6], f[7]))


class WitWorld(wit_world.WitWorld):
    def spam_key(self, event: types.Event) -> str:
        o, s = event.involved_object, event.source
        return key([s.component, s.host, o.kind, o.namespace, o.name, o.field_path, o.uid, o.api_version])

    def spam_key_batch(self, events: types.PackedStrings) -> types.PackedStrings:
        data, ends = pack(key(f) for f in unpack(events))
        return types.PackedStrings(data, ends)
