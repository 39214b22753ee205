//go:build !wasm

package wit

import "unsafe"

// Off wasm (native unit tests) the imports are inert: logs are discarded, the config is empty.

func logEnabled(uint32) uint32 { return 0 }

func logLog(uint32, unsafe.Pointer, uint32, unsafe.Pointer, uint32) {}

func configGet(_ unsafe.Pointer, _ uint32, ret unsafe.Pointer) { *(*uint32)(ret) = 0 }

func configEntries(ret unsafe.Pointer) { *(*[2]uint32)(ret) = [2]uint32{} }
