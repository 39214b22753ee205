# {{name}} (Python, componentize-py): a watcher sees every event before correlation. This one
# logs each Warning through the `log` import (print() traps: the component has no WASI).
import wit_world
from wit_world.imports import types, log


class WitWorld(wit_world.WitWorld):
    def watch(self, event: types.Event) -> None:
        if event.type == "Warning" and log.enabled(log.Level.INFO):
            o = event.involved_object
            log.log(log.Level.INFO, event.message,
                    [log.Field("reason", event.reason), log.Field("object", f"{o.namespace}/{o.name}")])

    def watch_batch(self, events: list[types.Event]) -> None:
        for e in events:
            self.watch(e)
