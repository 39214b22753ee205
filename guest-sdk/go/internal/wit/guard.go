package wit

// Guard, deferred by every export: a panic is logged through the log import (at error
// level, with its value) and then fails the call (Go's runtime exits, which traps: the host
// counts a failed call and makes a fresh instance).
func Guard() {
	if r := recover(); r != nil {
		Log(4, "panic: "+describe(r), nil)
		panic(r)
	}
}

// describe formats a panic value without package fmt (which would add some 400 KB of code to
// every plugin).
func describe(r any) string {
	switch v := r.(type) {
	case string:
		return v
	case error:
		return v.Error()
	case interface{ String() string }:
		return v.String()
	default:
		return "a value that is not a string or an error"
	}
}
