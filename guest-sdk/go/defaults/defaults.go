// Package defaults holds client-go's key functions (tools/record/events_cache.go),
// bit-exact, for composing your own and as the default plugins (by-reason, similar-events,
// source-object): the same keys as the Rust SDK's defaults module.
//
// Keys are plain concatenations with no separator, as in Go's client-go, so its collisions
// ("ab"+"c" = "a"+"bc") are reproduced exactly.
package defaults

import eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"

// CombinedMessagePrefix prefixes combined messages (client-go
// EventAggregatorByReasonMessageFunc).
const CombinedMessagePrefix = "(combined from similar events): "

// EventKey is client-go getEventKey: source.component, source.host, involvedObject kind,
// namespace, name, fieldPath, uid, apiVersion, type, reason, message.
func EventKey(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	f := e.Fields()
	w.Write(f[:11]...)
}

// SpamKey is client-go getSpamKey as of v0.26: source.component, source.host,
// involvedObject kind, namespace, name, uid, apiVersion (no type).
func SpamKey(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	o := &e.InvolvedObject
	w.Write(e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, o.UID, o.APIVersion)
}

// SpamKeyWithType is client-go getSpamKey since k8s 1.32: SpamKey followed by type.
func SpamKeyWithType(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	SpamKey(e, w)
	w.WriteString(e.Type)
}

// AggregateByReason is client-go EventAggregatorByReasonFunc's aggregate key:
// source.component, source.host, involvedObject kind, namespace, name, uid, apiVersion, type,
// reason, reportingComponent, reportingInstance.
func AggregateByReason(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	o := &e.InvolvedObject
	w.Write(e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, o.UID, o.APIVersion, e.Type, e.Reason,
		e.ReportingComponent, e.ReportingInstance)
}

// AggregateByReasonLocal is EventAggregatorByReasonFunc's local key: the message.
func AggregateByReasonLocal(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) { w.WriteString(e.Message) }

// AggregateByReasonMessage is client-go EventAggregatorByReasonMessageFunc:
// "(combined from similar events): " + message.
func AggregateByReasonMessage(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	w.Write(CombinedMessagePrefix, e.Message)
}

// ByReason is the default aggregate-key plugin by-reason.
type ByReason struct{}

// AggregateKey is AggregateByReason.
func (ByReason) AggregateKey(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) { AggregateByReason(e, w) }

// LocalKey is AggregateByReasonLocal.
func (ByReason) LocalKey(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) { AggregateByReasonLocal(e, w) }

// SimilarEvents is the default message combiner similar-events.
type SimilarEvents struct{}

// CombineMessage is AggregateByReasonMessage.
func (SimilarEvents) CombineMessage(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) {
	AggregateByReasonMessage(e, w)
}

// SourceObject is the default spam-key plugin source-object.
type SourceObject struct{}

// SpamKey is the package's SpamKey.
func (SourceObject) SpamKey(e *eventpipe.KeyEvent, w eventpipe.KeyWriter) { SpamKey(e, w) }
