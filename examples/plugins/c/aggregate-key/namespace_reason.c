// namespace-reason (C): an aggregate-key function that groups similar events per namespace
// instead of per object.
//   aggregate key = source.component|involvedObject.kind|involvedObject.namespace|type|reason
//   local key     = message (as client-go)
// The correlator calls the batch export with a packed batch of the 13 key fields per event
// (wit/types.wit, key-fields-batch) and expects 2 packed strings per event back.
//
// Ownership (wit-bindgen C ABI): exported functions own their arguments; returned strings and
// lists must be malloc'd (the generated post-return function frees them).
#include <stdlib.h>
#include <string.h>
#include "aggregate_key.h"

typedef aggregate_key_string_t str_t;

#define FIELDS 13  // per event, in the order of types.key-fields-batch
// The key-field indices joined with '|' into the aggregate key, and the local key's.
static const int AGG_FIELDS[] = {0 /* source.component */, 2 /* kind */, 3 /* namespace */, 8 /* type */,
                                 9 /* reason */};
#define N_AGG (sizeof AGG_FIELDS / sizeof AGG_FIELDS[0])
#define LOCAL_FIELD 10  // message

static str_t join(const str_t *const *parts, size_t n, char sep) {
  size_t len = n ? n - 1 : 0;
  for (size_t i = 0; i < n; i++) len += parts[i]->len;
  str_t out = { len ? malloc(len) : NULL, len };
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    if (i) out.ptr[off++] = (uint8_t)sep;
    memcpy(out.ptr + off, parts[i]->ptr, parts[i]->len);
    off += parts[i]->len;
  }
  return out;
}

void exports_aggregate_key_aggregate_key(aggregate_key_event_t *e, aggregate_key_aggregate_key_pair_t *ret) {
  const str_t *agg[N_AGG] = { &e->source.component, &e->involved_object.kind, &e->involved_object.namespace_,
                              &e->type, &e->reason };
  const str_t *local = &e->message;
  ret->aggregate = join(agg, N_AGG, '|');
  ret->local = join(&local, 1, '|');
  aggregate_key_event_free(e);
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

static bool fail(aggregate_key_key_fields_batch_t *in, str_t *err, const char *msg) {
  aggregate_key_string_dup(err, msg);  // a malloc'd copy: freed by post-return
  aggregate_key_key_fields_batch_free(in);
  return false;
}

bool exports_aggregate_key_aggregate_key_batch(aggregate_key_key_fields_batch_t *in,
                                               aggregate_key_packed_strings_t *ret, str_t *err) {
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
  // Each event's keys are its input strings plus N_AGG - 1 separators.
  size_t cap = nb + events * (N_AGG - 1);
  uint8_t *out = cap ? malloc(cap) : NULL;
  uint32_t *out_ends = events ? malloc(2 * events * sizeof(uint32_t)) : NULL;
  size_t off = 0;
  for (size_t e = 0; e < events; e++) {
    const uint32_t *en = ends + FIELDS * e;
    size_t base = e ? ends[FIELDS * e - 1] : 0;
#define FSTART(f) ((f) ? en[(f) - 1] : base)
    for (size_t i = 0; i < N_AGG; i++) {
      int f = AGG_FIELDS[i];
      if (i) out[off++] = '|';
      memcpy(out + off, bytes + FSTART(f), en[f] - FSTART(f));
      off += en[f] - FSTART(f);
    }
    out_ends[2 * e] = (uint32_t)off;
    memcpy(out + off, bytes + FSTART(LOCAL_FIELD), en[LOCAL_FIELD] - FSTART(LOCAL_FIELD));
    off += en[LOCAL_FIELD] - FSTART(LOCAL_FIELD);
    out_ends[2 * e + 1] = (uint32_t)off;
#undef FSTART
  }
  ret->bytes.ptr = out;
  ret->bytes.len = off;
  ret->ends.ptr = out_ends;
  ret->ends.len = 2 * events;
  aggregate_key_key_fields_batch_free(in);
  return true;
}
