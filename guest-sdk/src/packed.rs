//! The packed batch format of the key and combiner worlds, so that plugin code never touches it.
//!
//! A [`PackedStrings`] is a list of strings as two buffers: `bytes` (the UTF-8 bytes,
//! concatenated) and `ends` (the exclusive end offset of each string). The host sends a
//! *key-fields batch*: [`KEY_FIELD_COUNT`] strings per event in [`KeyField`] order. A plugin
//! answers with another `PackedStrings`: one string per event (spam keys, messages) or two
//! (aggregate key, local key).
//!
//! - Reading: [`PackedStrs::new`] validates a `PackedStrings` once (UTF-8, offsets) and then
//!   hands out `&str` slices; [`KeyFieldsBatch`] groups them into one [`EventView`] per event.
//! - Writing: [`StringPacker`] appends strings (through a [`KeyWriter`]) and finishes into a
//!   `PackedStrings`; [`pack_key_fields`] builds a key-fields batch (what the host does).
//!
//! Nothing here panics on malformed input: every check returns a [`PackError`].

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::{Event, PackedStrings};

/// Strings per event in a key-fields batch.
pub const KEY_FIELD_COUNT: usize = 13;

/// The fields of a key-fields batch, in wire order (the discriminant is the index within one
/// event). Fields 0 to 10, concatenated, are client-go's `getEventKey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum KeyField {
    /// `source.component`.
    SourceComponent = 0,
    /// `source.host`.
    SourceHost = 1,
    /// `involved-object.kind`.
    Kind = 2,
    /// `involved-object.namespace`.
    Namespace = 3,
    /// `involved-object.name`.
    Name = 4,
    /// `involved-object.field-path`.
    FieldPath = 5,
    /// `involved-object.uid`.
    Uid = 6,
    /// `involved-object.api-version`.
    ApiVersion = 7,
    /// `type`.
    Type = 8,
    /// `reason`.
    Reason = 9,
    /// `message`.
    Message = 10,
    /// `reporting-component`.
    ReportingComponent = 11,
    /// `reporting-instance`.
    ReportingInstance = 12,
}

impl KeyField {
    /// Every key field, in wire order: what a key plugin reads unless it says otherwise.
    pub const ALL: [KeyField; KEY_FIELD_COUNT] = [
        KeyField::SourceComponent,
        KeyField::SourceHost,
        KeyField::Kind,
        KeyField::Namespace,
        KeyField::Name,
        KeyField::FieldPath,
        KeyField::Uid,
        KeyField::ApiVersion,
        KeyField::Type,
        KeyField::Reason,
        KeyField::Message,
        KeyField::ReportingComponent,
        KeyField::ReportingInstance,
    ];
}

/// Why a packed buffer was rejected (or could not be built). Offsets and indices are in bytes
/// and strings respectively, counted from 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    /// `bytes` is not UTF-8; the first `valid_up_to` bytes are.
    NotUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// `ends[index]` is smaller than `ends[index - 1]`.
    OffsetDecreases {
        /// Index of the offending offset.
        index: usize,
    },
    /// `ends[index]` points past the end of `bytes`.
    OffsetOutOfRange {
        /// Index of the offending offset.
        index: usize,
        /// Its value.
        end: u32,
        /// `len(bytes)`.
        len: usize,
    },
    /// `ends[index]` splits a multi-byte UTF-8 character.
    NotCharBoundary {
        /// Index of the offending offset.
        index: usize,
        /// Its value.
        end: u32,
    },
    /// The last offset (0 when `ends` is empty) is not `len(bytes)`: bytes belong to no string.
    TrailingBytes {
        /// The last offset.
        last_end: usize,
        /// `len(bytes)`.
        len: usize,
    },
    /// A key-fields batch whose string count is not a multiple of [`KEY_FIELD_COUNT`].
    FieldCount {
        /// `len(ends)`.
        strings: usize,
    },
    /// The packed output would exceed `u32::MAX` bytes (offsets are `u32`).
    TooLarge,
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::NotUtf8 { valid_up_to } => {
                write!(f, "packed bytes are not UTF-8 after byte {valid_up_to}")
            }
            PackError::OffsetDecreases { index } => {
                write!(f, "ends[{index}] is smaller than ends[{}]", index - 1)
            }
            PackError::OffsetOutOfRange { index, end, len } => {
                write!(f, "ends[{index}] = {end} is past the end of the bytes ({len})")
            }
            PackError::NotCharBoundary { index, end } => {
                write!(f, "ends[{index}] = {end} splits a UTF-8 character")
            }
            PackError::TrailingBytes { last_end, len } => {
                write!(f, "the last end offset is {last_end} but there are {len} bytes")
            }
            PackError::FieldCount { strings } => {
                write!(f, "{strings} strings is not a multiple of {KEY_FIELD_COUNT} key fields")
            }
            PackError::TooLarge => f.write_str("packed strings exceed 4 GiB"),
        }
    }
}

