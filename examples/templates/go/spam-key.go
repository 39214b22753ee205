// {{name}} (Go): a spam key function: events with equal keys share one token bucket. This one
// is client-go's v0.26 getSpamKey (source.component + source.host + involved object kind,
// namespace, name, uid, apiVersion), followed by the reason: one bucket per object and reason.
package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/defaults"
	"github.com/eventpipe/eventpipe/guest-sdk/go/spamkey"
)

type perReason struct{}

// SpamKey writes the key; the strings of e are valid during the call only.
func (perReason) SpamKey(e *eventpipe.KeyEvent, key eventpipe.KeyWriter) {
	defaults.SpamKey(e, key) // client-go getSpamKey
	key.WriteString(e.Reason)
}

func init() {
	spamkey.Register(func() eventpipe.SpamKey { return perReason{} })
}

func main() {}
