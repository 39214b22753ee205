// {{name}} (JavaScript): a message combiner, the message of the event that replaces similar
// events once aggregation triggers. This one is client-go's default:
// "(combined from similar events): " + message.
import { pack, unpack } from './packed.js'; // the packed strings of a batch (a module beside this one)

const PREFIX = '(combined from similar events): ';

export function combineMessage(event) {
  return PREFIX + event.message;
}

// result<packed-strings, string>: return the ok value, throw the err payload.
export function combineMessageBatch(events) {
  return pack(unpack(events).map((f) => PREFIX + f[10])); // f[10]: the message
}
