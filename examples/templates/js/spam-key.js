// {{name}} (JavaScript): a spam key function: events with equal keys share one token bucket.
// This one is client-go's v0.26 getSpamKey: source + involved object.
import { pack, unpack } from './packed.js'; // the packed strings of a batch (a module beside this one)

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