impl core::error::Error for PackError {}

/// A validated, borrowed view of a [`PackedStrings`]: `len()` strings, each a `&str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedStrs<'a> {
    text: &'a str,
    ends: &'a [u32],
}

impl<'a> PackedStrs<'a> {
    /// Checks `bytes` and `ends` against the rules of `packed-strings` (one UTF-8 pass over
    /// `bytes`, one pass over `ends`).
    ///
    /// # Errors
    /// [`PackError::NotUtf8`], [`PackError::OffsetDecreases`], [`PackError::OffsetOutOfRange`],
    /// [`PackError::NotCharBoundary`] or [`PackError::TrailingBytes`], for the first violation.
    pub fn new(bytes: &'a [u8], ends: &'a [u32]) -> Result<Self, PackError> {
        let text = core::str::from_utf8(bytes).map_err(|e| PackError::NotUtf8 { valid_up_to: e.valid_up_to() })?;
        // The hot path: one branch per offset (this loop ran at ~35 fuel per string with a
        // separate check and error for each rule). `check_offsets` says what is wrong.
        let mut last = 0u32;
        for &end in ends {
            let e = end as usize;
            // A UTF-8 continuation byte (0b10xx_xxxx) at `e` means `e` splits a character.
            let splits = bytes.get(e).is_some_and(|&b| (b as i8) < -0x40);
            if end < last || e > bytes.len() || splits {
                Self::check_offsets(text, ends)?;
                break;
            }
            last = end;
        }
        if last as usize != text.len() {
            Self::check_offsets(text, ends)?;
        }
        Ok(Self { text, ends })
    }

    /// Checks `ends` against `text` rule by rule and returns the first broken one (the slow,
    /// precise form of the check in [`PackedStrs::new`]).
    #[cold]
    fn check_offsets(text: &str, ends: &[u32]) -> Result<(), PackError> {
        let mut last = 0u32;
        for (index, &end) in ends.iter().enumerate() {
            if end < last {
                return Err(PackError::OffsetDecreases { index });
            }
            if end as usize > text.len() {
                return Err(PackError::OffsetOutOfRange { index, end, len: text.len() });
            }
            if !text.is_char_boundary(end as usize) {
                return Err(PackError::NotCharBoundary { index, end });
            }
            last = end;
        }
        if last as usize != text.len() {
            return Err(PackError::TrailingBytes { last_end: last as usize, len: text.len() });
        }
        Ok(())
    }

    /// String `start..end` of the validated text.
    ///
    /// `start` and `end` must be `0` or offsets of `ends`, with `start <= end`: [`new`]
    /// checked that every such offset is within the text and on a character boundary.
    ///
    /// [`new`]: PackedStrs::new
    #[inline]
    fn slice(text: &'a str, start: usize, end: usize) -> &'a str {
        debug_assert!(start <= end && text.is_char_boundary(start) && text.is_char_boundary(end));
        // SAFETY: `new` checked every offset (see above). Checking each slice again cost ~65
        // fuel per string, a third of a key function's time.
        unsafe { text.get_unchecked(start..end) }
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `index`, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<&'a str> {
        let end = *self.ends.get(index)? as usize;
        let start = if index == 0 { 0 } else { self.ends[index - 1] as usize };
        self.text.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a str> + 'a {
        let text = self.text;
        let ends = self.ends;
        (0..ends.len()).map(move |i| {
            let start = if i == 0 { 0 } else { ends[i - 1] as usize };
            Self::slice(text, start, ends[i] as usize)
        })
    }
}

/// The `source` of an [`EventView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SourceView<'a> {
    /// `source.component`, e.g. `"kubelet"`.
    pub component: &'a str,
    /// `source.host`, the node name.
    pub host: &'a str,
}

/// The `involved_object` of an [`EventView`] (without `resource_version`, which no key uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ObjectView<'a> {
    /// Kind of the referent, e.g. `"Pod"`.
    pub kind: &'a str,
    /// Namespace of the referent.
    pub namespace: &'a str,
    /// Name of the referent.
    pub name: &'a str,
    /// A piece of the object, e.g. `"spec.containers{nginx}"`.
    pub field_path: &'a str,
    /// UID of the referent.
    pub uid: &'a str,
    /// API version of the referent.
    pub api_version: &'a str,
}

