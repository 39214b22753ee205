// Package eventpipe writes eventpipe plugins in Go: WebAssembly components that export one
// world of the WIT package eventpipe:plugin@0.1.0 (the repository's wit/ directory).
//
// A plugin is a type that implements one interface of this package, registered with the
// Register function of that world's package, in an init function:
//
//	package main
//
//	import (
//		eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
//		"github.com/eventpipe/eventpipe/guest-sdk/go/filter"
//	)
//
//	type dropNormal struct{}
//
//	func (dropNormal) Fields() []eventpipe.EventField { return []eventpipe.EventField{eventpipe.FieldType} }
//
//	func (dropNormal) Filter(tenant string, e *eventpipe.Event) eventpipe.Verdict {
//		if e.Type == "Normal" {
//			return eventpipe.Drop("normal event")
//		}
//		return eventpipe.Keep
//	}
//
//	func init() { filter.Register(func() eventpipe.Filter { return dropNormal{} }) }
//
//	func main() {}
//
// Build it as a WASI preview 1 library and make it a component (Go 1.24 or newer):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.core.wasm .
//	eventpipe-plugin-build component plugin.core.wasm --wit wit --world filter --stub-wasi -o plugin.wasm
//
// | world (package)                  | interface       | sees                        | default (package defaults) |
// |----------------------------------|-----------------|-----------------------------|----------------------------|
// | aggregate-key (aggregatekey)     | AggregateKey    | KeyEvent (13 key fields)    | ByReason                   |
// | message-combiner (messagecombiner)| MessageCombiner| KeyEvent                    | SimilarEvents              |
// | spam-key (spamkey)               | SpamKey         | KeyEvent                    | SourceObject               |
// | filter (filter-enriched)         | Filter          | Event (declared fields)     | EnrichedFilter             |
// | sink (sink)                      | Sink            | SinkRequest                 | —                          |
// | watcher (watcher)                | Watcher         | Event                       | —                          |
//
// The constructor given to Register runs once per component instance, on the first call:
// read the config (Config) there. An instance is single-threaded and never re-entered.
//
// There is no WASI: the build's --stub-wasi replaces Go's WASI preview 1 imports by stubs
// (no files, network or environment; a virtual clock that starts at the Unix epoch; zero
// random bytes; fmt.Print and println go nowhere). Log with Log / Debug / Info / Warn /
// Error. A panic is logged at error level and fails the call.
//
// Strings of the KeyEvent and Event values an export hands you point into the host's batch:
// they are valid during the call only. Copy them (strings.Clone) to keep them. Sinks and
// watchers get copies.
package eventpipe

import "github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"

// The event and its parts (wit/types.wit).
type (
	// Event is a core/v1 Event, field for field.
	Event = wit.Event
	// ObjectMeta is the part of metav1.ObjectMeta a plugin sees.
	ObjectMeta = wit.ObjectMeta
	// ObjectReference is core/v1 ObjectReference.
	ObjectReference = wit.ObjectReference
	// EventSource is core/v1 EventSource.
	EventSource = wit.EventSource
	// EventSeries is core/v1 EventSeries.
	EventSeries = wit.EventSeries
	// Instant is an optional time: Unix nanoseconds, Valid false when unset.
	Instant = wit.Instant
	// KeyEvent is the 13 key fields of one event of a key batch.
	KeyEvent = wit.KeyEvent
	// KeyWriter appends to the key being written.
	KeyWriter = wit.KeyWriter
	// Verdict is a filter's decision.
	Verdict = wit.Verdict
	// EventField names a field of a filter's projection.
	EventField = wit.EventField
	// EnrichmentField names a field of an event's enrichment (what the host knows of its
	// involved object: labels, annotations, top owner, node, cluster).
	EnrichmentField = wit.EnrichmentField
)

// Keep passes the event on to correlation.
var Keep = Verdict{}

// Drop discards the event; the host logs reason at debug level and counts it.
func Drop(reason string) Verdict { return Verdict{Dropped: true, HasReason: true, Reason: reason} }

// DropSilently discards the event without a reason.
func DropSilently() Verdict { return Verdict{Dropped: true} }

// AggregateKey is an aggregate-key function (world aggregate-key, client-go
// EventAggregatorKeyFunc). Both keys must be pure functions of the key fields.
type AggregateKey interface {
	// AggregateKey writes the aggregate key: events with equal keys are similar.
	AggregateKey(e *KeyEvent, key KeyWriter)
	// LocalKey writes the local key: distinct local keys count towards aggregation
	// (client-go: the message; see defaults.AggregateByReasonLocal).
	LocalKey(e *KeyEvent, key KeyWriter)
}

// MessageCombiner is a message combiner (world message-combiner, client-go
// EventAggregatorMessageFunc).
type MessageCombiner interface {
	// CombineMessage writes the message of the aggregate event replacing events like e.
	CombineMessage(e *KeyEvent, message KeyWriter)
}

