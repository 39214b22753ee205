"""A receiver of the log-store APIs the eventpipe sinks use, for tests/it/log_stores.rs.

    log_store_receiver.py KIND OUT

KIND is one of
- `loki`: `POST /loki/api/v1/push`, JSON (`application/json`) or protobuf
  (`application/x-protobuf`, snappy block format, decoded with cramjam and a descriptor of the
  messages of Loki's `pkg/push/push.proto`, package `logproto`, built here field for field);
  every push must carry each stream's entries in time order, or it is answered 400 as Loki does
  ("entry out of order");
- `elasticsearch`: `POST /_bulk`, NDJSON action and document lines. The first attempt of every
  seventh document is answered `429` in the bulk response's `items` and every eleventh `503`,
  and the first request is answered `429` as a whole with `Retry-After: 1`: the sink must send
  those items again, and only those. A document whose `_id` was already written is counted as a
  duplicate;
- `splunk`: `POST /services/collector/event` with `Authorization: Splunk test-token`,
  concatenated HEC event objects. The first request is answered `503` `{"text":"Server is
  busy","code":9}` with `Retry-After: 1`.

Each write received is one JSON line in OUT: `{"name", "count", ...}` with what the store keeps of
it. At the end (SIGTERM), a last line `{"summary": {...}}` gives counters. It prints
`listening on PORT` once it accepts connections (on 127.0.0.1, a free port).
"""

import json
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KIND, OUT_PATH = sys.argv[1], sys.argv[2]
OUT = open(OUT_PATH, "w", encoding="utf-8")
LOCK = threading.Lock()
SUMMARY = {"requests": 0, "retried_items": 0, "duplicates": 0, "out_of_order": 0, "whole_refusals": 0}
STATE = {"first": True, "seen": set(), "written": set()}


def record(line):
    OUT.write(json.dumps(line) + "\n")
    OUT.flush()


def loki_push_request_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="pkg/push/push.proto", package="logproto", dependency=["google/protobuf/timestamp.proto"]
    )

    def message(name, fields):
        m = file.message_type.add(name=name)
        for number, (field, kind, label, type_name) in enumerate(fields, start=1):
            m.field.add(name=field, number=number, type=kind, label=label, type_name=type_name)

    one, many = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    message("PushRequest", [("streams", f.TYPE_MESSAGE, many, ".logproto.StreamAdapter")])
    message(
        "StreamAdapter",
        [
            ("labels", f.TYPE_STRING, one, None),
            ("entries", f.TYPE_MESSAGE, many, ".logproto.EntryAdapter"),
            ("hash", f.TYPE_UINT64, one, None),
        ],
    )
    message(
        "EntryAdapter",
        [
            ("timestamp", f.TYPE_MESSAGE, one, ".google.protobuf.Timestamp"),
            ("line", f.TYPE_STRING, one, None),
            ("structuredMetadata", f.TYPE_MESSAGE, many, ".logproto.LabelPairAdapter"),
            ("parsed", f.TYPE_MESSAGE, many, ".logproto.LabelPairAdapter"),
        ],
    )
    message("LabelPairAdapter", [("name", f.TYPE_STRING, one, None), ("value", f.TYPE_STRING, one, None)])
    for m in file.message_type:
        for field in m.field:
            if not field.type_name:
                field.ClearField("type_name")
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("logproto.PushRequest"))


LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_labels(text):
    """Prometheus' text form of a label set, `{a="b", c="d"}`."""
    return {name: json.loads('"' + value + '"') for name, value in LABEL.findall(text)}


