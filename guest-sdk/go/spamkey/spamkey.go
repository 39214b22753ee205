// Package spamkey exports a spam key function (world spam-key): call
// Register in an init function.
package spamkey

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

var (
	newPlugin func() eventpipe.SpamKey
	key       func(*wit.KeyEvent, wit.KeyWriter)
)

// Register makes the component's spam key function the value newKey returns (called once per
// instance, on the first call).
func Register(newKey func() eventpipe.SpamKey) { newPlugin = newKey }

func instance() {
	if key == nil {
		if newPlugin == nil {
			panic("eventpipe: no spam key function registered (call spamkey.Register in an init function)")
		}
		key = newPlugin().SpamKey
	}
}

//go:wasmexport spam-key
func exportSpamKey(event uint32) uint32 {
	defer wit.Guard()
	instance()
	spamKey := wit.KeyStrings(event, key)[0]
	addr, _ := wit.Alloc(8)
	wit.PutString(addr, 0, spamKey)
	return addr
}

//go:wasmexport spam-key-batch
func exportSpamKeyBatch(bp, bl, ep, el uint32) uint32 {
	defer wit.Guard()
	instance()
	return wit.KeyBatch(bp, bl, ep, el, key)
}

//go:wasmexport cabi_post_spam-key
func postSpamKey(uint32) { wit.Release() }

//go:wasmexport cabi_post_spam-key-batch
func postSpamKeyBatch(uint32) { wit.Release() }
