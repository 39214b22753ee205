package wit

import (
	"errors"
	"strconv"
)

// EventField names one field of an event in a filter's projection (wit/types.wit,
// variant event-field): Tag is the case's index, Key the label or annotation key.
type EventField struct {
	Tag uint8
	Key string
}

// The cases of event-field, in WIT order.
const (
	FieldName uint8 = iota
	FieldGenerateName
	FieldNamespace
	FieldUID
	FieldResourceVersion
	FieldCreationTimestamp
	FieldLabel
	FieldAnnotation
	FieldInvolvedObjectKind
	FieldInvolvedObjectNamespace
	FieldInvolvedObjectName
	FieldInvolvedObjectUID
	FieldInvolvedObjectAPIVersion
	FieldInvolvedObjectResourceVersion
	FieldInvolvedObjectFieldPath
	FieldReason
	FieldMessage
	FieldSourceComponent
	FieldSourceHost
	FieldFirstTimestamp
	FieldLastTimestamp
	FieldCount
	FieldType
	FieldEventTime
	FieldSeriesCount
	FieldSeriesLastObservedTime
	FieldAction
	FieldRelatedKind
	FieldRelatedNamespace
	FieldRelatedName
	FieldRelatedUID
	FieldRelatedAPIVersion
	FieldRelatedResourceVersion
	FieldRelatedFieldPath
	FieldReportingComponent
	FieldReportingInstance
	fieldCases
)

// StoreFields encodes fields as list<event-field>; returns (address, length).
func StoreFields(fields []EventField) (uint32, uint32) {
	addr, _ := Alloc(12 * len(fields))
	for i, f := range fields {
		at := addr + 12*uint32(i)
		PutU8(at, 0, f.Tag)
		if f.Tag == FieldLabel || f.Tag == FieldAnnotation {
			PutString(at, 4, f.Key)
		}
	}
	return addr, uint32(len(fields))
}

// EnrichmentField names one field of an event's enrichment (wit/types.wit, variant
// enrichment-field): Tag is the case's index, Key the label or annotation key.
type EnrichmentField struct {
	Tag uint8
	Key string
}

// The cases of enrichment-field, in WIT order.
const (
	EnrichmentCluster uint8 = iota
	EnrichmentObjectLabel
	EnrichmentObjectAnnotation
	EnrichmentOwnerKind
	EnrichmentOwnerName
	EnrichmentOwnerUID
	EnrichmentOwnerAPIVersion
	EnrichmentNodeName
	EnrichmentNodeLabel
)

// StoreEnrichmentFields encodes fields as list<enrichment-field>; returns (address, length).
func StoreEnrichmentFields(fields []EnrichmentField) (uint32, uint32) {
	addr, _ := Alloc(12 * len(fields))
	for i, f := range fields {
		at := addr + 12*uint32(i)
		PutU8(at, 0, f.Tag)
		if f.Tag == EnrichmentObjectLabel || f.Tag == EnrichmentObjectAnnotation || f.Tag == EnrichmentNodeLabel {
			PutString(at, 4, f.Key)
		}
	}
	return addr, uint32(len(fields))
}

