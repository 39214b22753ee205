// namespace-reason (Go): an aggregate-key function that groups similar events per namespace
// instead of per object. The aggregate key is
// source.component|involvedObject.kind|involvedObject.namespace|type|reason, the local key
// the message (as client-go). So when many pods of one namespace report the same reason with
// more than max_events (10) distinct messages within max_interval_seconds (600 s), the rest
// are combined into one aggregate event — client-go's default only does that per object.
package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/aggregatekey"
	"github.com/eventpipe/eventpipe/guest-sdk/go/defaults"
)

// namespaceReason is the key function (stateless).
type namespaceReason struct{}

func (namespaceReason) AggregateKey(e *eventpipe.KeyEvent, key eventpipe.KeyWriter) {
	o := &e.InvolvedObject
	key.Write(e.Source.Component, "|", o.Kind, "|", o.Namespace, "|", e.Type, "|", e.Reason)
}

// LocalKey: the message, as client-go.
func (namespaceReason) LocalKey(e *eventpipe.KeyEvent, key eventpipe.KeyWriter) {
	defaults.AggregateByReasonLocal(e, key)
}

func init() {
	aggregatekey.Register(func() eventpipe.AggregateKey { return namespaceReason{} })
}

func main() {}
