//go:build !wasm

package sink

import "unsafe"

// Off wasm (native unit tests) writes succeed without going anywhere.
func outputWrite(unsafe.Pointer, uint32, unsafe.Pointer) {}
