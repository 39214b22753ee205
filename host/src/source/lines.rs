//! Reading input one line at a time in bounded memory: at most [`MAX_LINE_BYTES`] + 1 bytes of
//! a line are kept, the rest of a longer line is read and dropped as it arrives, so a 1 GB line
//! costs no more memory than a 4 MiB one and the next line is still read. The decoder then
//! sees that the kept line is too long and rejects it ([`super::decode`]). One step
//! (`take_line`) serves both readers: [`read_line`] (blocking, `replay`) and
//! [`read_line_async`] (the JSON-lines source), each appending to a [`Line`].

use std::io::BufRead;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::decode::MAX_LINE_BYTES;

/// A line being read: the bytes kept of it and how many bytes of input it took so far (more
/// than kept for a line over the bound). Reading appends to it, so a read that is cancelled
/// (an async one dropped in a `select!`) loses nothing: the next read goes on with the line.
#[derive(Debug, Default)]
pub struct Line {
    /// The line as read so far, with its `\n` once it ended; at most [`MAX_LINE_BYTES`] + 1
    /// bytes.
    pub bytes: Vec<u8>,
    /// Bytes of input it took (its length in the input).
    pub read: u64,
}

impl Line {
    /// Empties it for the next line (keeping its allocation, unless a huge line grew it).
    pub fn clear(&mut self) {
        self.bytes.clear();
        if self.bytes.capacity() > 1 << 20 {
            self.bytes = Vec::new();
        }
        self.read = 0;
    }
}

/// How a read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnd {
    /// At a `\n`: the line is complete.
    Newline,
    /// At the end of the input (for now: a file being written may grow); the line holds what
    /// came before it, possibly nothing.
    Eof,
}

/// Appends the line at the start of `available` to `line`, up to its `\n` (kept) and within
/// the bound. Returns the bytes it used of `available` and whether the line ended there.
pub(crate) fn take_line(available: &[u8], line: &mut Line) -> (usize, bool) {
    let (chunk, ended) = match memchr::memchr(b'\n', available) {
        Some(i) => (&available[..=i], true),
        None => (available, false),
    };
    let room = (MAX_LINE_BYTES + 1).saturating_sub(line.bytes.len());
    line.bytes.extend_from_slice(&chunk[..room.min(chunk.len())]);
    line.read += chunk.len() as u64;
    (chunk.len(), ended)
}

/// Reads the rest of a line of `reader` into `line` (see [`Line`] for what is kept).
///
/// # Errors
/// The reader's I/O errors.
pub fn read_line<R: BufRead>(reader: &mut R, line: &mut Line) -> std::io::Result<LineEnd> {
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(LineEnd::Eof);
        }
        let (used, ended) = take_line(available, line);
        reader.consume(used);
        if ended {
            return Ok(LineEnd::Newline);
        }
    }
}

/// As [`read_line`], for an async reader; cancellation-safe (what was read is in `line`).
///
/// # Errors
/// The reader's I/O errors.
pub async fn read_line_async<R: AsyncBufRead + Unpin>(reader: &mut R, line: &mut Line) -> std::io::Result<LineEnd> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(LineEnd::Eof);
        }
        let (used, ended) = take_line(available, line);
        reader.consume(used);
        if ended {
            return Ok(LineEnd::Newline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_whole_and_a_long_one_is_cut_at_the_bound() {
        let long = vec![b'x'; MAX_LINE_BYTES + 100];
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nlast");
        // A small buffer, so that lines span many fills.
        let mut reader = std::io::BufReader::with_capacity(7, &input[..]);
        let mut line = Line::default();
        assert_eq!(read_line(&mut reader, &mut line).unwrap(), LineEnd::Newline);
        assert_eq!((line.bytes.as_slice(), line.read), (&b"{\"a\":1}\n"[..], 8));
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line).unwrap(), LineEnd::Newline);
        assert_eq!(
            (line.bytes.len(), line.read),
            (MAX_LINE_BYTES + 1, MAX_LINE_BYTES as u64 + 101),
            "kept up to the bound"
        );
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line).unwrap(), LineEnd::Eof);
        assert_eq!((line.bytes.as_slice(), line.read), (&b"last"[..], 4));
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line).unwrap(), LineEnd::Eof);
        assert_eq!(line.read, 0);
    }

    #[tokio::test]
    async fn an_async_read_that_is_cancelled_loses_nothing() {
        // The reader gets the line in two pieces, with a pause between them.
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut reader = tokio::io::BufReader::new(rx);
        let mut line = Line::default();
        use tokio::io::AsyncWriteExt;
        tx.write_all(b"one ").await.unwrap();
        let cancelled =
            tokio::time::timeout(std::time::Duration::from_millis(50), read_line_async(&mut reader, &mut line)).await;
        assert!(cancelled.is_err(), "no line end yet");
        tx.write_all(b"two\nthree").await.unwrap();
        drop(tx);
        assert_eq!(read_line_async(&mut reader, &mut line).await.unwrap(), LineEnd::Newline);
        assert_eq!((line.bytes.as_slice(), line.read), (&b"one two\n"[..], 8));
        line.clear();
        assert_eq!(read_line_async(&mut reader, &mut line).await.unwrap(), LineEnd::Eof);
        assert_eq!(line.bytes, b"three");
    }
}
