//! Reading input one line at a time in bounded memory: at most [`MAX_LINE_BYTES`] + 1 bytes of
//! a line are kept, the rest of a longer line is read and dropped as it arrives, so a 1 GB line
//! costs no more memory than a 4 MiB one and the next line is still read. The decoder then
//! sees that the kept line is too long and rejects it ([`super::decode`]). One step
//! ([`take_line`]) serves both readers: [`read_line`] (blocking, `replay`) and
//! [`read_line_async`] (the JSON-lines source).

use std::io::BufRead;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::decode::MAX_LINE_BYTES;

/// Appends the line at the start of `available` to `buf`, up to its `\n` (kept) and within the
/// bound. Returns the bytes it used of `available` and whether the line ended there.
fn take_line(available: &[u8], buf: &mut Vec<u8>) -> (usize, bool) {
    let (chunk, ended) = match memchr::memchr(b'\n', available) {
        Some(i) => (&available[..=i], true),
        None => (available, false),
    };
    let room = (MAX_LINE_BYTES + 1).saturating_sub(buf.len());
    buf.extend_from_slice(&chunk[..room.min(chunk.len())]);
    (chunk.len(), ended)
}

/// Appends one line of `reader` to `buf` (with its `\n`), keeping at most
/// [`MAX_LINE_BYTES`] + 1 bytes of it. Returns the bytes read (0 at the end of the input) and
/// whether the line ended with `\n` (a last line without one, or the end, gives `false`).
///
/// # Errors
/// The reader's I/O errors.
pub fn read_line<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok((read, false));
        }
        let (used, ended) = take_line(available, buf);
        reader.consume(used);
        read += used;
        if ended {
            return Ok((read, true));
        }
    }
}

/// As [`read_line`], for an async reader. Cancellation-safe in the sense the JSON-lines source
/// needs: bytes read before a cancellation are already in `buf`.
///
/// # Errors
/// The reader's I/O errors.
pub async fn read_line_async<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<(usize, bool)> {
    let mut read = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok((read, false));
        }
        let (used, ended) = take_line(available, buf);
        reader.consume(used);
        read += used;
        if ended {
            return Ok((read, true));
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
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut reader, &mut buf).unwrap(), (8, true));
        assert_eq!(buf, b"{\"a\":1}\n");
        buf.clear();
        assert_eq!(read_line(&mut reader, &mut buf).unwrap(), (MAX_LINE_BYTES + 101, true));
        assert_eq!(buf.len(), MAX_LINE_BYTES + 1, "kept up to the bound");
        buf.clear();
        assert_eq!(read_line(&mut reader, &mut buf).unwrap(), (4, false));
        assert_eq!(buf, b"last");
        buf.clear();
        assert_eq!(read_line(&mut reader, &mut buf).unwrap(), (0, false));
    }

    #[tokio::test]
    async fn the_async_reader_reads_the_same_lines() {
        let input = b"one\ntwo\n\nthree".to_vec();
        let mut reader = tokio::io::BufReader::with_capacity(2, &input[..]);
        let mut lines = Vec::new();
        loop {
            let mut buf = Vec::new();
            let (n, _) = read_line_async(&mut reader, &mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            lines.push(String::from_utf8(buf).unwrap());
        }
        assert_eq!(lines, ["one\n", "two\n", "\n", "three"]);
    }
}
