//! JSON strings read as Go's `encoding/json` reads them (its `unquote`), where a strict parser
//! rejects the document: what client-go, kubectl and the apiserver (through its fork of it,
//! `sigs.k8s.io/json`) accept, eventpipe decodes to the same events.
//!
//! - **Unpaired surrogate escapes.** A JSON string may spell a character outside the Basic
//!   Multilingual Plane as a `\uD83D\uDE00` pair of escapes. An escape of a surrogate that is
//!   not the first half of such a pair (a high surrogate `\uD800`–`\uDBFF` not followed by a
//!   low one `\uDC00`–`\uDFFF`, or a low surrogate on its own) has no character: Go decodes it
//!   as U+FFFD and goes on, serde_json rejects the whole document. A document that fails to
//!   parse is retried once with each such escape replaced by `\ufffd` ([`replace_unpaired`]);
//!   a document without one costs nothing more than before.
//! - **Bytes that are not UTF-8** inside a string: Go decodes each invalid byte as one U+FFFD
//!   (`utf8.DecodeRune` reads one byte of an invalid sequence at a time), where Rust's
//!   `String::from_utf8_lossy` replaces a whole truncated sequence with one ([`lossy_utf8`]).

use std::borrow::Cow;

use serde::de::DeserializeOwned;

/// `text` with every unpaired surrogate escape replaced by `\ufffd`, as Go's `encoding/json`
/// `unquote` decodes it; `None` when `text` has none. The replacement is as long as what it
/// replaces (six bytes), so every offset in the text, and in an error about it, stays the same.
///
/// Escapes are recognised as a JSON decoder reads them, left to right: `\\` is an escaped
/// backslash, so `\\ud800` is a backslash and the text `ud800`. A high surrogate followed by a
/// high one is replaced, and the second is then read afresh (it may start a pair), as Go does.
/// Text outside strings is not told apart: a backslash there is a syntax error either way.
pub(crate) fn replace_unpaired(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut unpaired = Vec::new();
    let mut i = 0;
    while let Some(found) = bytes[i..].iter().position(|&b| b == b'\\') {
        let at = i + found;
        match escaped_unit(bytes, at) {
            Some(0xD800..=0xDBFF) => {
                if escaped_unit(bytes, at + 6).is_some_and(|next| (0xDC00..=0xDFFF).contains(&next)) {
                    i = at + 12; // a pair: one character
                } else {
                    unpaired.push(at);
                    i = at + 6;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                unpaired.push(at);
                i = at + 6;
            }
            Some(_) => i = at + 6,
            // Any other escape (or a malformed `\u`, which stays the parser's error).
            None => i = at + 2,
        }
        if i >= bytes.len() {
            break;
        }
    }
    if unpaired.is_empty() {
        return None;
    }
    let mut fixed = String::with_capacity(text.len());
    let mut from = 0;
    for at in unpaired {
        fixed.push_str(&text[from..at]);
        fixed.push_str("\\ufffd");
        from = at + 6;
    }
    fixed.push_str(&text[from..]);
    Some(fixed)
}

/// `bytes` as text, each byte of an invalid UTF-8 sequence replaced by U+FFFD, as Go's
/// `encoding/json` reads a string holding them (one replacement per byte: a sequence cut after
/// two of its three bytes is two U+FFFD, where `String::from_utf8_lossy` gives one). Borrowed
/// when `bytes` is UTF-8.
pub(crate) fn lossy_utf8(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let mut text = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        chunk.invalid().iter().for_each(|_| text.push(char::REPLACEMENT_CHARACTER));
    }
    Cow::Owned(text)
}

