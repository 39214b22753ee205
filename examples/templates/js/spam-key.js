// {{name}} (JavaScript): a spam key function: events with equal keys share one token bucket.
// This one is client-go's v0.26 getSpamKey: source + involved object.
function key(f) {
  // source.component, source.host, kind, namespace, name, uid, api-version
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[6] + f[7];
}

export function spamKey(event) {
  const o = event.involvedObject, s = event.source;
  return key([s.component, s.host, o.kind, o.namespace, o.name, o.fieldPath, o.uid, o.apiVersion]);
}

// result<packed-strings, string>: return the ok value, throw the err payload.
export function spamKeyBatch(events) {
  return pack(unpack(events).map(key));
}

// The packed key-fields batch (wit/types.wit, key-fields-batch): 13 strings per event.
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
const encoder = globalThis.TextEncoder ? new TextEncoder() : {
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
function unpack(events) {
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
function pack(strings) {
  const parts = strings.map((s) => encoder.encode(s));
  const ends = new Uint32Array(parts.length);
  let total = 0;
  parts.forEach((p, i) => { total += p.length; ends[i] = total; });
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const p of parts) { bytes.set(p, off); off += p.length; }
  return { bytes, ends };
}
