// packed.js: the packed strings of the plugin boundary (wit/types.wit: `packed-strings`,
// `key-fields-batch`) and UTF-8, for the JavaScript plugins whose batch exports take or return
// them (aggregate key, message combiner, spam key) and for sinks that write bytes. A module
// beside the plugin's source: componentize-js and componentize-qjs bundle what it imports.

// A key-fields batch has 13 strings per event, in this order: source.component, source.host,
// involvedObject.kind, .namespace, .name, .fieldPath, .uid, .apiVersion, type, reason, message,
// reportingComponent, reportingInstance.
const FIELDS = 13;

// QuickJS (componentize-qjs) has no TextDecoder/TextEncoder: strict UTF-8 by hand.
const decoder = globalThis.TextDecoder ? new TextDecoder('utf-8', { fatal: true }) : {
  decode(b) {
    let s = '';
    for (let i = 0; i < b.length;) {
      const c = b[i];
      let k, cp;
      if (c < 0x80) { s += String.fromCharCode(c); i++; continue; }
      else if ((c & 0xe0) === 0xc0) { k = 1; cp = c & 0x1f; }
      else if ((c & 0xf0) === 0xe0) { k = 2; cp = c & 0x0f; }
      else if ((c & 0xf8) === 0xf0) { k = 3; cp = c & 0x07; }
      else throw new TypeError('invalid UTF-8');
      for (let j = 1; j <= k; j++) {
        if (i + j >= b.length || (b[i + j] & 0xc0) !== 0x80) throw new TypeError('invalid UTF-8');
        cp = (cp << 6) | (b[i + j] & 0x3f);
      }
      if ((k === 1 && cp < 0x80) || (k === 2 && cp < 0x800) || (k === 3 && cp < 0x10000) ||
          cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw new TypeError('invalid UTF-8');
      s += String.fromCodePoint(cp);
      i += k + 1;
    }
    return s;
  },
};
export const encoder = globalThis.TextEncoder ? new TextEncoder() : {
  encode(s) {
    const out = [];
    for (const ch of s) {
      const cp = ch.codePointAt(0);
      if (cp < 0x80) out.push(cp);
      else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
      else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
      else out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
    }
    return new Uint8Array(out);
  },
};

// The events of a key-fields batch as arrays of 13 strings; throws (an `err`) when malformed.
export function unpack(events) {
  const bytes = events.bytes, ends = events.ends;
  if (ends.length % FIELDS !== 0) throw `len(ends) = ${ends.length} is not a multiple of ${FIELDS}`;
  if ((ends.length ? ends[ends.length - 1] : 0) !== bytes.length) throw 'the last offset is not len(bytes)';
  const out = [];
  let start = 0, fields = [];
  for (const end of ends) {
    if (end < start || end > bytes.length) throw 'offsets decrease or pass len(bytes)';
    try { fields.push(decoder.decode(bytes.subarray(start, end))); }
    catch { throw 'bytes are not UTF-8 split at character boundaries'; }
    start = end;
    if (fields.length === FIELDS) { out.push(fields); fields = []; }
  }
  return out;
}

// Strings as packed-strings.
export function pack(strings) {
  const parts = strings.map((s) => encoder.encode(s));
  const ends = new Uint32Array(parts.length);
  let total = 0;
  parts.forEach((p, i) => { total += p.length; ends[i] = total; });
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const p of parts) { bytes.set(p, off); off += p.length; }
  return { bytes, ends };
}
