# slack (Python, componentize-py): a sink that formats each create / patch as one Slack-style
# message, a JSON line {"text": "…"} (the body of a Slack incoming-webhook request), written
# through the sink's `output` import. The plugin has no network access: the host delivers the
# bytes. The same output as the Rust `slack` example, byte for byte:
#
#   {"text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container"}
#   {"text":":warning: *BackOff* Pod default/web-0 (x3): Back-off restarting failed container"}
#
# `Normal` events get `:information_source:`. Config key `min_type = "Warning"` keeps only
# warnings (others are acknowledged without a message). Errors: an output the host cannot
# write is a retryable error.
#
# The world's exports are `deliver` / `deliver-batch` (a `send` export clashed with wasi-libc's
# socket function of that name, which CPython links).
import json

import wit_world
from componentize_py_types import Err, Ok, Result
from wit_world.imports import config, output, types

_warnings_only: bool | None = None


def warnings_only() -> bool:
    # Read on the first call, not at import: componentize-py runs the module's top level at
    # build time, when there is no host to ask. The config is fixed per instance.
    global _warnings_only
    if _warnings_only is None:
        _warnings_only = config.get("min_type") == "Warning"
    return _warnings_only


def event_of(request: types.SinkRequest) -> types.Event:
    if isinstance(request, types.SinkRequest_Create):
        return request.value
    return request.value.event


def message(event: types.Event) -> str:
    """The message line for `event`, newline included."""
    icon = ":warning:" if event.type == "Warning" else ":information_source:"
    o = event.involved_object
    obj = f"{o.namespace}/{o.name}" if o.namespace else o.name
    repeat = f" (x{event.count})" if event.count > 1 else ""
    text = f"{icon} *{event.reason}* {o.kind} {obj}{repeat}: {event.message}"
    # Escapes `"`, `\` and control characters only, as the Rust SDK's json::write_str.
    return '{"text":' + json.dumps(text, ensure_ascii=False) + "}\n"


class WitWorld(wit_world.WitWorld):
    def deliver(self, tenant: str, request: types.SinkRequest) -> types.Event:
        result = self.deliver_batch(tenant, [request])[0]
        if isinstance(result, Err):
            raise result
        return result.value

    def deliver_batch(
        self, tenant: str, requests: list[types.SinkRequest]
    ) -> list[Result[types.Event, types.SinkError]]:
        events = [event_of(r) for r in requests]
        only_warnings = warnings_only()
        lines = "".join(message(e) for e in events if not only_warnings or e.type == "Warning")
        # One write per batch; the host flushes after the call.
        if lines:
            try:
                output.write(lines.encode())
            except Err as e:
                error = types.SinkError_Retryable(f"slack: output: {e.value}")
                return [Err(error) for _ in events]
        return [Ok(e) for e in events]