// SpamKey is a spam key function (world spam-key, client-go EventSpamKeyFunc): events with
// equal keys share one token bucket.
type SpamKey interface {
	// SpamKey writes the spam key of e.
	SpamKey(e *KeyEvent, key KeyWriter)
}

// Filter keeps or drops events before correlation (world filter).
type Filter interface {
	// Fields lists the fields Filter reads; the host sends only these, and every other field
	// of the Event that Filter gets is empty. Asked once per instance. EveryField lists all
	// but labels and annotations.
	Fields() []EventField
	// Filter decides on one event. tenant names the tenant whose rules matched ("" for the
	// defaults).
	Filter(tenant string, e *Event) Verdict
}

// EnrichedFilter is a Filter that also reads each event's enrichment (world
// filter-enriched): the involved object's labels and annotations, its top owner, its node and
// the cluster's name, as the host's [enrich] configuration finds them. The filter package
// calls FilterEnriched for every event of a batch when the registered Filter implements it;
// the single-event call (for tools) stays Filter.
type EnrichedFilter interface {
	Filter
	// EnrichmentFields lists the enrichment fields FilterEnriched reads (asked once per
	// instance, with Fields; at most 64 fields in all).
	EnrichmentFields() []EnrichmentField
	// FilterEnriched decides on one event with its enrichment: "" for each field the host
	// found nothing of, or when enrichment is off.
	FilterEnriched(tenant string, e *Event, enrichment Enrichment) Verdict
}

// Enrichment holds the values of an EnrichedFilter's enrichment fields for one event (views
// into the batch: valid during the call only).
type Enrichment struct {
	Fields []EnrichmentField
	Values []string
}

// Get returns the value of field: "" when it was not declared or the host found nothing.
func (e Enrichment) Get(field EnrichmentField) string {
	for i, f := range e.Fields {
		if f == field && i < len(e.Values) {
			return e.Values[i]
		}
	}
	return ""
}

// The enrichment fields without a key.
var (
	EnrichmentCluster         = EnrichmentField{Tag: wit.EnrichmentCluster}
	EnrichmentOwnerKind       = EnrichmentField{Tag: wit.EnrichmentOwnerKind}
	EnrichmentOwnerName       = EnrichmentField{Tag: wit.EnrichmentOwnerName}
	EnrichmentOwnerUID        = EnrichmentField{Tag: wit.EnrichmentOwnerUID}
	EnrichmentOwnerAPIVersion = EnrichmentField{Tag: wit.EnrichmentOwnerAPIVersion}
	EnrichmentNodeName        = EnrichmentField{Tag: wit.EnrichmentNodeName}
)

// ObjectLabel is the enrichment field of the involved object's label with this key.
func ObjectLabel(key string) EnrichmentField {
	return EnrichmentField{Tag: wit.EnrichmentObjectLabel, Key: key}
}

// ObjectAnnotation is the enrichment field of the involved object's annotation with this key.
func ObjectAnnotation(key string) EnrichmentField {
	return EnrichmentField{Tag: wit.EnrichmentObjectAnnotation, Key: key}
}

// NodeLabel is the enrichment field of the label with this key of the node a Pod runs on.
func NodeLabel(key string) EnrichmentField {
	return EnrichmentField{Tag: wit.EnrichmentNodeLabel, Key: key}
}

// Watcher sees every event distributed to it, before correlation (world watcher).
type Watcher interface {
	// Watch receives one event.
	Watch(e *Event)
}

