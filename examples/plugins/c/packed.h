// packed.h: reading a key-fields batch (wit/types.wit, `key-fields-batch`) in C, for the
// plugins whose batch export takes one (aggregate key, message combiner, spam key). Header
// only (static inline functions): include it in the one source file of a plugin.
//
// A batch is one byte buffer and one end offset per string, 13 strings per event in the order
// of `types.key-fields-batch`: source.component, source.host, involvedObject.kind, .namespace,
// .name, .fieldPath, .uid, .apiVersion, type, reason, message, reportingComponent,
// reportingInstance.
#ifndef EVENTPIPE_PACKED_H
#define EVENTPIPE_PACKED_H

#include <stddef.h>
#include <stdint.h>

#define KEY_FIELDS 13  // strings per event of a key-fields batch

// Whether s[0..n) is strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
static inline int utf8_valid(const uint8_t *s, size_t n) {
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

// NULL when `bytes` (nb bytes) and `ends` (ne offsets) are a well-formed key-fields batch, else
// what is wrong with it: the message a batch export returns as its `err`.
static inline const char *key_fields_batch_error(const uint8_t *bytes, size_t nb, const uint32_t *ends, size_t ne) {
  if (ne % KEY_FIELDS != 0) return "len(ends) is not a multiple of 13";
  if ((ne ? ends[ne - 1] : 0) != nb) return "the last offset is not len(bytes)";
  size_t start = 0;
  for (size_t i = 0; i < ne; i++) {
    if (ends[i] < start || ends[i] > nb) return "offsets decrease or pass len(bytes)";
    if (!utf8_valid(bytes + start, ends[i] - start)) return "bytes are not UTF-8 split at character boundaries";
    start = ends[i];
  }
  return NULL;
}

// One string of a batch: its bytes (not NUL-terminated) and their length.
typedef struct {
  const uint8_t *ptr;
  size_t len;
} key_field_t;

// Key field `field` (0..12) of event `event` of a batch that key_fields_batch_error passed.
static inline key_field_t key_field(const uint8_t *bytes, const uint32_t *ends, size_t event, size_t field) {
  size_t i = KEY_FIELDS * event + field;
  size_t start = i ? ends[i - 1] : 0;
  key_field_t f = { bytes + start, ends[i] - start };
  return f;
}

#endif
