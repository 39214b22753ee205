// {{name}} (Go): a watcher sees every event before correlation. This one logs each Warning
// through the `log` import (fmt.Print goes nowhere: the component has no WASI).
package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/watcher"
)

type warnings struct{}

func (warnings) Watch(e *eventpipe.Event) {
	if e.Type == "Warning" && eventpipe.LogEnabled(eventpipe.LevelInfo) {
		o := &e.InvolvedObject
		eventpipe.Info(e.Message, "reason", e.Reason, "object", o.Namespace+"/"+o.Name)
	}
}

func init() {
	watcher.Register(func() eventpipe.Watcher { return warnings{} })
}

func main() {}
