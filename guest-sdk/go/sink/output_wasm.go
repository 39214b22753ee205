//go:build wasm

package sink

import "unsafe"

//go:wasmimport eventpipe:plugin/output@0.1.0 write
func outputWrite(p unsafe.Pointer, n uint32, ret unsafe.Pointer)
