// {{name}} (Go): a sink. It formats each request as one line ("create|patch TYPE REASON KIND
// NAMESPACE/NAME: MESSAGE") and writes it through the `output` import; the host delivers the
// bytes (the plugin has no network or files, and fmt.Print goes nowhere).
package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/sink"
)

type lines struct {
	buf []byte
}

// Deliver writes one line and returns the event as stored. An error that is a
// *eventpipe.SinkError says what the host does next; any other error is retryable.
func (l *lines) Deliver(tenant string, req *eventpipe.SinkRequest) (eventpipe.Event, error) {
	verb := "create"
	if req.Patch {
		verb = "patch"
	}
	e, o := &req.Event, &req.Event.InvolvedObject
	l.buf = append(l.buf[:0], verb...)
	for _, s := range []string{" ", e.Type, " ", e.Reason, " ", o.Kind, " ", o.Namespace, "/", o.Name, ": ", e.Message, "\n"} {
		l.buf = append(l.buf, s...)
	}
	if err := sink.Write(l.buf); err != nil {
		return eventpipe.Event{}, &eventpipe.SinkError{Kind: eventpipe.Retryable, Message: "output: " + err.Error()}
	}
	return req.Event, nil
}

func init() {
	sink.Register(func() eventpipe.Sink { return &lines{} })
}

func main() {}
