// {{name}} (C): a message combiner, the message of the event that replaces similar events once
// aggregation triggers. This one is client-go's default: "(combined from similar events): " + message.
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments; returned strings and
// lists must be malloc'd (the generated post-return function frees them). No stdio: the
// component imports no WASI.
#include <stdlib.h>
#include <string.h>
#include "message_combiner.h"
#include "packed.h"  // the key-fields batch: key_fields_batch_error, key_field

typedef message_combiner_string_t str_t;

static const char PREFIX[] = "(combined from similar events): ";
#define EXTRA_PER_EVENT (sizeof PREFIX - 1)

void exports_message_combiner_combine_message(message_combiner_event_t *e, str_t *ret) {
  size_t n = sizeof PREFIX - 1 + e->message.len;
  ret->ptr = malloc(n ? n : 1);
  memcpy(ret->ptr, PREFIX, sizeof PREFIX - 1);
  memcpy(ret->ptr + sizeof PREFIX - 1, e->message.ptr, e->message.len);
  ret->len = n;
  message_combiner_event_free(e);
}

static bool fail(message_combiner_key_fields_batch_t *in, str_t *err, const char *msg) {
  message_combiner_string_dup(err, msg);  // a malloc'd copy: freed by post-return
  message_combiner_key_fields_batch_free(in);
  return false;
}

bool exports_message_combiner_combine_message_batch(message_combiner_key_fields_batch_t *in, message_combiner_packed_strings_t *ret, str_t *err) {
  const uint8_t *bytes = in->bytes.ptr;
  const uint32_t *ends = in->ends.ptr;
  const char *bad = key_fields_batch_error(bytes, in->bytes.len, ends, in->ends.len);
  if (bad) return fail(in, err, bad);
  size_t events = in->ends.len / KEY_FIELDS;
  size_t cap = in->bytes.len + events * EXTRA_PER_EVENT;
  uint8_t *out = cap ? malloc(cap) : NULL;
  uint32_t *out_ends = events ? malloc(events * sizeof(uint32_t)) : NULL;
  size_t off = 0;
  for (size_t e = 0; e < events; e++) {
    key_field_t message = key_field(bytes, ends, e, 10);
    memcpy(out + off, PREFIX, sizeof PREFIX - 1);
    off += sizeof PREFIX - 1;
    memcpy(out + off, message.ptr, message.len);
    off += message.len;
    out_ends[e] = (uint32_t)off;
  }
  ret->bytes.ptr = out;
  ret->bytes.len = off;
  ret->ends.ptr = out_ends;
  ret->ends.len = events;
  message_combiner_key_fields_batch_free(in);
  return true;
}
