// Package messagecombiner exports a message combiner (world message-combiner): call
// Register in an init function.
package messagecombiner

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

var (
	newPlugin func() eventpipe.MessageCombiner
	combine   func(*wit.KeyEvent, wit.KeyWriter)
)

// Register makes the component's combiner the value newCombiner returns (called once per
// instance, on the first call).
func Register(newCombiner func() eventpipe.MessageCombiner) { newPlugin = newCombiner }

func instance() {
	if combine == nil {
		if newPlugin == nil {
			panic("eventpipe: no message combiner registered (call messagecombiner.Register in an init function)")
		}
		combine = newPlugin().CombineMessage
	}
}

//go:wasmexport combine-message
func exportCombineMessage(event uint32) uint32 {
	defer wit.Guard()
	instance()
	message := wit.KeyStrings(event, combine)[0]
	addr, _ := wit.Alloc(8)
	wit.PutString(addr, 0, message)
	return addr
}

//go:wasmexport combine-message-batch
func exportCombineMessageBatch(bp, bl, ep, el uint32) uint32 {
	defer wit.Guard()
	instance()
	return wit.KeyBatch(bp, bl, ep, el, combine)
}

//go:wasmexport cabi_post_combine-message
func postCombineMessage(uint32) { wit.Release() }

//go:wasmexport cabi_post_combine-message-batch
func postCombineMessageBatch(uint32) { wit.Release() }
