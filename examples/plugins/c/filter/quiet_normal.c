// quiet-normal (C): drops routine Normal events (by default the reasons Scheduled, Pulling,
// Pulled, Created, Started) before correlation; keeps Warning events and every other reason.
// Config key `reasons` (comma-separated) replaces the list.
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

static void verdict(const str_t *tenant, const filter_event_t *event, filter_verdict_t *ret) {
  if (!eq(&event->type, "Normal") || !listed(&event->reason)) {
    ret->tag = EVENTPIPE_PLUGIN_TYPES_VERDICT_KEEP;
    return;
  }
  if (eventpipe_plugin_log_enabled(EVENTPIPE_PLUGIN_LOG_LEVEL_DEBUG)) {
    eventpipe_plugin_log_field_t fields[2] = {
      { .key = { (uint8_t *)"tenant", 6 }, .value = *tenant },
      { .key = { (uint8_t *)"reason", 6 }, .value = event->reason },
    };
    eventpipe_plugin_log_list_field_t list = { fields, 2 };
    str_t msg = { (uint8_t *)"dropping a routine event", 24 };
    eventpipe_plugin_log_log(EVENTPIPE_PLUGIN_LOG_LEVEL_DEBUG, &msg, &list);
  }
  static const char prefix[] = "routine Normal event: ";
  size_t p = sizeof prefix - 1, n = p + event->reason.len;
  uint8_t *buf = malloc(n);  // freed by the generated post-return function
  memcpy(buf, prefix, p);
  memcpy(buf + p, event->reason.ptr, event->reason.len);
  ret->tag = EVENTPIPE_PLUGIN_TYPES_VERDICT_DROP;
  ret->val.drop.is_some = true;
  ret->val.drop.val.ptr = buf;
  ret->val.drop.val.len = n;
}

void exports_filter_filter(str_t *tenant, filter_event_t *event, filter_verdict_t *ret) {
  read_reasons();
  verdict(tenant, event, ret);
  filter_string_free(tenant);
  filter_event_free(event);
}

void exports_filter_filter_batch(str_t *tenant, filter_list_event_t *events, filter_list_verdict_t *ret) {
  read_reasons();
  ret->len = events->len;
  ret->ptr = events->len ? malloc(events->len * sizeof(filter_verdict_t)) : NULL;
  for (size_t i = 0; i < events->len; i++) verdict(tenant, &events->ptr[i], &ret->ptr[i]);
  filter_string_free(tenant);
  filter_list_event_free(events);
}
