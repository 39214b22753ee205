package wit

import "sort"

// Instant is an optional point in time: nanoseconds since the Unix epoch (UTC). Valid false
// is Go's zero time.Time (unset, null on the wire).
type Instant struct {
	UnixNanos int64
	Valid     bool
}

// ObjectReference is core/v1 ObjectReference (involvedObject, related).
type ObjectReference struct {
	Kind, Namespace, Name, UID, APIVersion, ResourceVersion, FieldPath string
}

// EventSource is core/v1 EventSource.
type EventSource struct {
	Component, Host string
}

// EventSeries is core/v1 EventSeries.
type EventSeries struct {
	Count            int32
	LastObservedTime Instant
}

// ObjectMeta is the part of metav1.ObjectMeta a plugin sees.
type ObjectMeta struct {
	Name, GenerateName, Namespace, UID, ResourceVersion string
	CreationTimestamp                                   Instant
	Labels, Annotations                                 map[string]string
}

// Event is a core/v1 Event, field for field (wit/types.wit, record event).
type Event struct {
	Metadata           ObjectMeta
	InvolvedObject     ObjectReference
	Reason, Message    string
	Source             EventSource
	FirstTimestamp     Instant
	LastTimestamp      Instant
	Count              int32
	Type               string
	EventTime          Instant
	Series             *EventSeries
	Action             string
	Related            *ObjectReference
	ReportingComponent string
	ReportingInstance  string
}

// Verdict is a filter's decision: keep, or drop with an optional reason.
type Verdict struct {
	Dropped   bool
	HasReason bool
	Reason    string
}

// Layout of the records in memory (canonical ABI, wit/types.wit).
const (
	EventSize, EventAlign = 344, 8
	objectRefSize         = 56
	verdictSize           = 16
	sinkRequestSize       = 360
	resultEventSize       = 352
)

func loadInstant(addr, off uint32) Instant {
	if U8(addr, off) == 0 {
		return Instant{}
	}
	return Instant{UnixNanos: I64(addr, off+8), Valid: true}
}

func storeInstant(addr, off uint32, t Instant) {
	if t.Valid {
		PutU8(addr, off, 1)
		PutI64(addr, off+8, t.UnixNanos)
	} else {
		PutU8(addr, off, 0)
	}
}

func loadRef(addr, off uint32, str func(uint32, uint32) string) ObjectReference {
	return ObjectReference{
		Kind: str(addr, off), Namespace: str(addr, off+8), Name: str(addr, off+16), UID: str(addr, off+24),
		APIVersion: str(addr, off+32), ResourceVersion: str(addr, off+40), FieldPath: str(addr, off+48),
	}
}

func storeRef(addr, off uint32, r *ObjectReference) {
	for i, s := range [...]string{r.Kind, r.Namespace, r.Name, r.UID, r.APIVersion, r.ResourceVersion, r.FieldPath} {
		PutString(addr, off+8*uint32(i), s)
	}
}

func loadMap(addr, off uint32, str func(uint32, uint32) string) map[string]string {
	list, n := U32(addr, off), U32(addr, off+4)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := uint32(0); i < n; i++ {
		m[str(list, 16*i)] = str(list, 16*i+8)
	}
	return m
}

func storeMap(addr, off uint32, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // sorted by UTF-8 bytes, as the WIT requires
	list, _ := Alloc(16 * len(keys))
	for i, k := range keys {
		PutString(list, 16*uint32(i), k)
		PutString(list, 16*uint32(i)+8, m[k])
	}
	PutU32(addr, off, list)
	PutU32(addr, off+4, uint32(len(keys)))
}

// LoadEvent decodes the event record at addr. copy: strings are copied into Go memory (else
// they point into the argument buffers and are valid during the call only).
func LoadEvent(addr uint32, copy bool) Event {
	str := ViewAt
	if copy {
		str = CopyAt
	}
	e := Event{
		Metadata: ObjectMeta{
			Name: str(addr, 0), GenerateName: str(addr, 8), Namespace: str(addr, 16), UID: str(addr, 24),
			ResourceVersion: str(addr, 32), CreationTimestamp: loadInstant(addr, 40),
			Labels: loadMap(addr, 56, str), Annotations: loadMap(addr, 64, str),
		},
		InvolvedObject:     loadRef(addr, 72, str),
		Reason:             str(addr, 128),
		Message:            str(addr, 136),
		Source:             EventSource{Component: str(addr, 144), Host: str(addr, 152)},
		FirstTimestamp:     loadInstant(addr, 160),
		LastTimestamp:      loadInstant(addr, 176),
		Count:              I32(addr, 192),
		Type:               str(addr, 196),
		EventTime:          loadInstant(addr, 208),
		Action:             str(addr, 256),
		ReportingComponent: str(addr, 324),
		ReportingInstance:  str(addr, 332),
	}
	if U8(addr, 224) != 0 {
		e.Series = &EventSeries{Count: I32(addr, 232), LastObservedTime: loadInstant(addr, 240)}
	}
	if U8(addr, 264) != 0 {
		r := loadRef(addr, 268, str)
		e.Related = &r
	}
	return e
}

// StoreEvent encodes e at addr (EventSize bytes, zeroed), keeping its strings alive until
// Release.
func StoreEvent(addr uint32, e *Event) {
	m := &e.Metadata
	for i, s := range [...]string{m.Name, m.GenerateName, m.Namespace, m.UID, m.ResourceVersion} {
		PutString(addr, 8*uint32(i), s)
	}
	storeInstant(addr, 40, m.CreationTimestamp)
	storeMap(addr, 56, m.Labels)
	storeMap(addr, 64, m.Annotations)
	storeRef(addr, 72, &e.InvolvedObject)
	PutString(addr, 128, e.Reason)
	PutString(addr, 136, e.Message)
	PutString(addr, 144, e.Source.Component)
	PutString(addr, 152, e.Source.Host)
	storeInstant(addr, 160, e.FirstTimestamp)
	storeInstant(addr, 176, e.LastTimestamp)
	PutI32(addr, 192, e.Count)
	PutString(addr, 196, e.Type)
	storeInstant(addr, 208, e.EventTime)
	if e.Series != nil {
		PutU8(addr, 224, 1)
		PutI32(addr, 232, e.Series.Count)
		storeInstant(addr, 240, e.Series.LastObservedTime)
	}
	PutString(addr, 256, e.Action)
	if e.Related != nil {
		PutU8(addr, 264, 1)
		storeRef(addr, 268, e.Related)
	}
	PutString(addr, 324, e.ReportingComponent)
	PutString(addr, 332, e.ReportingInstance)
}

// StoreVerdict encodes v at addr (verdictSize bytes).
func StoreVerdict(addr uint32, v *Verdict) {
	if !v.Dropped {
		PutU8(addr, 0, 0)
		return
	}
	PutU8(addr, 0, 1)
	if v.HasReason {
		PutU8(addr, 4, 1)
		PutString(addr, 8, v.Reason)
	} else {
		PutU8(addr, 4, 0)
	}
}
