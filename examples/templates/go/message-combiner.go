// {{name}} (Go): a message combiner, the message of the event that replaces similar events
// once aggregation triggers. This one is client-go's default:
// "(combined from similar events): " + message.
package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/defaults"
	"github.com/eventpipe/eventpipe/guest-sdk/go/messagecombiner"
)

type combiner struct{}

// CombineMessage writes the combined message; the strings of e are valid during the call only.
func (combiner) CombineMessage(e *eventpipe.KeyEvent, message eventpipe.KeyWriter) {
	message.Write(defaults.CombinedMessagePrefix, e.Message)
}

func init() {
	messagecombiner.Register(func() eventpipe.MessageCombiner { return combiner{} })
}

func main() {}
