# slack (Python, componentize-py): an encoder that turns each batch of writes into one Slack
# incoming-webhook message (`webhook:https://hooks.slack.com/services/…,encoder=slack`): a
# `text` fallback with one line per write, and one Block Kit `section` per write (at most 50
# blocks: past 49 writes the last block says how many more the text holds). The host posts it,
# with its queue, batching, retries (Slack's 429 and Retry-After) and order; the plugin has no
# network. The same bodies as the Rust `slack` example, byte for byte:
#
#   {"text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container","blocks":[{"type":"section","text":{"type":"mrkdwn","text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container"}}]}
#
# A repeat shows its count (`(x3)`); `Normal` events get `:information_source:`. Config key
# `min_type = "Warning"` leaves other events out of the message (a batch of none of them is
# refused: it fails without a request). A section holds at most 3,000 characters, cut there.
import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import config, types

MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000

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


def line(event: types.Event) -> str:
    """The message line for `event`."""
    icon = ":warning:" if event.type == "Warning" else ":information_source:"
    o = event.involved_object
    obj = f"{o.namespace}/{o.name}" if o.namespace else o.name
    repeat = f" (x{event.count})" if event.count > 1 else ""
    return f"{icon} *{event.reason}* {o.kind} {obj}{repeat}: {event.message}"


def string(text: str) -> str:
    # Escapes `"`, `\` and control characters only, as the Rust SDK's json::write_str.
    return json.dumps(text, ensure_ascii=False)


def section(text: str) -> str:
    return '{"type":"section","text":{"type":"mrkdwn","text":' + string(text[:MAX_SECTION_CHARS]) + "}}"


class WitWorld(wit_world.WitWorld):
    def encode(self, tenant: str, writes: list[types.EncoderWrite]) -> types.EncodedRequest:
        only_warnings = warnings_only()
        events = [event_of(w.request) for w in writes]
        lines = [line(e) for e in events if not only_warnings or e.type == "Warning"]
        if not lines:
            raise Err("no event of the batch is for Slack (min_type)")
        shown = MAX_BLOCKS - 1 if len(lines) > MAX_BLOCKS else len(lines)
        blocks = [section(text) for text in lines[:shown]]
        if shown < len(lines):
            blocks.append(section(f"…and {len(lines) - shown} more"))
        body = '{"text":' + string("\n".join(lines)) + ',"blocks":[' + ",".join(blocks) + "]}"
        return types.EncodedRequest(content_type="", headers=[], body=body.encode())
