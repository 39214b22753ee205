// quiet-normal (C): drops routine Normal events (by default the reasons Scheduled, Pulling,
// Pulled, Created, Started) before correlation; keeps Warning events and every other reason.
// Config key `reasons` (comma-separated) replaces the list.
//
// It reads two fields, which it declares in `fields`: the host sends `filter_batch` only
// those, packed (wit/types.wit, projected-batch): string 2*i is event i's type, 2*i+1 its
// reason.
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments (free them with the
// generated *_free functions); returned strings and lists must be malloc'd: the generated
// post-return function frees them. No stdio: the component imports no WASI, log through the
// `log` import.
#include <stdlib.h>
#include <string.h>
#include "filter.h"

typedef filter_string_t str_t;

static const char DEFAULT_REASONS[] = "Scheduled,Pulling,Pulled,Created,Started";

// The reason list, read from the config on the first call (fixed per instance).
static const uint8_t *reasons;
static size_t reasons_len;
static int reasons_read;

static void read_reasons(void) {
  if (reasons_read) return;
  reasons_read = 1;
  str_t key = { (uint8_t *)"reasons", 7 }, value;
  if (eventpipe_plugin_config_get(&key, &value)) {  // value is ours: kept for the instance
    reasons = value.ptr;
    reasons_len = value.len;
  } else {
    reasons = (const uint8_t *)DEFAULT_REASONS;
    reasons_len = sizeof DEFAULT_REASONS - 1;
  }
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t'; }

// Whether `reason` is one of the comma-separated, space-trimmed entries of the list.
static int listed(const str_t *reason) {
  size_t i = 0;
  while (i <= reasons_len) {
    size_t end = i;
    while (end < reasons_len && reasons[end] != ',') end++;
    size_t a = i, b = end;
    while (a < b && is_space(reasons[a])) a++;
    while (b > a && is_space(reasons[b - 1])) b--;
    if (b > a && b - a == reason->len && memcmp(reasons + a, reason->ptr, reason->len) == 0) return 1;
    i = end + 1;
  }
  return 0;
}

static int eq(const str_t *s, const char *lit) {
  size_t n = strlen(lit);
  return s->len == n && memcmp(s->ptr, lit, n) == 0;
}

static void verdict(const str_t *tenant, const str_t *type, const str_t *reason, filter_verdict_t *ret) {
  if (!eq(type, "Normal") || !listed(reason)) {
    ret->tag = EVENTPIPE_PLUGIN_TYPES_VERDICT_KEEP;
    return;
  }
  if (eventpipe_plugin_log_enabled(EVENTPIPE_PLUGIN_LOG_LEVEL_DEBUG)) {
    eventpipe_plugin_log_field_t fields[2] = {
      { .key = { (uint8_t *)"tenant", 6 }, .value = *tenant },
      { .key = { (uint8_t *)"reason", 6 }, .value = *reason },
    };
    eventpipe_plugin_log_list_field_t list = { fields, 2 };
    str_t msg = { (uint8_t *)"dropping a routine event", 24 };
    eventpipe_plugin_log_log(EVENTPIPE_PLUGIN_LOG_LEVEL_DEBUG, &msg, &list);
  }
  static const char prefix[] = "routine Normal event: ";
  size_t p = sizeof prefix - 1, n = p + reason->len;
  uint8_t *buf = malloc(n);  // freed by the generated post-return function
  memcpy(buf, prefix, p);
  memcpy(buf + p, reason->ptr, reason->len);
  ret->tag = EVENTPIPE_PLUGIN_TYPES_VERDICT_DROP;
  ret->val.drop.is_some = true;
  ret->val.drop.val.ptr = buf;
  ret->val.drop.val.len = n;
}

void exports_filter_filter(str_t *tenant, filter_event_t *event, filter_verdict_t *ret) {
  read_reasons();
  verdict(tenant, &event->type, &event->reason, ret);
  filter_string_free(tenant);
  filter_event_free(event);
}

// The fields filter_batch reads, in this order.
void exports_filter_fields(filter_list_event_field_t *ret) {
  ret->len = 2;
  ret->ptr = malloc(2 * sizeof(filter_event_field_t));
  ret->ptr[0].tag = EVENTPIPE_PLUGIN_TYPES_EVENT_FIELD_TYPE;
  ret->ptr[1].tag = EVENTPIPE_PLUGIN_TYPES_EVENT_FIELD_REASON;
}

void exports_filter_filter_batch(str_t *tenant, uint32_t count, filter_projected_batch_t *events,
                                 filter_list_verdict_t *ret) {
  read_reasons();
  const uint8_t *bytes = events->bytes.ptr;
  const uint32_t *ends = events->ends.ptr;
  ret->len = count;
  ret->ptr = count ? malloc(count * sizeof(filter_verdict_t)) : NULL;
  if (events->ends.len != 2 * (size_t)count) abort();  // the host never sends another size
  uint32_t start = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t type_end = ends[2 * i], reason_end = ends[2 * i + 1];
    if (type_end < start || reason_end < type_end || reason_end > events->bytes.len) abort();
    str_t type = { (uint8_t *)bytes + start, type_end - start };
    str_t reason = { (uint8_t *)bytes + type_end, reason_end - type_end };
    verdict(tenant, &type, &reason, &ret->ptr[i]);
    start = reason_end;
  }
  filter_string_free(tenant);
  filter_projected_batch_free(events);
}