/// The key fields of one event, borrowed: what key and combiner functions see. Field names
/// and nesting follow [`Event`], so `event.involved_object.kind` reads the same on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventView<'a> {
    /// The reporting component.
    pub source: SourceView<'a>,
    /// The object the event is about.
    pub involved_object: ObjectView<'a>,
    /// `"Normal"` or `"Warning"`.
    pub type_: &'a str,
    /// Short reason, e.g. `"FailedMount"`.
    pub reason: &'a str,
    /// Human-readable description.
    pub message: &'a str,
    /// The controller that emitted the event (Go `ReportingController`).
    pub reporting_component: &'a str,
    /// Its instance.
    pub reporting_instance: &'a str,
}

impl<'a> EventView<'a> {
    /// The view from the fields in [`KeyField`] order.
    pub fn from_fields(f: [&'a str; KEY_FIELD_COUNT]) -> Self {
        let [component, host, kind, namespace, name, field_path, uid, api_version, type_, reason, message, rc, ri] = f;
        EventView {
            source: SourceView { component, host },
            involved_object: ObjectView { kind, namespace, name, field_path, uid, api_version },
            type_,
            reason,
            message,
            reporting_component: rc,
            reporting_instance: ri,
        }
    }

    /// The fields in [`KeyField`] order (the wire order of a key-fields batch).
    pub fn fields(&self) -> [&'a str; KEY_FIELD_COUNT] {
        let (s, o) = (&self.source, &self.involved_object);
        [
            s.component,
            s.host,
            o.kind,
            o.namespace,
            o.name,
            o.field_path,
            o.uid,
            o.api_version,
            self.type_,
            self.reason,
            self.message,
            self.reporting_component,
            self.reporting_instance,
        ]
    }

    /// One field by name.
    pub fn field(&self, field: KeyField) -> &'a str {
        self.fields()[field as usize]
    }
}

impl<'a> From<&'a Event> for EventView<'a> {
    fn from(e: &'a Event) -> Self {
        let io = &e.involved_object;
        EventView {
            source: SourceView { component: &e.source.component, host: &e.source.host },
            involved_object: ObjectView {
                kind: &io.kind,
                namespace: &io.namespace,
                name: &io.name,
                field_path: &io.field_path,
                uid: &io.uid,
                api_version: &io.api_version,
            },
            type_: &e.type_,
            reason: &e.reason,
            message: &e.message,
            reporting_component: &e.reporting_component,
            reporting_instance: &e.reporting_instance,
        }
    }
}

/// A validated key-fields batch: `len()` events of [`KEY_FIELD_COUNT`] strings each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFieldsBatch<'a> {
    strs: PackedStrs<'a>,
}

impl<'a> KeyFieldsBatch<'a> {
    /// Validates a key-fields batch.
    ///
    /// # Errors
    /// Any [`PackedStrs::new`] error, or [`PackError::FieldCount`] when the number of strings is
    /// not a multiple of [`KEY_FIELD_COUNT`].
    pub fn new(bytes: &'a [u8], ends: &'a [u32]) -> Result<Self, PackError> {
        if !ends.len().is_multiple_of(KEY_FIELD_COUNT) {
            return Err(PackError::FieldCount { strings: ends.len() });
        }
        Ok(Self { strs: PackedStrs::new(bytes, ends)? })
    }

    /// Validates the batch the host passed.
    ///
    /// # Errors
    /// As [`KeyFieldsBatch::new`].
    pub fn from_packed(packed: &'a PackedStrings) -> Result<Self, PackError> {
        Self::new(&packed.bytes, &packed.ends)
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.strs.len() / KEY_FIELD_COUNT
    }

    /// Whether the batch holds no event.
    pub fn is_empty(&self) -> bool {
        self.strs.is_empty()
    }

    /// Event `index`, or `None` past the end.
    pub fn get(&self, index: usize) -> Option<EventView<'a>> {
        (index < self.len()).then(|| self.view(index))
    }

    /// The events in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = EventView<'a>> + 'a {
        let text = self.strs.text;
        let mut start = 0usize;
        self.strs.ends.chunks_exact(KEY_FIELD_COUNT).map(move |event| {
            EventView::from_fields(core::array::from_fn(|f| {
                let end = event[f] as usize;
                let s = PackedStrs::slice(text, start, end);
                start = end;
                s
            }))
        })
    }

    fn view(&self, index: usize) -> EventView<'a> {
        let base = index * KEY_FIELD_COUNT;
        EventView::from_fields(core::array::from_fn(|f| self.strs.get(base + f).unwrap_or_default()))
    }
}

