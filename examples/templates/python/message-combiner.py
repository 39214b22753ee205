# {{name}} (Python, componentize-py): a message combiner, the message of the event that replaces
# similar events once aggregation triggers. This one is client-go's default:
# "(combined from similar events): " + message.
import wit_world
from wit_world.imports import types
from packed import unpack, pack

PREFIX = "(combined from similar events): "


class WitWorld(wit_world.WitWorld):
    def combine_message(self, event: types.Event) -> str:
        return PREFIX + event.message

    def combine_message_batch(self, events: types.PackedStrings) -> types.PackedStrings:
        # f[10] is the message (see types.key-fields-batch); one string per event.
        data, ends = pack(PREFIX + f[10] for f in unpack(events))
        return types.PackedStrings(data, ends)
