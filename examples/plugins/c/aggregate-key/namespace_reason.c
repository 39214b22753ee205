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
#include "packed.h"  // the key-fields batch: key_fields_batch_error, key_field

typedef aggregate_key_string_t str_t;

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

static bool fail(aggregate_key_key_fields_batch_t *in, str_t *err, const char *msg) {
  aggregate_key_string_dup(err, msg);  // a malloc'd copy: freed by post-return
  aggregate_key_key_fields_batch_free(in);
  return false;
}

bool exports_aggregate_key_aggregate_key_batch(aggregate_key_key_fields_batch_t *in,
                                               aggregate_key_packed_strings_t *ret, str_t *err) {
  const uint8_t *bytes = in->bytes.ptr;
  const uint32_t *ends = in->ends.ptr;
  const char *bad = key_fields_batch_error(bytes, in->bytes.len, ends, in->ends.len);
  if (bad) return fail(in, err, bad);
  size_t events = in->ends.len / KEY_FIELDS;
  // Each event's keys are its input strings plus N_AGG - 1 separators.
  size_t cap = in->bytes.len + events * (N_AGG - 1);
  uint8_t *out = cap ? malloc(cap) : NULL;
  uint32_t *out_ends = events ? malloc(2 * events * sizeof(uint32_t)) : NULL;
  size_t off = 0;
  for (size_t e = 0; e < events; e++) {
    for (size_t i = 0; i < N_AGG; i++) {
      key_field_t f = key_field(bytes, ends, e, AGG_FIELDS[i]);
      if (i) out[off++] = '|';
      memcpy(out + off, f.ptr, f.len);
      off += f.len;
    }
    out_ends[2 * e] = (uint32_t)off;
    key_field_t local = key_field(bytes, ends, e, LOCAL_FIELD);
    memcpy(out + off, local.ptr, local.len);
    off += local.len;
    out_ends[2 * e + 1] = (uint32_t)off;
  }
  ret->bytes.ptr = out;
  ret->bytes.len = off;
  ret->ends.ptr = out_ends;
  ret->ends.len = 2 * events;
  aggregate_key_key_fields_batch_free(in);
  return true;
}
