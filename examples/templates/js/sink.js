// {{name}} (JavaScript): a sink. It formats each request as one line and writes it through the
// `output` import; the host delivers the bytes (the plugin has no network or files).
import { write } from 'eventpipe:plugin/output@0.1.0';
import { encoder } from './packed.js'; // UTF-8, also where QuickJS has no TextEncoder

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
