// {{name}} (C): a sink. It formats each request as one line ("create|patch TYPE REASON
// KIND NAMESPACE/NAME: MESSAGE") and writes it through the `output` import; the host delivers
// the bytes (the plugin has no network, files or stdio).
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments; the event of each
// request is moved into its result (the generated post-return function frees results).
#include <stdlib.h>
#include <string.h>
#include "sink.h"

typedef sink_string_t str_t;

static size_t put(uint8_t *out, size_t off, const void *p, size_t n) {
  memcpy(out + off, p, n);
  return off + n;
}

// Writes the request's line; on failure fills `err` (a retryable error) and returns false.
static bool write_line(const sink_sink_request_t *request, const sink_event_t *e, sink_sink_error_t *err) {
  const char *verb = request->tag == EVENTPIPE_PLUGIN_TYPES_SINK_REQUEST_CREATE ? "create " : "patch ";
  const str_t *parts[] = { &e->type, &e->reason, &e->involved_object.kind, &e->involved_object.namespace_,
                           &e->involved_object.name, &e->message };
  static const char *const seps[] = { " ", " ", " ", "/", ": ", "\n" };
  size_t n = strlen(verb);
  for (size_t i = 0; i < 6; i++) n += parts[i]->len + strlen(seps[i]);
  uint8_t *buf = malloc(n);
  size_t off = put(buf, 0, verb, strlen(verb));
  for (size_t i = 0; i < 6; i++) {
    off = put(buf, off, parts[i]->ptr, parts[i]->len);
    off = put(buf, off, seps[i], strlen(seps[i]));
  }
  sink_list_u8_t bytes = { buf, off };
  str_t why;
  bool ok = eventpipe_plugin_output_write(&bytes, &why);  // borrows `bytes`
  free(buf);
  if (!ok) {
    err->tag = EVENTPIPE_PLUGIN_TYPES_SINK_ERROR_RETRYABLE;
    err->val.retryable = why;  // ours: freed by post-return
  }
  return ok;
}

// Performs one request, moving its event into `ret` (or freeing it on error).
static bool deliver_one(sink_sink_request_t *request, sink_event_t *ret, sink_sink_error_t *err) {
  sink_event_t *event = request->tag == EVENTPIPE_PLUGIN_TYPES_SINK_REQUEST_CREATE ? &request->val.create
                                                                                   : &request->val.patch.event;
  bool ok = write_line(request, event, err);
  if (request->tag == EVENTPIPE_PLUGIN_TYPES_SINK_REQUEST_PATCH) sink_list_u8_free(&request->val.patch.body);
  if (ok) *ret = *event;  // moved: the host gets it back
  else sink_event_free(event);
  return ok;
}

bool exports_sink_deliver(str_t *tenant, sink_sink_request_t *request, sink_event_t *ret, sink_sink_error_t *err) {
  sink_string_free(tenant);
  return deliver_one(request, ret, err);
}

void exports_sink_deliver_batch(str_t *tenant, sink_list_sink_request_t *requests,
                             sink_list_result_event_sink_error_t *ret) {
  sink_string_free(tenant);
  ret->len = requests->len;
  ret->ptr = requests->len ? malloc(requests->len * sizeof *ret->ptr) : NULL;
  for (size_t i = 0; i < requests->len; i++) {
    sink_result_event_sink_error_t *r = &ret->ptr[i];
    r->is_err = !deliver_one(&requests->ptr[i], &r->val.ok, &r->val.err);
  }
  free(requests->ptr);  // the elements were moved or freed above
}
