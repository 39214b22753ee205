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

export function filter(tenant, event) {
  if (event.type === 'Normal' && noisy().has(event.reason)) {
    if (enabled('debug')) {
      log('debug', 'dropping a routine event', [
        { key: 'tenant', value: tenant },
        { key: 'reason', value: event.reason },
      ]);
    }
    return { tag: 'drop', val: 'routine Normal event: ' + event.reason };
  }
  return { tag: 'keep' };
}

export function filterBatch(tenant, events) {
  return events.map((e) => filter(tenant, e));
}
