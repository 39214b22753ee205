package wit

import (
	"errors"
	"unicode/utf8"
)

// KeyFields is the number of strings per event in a key-fields batch.
const KeyFields = 13

// KeyEvent is one event of a key-fields batch: the 13 fields every client-go key function
// reads. Its strings point into the batch: valid during the call only (strings.Clone to keep).
type KeyEvent struct {
	Source struct {
		Component, Host string
	}
	InvolvedObject struct {
		Kind, Namespace, Name, FieldPath, UID, APIVersion string
	}
	Type, Reason, Message                 string
	ReportingComponent, ReportingInstance string
}

// Fields are the 13 key fields in batch order (the first 11 are client-go's getEventKey).
func (e *KeyEvent) Fields() [KeyFields]string {
	o := &e.InvolvedObject
	return [KeyFields]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, o.FieldPath, o.UID,
		o.APIVersion, e.Type, e.Reason, e.Message, e.ReportingComponent, e.ReportingInstance}
}

func (e *KeyEvent) set(f [KeyFields]string) {
	e.Source.Component, e.Source.Host = f[0], f[1]
	o := &e.InvolvedObject
	o.Kind, o.Namespace, o.Name, o.FieldPath, o.UID, o.APIVersion = f[2], f[3], f[4], f[5], f[6], f[7]
	e.Type, e.Reason, e.Message, e.ReportingComponent, e.ReportingInstance = f[8], f[9], f[10], f[11], f[12]
}

// KeyEventOf is the key fields of a whole event.
func KeyEventOf(ev *Event) KeyEvent {
	var k KeyEvent
	o := &ev.InvolvedObject
	k.set([KeyFields]string{ev.Source.Component, ev.Source.Host, o.Kind, o.Namespace, o.Name, o.FieldPath, o.UID,
		o.APIVersion, ev.Type, ev.Reason, ev.Message, ev.ReportingComponent, ev.ReportingInstance})
	return k
}

// KeyWriter appends one key (or message) to the packed answer.
type KeyWriter struct {
	buf *[]byte
}

// NewKeyWriter writes into *buf.
func NewKeyWriter(buf *[]byte) KeyWriter { return KeyWriter{buf} }

// WriteString appends s.
func (w KeyWriter) WriteString(s string) { *w.buf = append(*w.buf, s...) }

// Write appends every part, in order, with nothing between them.
func (w KeyWriter) Write(parts ...string) {
	for _, s := range parts {
		*w.buf = append(*w.buf, s...)
	}
}

// WriteByte appends one byte.
func (w KeyWriter) WriteByte(b byte) error {
	*w.buf = append(*w.buf, b)
	return nil
}

// Packed validates a packed-strings value (bytes, ends): offsets never decrease, stay within
// bytes, the last is len(bytes), and (utf8) every string is UTF-8.
func Packed(bytes []byte, ends []uint32, checkUTF8 bool) error {
	var last uint32
	if len(ends) > 0 {
		last = ends[len(ends)-1]
	}
	if int(last) != len(bytes) {
		return errors.New("the last offset is not len(bytes)")
	}
	start := uint32(0)
	for _, end := range ends {
		if end < start || int(end) > len(bytes) {
			return errors.New("offsets decrease or pass len(bytes)")
		}
		if checkUTF8 && !utf8.Valid(bytes[start:end]) {
			return errors.New("bytes are not UTF-8 split at character boundaries")
		}
		start = end
	}
	return nil
}

// The answer of the last key batch: reused by the next (the host has read it by then).
var (
	outBytes []byte
	outEnds  []uint32
	retArea  [5]uint32 // result<packed-strings, string>: tag, bytes ptr/len, ends ptr/len
	errText  string
)

// KeyBatch answers a key-fields batch (bytes at bp/bl, ends at ep/el): for every event, the
// strings the writers append, in order (one per writer). Returns the address of the result
// (result<packed-strings, string>).
func KeyBatch(bp, bl, ep, el uint32, writers ...func(*KeyEvent, KeyWriter)) uint32 {
	bytes, ends := Bytes(bp, bl), U32s(ep, el)
	fail := func(msg string) uint32 {
		errText = msg
		retArea = [5]uint32{1, KeepString(errText), uint32(len(errText))}
		return Addr32(retArea[:])
	}
	if len(ends)%KeyFields != 0 {
		return fail("len(ends) is not a multiple of 13")
	}
	if err := Packed(bytes, ends, true); err != nil {
		return fail(err.Error())
	}
	events := len(ends) / KeyFields
	outBytes, outEnds = outBytes[:0], outEnds[:0]
	w := KeyWriter{&outBytes}
	var e KeyEvent
	var f [KeyFields]string
	start := uint32(0)
	for i := 0; i < events; i++ {
		for j := range f {
			end := ends[KeyFields*i+j]
			f[j] = ViewBytes(bytes[start:end])
			start = end
		}
		e.set(f)
		for _, write := range writers {
			write(&e, w)
			outEnds = append(outEnds, uint32(len(outBytes)))
		}
	}
	retArea = [5]uint32{0, Addr(outBytes), uint32(len(outBytes)), Addr32(outEnds), uint32(len(outEnds))}
	return Addr32(retArea[:])
}

// KeyStrings answers a single-event export: the event at addr, one string per writer.
func KeyStrings(addr uint32, writers ...func(*KeyEvent, KeyWriter)) []string {
	ev := LoadEvent(addr, false)
	k := KeyEventOf(&ev)
	out := make([]string, len(writers))
	for i, write := range writers {
		var b []byte
		write(&k, KeyWriter{&b})
		out[i] = string(b)
	}
	return out
}