func instant(s string) Instant {
	if s == "" {
		return Instant{}
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return Instant{UnixNanos: n, Valid: true}
}

func int32Of(s string) int32 {
	n, _ := strconv.ParseInt(s, 10, 32)
	return int32(n)
}

// Projection decodes projected batches into one reused Event: the declared fields set, the
// others empty; then the declared enrichment fields' values.
type Projection struct {
	Fields     []EventField
	Enrichment []EnrichmentField
	event      Event
	series     EventSeries
	related    ObjectReference
	values     []string
}

// ErrProjection: a batch that does not hold count × fields strings.
var ErrProjection = errors.New("the projected batch does not hold count × fields strings")

// Each calls f with every event of the batch and the values of its enrichment fields, in
// their order (strings are views into the batch: valid during the call only). A batch without
// the enrichment fields (a component built for the plain filter world, which the host does
// not ask for them) gives "" for each.
func (p *Projection) Each(count int, bytes []byte, ends []uint32, f func(i int, e *Event, enrichment []string)) error {
	packed := len(p.Enrichment)
	if len(ends) != count*(len(p.Fields)+packed) && len(ends) == count*len(p.Fields) {
		packed = 0
	}
	n := len(p.Fields) + packed
	if len(ends) != count*n {
		return ErrProjection
	}
	if err := Packed(bytes, ends, false); err != nil {
		return err
	}
	if cap(p.values) < len(p.Enrichment) {
		p.values = make([]string, len(p.Enrichment))
	}
	values := p.values[:len(p.Enrichment)]
	clear(values)
	start := uint32(0)
	for i := 0; i < count; i++ {
		e := &p.event
		for j, field := range p.Fields {
			end := ends[n*i+j]
			p.set(e, field, ViewBytes(bytes[start:end]))
			start = end
		}
		for j := range values[:packed] {
			end := ends[n*i+len(p.Fields)+j]
			values[j] = ViewBytes(bytes[start:end])
			start = end
		}
		f(i, e, values)
	}
	return nil
}

func (p *Projection) set(e *Event, f EventField, s string) {
	m, o := &e.Metadata, &e.InvolvedObject
	switch f.Tag {
	case FieldName:
		m.Name = s
	case FieldGenerateName:
		m.GenerateName = s
	case FieldNamespace:
		m.Namespace = s
	case FieldUID:
		m.UID = s
	case FieldResourceVersion:
		m.ResourceVersion = s
	case FieldCreationTimestamp:
		m.CreationTimestamp = instant(s)
	case FieldLabel:
		m.Labels = setKey(m.Labels, f.Key, s)
	case FieldAnnotation:
		m.Annotations = setKey(m.Annotations, f.Key, s)
	case FieldInvolvedObjectKind:
		o.Kind = s
	case FieldInvolvedObjectNamespace:
		o.Namespace = s
	case FieldInvolvedObjectName:
		o.Name = s
	case FieldInvolvedObjectUID:
		o.UID = s
	case FieldInvolvedObjectAPIVersion:
		o.APIVersion = s
	case FieldInvolvedObjectResourceVersion:
		o.ResourceVersion = s
	case FieldInvolvedObjectFieldPath:
		o.FieldPath = s
	case FieldReason:
		e.Reason = s
	case FieldMessage:
		e.Message = s
	case FieldSourceComponent:
		e.Source.Component = s
	case FieldSourceHost:
		e.Source.Host = s
	case FieldFirstTimestamp:
		e.FirstTimestamp = instant(s)
	case FieldLastTimestamp:
		e.LastTimestamp = instant(s)
	case FieldCount:
		e.Count = int32Of(s)
	case FieldType:
		e.Type = s
	case FieldEventTime:
		e.EventTime = instant(s)
	case FieldSeriesCount:
		if s == "" {
			e.Series = nil
		} else {
			p.series.Count = int32Of(s)
			e.Series = &p.series
		}
	case FieldSeriesLastObservedTime:
		p.series.LastObservedTime = instant(s)
		if p.series.LastObservedTime.Valid {
			e.Series = &p.series
		}
	case FieldAction:
		e.Action = s
	case FieldRelatedKind, FieldRelatedNamespace, FieldRelatedName, FieldRelatedUID, FieldRelatedAPIVersion,
		FieldRelatedResourceVersion, FieldRelatedFieldPath:
		r := &p.related
		*[...]*string{&r.Kind, &r.Namespace, &r.Name, &r.UID, &r.APIVersion, &r.ResourceVersion,
			&r.FieldPath}[f.Tag-FieldRelatedKind] = s
		if *r != (ObjectReference{}) {
			e.Related = r
		} else {
			e.Related = nil
		}
	case FieldReportingComponent:
		e.ReportingComponent = s
	case FieldReportingInstance:
		e.ReportingInstance = s
	}
}

func setKey(m map[string]string, k, v string) map[string]string {
	if v == "" {
		delete(m, k)
		return m
	}
	if m == nil {
		m = make(map[string]string)
	}
	m[k] = v
	return m
}
