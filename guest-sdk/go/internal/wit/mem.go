// Package wit is the canonical ABI of the eventpipe:plugin@0.1.0 worlds, written by hand:
// linear memory, the event record's layout, packed batches and the imports. Plugins use the
// packages above it (eventpipe and one world package); this one may change.
//
// Memory: the host writes arguments into memory it gets from cabi_realloc and reads results
// after an export returns, until it calls the export's post-return function. Everything
// handed to the host is kept referenced from Keep until then, so that Go's (non-moving)
// garbage collector cannot free it.
package wit

import "unsafe"

// Blocks allocated for the host (arguments, import results) and the results of the
// current call: referenced until Release.
var keep [][]uint64

// Strings whose bytes a result points at, referenced until Release.
var keepStrings []string

// cabi_realloc: the allocator the host calls for arguments and import results. Memory is
// 8-byte aligned Go memory, kept alive until the call's post-return.
//
//go:wasmexport cabi_realloc
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	if newSize == 0 {
		return align // a non-null, aligned, empty block
	}
	p, b := Alloc(int(newSize))
	if old != 0 && oldSize != 0 {
		copy(b, Bytes(old, min(oldSize, newSize)))
	}
	return p
}

// Alloc returns n zeroed, 8-byte aligned bytes kept alive until Release, and their address.
func Alloc(n int) (uint32, []byte) {
	if n == 0 {
		return 8, nil
	}
	block := make([]uint64, (n+7)/8)
	keep = append(keep, block)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), n)
	return Addr(b), b
}

// Release drops every reference Alloc and KeepString made (post-return, or the end of an
// export without results).
func Release() {
	clear(keep)
	keep = keep[:0]
	clear(keepStrings)
	keepStrings = keepStrings[:0]
}

// Addr is the linear-memory address of b's first byte (0 for an empty slice).
func Addr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// Addr32 is the address of the first element of s (0 for an empty slice).
func Addr32(s []uint32) uint32 {
	if len(s) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(s))))
}

// KeepString returns the address of s's bytes and keeps s referenced until Release.
func KeepString(s string) uint32 {
	if len(s) == 0 {
		return 0
	}
	keepStrings = append(keepStrings, s)
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

func ptr(addr uint32) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(nil), addr) // a linear-memory address from the host
}

// Bytes is the memory at addr, n bytes long (no copy).
func Bytes(addr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr(addr)), n)
}

// U32s is the memory at addr as n uint32 values (no copy).
func U32s(addr, n uint32) []uint32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(ptr(addr)), n)
}

// View is the string at addr, n bytes long, without a copy: valid while the memory is.
func View(addr, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(ptr(addr)), n)
}

// Copy is the string at addr, n bytes long, copied into Go memory.
func Copy(addr, n uint32) string {
	return string(Bytes(addr, n))
}

// ViewBytes is b as a string, without a copy.
func ViewBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Load/store helpers at addr+offset (little endian, as Wasm memory).

func U8(addr, off uint32) uint8   { return *(*uint8)(ptr(addr + off)) }
func U32(addr, off uint32) uint32 { return *(*uint32)(ptr(addr + off)) }
func I32(addr, off uint32) int32  { return *(*int32)(ptr(addr + off)) }
func I64(addr, off uint32) int64  { return *(*int64)(ptr(addr + off)) }

func PutU8(addr, off uint32, v uint8)   { *(*uint8)(ptr(addr + off)) = v }
func PutU32(addr, off uint32, v uint32) { *(*uint32)(ptr(addr + off)) = v }
func PutI32(addr, off uint32, v int32)  { *(*int32)(ptr(addr + off)) = v }
func PutI64(addr, off uint32, v int64)  { *(*int64)(ptr(addr + off)) = v }

// PutString writes the (pointer, length) of s at addr+off, keeping s alive until Release.
func PutString(addr, off uint32, s string) {
	PutU32(addr, off, KeepString(s))
	PutU32(addr, off+4, uint32(len(s)))
}

// ViewAt is the string whose (pointer, length) is at addr+off, without a copy.
func ViewAt(addr, off uint32) string { return View(U32(addr, off), U32(addr, off+4)) }

// CopyAt is the string whose (pointer, length) is at addr+off, copied.
func CopyAt(addr, off uint32) string { return Copy(U32(addr, off), U32(addr, off+4)) }

// U64Bytes is s's memory as bytes.
func U64Bytes(s []uint64) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}
