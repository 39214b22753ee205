// namespace-reason (JavaScript): an aggregate-key function that groups similar events per
// namespace instead of per object.
//   aggregate key = source.component|involvedObject.kind|involvedObject.namespace|type|reason
//   local key     = message (as client-go)
// The correlator calls aggregateKeyBatch with a packed batch of the 13 key fields per event
// (wit/types.wit, key-fields-batch) and expects 2 packed strings per event back.

const FIELDS = 13; // per event, in the order of types.key-fields-batch

function keys(f) {
  // f[0] source.component, f[2] kind, f[3] namespace, f[8] type, f[9] reason, f[10] message
  return [[f[0], f[2], f[3], f[8], f[9]].join('|'), f[10]];
}

export function aggregateKey(event) {
  const o = event.involvedObject;
  const aggregate = [event.source.component, o.kind, o.namespace, event.type, event.reason].join('|');
  return { aggregate, local: event.message };
}

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

// result<packed-strings, string>: return the ok value, throw the err payload.
export function aggregateKeyBatch(events) {
  const bytes = events.bytes, ends = events.ends;
  if (ends.length % FIELDS !== 0) throw `len(ends) = ${ends.length} is not a multiple of ${FIELDS}`;
  if ((ends.length ? ends[ends.length - 1] : 0) !== bytes.length) throw 'the last offset is not len(bytes)';
  const parts = [];
  const outEnds = new Uint32Array((ends.length / FIELDS) * 2);
  let start = 0, total = 0, n = 0;
  let fields = [];
  for (const end of ends) {
    if (end < start || end > bytes.length) throw 'offsets decrease or pass len(bytes)';
    let s;
    try { s = decoder.decode(bytes.subarray(start, end)); }
    catch { throw 'bytes are not UTF-8 split at character boundaries'; }
    fields.push(s);
    start = end;
    if (fields.length === FIELDS) {
      for (const k of keys(fields)) {
        const b = encoder.encode(k);
        parts.push(b);
        total += b.length;
        outEnds[n++] = total;
      }
      fields = [];
    }
  }
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) { out.set(p, off); off += p.length; }
  return { bytes: out, ends: outEnds };
}
