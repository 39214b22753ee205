//! A JSON validator that appends the compact form of its input (RFC 8259; whitespace outside
//! strings dropped, everything else verbatim), so a patch body can be embedded in one line.

use core::fmt;

use eventpipe_guest::prelude::*;

/// Nesting limit, so that hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

/// Where and why the input is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

/// Validates `input` as one JSON value and appends its compact form to `out`.
///
/// # Errors
/// The first syntax error (`out` may then hold a partial value: truncate it).
pub fn compact(input: &[u8], out: &mut String) -> Result<(), Error> {
    let text = core::str::from_utf8(input).map_err(|e| Error {
        offset: e.valid_up_to(),
        what: "invalid UTF-8",
    })?;
    let mut p = Parser { s: text, i: 0, out };
    p.value(0)?;
    p.ws();
    if p.i != text.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(())
}

struct Parser<'a, 'o> {
    s: &'a str,
    i: usize,
    out: &'o mut String,
}

impl Parser<'_, '_> {
    fn err(&self, what: &'static str) -> Error {
        Error {
            offset: self.i,
            what,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Copies `s[start..self.i]` to the output.
    fn emit(&mut self, start: usize) {
        self.out.push_str(&self.s[start..self.i]);
    }

    fn value(&mut self, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.ws();
        match self.peek() {
            Some(b'{') => self.seq(depth, b'}', true),
            Some(b'[') => self.seq(depth, b']', false),
            Some(b'"') => self.string(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(_) => Err(self.err("unexpected character")),
            None => Err(self.err("unexpected end")),
        }
    }

    /// An object (`members`) or array, the opening bracket at `self.i`.
    fn seq(&mut self, depth: usize, close: u8, members: bool) -> Result<(), Error> {
        self.out.push(self.s.as_bytes()[self.i] as char);
        self.i += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            self.out.push(close as char);
            return Ok(());
        }
        loop {
            if members {
                self.ws();
                if self.peek() != Some(b'"') {
                    return Err(self.err("expected a member name"));
                }
                self.string()?;
                self.ws();
                if self.peek() != Some(b':') {
                    return Err(self.err("expected ':'"));
                }
                self.i += 1;
                self.out.push(':');
            }
            self.value(depth + 1)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.out.push(',');
                }
                Some(c) if c == close => {
                    self.i += 1;
                    self.out.push(close as char);
                    return Ok(());
                }
                _ => return Err(self.err("expected ',' or a closing bracket")),
            }
        }
    }

    fn string(&mut self) -> Result<(), Error> {
        let start = self.i;
        self.i += 1;
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.s.as_bytes().get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(self.err("bad \\u escape"));
                            }
                            self.i += 5;
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                Some(0..=0x1f) => return Err(self.err("control character in string")),
                Some(_) => self.i += 1,
            }
        }
        self.i += 1;
        self.emit(start);
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<(), Error> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("bad number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("bad fraction"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("bad exponent"));
            }
        }
        self.emit(start);
        Ok(())
    }

    fn literal(&mut self, word: &'static str) -> Result<(), Error> {
        if !self.s[self.i..].starts_with(word) {
            return Err(self.err("unexpected word"));
        }
        self.i += word.len();
        self.out.push_str(word);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Result<String, Error> {
        let mut out = String::new();
        compact(s.as_bytes(), &mut out).map(|()| out)
    }

    #[test]
    fn compacts_valid_json() {
        assert_eq!(
            c(" { \"b\" : [1, -2.5e+3, true,false, null, \"x y\\n\\u00e9\"] ,\n \"a\":{}} ")
                .unwrap(),
            r#"{"b":[1,-2.5e+3,true,false,null,"x y\n\u00e9"],"a":{}}"#
        );
        assert_eq!(c("0").unwrap(), "0");
        assert_eq!(c("\"ü\"").unwrap(), "\"ü\"");
    }

    #[test]
    fn rejects_invalid_json() {
        for bad in [
            "",
            "{",
            "{\"a\" 1}",
            "[1,]",
            "01",
            "1.",
            "-",
            "tru",
            "\"a",
            "\"\\x\"",
            "\"\u{1}\"",
            "{} {}",
            "{a:1}",
            "\"\\u12\"",
        ] {
            assert!(c(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert_eq!(c(&deep).unwrap_err().what, "nested too deeply");
        assert!(compact(&[b'"', 0xff, b'"'], &mut String::new()).is_err());
    }
}
