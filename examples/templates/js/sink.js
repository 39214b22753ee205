// {{name}} (JavaScript): a sink. It formats each request as one line and writes it through the
// `output` import; the host delivers the bytes (the plugin has no network or files).
import { write } from 'eventpipe:plugin/output@0.1.0';

// QuickJS (componentize-qjs) has no TextDecoder/TextEncoder: strict UTF-8 by hand.
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


function line(request) {
  const [verb, event] = request.tag === 'create' ? ['create', request.val] : ['patch', request.val.event];
  const o = event.involvedObject;
  return `${verb} ${event.type} ${event.reason} ${o.kind} ${o.namespace}/${o.name} (x${event.count}): ${event.message}\n`;
}

// result<event, sink-error>: return the event, throw the error variant.
export function deliver(tenant, request) {
  try {
    write(encoder.encode(line(request)));
  } catch (e) {
    throw { tag: 'retryable', val: `output: ${e?.payload ?? e}` };
  }
  return request.tag === 'create' ? request.val : request.val.event;
}

export function deliverBatch(tenant, requests) {
  return requests.map((r) => {
    try {
      return { tag: 'ok', val: deliver(tenant, r) };
    } catch (e) {
      return { tag: 'err', val: e?.payload ?? e };
    }
  });
}
