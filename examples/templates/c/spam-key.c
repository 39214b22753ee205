// {{name}} (C): a spam key function: events with equal keys share one token bucket. This one is
// client-go's v0.26 getSpamKey: source.component + source.host + involved object
// (kind, namespace, name, uid, api-version).
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments; returned strings and
// lists must be malloc'd (the generated post-return function frees them). No stdio: the
// component imports no WASI.
#include <stdlib.h>
#include <string.h>
#include "spam_key.h"
#include "packed.h"  // the key-fields batch: key_fields_batch_error, key_field

typedef spam_key_string_t str_t;

void exports_spam_key_spam_key(spam_key_event_t *e, str_t *ret) {
  const str_t *parts[] = { &e->source.component, &e->source.host, &e->involved_object.kind,
                           &e->involved_object.namespace_, &e->involved_object.name, &e->involved_object.uid,
                           &e->involved_object.api_version };
  size_t n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) n += parts[i]->len;
  ret->ptr = malloc(n ? n : 1);
  ret->len = n;
  n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    memcpy(ret->ptr + n, parts[i]->ptr, parts[i]->len);
    n += parts[i]->len;
  }
  spam_key_event_free(e);
}

static bool fail(spam_key_key_fields_batch_t *in, str_t *err, const char *msg) {
  spam_key_string_dup(err, msg);  // a malloc'd copy: freed by post-return
  spam_key_key_fields_batch_free(in);
  return false;
}

bool exports_spam_key_spam_key_batch(spam_key_key_fields_batch_t *in, spam_key_packed_strings_t *ret, str_t *err) {
  const uint8_t *bytes = in->bytes.ptr;
  const uint32_t *ends = in->ends.ptr;
  const char *bad = key_fields_batch_error(bytes, in->bytes.len, ends, in->ends.len);
  if (bad) return fail(in, err, bad);
  // The key fields concatenated: source.component, source.host, kind, namespace, name, uid,
  // api-version. A key is never longer than its event's fields together.
  static const int KEY[] = {0, 1, 2, 3, 4, 6, 7};
  size_t events = in->ends.len / KEY_FIELDS;
  uint8_t *out = in->bytes.len ? malloc(in->bytes.len) : NULL;
  uint32_t *out_ends = events ? malloc(events * sizeof(uint32_t)) : NULL;
  size_t off = 0;
  for (size_t e = 0; e < events; e++) {
    for (size_t i = 0; i < sizeof KEY / sizeof KEY[0]; i++) {
      key_field_t f = key_field(bytes, ends, e, KEY[i]);
      memcpy(out + off, f.ptr, f.len);
      off += f.len;
    }
    out_ends[e] = (uint32_t)off;
  }
  ret->bytes.ptr = out;
  ret->bytes.len = off;
  ret->ends.ptr = out_ends;
  ret->ends.len = events;
  spam_key_key_fields_batch_free(in);
  return true;
}
