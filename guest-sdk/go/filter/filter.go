// Package filter exports a filter plugin (world filter-enriched, a filter that may also read
// each event's enrichment): call Register in an init function.
package filter

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

var (
	newPlugin  func() eventpipe.Filter
	plugin     eventpipe.Filter
	projection wit.Projection
	fieldsRead bool
	verdicts   []uint64 // the last batch's answer (reused: the host has read it by then)
	retArea    [2]uint32
)

// Register makes the component's filter the value newFilter returns (called once per
// instance, on the first call).
func Register(newFilter func() eventpipe.Filter) { newPlugin = newFilter }

func instance() eventpipe.Filter {
	if plugin == nil {
		if newPlugin == nil {
			panic("eventpipe: no filter registered (call filter.Register in an init function)")
		}
		plugin = newPlugin()
	}
	return plugin
}

// fields reads the projection once: the event fields and, for an EnrichedFilter, the
// enrichment fields.
func fields() []eventpipe.EventField {
	if !fieldsRead {
		projection.Fields = instance().Fields()
		if enriched, ok := instance().(eventpipe.EnrichedFilter); ok {
			projection.Enrichment = enriched.EnrichmentFields()
		}
		fieldsRead = true
	}
	return projection.Fields
}

//go:wasmexport enrichment-fields
func exportEnrichmentFields() uint32 {
	defer wit.Guard()
	fields()
	addr, n := wit.StoreEnrichmentFields(projection.Enrichment)
	retArea = [2]uint32{addr, n}
	return wit.Addr32(retArea[:])
}

//go:wasmexport fields
func exportFields() uint32 {
	defer wit.Guard()
	addr, n := wit.StoreFields(fields())
	retArea = [2]uint32{addr, n}
	return wit.Addr32(retArea[:])
}

//go:wasmexport filter
func exportFilter(args uint32) uint32 {
	defer wit.Guard()
	tenant := wit.ViewAt(args, 0)
	e := wit.LoadEvent(args+8, false)
	v := instance().Filter(tenant, &e)
	addr, _ := wit.Alloc(16)
	wit.StoreVerdict(addr, &v)
	return addr
}

//go:wasmexport filter-batch
func exportFilterBatch(tp, tl, count, bp, bl, ep, el uint32) uint32 {
	defer wit.Guard()
	tenant := wit.View(tp, tl)
	f := instance()
	fields()
	need := (16*int(count) + 7) / 8
	if cap(verdicts) < need {
		verdicts = make([]uint64, need)
	}
	verdicts = verdicts[:need]
	clear(verdicts)
	base := uint32(0)
	if count > 0 {
		base = wit.Addr(wit.U64Bytes(verdicts))
	}
	enriched, _ := f.(eventpipe.EnrichedFilter)
	err := projection.Each(int(count), wit.Bytes(bp, bl), wit.U32s(ep, el), func(i int, e *eventpipe.Event, values []string) {
		var v eventpipe.Verdict
		if enriched != nil {
			v = enriched.FilterEnriched(tenant, e, eventpipe.Enrichment{Fields: projection.Enrichment, Values: values})
		} else {
			v = f.Filter(tenant, e)
		}
		wit.StoreVerdict(base+16*uint32(i), &v)
	})
	if err != nil {
		panic("eventpipe: " + err.Error()) // the host never sends such a batch
	}
	retArea = [2]uint32{base, count}
	return wit.Addr32(retArea[:])
}

//go:wasmexport cabi_post_fields
func postFields(uint32) { wit.Release() }

//go:wasmexport cabi_post_enrichment-fields
func postEnrichmentFields(uint32) { wit.Release() }

//go:wasmexport cabi_post_filter
func postFilter(uint32) { wit.Release() }

//go:wasmexport cabi_post_filter-batch
func postFilterBatch(uint32) { wit.Release() }