/// Appends to the string being built: a key or a message. Writes go straight into the packed
/// output buffer, so building a key allocates nothing per event. Implements [`fmt::Write`],
/// so `write!(key, "{}/{}", a, b)` works.
#[derive(Debug)]
pub struct KeyWriter<'a> {
    buf: &'a mut String,
}

impl<'a> KeyWriter<'a> {
    /// A writer appending to `buf`.
    pub fn new(buf: &'a mut String) -> Self {
        Self { buf }
    }

    /// Appends `s`.
    #[inline]
    pub fn push_str(&mut self, s: &str) {
        self.buf.push_str(s);
    }

    /// Appends each part in order, with no separator (client-go's key style).
    #[inline]
    pub fn push_all(&mut self, parts: &[&str]) {
        self.buf.reserve(parts.iter().map(|p| p.len()).sum());
        for p in parts {
            self.buf.push_str(p);
        }
    }

    /// Appends one character.
    #[inline]
    pub fn push(&mut self, c: char) {
        self.buf.push(c);
    }
}

impl fmt::Write for KeyWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.buf.push_str(s);
        Ok(())
    }
}

/// Builds a [`PackedStrings`] one string at a time.
#[derive(Debug, Default, Clone)]
pub struct StringPacker {
    bytes: String,
    ends: Vec<u32>,
}

impl StringPacker {
    /// An empty packer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty packer with room for `bytes` bytes and `strings` strings.
    pub fn with_capacity(bytes: usize, strings: usize) -> Self {
        Self { bytes: String::with_capacity(bytes), ends: Vec::with_capacity(strings) }
    }

    /// Appends one string.
    ///
    /// # Errors
    /// [`PackError::TooLarge`] when the total would exceed `u32::MAX` bytes (the string is
    /// then not added).
    pub fn push(&mut self, s: &str) -> Result<(), PackError> {
        self.push_with(|w| w.push_str(s))
    }

