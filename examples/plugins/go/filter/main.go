// quiet-normal (Go): a filter that drops routine Normal events (by default the reasons
// Scheduled, Pulling, Pulled, Created and Started: a pod starting up) before correlation, so
// they never reach the sink or use up spam-filter tokens. Warning events and other reasons
// are kept. Config key `reasons` (comma-separated) replaces the list.
package main

import (
	"strings"

	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/filter"
)

// The reasons dropped when the config sets none.
const defaultReasons = "Scheduled,Pulling,Pulled,Created,Started"

// quietNormal is the filter, with its reason list read from the config once per instance.
type quietNormal struct {
	reasons []string
}

func newQuietNormal() eventpipe.Filter {
	list, ok := eventpipe.Config("reasons")
	if !ok {
		list = defaultReasons
	}
	q := &quietNormal{}
	for _, r := range strings.Split(list, ",") {
		if r = strings.TrimSpace(r); r != "" {
			q.reasons = append(q.reasons, r)
		}
	}
	return q
}

// Fields: the fields Filter reads; the host sends only these.
func (q *quietNormal) Fields() []eventpipe.EventField {
	return []eventpipe.EventField{eventpipe.FieldType, eventpipe.FieldReason}
}

func (q *quietNormal) Filter(tenant string, e *eventpipe.Event) eventpipe.Verdict {
	if e.Type != "Normal" || !q.listed(e.Reason) {
		return eventpipe.Keep
	}
	if eventpipe.LogEnabled(eventpipe.LevelDebug) {
		eventpipe.Debug("dropping a routine event", "tenant", tenant, "reason", e.Reason)
	}
	return eventpipe.Drop("routine Normal event: " + e.Reason)
}

func (q *quietNormal) listed(reason string) bool {
	for _, r := range q.reasons {
		if r == reason {
			return true
		}
	}
	return false
}

func init() { filter.Register(newQuietNormal) }

func main() {}