def loki_streams(content_type, body):
    """(labels, [(ns, line, metadata)]) of each stream of a push."""
    if content_type == "application/json":
        push = json.loads(body)
        for stream in push["streams"]:
            yield stream["stream"], [
                (int(v[0]), v[1], v[2] if len(v) > 2 else {}) for v in stream["values"]
            ]
    elif content_type == "application/x-protobuf":
        import cramjam

        request = PUSH_REQUEST()
        request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
        for stream in request.streams:
            yield parse_labels(stream.labels), [
                (
                    e.timestamp.seconds * 1_000_000_000 + e.timestamp.nanos,
                    e.line,
                    {p.name: p.value for p in e.structuredMetadata},
                )
                for e in stream.entries
            ]
    else:
        raise ValueError(f"unexpected Content-Type {content_type}")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with LOCK:
            SUMMARY["requests"] += 1
            getattr(self, KIND)(body)

    def loki(self, body):
        if self.path != "/loki/api/v1/push":
            return self.answer(404, b"404 page not found\n", "text/plain")
        streams = list(loki_streams(self.headers["Content-Type"], body))
        for labels, entries in streams:
            times = [ts for ts, _, _ in entries]
            if times != sorted(times):
                SUMMARY["out_of_order"] += 1
                return self.answer(400, b"entry out of order\n", "text/plain")
        for labels, entries in streams:
            for ts, line, metadata in entries:
                event = json.loads(line)
                record({
                    "name": event["metadata"].get("name", ""),
                    "count": event.get("count", 0),
                    "labels": labels,
                    "ts": ts,
                    "metadata": metadata,
                    "event": event,
                })
        self.answer(204, b"", "text/plain")

    def elasticsearch(self, body):
        if self.path != "/_bulk" or self.headers["Content-Type"] != "application/x-ndjson":
            return self.answer(400, b'{"error":"not a bulk request"}', "application/json")
        if STATE["first"]:
            STATE["first"] = False
            SUMMARY["whole_refusals"] += 1
            error = {"error": {"type": "es_rejected_execution_exception", "reason": "rejected"}, "status": 429}
            return self.answer(429, json.dumps(error).encode(), "application/json", {"Retry-After": "1"})
        lines = body.decode().split("\n")
        assert lines[-1] == "", "NDJSON ends with a newline"
        items, errors = [], False
        for action_line, document_line in zip(lines[0:-1:2], lines[1:-1:2]):
            action = json.loads(action_line)
            (op, meta), = action.items()
            document = json.loads(document_line)
            doc_id = meta["_id"]
            n = len(STATE["seen"])
            first = doc_id not in STATE["seen"]
            STATE["seen"].add(doc_id)
            if first and n % 7 == 3:
                errors = True
                SUMMARY["retried_items"] += 1
                items.append({op: {"_index": meta["_index"], "_id": doc_id, "status": 429,
                                   "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}})
                continue
            if first and n % 11 == 5:
                errors = True
                SUMMARY["retried_items"] += 1
                items.append({op: {"_index": meta["_index"], "_id": doc_id, "status": 503,
                                   "error": {"type": "unavailable_shards_exception", "reason": "primary not active"}}})
                continue
            if doc_id in STATE["written"]:
                SUMMARY["duplicates"] += 1
            STATE["written"].add(doc_id)
            record({
                "op": op,
                "index": meta["_index"],
                "id": doc_id,
                "name": document["metadata"].get("name", ""),
                "count": document.get("count", 0),
                "timestamp": document.get("@timestamp"),
            })
            items.append({op: {"_index": meta["_index"], "_id": doc_id, "status": 201, "result": "created"}})
        answer = {"took": 1, "errors": errors, "items": items}
        self.answer(200, json.dumps(answer).encode(), "application/json")

    def splunk(self, body):
        if self.path != "/services/collector/event":
            return self.answer(404, b'{"text":"The requested URL was not found on this server.","code":404}',
                               "application/json")
        auth = self.headers.get("Authorization")
        if auth is None:
            return self.answer(401, b'{"text":"Token is required","code":2}', "application/json")
        if auth != "Splunk test-token":
            return self.answer(403, b'{"text":"Invalid token","code":4}', "application/json")
        if STATE["first"]:
            STATE["first"] = False
            SUMMARY["whole_refusals"] += 1
            return self.answer(503, b'{"text":"Server is busy","code":9}', "application/json",
                               {"Retry-After": "1"})
        text, decoder, at, events = body.decode(), json.JSONDecoder(), 0, []
        while at < len(text):
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                break
            event, at = decoder.raw_decode(text, at)
            events.append(event)
        for n, event in enumerate(events):
            if not isinstance(event.get("event"), dict) or not isinstance(event.get("time"), (int, float)):
                message = {"text": "Invalid data format", "code": 6, "invalid-event-number": n}
                return self.answer(400, json.dumps(message).encode(), "application/json")
        for event in events:
            record({
                "name": event["event"]["metadata"].get("name", ""),
                "count": event["event"].get("count", 0),
                "time": event["time"],
                "host": event.get("host"),
                "source": event["source"],
                "sourcetype": event["sourcetype"],
                "index": event.get("index"),
            })
        self.answer(200, b'{"text":"Success","code":0}', "application/json")

    def answer(self, code, body, content_type, headers=None):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


PUSH_REQUEST = loki_push_request_class() if KIND == "loki" else None
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def stop(*_):
    with LOCK:
        record({"summary": SUMMARY})
        OUT.close()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