    /// Appends one string built by `write` through a [`KeyWriter`].
    ///
    /// # Errors
    /// [`PackError::TooLarge`] when the total would exceed `u32::MAX` bytes (what `write`
    /// wrote is then removed).
    pub fn push_with(&mut self, write: impl FnOnce(&mut KeyWriter<'_>)) -> Result<(), PackError> {
        let start = self.bytes.len();
        write(&mut KeyWriter::new(&mut self.bytes));
        match u32::try_from(self.bytes.len()) {
            Ok(end) => {
                self.ends.push(end);
                Ok(())
            }
            Err(_) => {
                self.bytes.truncate(start);
                Err(PackError::TooLarge)
            }
        }
    }

    /// Number of strings so far.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether no string was added.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The packed strings.
    pub fn finish(self) -> PackedStrings {
        PackedStrings { bytes: self.bytes.into_bytes(), ends: self.ends }
    }
}

/// Packs events into a key-fields batch, as the host does before calling a batch function.
///
/// # Errors
/// [`PackError::TooLarge`] when the batch would exceed `u32::MAX` bytes.
pub fn pack_key_fields<'e>(events: impl IntoIterator<Item = EventView<'e>>) -> Result<PackedStrings, PackError> {
    let mut packer = StringPacker::new();
    for event in events {
        for field in event.fields() {
            packer.push(field)?;
        }
    }
    Ok(packer.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn view(n: &'static str) -> EventView<'static> {
        EventView::from_fields([
            "kubelet",
            "node1",
            "Pod",
            "default",
            n,
            "spec.containers{app}",
            "uid-1",
            "v1",
            "Warning",
            "BackOff",
            "Back-off restarting failed container ✓",
            "kubelet",
            "node1",
        ])
    }

    #[test]
    fn key_fields_round_trip() {
        let events = [view("a"), view("ünïcødé"), EventView::default(), view("")];
        let packed = pack_key_fields(events.iter().copied()).unwrap();
        assert_eq!(packed.ends.len(), events.len() * KEY_FIELD_COUNT);
        let batch = KeyFieldsBatch::from_packed(&packed).unwrap();
        assert_eq!(batch.len(), events.len());
        assert_eq!(batch.iter().collect::<Vec<_>>(), events);
        assert_eq!(batch.get(1).unwrap().involved_object.name, "ünïcødé");
        assert_eq!(batch.get(4), None);
    }

    #[test]
    fn view_fields_follow_the_wire_order() {
        let v = view("x");
        assert_eq!(EventView::from_fields(v.fields()), v);
        assert_eq!(v.field(KeyField::Name), "x");
        assert_eq!(v.field(KeyField::FieldPath), "spec.containers{app}");
        assert_eq!(v.field(KeyField::ReportingInstance), "node1");
    }

    #[test]
    fn packer_round_trip_and_empty() {
        let mut p = StringPacker::new();
        for s in ["", "ab", "", "ç", "xyz"] {
            p.push(s).unwrap();
        }
        p.push_with(|w| {
            w.push_all(&["a", "b"]);
            w.push('c');
            core::fmt::Write::write_fmt(w, format_args!("{}", 7)).unwrap();
        })
        .unwrap();
        let packed = p.finish();
        let strs = PackedStrs::new(&packed.bytes, &packed.ends).unwrap();
        assert_eq!(strs.iter().collect::<Vec<_>>(), ["", "ab", "", "ç", "xyz", "abc7"]);
        assert_eq!(strs.get(3), Some("ç"));
        assert_eq!(strs.get(6), None);

        let empty = StringPacker::new().finish();
        assert!(PackedStrs::new(&empty.bytes, &empty.ends).unwrap().is_empty());
        assert!(KeyFieldsBatch::from_packed(&empty).unwrap().is_empty());
    }

    #[test]
    fn malformed_buffers_are_errors_not_panics() {
        use PackError::*;
        let check = |bytes: &[u8], ends: &[u32]| PackedStrs::new(bytes, ends).map(|s| s.len());
        assert_eq!(check(b"abc", &[1, 3]), Ok(2));
        assert_eq!(check(b"abc", &[2, 1]), Err(OffsetDecreases { index: 1 }));
        assert_eq!(check(b"abc", &[4]), Err(OffsetOutOfRange { index: 0, end: 4, len: 3 }));
        assert_eq!(check(b"abc", &[u32::MAX]), Err(OffsetOutOfRange { index: 0, end: u32::MAX, len: 3 }));
        assert_eq!(check(b"abc", &[2]), Err(TrailingBytes { last_end: 2, len: 3 }));
        assert_eq!(check(b"abc", &[]), Err(TrailingBytes { last_end: 0, len: 3 }));
        assert_eq!(check("é".as_bytes(), &[1, 2]), Err(NotCharBoundary { index: 0, end: 1 }));
        // A split inside a 4-byte character after valid offsets, and a bad offset after a
        // split one (the first broken rule is reported).
        assert_eq!(check("a😀b".as_bytes(), &[1, 3, 6]), Err(NotCharBoundary { index: 1, end: 3 }));
        assert_eq!(check("a😀b".as_bytes(), &[2, 1]), Err(NotCharBoundary { index: 0, end: 2 }));
        assert_eq!(check("a😀b".as_bytes(), &[1, 5, 6]).map(|_| ()), Ok(()));
        assert_eq!(check(&[b'a', 0xff], &[2]), Err(NotUtf8 { valid_up_to: 1 }));
        assert_eq!(check(&[0xe2, 0x82], &[2]), Err(NotUtf8 { valid_up_to: 0 }));

        // Key-fields batches: a short batch (12 strings) or one event plus a stray string.
        let ends: Vec<u32> = vec![0; 12];
        assert_eq!(KeyFieldsBatch::new(b"", &ends), Err(FieldCount { strings: 12 }));
        let ends: Vec<u32> = vec![0; 14];
        assert_eq!(KeyFieldsBatch::new(b"", &ends), Err(FieldCount { strings: 14 }));
        let ends: Vec<u32> = vec![0; 13];
        assert_eq!(KeyFieldsBatch::new(b"x", &ends), Err(TrailingBytes { last_end: 0, len: 1 }));
        assert_eq!(KeyFieldsBatch::new(b"", &ends).unwrap().get(0), Some(EventView::default()));
    }

    #[test]
    fn truncated_batches_are_rejected() {
        let packed = pack_key_fields([view("a"), view("b")]).unwrap();
        // Cut the byte buffer or the offsets anywhere: never a panic, always an error.
        for cut in 0..packed.bytes.len() {
            assert!(KeyFieldsBatch::new(&packed.bytes[..cut], &packed.ends).is_err(), "bytes cut at {cut}");
        }
        for cut in 0..packed.ends.len() {
            assert!(KeyFieldsBatch::new(&packed.bytes, &packed.ends[..cut]).is_err(), "ends cut at {cut}");
        }
    }

    #[test]
    fn errors_have_messages() {
        let e = PackedStrs::new(b"abc", &[2, 1]).unwrap_err();
        assert_eq!(alloc::string::ToString::to_string(&e), "ends[1] is smaller than ends[0]");
        let e = KeyFieldsBatch::new(b"", &[0; 3]).unwrap_err();
        assert_eq!(alloc::string::ToString::to_string(&e), "3 strings is not a multiple of 13 key fields");
    }
}
