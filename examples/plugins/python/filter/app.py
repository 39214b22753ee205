# quiet-normal (Python, componentize-py): drops routine Normal events (by default the reasons
# Scheduled, Pulling, Pulled, Created, Started) before correlation; keeps Warning events and
# every other reason. Config key `reasons` (comma-separated) replaces the list.
#
# Log through the `log` import: the component is built with --stub-wasi, so print() traps.
import wit_world
from wit_world.imports import types, log, config

DEFAULT_REASONS = "Scheduled,Pulling,Pulled,Created,Started"


def _reasons() -> frozenset[str]:
    listed = config.get("reasons")
    if listed is None:
        listed = DEFAULT_REASONS
    return frozenset(r.strip() for r in listed.split(",") if r.strip())


_cached: frozenset[str] | None = None


def reasons() -> frozenset[str]:
    # Read on the first call, not at import: componentize-py runs the module's top level at
    # build time, when there is no host to ask. The config is fixed per instance.
    global _cached
    if _cached is None:
        _cached = _reasons()
    return _cached


class WitWorld(wit_world.WitWorld):
    def filter(self, tenant: str, event: types.Event) -> types.Verdict:
        if event.type == "Normal" and event.reason in reasons():
            if log.enabled(log.Level.DEBUG):
                log.log(log.Level.DEBUG, "dropping a routine event",
                        [log.Field("tenant", tenant), log.Field("reason", event.reason)])
            return types.Verdict_Drop("routine Normal event: " + event.reason)
        return types.Verdict_Keep()

    def filter_batch(self, tenant: str, events: list[types.Event]) -> list[types.Verdict]:
        return [self.filter(tenant, e) for e in events]
