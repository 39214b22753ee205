// {{name}} (C): a message combiner, the message of the event that replaces similar events once
// aggregation triggers. This one is client-go's default: "(combined from similar events): " + message.
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments; returned strings and
// lists must be malloc'd (the generated post-return function frees them). No stdio: the
// component imports no WASI.
#include <stdlib.h>
#include <string.h>
#include "message_combiner.h"

typedef message_combiner_string_t str_t;

#define FIELDS 13  // per event, in the order of types.key-fields-batch
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

// Strict UTF-8 check (no overlongs, no surrogates, max U+10FFFF).
static int utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    else if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
    else return 0;
    for (size_t j = 1; j <= k; j++) {
      if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += k + 1;
  }
  return 1;
}

static bool fail(message_combiner_key_fields_batch_t *in, str_t *err, const char *msg) {
  message_combiner_string_dup(err, msg);  // a malloc'd copy: freed by post-return
  message_combiner_key_fields_batch_free(in);
  return false;
}

bool exports_message_combiner_combine_message_batch(message_combiner_key_fields_batch_t *in, message_combiner_packed_strings_t *ret, str_t *err) {
  const uint8_t *bytes = in->bytes.ptr;
  const uint32_t *ends = in->ends.ptr;
  size_t nb = in->bytes.len, ne = in->ends.len;
  if (ne % FIELDS != 0) return fail(in, err, "len(ends) is not a multiple of 13");
  if ((ne ? ends[ne - 1] : 0) != nb) return fail(in, err, "the last offset is not len(bytes)");
  size_t start = 0;
  for (size_t i = 0; i < ne; i++) {
    if (ends[i] < start || ends[i] > nb) return fail(in, err, "offsets decrease or pass len(bytes)");
    if (!utf8_valid(bytes + start, ends[i] - start))
      return fail(in, err, "bytes are not UTF-8 split at character boundaries");
    start = ends[i];
  }
  size_t events = ne / FIELDS;
  size_t cap = nb + events * EXTRA_PER_EVENT;
  uint8_t *out = cap ? malloc(cap) : NULL;
  uint32_t *out_ends = events ? malloc(events * sizeof(uint32_t)) : NULL;
  size_t off = 0;
  for (size_t e = 0; e < events; e++) {
    const uint32_t *en = ends + FIELDS * e;
    size_t base = e ? ends[FIELDS * e - 1] : 0;
#define FSTART(f) ((f) ? en[(f) - 1] : base)
#define APPEND_FIELD(f) (memcpy(out + off, bytes + FSTART(f), en[f] - FSTART(f)), off += en[f] - FSTART(f))
    memcpy(out + off, PREFIX, sizeof PREFIX - 1);
    off += sizeof PREFIX - 1;
    APPEND_FIELD(10);  // message
    out_ends[e] = (uint32_t)off;
  }
  ret->bytes.ptr = out;
  ret->bytes.len = off;
  ret->ends.ptr = out_ends;
  ret->ends.len = events;
  message_combiner_key_fields_batch_free(in);
  return true;
}
