# {{name}} (Python, componentize-py): a sink. It formats each request as one line ("create|patch
# TYPE REASON KIND NAMESPACE/NAME: MESSAGE") and writes it through the `output` import; the host
# delivers the bytes (the plugin has no network, files or stdio: print() traps).
#
# `deliver` returns the event as stored or raises componentize_py_types.Err(SinkError_…);
# `deliver_batch` answers exactly one Ok / Err per request, in order.
import wit_world
from componentize_py_types import Err, Ok, Result
from wit_world.imports import output, types


def line(request: types.SinkRequest) -> str:
    if isinstance(request, types.SinkRequest_Create):
        verb, event = "create", request.value
    else:
        verb, event = "patch", request.value.event
    o = event.involved_object
    return f"{verb} {event.type} {event.reason} {o.kind} {o.namespace}/{o.name}: {event.message}\n"


class WitWorld(wit_world.WitWorld):
    def deliver(self, tenant: str, request: types.SinkRequest) -> types.Event:
        try:
            output.write(line(request).encode())
        except Err as e:
            raise Err(types.SinkError_Retryable(f"output: {e.value}"))
        if isinstance(request, types.SinkRequest_Create):
            return request.value
        return request.value.event

    def deliver_batch(
        self, tenant: str, requests: list[types.SinkRequest]
    ) -> list[Result[types.Event, types.SinkError]]:
        results: list[Result[types.Event, types.SinkError]] = []
        for r in requests:
            try:
                results.append(Ok(self.deliver(tenant, r)))
            except Err as e:
                results.append(Err(e.value))
        return results
