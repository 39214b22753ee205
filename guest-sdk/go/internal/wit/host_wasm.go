//go:build wasm

package wit

import "unsafe"

//go:wasmimport eventpipe:plugin/log@0.1.0 enabled
func logEnabled(level uint32) uint32

//go:wasmimport eventpipe:plugin/log@0.1.0 log
func logLog(level uint32, msg unsafe.Pointer, msgLen uint32, fields unsafe.Pointer, fieldsLen uint32)

//go:wasmimport eventpipe:plugin/config@0.1.0 get
func configGet(key unsafe.Pointer, keyLen uint32, ret unsafe.Pointer)

//go:wasmimport eventpipe:plugin/config@0.1.0 entries
func configEntries(ret unsafe.Pointer)
