// namespace-reason (JavaScript): an aggregate-key function that groups similar events per
// namespace instead of per object.
//   aggregate key = source.component|involvedObject.kind|involvedObject.namespace|type|reason
//   local key     = message (as client-go)
// The correlator calls aggregateKeyBatch with a packed batch of the 13 key fields per event
// (wit/types.wit, key-fields-batch) and expects 2 packed strings per event back.

import { pack, unpack } from './packed.js'; // the packed strings of a batch (a module beside this one)

function keys(f) {
  // f[0] source.component, f[2] kind, f[3] namespace, f[8] type, f[9] reason, f[10] message
  return [[f[0], f[2], f[3], f[8], f[9]].join('|'), f[10]];
}

export function aggregateKey(event) {
  const o = event.involvedObject;
  const aggregate = [event.source.component, o.kind, o.namespace, event.type, event.reason].join('|');
  return { aggregate, local: event.message };
}

// result<packed-strings, string>: return the ok value, throw the err payload.
export function aggregateKeyBatch(events) {
  return pack(unpack(events).flatMap(keys));
}