/// The UTF-16 unit of a `\uXXXX` escape starting at `bytes[at]`, if one does.
fn escaped_unit(bytes: &[u8], at: usize) -> Option<u16> {
    let escape = bytes.get(at..at + 6)?;
    if escape[..2] != *b"\\u" {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(hex, 16).ok()
}

/// `serde_json::from_slice`, reading strings as Go does: when `bytes` does not parse and holds
/// bytes that are not UTF-8 ([`lossy_utf8`]) or an unpaired surrogate escape
/// ([`replace_unpaired`]), it is parsed again as Go reads it, and that attempt's result is
/// returned (an error's column then counts the text as read: each bad byte is the 3 bytes of
/// U+FFFD).
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    serde_json::from_slice(bytes).or_else(|e| {
        let text = lossy_utf8(bytes);
        match (replace_unpaired(&text), text) {
            (Some(fixed), _) => serde_json::from_str(&fixed),
            (None, Cow::Owned(text)) => serde_json::from_str(&text),
            (None, Cow::Borrowed(_)) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Go's `json.Unmarshal` makes of the JSON string `json` (`encoding/json` `unquote`:
    /// a surrogate escape that does not pair with the next escape is U+FFFD), read here through
    /// the replacement.
    fn as_go(json: &str) -> String {
        let fixed = replace_unpaired(json);
        serde_json::from_str(fixed.as_deref().unwrap_or(json)).unwrap()
    }

    #[test]
    fn unpaired_surrogates_are_u_fffd_as_in_go() {
        assert_eq!(as_go(r#""\ud800""#), "\u{fffd}", "a lone high surrogate at the end");
        assert_eq!(as_go(r#""a\ud800b""#), "a\u{fffd}b", "followed by text");
        assert_eq!(as_go(r#""\ud800\u0041""#), "\u{fffd}A", "followed by another escape");
        assert_eq!(as_go(r#""\udc00x""#), "\u{fffd}x", "a lone low surrogate");
        assert_eq!(as_go(r#""\uDC00\uD800""#), "\u{fffd}\u{fffd}", "low then high: no pair");
        assert_eq!(as_go(r#""\ud800\ud83d\ude00""#), "\u{fffd}\u{1f600}", "the second high starts a pair");
        assert_eq!(as_go(r#""\ud800\n""#), "\u{fffd}\n");
    }

    #[test]
    fn pairs_and_other_escapes_are_left_alone() {
        for json in [
            r#""\ud83d\ude00 \uDBFF\uDFFF""#,
            r#""\\ud800""#,                   // an escaped backslash, then the text `ud800`
            r#""\\\\ud800 \u00e9 \" \/ \t""#, // two escaped backslashes
            r#""\ud8""#,                      // too short: the parser's error
            r#""\uzz00""#,
            "\"no escapes\"",
            "\"trailing \\",
        ] {
            assert_eq!(replace_unpaired(json), None, "{json}");
        }
        assert_eq!(as_go(r#""\\ud800""#), "\\ud800");
    }

    /// Go's `utf8.DecodeRune` on an invalid sequence reads one byte: one U+FFFD per byte.
    #[test]
    fn invalid_utf8_is_one_u_fffd_per_byte_as_in_go() {
        let r = '\u{fffd}';
        assert_eq!(lossy_utf8(b"ok \xe2\x82 end"), format!("ok {r}{r} end"), "a 3-byte sequence cut after 2");
        assert_eq!(lossy_utf8(b"\xf0\x9f\x98"), format!("{r}{r}{r}"), "a 4-byte sequence cut after 3");
        assert_eq!(lossy_utf8(b"\xed\xa0\x80"), format!("{r}{r}{r}"), "a UTF-8-encoded surrogate");
        assert_eq!(lossy_utf8(b"\xff\xe2\x82\xac"), format!("{r}\u{20ac}"), "then a whole euro sign");
        assert_eq!(lossy_utf8(b"\xc0\xaf"), format!("{r}{r}"), "an overlong slash");
        assert!(matches!(lossy_utf8("é ok".as_bytes()), Cow::Borrowed("é ok")));
        assert_ne!(lossy_utf8(b"\xe2\x82"), String::from_utf8_lossy(b"\xe2\x82"), "where Rust gives one");
    }

    #[test]
    fn the_replacement_keeps_every_offset() {
        let json = r#"{"message": "\ud800 x", "reason": "\udc01"}"#;
        let fixed = replace_unpaired(json).unwrap();
        assert_eq!(fixed, r#"{"message": "\ufffd x", "reason": "\ufffd"}"#);
        assert_eq!(fixed.len(), json.len());
    }

    #[test]
    fn from_slice_parses_what_go_parses_and_reports_the_rest() {
        let v: serde_json::Value = from_slice(br#"{"m": "\ud800"}"#).unwrap();
        assert_eq!(v["m"], "\u{fffd}");
        assert!(serde_json::from_slice::<serde_json::Value>(br#"{"m": "\ud800"}"#).is_err(), "serde alone fails");
        let e = from_slice::<serde_json::Value>(br#"{"m": "\ud800", }"#).unwrap_err();
        assert_eq!(e.column(), 17, "the remaining error, where it is in the input: {e}");
        let v: serde_json::Value = from_slice(b"{\"m\": \"a\xff\\udc00\"}").unwrap();
        assert_eq!(v["m"], "a\u{fffd}\u{fffd}", "a bad byte and a lone surrogate together");
        let e = from_slice::<serde_json::Value>(b"{\"m\": 1,}").unwrap_err();
        assert!(e.to_string().contains("trailing comma"), "{e}");
    }
}
