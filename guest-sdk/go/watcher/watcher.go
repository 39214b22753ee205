// Package watcher exports a watcher (world watcher): call Register in an init function.
package watcher

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/internal/wit"
)

var (
	newPlugin func() eventpipe.Watcher
	plugin    eventpipe.Watcher
)

// Register makes the component's watcher the value newWatcher returns (called once per
// instance, on the first call).
func Register(newWatcher func() eventpipe.Watcher) { newPlugin = newWatcher }

func instance() eventpipe.Watcher {
	if plugin == nil {
		if newPlugin == nil {
			panic("eventpipe: no watcher registered (call watcher.Register in an init function)")
		}
		plugin = newPlugin()
	}
	return plugin
}

//go:wasmexport watch
func exportWatch(event uint32) {
	defer wit.Release()
	defer wit.Guard()
	e := wit.LoadEvent(event, true)
	instance().Watch(&e)
}

//go:wasmexport watch-batch
func exportWatchBatch(events, n uint32) {
	defer wit.Release()
	defer wit.Guard()
	w := instance()
	for i := uint32(0); i < n; i++ {
		e := wit.LoadEvent(events+wit.EventSize*i, true)
		w.Watch(&e)
	}
}
