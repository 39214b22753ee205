// {{name}} (C): a watcher sees every event before correlation. This one logs each Warning
// through the `log` import (no stdio: the component imports no WASI).
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments.
#include <stdlib.h>
#include <string.h>
#include "watcher.h"

static void watch_one(const watcher_event_t *event) {
  if (event->type.len != 7 || memcmp(event->type.ptr, "Warning", 7) != 0) return;
  if (!eventpipe_plugin_log_enabled(EVENTPIPE_PLUGIN_LOG_LEVEL_INFO)) return;
  eventpipe_plugin_log_field_t fields[2] = {
    { .key = { (uint8_t *)"reason", 6 }, .value = event->reason },
    { .key = { (uint8_t *)"name", 4 }, .value = event->involved_object.name },
  };
  eventpipe_plugin_log_list_field_t list = { fields, 2 };
  eventpipe_plugin_log_log(EVENTPIPE_PLUGIN_LOG_LEVEL_INFO, (watcher_string_t *)&event->message, &list);
}

void exports_watcher_watch(watcher_event_t *event) {
  watch_one(event);
  watcher_event_free(event);
}

void exports_watcher_watch_batch(watcher_list_event_t *events) {
  for (size_t i = 0; i < events->len; i++) watch_one(&events->ptr[i]);
  watcher_list_event_free(events);
}