// The log levels (wit/host.wit, log.level).
const (
	LevelTrace uint32 = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// LogEnabled reports whether a record at level would be emitted: check it before formatting
// expensive messages.
func LogEnabled(level uint32) bool { return wit.LogEnabled(level) }

// Log emits one record into the host's tracing, with fields given as key, value, key,
// value, ….
func Log(level uint32, message string, fields ...string) { wit.Log(level, message, fields) }

// Debug logs at debug level (fields: key, value, …).
func Debug(message string, fields ...string) { wit.Log(LevelDebug, message, fields) }

// Info logs at info level.
func Info(message string, fields ...string) { wit.Log(LevelInfo, message, fields) }

// Warn logs at warn level.
func Warn(message string, fields ...string) { wit.Log(LevelWarn, message, fields) }

// Error logs at error level.
func Error(message string, fields ...string) { wit.Log(LevelError, message, fields) }

// Config returns the plugin's config value of key (fixed for the instance's life).
func Config(key string) (string, bool) { return wit.ConfigGet(key) }

// ConfigEntries returns every config entry, sorted by key.
func ConfigEntries() [][2]string { return wit.ConfigEntries() }

// Label is the projection field of the label with this key ("" when absent).
func Label(key string) EventField { return EventField{Tag: wit.FieldLabel, Key: key} }

// Annotation is the projection field of the annotation with this key ("" when absent).
func Annotation(key string) EventField { return EventField{Tag: wit.FieldAnnotation, Key: key} }

// The projection fields (wit/types.wit, event-field); see also Label and Annotation.
var (
	FieldName                          = EventField{Tag: wit.FieldName}
	FieldGenerateName                  = EventField{Tag: wit.FieldGenerateName}
	FieldNamespace                     = EventField{Tag: wit.FieldNamespace}
	FieldUID                           = EventField{Tag: wit.FieldUID}
	FieldResourceVersion               = EventField{Tag: wit.FieldResourceVersion}
	FieldCreationTimestamp             = EventField{Tag: wit.FieldCreationTimestamp}
	FieldInvolvedObjectKind            = EventField{Tag: wit.FieldInvolvedObjectKind}
	FieldInvolvedObjectNamespace       = EventField{Tag: wit.FieldInvolvedObjectNamespace}
	FieldInvolvedObjectName            = EventField{Tag: wit.FieldInvolvedObjectName}
	FieldInvolvedObjectUID             = EventField{Tag: wit.FieldInvolvedObjectUID}
	FieldInvolvedObjectAPIVersion      = EventField{Tag: wit.FieldInvolvedObjectAPIVersion}
	FieldInvolvedObjectResourceVersion = EventField{Tag: wit.FieldInvolvedObjectResourceVersion}
	FieldInvolvedObjectFieldPath       = EventField{Tag: wit.FieldInvolvedObjectFieldPath}
	FieldReason                        = EventField{Tag: wit.FieldReason}
	FieldMessage                       = EventField{Tag: wit.FieldMessage}
	FieldSourceComponent               = EventField{Tag: wit.FieldSourceComponent}
	FieldSourceHost                    = EventField{Tag: wit.FieldSourceHost}
	FieldFirstTimestamp                = EventField{Tag: wit.FieldFirstTimestamp}
	FieldLastTimestamp                 = EventField{Tag: wit.FieldLastTimestamp}
	FieldCount                         = EventField{Tag: wit.FieldCount}
	FieldType                          = EventField{Tag: wit.FieldType}
	FieldEventTime                     = EventField{Tag: wit.FieldEventTime}
	FieldSeriesCount                   = EventField{Tag: wit.FieldSeriesCount}
	FieldSeriesLastObservedTime        = EventField{Tag: wit.FieldSeriesLastObservedTime}
	FieldAction                        = EventField{Tag: wit.FieldAction}
	FieldRelatedKind                   = EventField{Tag: wit.FieldRelatedKind}
	FieldRelatedNamespace              = EventField{Tag: wit.FieldRelatedNamespace}
	FieldRelatedName                   = EventField{Tag: wit.FieldRelatedName}
	FieldRelatedUID                    = EventField{Tag: wit.FieldRelatedUID}
	FieldRelatedAPIVersion             = EventField{Tag: wit.FieldRelatedAPIVersion}
	FieldRelatedResourceVersion        = EventField{Tag: wit.FieldRelatedResourceVersion}
	FieldRelatedFieldPath              = EventField{Tag: wit.FieldRelatedFieldPath}
	FieldReportingComponent            = EventField{Tag: wit.FieldReportingComponent}
	FieldReportingInstance             = EventField{Tag: wit.FieldReportingInstance}
)

// EveryField is every field but labels and annotations (named one key at a time): a
// projection for a filter that reads everything (each event then costs every string).
func EveryField() []EventField {
	out := make([]EventField, 0, 34)
	for tag := wit.FieldName; tag <= wit.FieldReportingInstance; tag++ {
		if tag != wit.FieldLabel && tag != wit.FieldAnnotation {
			out = append(out, EventField{Tag: tag})
		}
	}
	return out
}

// SinkRequest is one call of client-go's EventSink: a create, or (Patch) a strategic-merge
// patch of the event named Event.Metadata.Name with Body (JSON, may be empty).
type SinkRequest struct {
	Patch bool
	Event Event
	Body  []byte
}

// SinkErrorKind says what the host does after a failed request.
type SinkErrorKind uint8

// The kinds of SinkError (wit/types.wit, sink-error).
const (
	// Retryable: the host retries later.
	Retryable SinkErrorKind = iota
	// Permanent: the host drops the event and logs the message.
	Permanent
	// NotFound: a patch's target does not exist; the host creates the event instead.
	NotFound
)

// SinkError is a failed sink request.
type SinkError struct {
	Kind    SinkErrorKind
	Message string
}

func (e *SinkError) Error() string { return e.Message }

// Sink is an event sink (world sink, client-go EventSink). It formats; the host delivers
// what it writes with sink.Write.
type Sink interface {
	// Deliver performs one request and returns the event as stored (usually req.Event). An
	// error that is a *SinkError says how the host goes on; any other error is Retryable.
	Deliver(tenant string, req *SinkRequest) (Event, error)
}
