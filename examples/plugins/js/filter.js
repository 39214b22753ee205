// quiet-normal (JavaScript): drops routine Normal events (by default the reasons Scheduled,
// Pulling, Pulled, Created, Started) before correlation; keeps Warning events and every other
// reason. Config key `reasons` (comma-separated) replaces the list.
//
// Builds with componentize-js (StarlingMonkey) and componentize-qjs (QuickJS). Log through the
// `log` import: without WASI, console.log is dropped (componentize-js) or traps (QuickJS).
import { get } from 'eventpipe:plugin/config@0.1.0';
import { enabled, log } from 'eventpipe:plugin/log@0.1.0';

const DEFAULT_REASONS = 'Scheduled,Pulling,Pulled,Created,Started';

// Read on the first call (the config is fixed per instance), not at module evaluation, which
// happens at build time.
let reasons;
function noisy() {
  if (reasons === undefined) {
    const listed = get('reasons') ?? DEFAULT_REASONS;
    reasons = new Set(listed.split(',').map((r) => r.trim()).filter((r) => r !== ''));
  }
  return reasons;
}

const KEEP = { tag: 'keep' }; // one value for every kept event

function verdict(tenant, type, reason) {
  if (type === 'Normal' && noisy().has(reason)) {
    if (enabled('debug')) {
      log('debug', 'dropping a routine event', [
        { key: 'tenant', value: tenant },
        { key: 'reason', value: reason },
      ]);
    }
    return { tag: 'drop', val: 'routine Normal event: ' + reason };
  }
  return KEEP;
}

export function filter(tenant, event) {
  return verdict(tenant, event.type, event.reason);
}

// The fields filterBatch receives, per event, in this order: the host sends nothing else.
const FIELDS = [{ tag: 'type' }, { tag: 'reason' }];

export function fields() {
  return FIELDS;
}

// Event names and reasons are ASCII almost always; other strings go through UTF-8 decoding.
// (QuickJS, for componentize-qjs, has no TextDecoder.)
const decoder = globalThis.TextDecoder ? new TextDecoder('utf-8') : null;
function text(bytes, start, end) {
  let ascii = true;
  for (let i = start; i < end; i++) if (bytes[i] >= 0x80) { ascii = false; break; }
  if (ascii) return String.fromCharCode.apply(null, bytes.subarray(start, end));
  if (decoder) return decoder.decode(bytes.subarray(start, end));
  return decodeURIComponent(Array.from(bytes.subarray(start, end), (b) => '%' + b.toString(16).padStart(2, '0')).join(''));
}

// String n*i + f of `events` is field f of event i (wit/types.wit, projected-batch).
export function filterBatch(tenant, count, events) {
  const bytes = events.bytes, ends = events.ends, n = FIELDS.length;
  const out = new Array(count);
  let start = 0;
  for (let i = 0; i < count; i++) {
    const values = new Array(n);
    for (let f = 0; f < n; f++) {
      const end = ends[n * i + f];
      values[f] = text(bytes, start, end);
      start = end;
    }
    out[i] = verdict(tenant, values[0], values[1]);
  }
  return out;
}
