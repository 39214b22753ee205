// Package aggregatekey exports an aggregate-key function (world aggregate-key): call
// Register in an init function.
package aggregatekey

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

var (
	newPlugin func() eventpipe.AggregateKey
	plugin    eventpipe.AggregateKey
	aggregate func(*wit.KeyEvent, wit.KeyWriter)
	local     func(*wit.KeyEvent, wit.KeyWriter)
)

// Register makes the component's key function the value newKey returns (called once per
// instance, on the first call).
func Register(newKey func() eventpipe.AggregateKey) { newPlugin = newKey }

func instance() {
	if plugin == nil {
		if newPlugin == nil {
			panic("eventpipe: no aggregate-key function registered (call aggregatekey.Register in an init function)")
		}
		plugin = newPlugin()
		aggregate, local = plugin.AggregateKey, plugin.LocalKey
	}
}

//go:wasmexport aggregate-key
func exportAggregateKey(event uint32) uint32 {
	defer wit.Guard()
	instance()
	keys := wit.KeyStrings(event, aggregate, local)
	addr, _ := wit.Alloc(16)
	wit.PutString(addr, 0, keys[0])
	wit.PutString(addr, 8, keys[1])
	return addr
}

//go:wasmexport aggregate-key-batch
func exportAggregateKeyBatch(bp, bl, ep, el uint32) uint32 {
	defer wit.Guard()
	instance()
	return wit.KeyBatch(bp, bl, ep, el, aggregate, local)
}

//go:wasmexport cabi_post_aggregate-key
func postAggregateKey(uint32) { wit.Release() }

//go:wasmexport cabi_post_aggregate-key-batch
func postAggregateKeyBatch(uint32) { wit.Release() }
