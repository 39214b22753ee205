package wit

import "unsafe"

// LogEnabled: whether a record at level (0 trace … 4 error) would be emitted.
func LogEnabled(level uint32) bool { return logEnabled(level) != 0 }

// Log emits one record; fields are key, value pairs.
func Log(level uint32, message string, fields []string) {
	n := len(fields) / 2
	var list []uint32
	if n > 0 {
		list = make([]uint32, 4*n)
		for i := 0; i < n; i++ {
			k, v := fields[2*i], fields[2*i+1]
			list[4*i] = uint32(uintptr(unsafe.Pointer(unsafe.StringData(k))))
			list[4*i+1] = uint32(len(k))
			list[4*i+2] = uint32(uintptr(unsafe.Pointer(unsafe.StringData(v))))
			list[4*i+3] = uint32(len(v))
		}
	}
	logLog(level, unsafe.Pointer(unsafe.StringData(message)), uint32(len(message)),
		unsafe.Pointer(unsafe.SliceData(list)), uint32(n))
	keepAlive(fields, list, message)
}

//go:noinline
func keepAlive(...any) {}

// ConfigGet: the plugin's config value of key (copied: it outlives the call).
func ConfigGet(key string) (string, bool) {
	var ret [3]uint32 // option<string>: tag, ptr, len
	configGet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&ret[0]))
	keepAlive(key)
	if ret[0]&0xff == 0 {
		return "", false
	}
	return Copy(ret[1], ret[2]), true
}

// ConfigEntries: every config entry, sorted by key (copied).
func ConfigEntries() [][2]string {
	var ret [2]uint32 // list: ptr, len
	configEntries(unsafe.Pointer(&ret[0]))
	out := make([][2]string, ret[1])
	for i := range out {
		out[i] = [2]string{CopyAt(ret[0], 16*uint32(i)), CopyAt(ret[0], 16*uint32(i)+8)}
	}
	return out
}
