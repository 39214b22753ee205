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


# The fields filter_batch receives, per event, in this order: the host sends nothing else.
FIELDS = [types.EventField_Type(), types.EventField_Reason()]


KEEP = types.Verdict_Keep()  # one value for every kept event: nothing to build per event


def verdict(tenant: str, type_: str, reason: str) -> types.Verdict:
    if type_ == "Normal" and reason in reasons():
        if log.enabled(log.Level.DEBUG):
            log.log(log.Level.DEBUG, "dropping a routine event",
                    [log.Field("tenant", tenant), log.Field("reason", reason)])
        return types.Verdict_Drop("routine Normal event: " + reason)
    return KEEP


class WitWorld(wit_world.WitWorld):
    def filter(self, tenant: str, event: types.Event) -> types.Verdict:
        return verdict(tenant, event.type, event.reason)

    def fields(self) -> list[types.EventField]:
        return FIELDS

    def filter_batch(self, tenant: str, count: int, events: types.PackedStrings) -> list[types.Verdict]:
        # String n*i + f is field f of event i (wit/types.wit, projected-batch). One decode
        # for the batch when it is ASCII (byte offsets are then character offsets).
        data, ends, start, values = events.bytes, events.ends, 0, []
        text = data.decode("utf-8")
        if len(text) == len(data):
            for end in ends:
                values.append(text[start:end])
                start = end
        else:
            for end in ends:
                values.append(data[start:end].decode("utf-8"))
                start = end
        n = len(FIELDS)
        return [verdict(tenant, *values[n * i:n * i + n]) for i in range(count)]
