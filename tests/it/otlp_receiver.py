"""A minimal OTLP/HTTP logs receiver for tests/it/otlp_sink.rs.

It decodes every POST to /v1/logs with the OpenTelemetry protobuf definitions (PyPI
`opentelemetry-proto`), writes one JSON line per log record to the file given as its only
argument, and answers 200 with an empty ExportLogsServiceResponse. It prints
`listening on PORT` once it accepts connections (on 127.0.0.1, a free port).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

OUT = open(sys.argv[1], "w", encoding="utf-8")
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(key_values):
    return {kv.key: value(kv.value) for kv in key_values}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/logs" or self.headers["Content-Type"] != "application/x-protobuf":
            self.answer(400, b"")
            return
        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource_logs in request.resource_logs:
            resource = attributes(resource_logs.resource.attributes)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    lines.append(json.dumps({
                        "scope": scope_logs.scope.name,
                        "resource": resource,
                        "attributes": attributes(record.attributes),
                        "severity_number": record.severity_number,
                        "severity_text": record.severity_text,
                        "body": value(record.body),
                        "time_unix_nano": record.time_unix_nano,
                        "observed_time_unix_nano": record.observed_time_unix_nano,
                    }))
        with LOCK:
            OUT.write("".join(line + "\n" for line in lines))
            OUT.flush()
        self.answer(200, ExportLogsServiceResponse().SerializeToString())

    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
