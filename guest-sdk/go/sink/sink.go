// Package sink exports an event sink (world sink): call Register in an init function, and
// write what the sink formats with Write.
package sink

import (
	"errors"
	"unsafe"

	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

// Write appends b to the sink's destination; the host flushes after each call returns. An
// error means the destination is gone: fail the request as Retryable.
func Write(b []byte) error {
	var ret [3]uint32 // result<_, string>: tag, ptr, len
	outputWrite(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)), unsafe.Pointer(&ret[0]))
	if ret[0]&0xff == 0 {
		return nil
	}
	return errors.New(wit.Copy(ret[1], ret[2]))
}

// WriteString is Write of a string.
func WriteString(s string) error { return Write(unsafe.Slice(unsafe.StringData(s), len(s))) }

var (
	newPlugin func() eventpipe.Sink
	plugin    eventpipe.Sink
	retArea   [2]uint32
)

// Register makes the component's sink the value newSink returns (called once per instance,
// on the first call).
func Register(newSink func() eventpipe.Sink) { newPlugin = newSink }

func instance() eventpipe.Sink {
	if plugin == nil {
		if newPlugin == nil {
			panic("eventpipe: no sink registered (call sink.Register in an init function)")
		}
		plugin = newPlugin()
	}
	return plugin
}

// The sink-request at addr (variant: tag @0, payload @8; patch: event, body @+344).
func loadRequest(addr uint32) eventpipe.SinkRequest {
	req := eventpipe.SinkRequest{Patch: wit.U8(addr, 0) == 1, Event: wit.LoadEvent(addr+8, true)}
	if req.Patch {
		req.Body = []byte(wit.CopyAt(addr, 8+wit.EventSize))
	}
	return req
}

// Stores result<event, sink-error> at addr (tag @0, payload @8).
func storeResult(addr uint32, e eventpipe.Event, err error) {
	if err == nil {
		wit.StoreEvent(addr+8, &e)
		return
	}
	wit.PutU8(addr, 0, 1)
	kind, msg := eventpipe.Retryable, err.Error()
	var se *eventpipe.SinkError
	if errors.As(err, &se) {
		kind = se.Kind
	}
	wit.PutU8(addr, 8, uint8(kind))
	wit.PutString(addr, 12, msg)
}

const resultSize = 8 + wit.EventSize

//go:wasmexport deliver
func exportDeliver(args uint32) uint32 {
	defer wit.Guard()
	tenant := wit.CopyAt(args, 0)
	req := loadRequest(args + 8)
	e, err := instance().Deliver(tenant, &req)
	addr, _ := wit.Alloc(resultSize)
	storeResult(addr, e, err)
	return addr
}

//go:wasmexport deliver-batch
func exportDeliverBatch(tp, tl, rp, rn uint32) uint32 {
	defer wit.Guard()
	tenant := wit.Copy(tp, tl)
	s := instance()
	base, _ := wit.Alloc(resultSize * int(rn))
	for i := uint32(0); i < rn; i++ {
		req := loadRequest(rp + (8+352)*i)
		e, err := s.Deliver(tenant, &req)
		storeResult(base+resultSize*i, e, err)
	}
	retArea = [2]uint32{base, rn}
	return wit.Addr32(retArea[:])
}

//go:wasmexport cabi_post_deliver
func postDeliver(uint32) { wit.Release() }

//go:wasmexport cabi_post_deliver-batch
func postDeliverBatch(uint32) { wit.Release() }
