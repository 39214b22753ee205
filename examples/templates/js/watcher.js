// {{name}} (JavaScript): a watcher sees every event before correlation. This one logs each
// Warning through the `log` import (console.log is dropped or traps: the component has no WASI).
import { enabled, log } from 'eventpipe:plugin/log@0.1.0';

export function watch(event) {
  if (event.type === 'Warning' && enabled('info')) {
    const o = event.involvedObject;
    log('info', event.message, [
      { key: 'reason', value: event.reason },
      { key: 'object', value: `${o.namespace}/${o.name}` },
    ]);
  }
}

export function watchBatch(events) {
  for (const e of events) watch(e);
}
