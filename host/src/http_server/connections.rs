//! The open connections of one server, what each is doing, and which to shed when room is
//! needed: a connection still waiting for its request head after [`HEAD_GRACE`], oldest first; then
//! a request body arriving slower than the minimum body rate, furthest behind first. A body's
//! rate is measured from the moment its handler first asks for it, so a busy server never
//! blames a client for the time the body waited to be read. A connection younger than
//! [`HEAD_GRACE`] is never shed: in a burst of clients the newest would otherwise push out the
//! ones accepted just before them, whose heads are on their way.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio_util::sync::CancellationToken;

/// Time a new connection has to send its request head before it may be shed: 1 s (a client
/// sends its head at once; a slowloris is pushed out after this).
const HEAD_GRACE: Duration = Duration::from_secs(1);
/// Time a request body is read before its rate is checked: 2 s.
const BODY_GRACE: Duration = Duration::from_secs(2);

/// No request head complete yet.
const HEAD: u8 = 0;
/// A handler is reading a request body that has not arrived whole.
const BODY: u8 = 1;
/// A request head arrived and its body is not being waited for: the handler runs (and has not
/// asked for the body yet, or read it whole), or answered (idle keep-alive).
const SERVING: u8 = 2;

/// One open connection.
#[derive(Debug)]
pub(super) struct Open {
    /// [`HEAD`], [`BODY`] or [`SERVING`].
    phase: AtomicU8,
    /// When it was accepted, ms since the set's epoch.
    accepted_at_ms: u64,
    /// When the current request's handler first asked for its body, ms since the set's epoch.
    body_from_ms: AtomicU64,
    /// Body bytes of the current request read so far.
    body_bytes: AtomicU64,
    /// Cancelled to close the connection at once.
    pub close: CancellationToken,
}

impl Open {
    /// The handler first asked for the current request's body at `now_ms`.
    fn body_wanted(&self, now_ms: u64) {
        self.body_from_ms.store(now_ms, Ordering::Relaxed);
        self.body_bytes.store(0, Ordering::Relaxed);
        self.phase.store(BODY, Ordering::Release);
    }

    /// The current request is answered (its body read or not): not shed for its rate any more.
    pub fn answered(&self) {
        self.phase.store(SERVING, Ordering::Release);
    }

    /// Whether it has waited for its first request head past the grace period at `now_ms`.
    fn head_overdue(&self, now_ms: u64) -> bool {
        self.phase.load(Ordering::Acquire) == HEAD
            && now_ms.saturating_sub(self.accepted_at_ms) >= HEAD_GRACE.as_millis() as u64
    }

    /// Bytes the body is short of `min_rate` (bytes per second) at `now_ms`, when a handler has
    /// waited for it for [`BODY_GRACE`] or longer; else `None`.
    fn body_shortfall(&self, now_ms: u64, min_rate: u64) -> Option<u64> {
        if min_rate == 0 || self.phase.load(Ordering::Acquire) != BODY {
            return None;
        }
        let elapsed_ms = now_ms.saturating_sub(self.body_from_ms.load(Ordering::Relaxed));
        if elapsed_ms < BODY_GRACE.as_millis() as u64 {
            return None;
        }
        let due = min_rate.saturating_mul(elapsed_ms) / 1000;
        due.checked_sub(self.body_bytes.load(Ordering::Relaxed)).filter(|&short| short > 0)
    }
}

/// What was shed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shed {
    /// A connection that had not sent a complete request head.
    SlowHead,
    /// A request body below the minimum body rate.
    SlowBody,
}

/// The open connections in accept order.
#[derive(Debug)]
pub(super) struct Connections {
    epoch: Instant,
    open: Mutex<VecDeque<Arc<Open>>>,
}

impl Connections {
    pub fn new() -> Self {
        Self { epoch: Instant::now(), open: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Open>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// A new connection, waiting for its request head.
    pub fn add(&self) -> Arc<Open> {
        let conn = Arc::new(Open {
            phase: AtomicU8::new(HEAD),
            accepted_at_ms: self.now_ms(),
            body_from_ms: AtomicU64::new(0),
            body_bytes: AtomicU64::new(0),
            close: CancellationToken::new(),
        });
        self.lock().push_back(conn.clone());
        conn
    }

    pub fn remove(&self, conn: &Arc<Open>) {
        self.lock().retain(|c| !Arc::ptr_eq(c, conn));
    }

    /// A request head arrived on `conn`: its `body` is read through the returned body, which
    /// counts the bytes for the rate check.
    pub fn request(&self, conn: &Arc<Open>, body: Incoming) -> MeteredBody {
        conn.answered();
        MeteredBody { inner: body, conn: conn.clone(), epoch: self.epoch, wanted: false }
    }

    /// Closes one connection to make room: the oldest that has not sent a complete request
    /// head within [`HEAD_GRACE`], else the request body furthest below `min_rate` (bytes per
    /// second; 0: none is slow); what it shed, or `None` when none may be shed.
    pub fn shed_one(&self, min_rate: u64) -> Option<Shed> {
        let now = self.now_ms();
        let mut open = self.lock();
        let (at, shed) = match open.iter().position(|c| c.head_overdue(now)) {
            Some(at) => (at, Shed::SlowHead),
            None => {
                let slowest = open.iter().enumerate().filter_map(|(i, c)| Some((c.body_shortfall(now, min_rate)?, i)));
                (slowest.max()?.1, Shed::SlowBody)
            }
        };
        open.remove(at).expect("found").close.cancel();
        Some(shed)
    }

    /// Closes every connection whose request body is below `min_rate` (bytes per second); how
    /// many.
    pub fn shed_slow_bodies(&self, min_rate: u64) -> u64 {
        let now = self.now_ms();
        let mut shed = 0;
        self.lock().retain(|c| {
            let slow = c.body_shortfall(now, min_rate).is_some();
            if slow {
                c.close.cancel();
                shed += 1;
            }
            !slow
        });
        shed
    }
}

/// A request body that counts its bytes into its connection and marks the connection
/// serving once it is read whole (or failed).
#[derive(Debug)]
pub(super) struct MeteredBody {
    inner: Incoming,
    conn: Arc<Open>,
    /// The set's epoch.
    epoch: Instant,
    /// Whether the handler asked for the body yet.
    wanted: bool,
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if !this.wanted {
            this.wanted = true;
            if !this.inner.is_end_stream() {
                this.conn.body_wanted(u64::try_from(this.epoch.elapsed().as_millis()).unwrap_or(u64::MAX));
            }
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.conn.body_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                if this.inner.is_end_stream() {
                    this.conn.answered();
                }
            }
            Poll::Ready(_) => this.conn.answered(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading_body(conns: &Connections, body_from_ms: u64, bytes: u64) -> Arc<Open> {
        let conn = conns.add();
        conn.body_from_ms.store(body_from_ms, Ordering::Relaxed);
        conn.body_bytes.store(bytes, Ordering::Relaxed);
        conn.phase.store(BODY, Ordering::Release);
        conn
    }

    #[test]
    fn a_body_is_behind_once_below_the_rate_after_the_grace_period() {
        let conns = Connections::new();
        let conn = reading_body(&conns, 0, 100);
        assert_eq!(conn.body_shortfall(1999, 1024), None, "within the grace period");
        assert_eq!(conn.body_shortfall(3000, 1024), Some(3072 - 100));
        assert_eq!(conn.body_shortfall(3000, 0), None, "0 disables the check");
        conn.body_bytes.store(4096, Ordering::Relaxed);
        assert_eq!(conn.body_shortfall(3000, 1024), None, "ahead of the rate");
        conn.answered();
        conn.body_bytes.store(0, Ordering::Relaxed);
        assert_eq!(conn.body_shortfall(60_000, 1024), None, "a body read whole is never slow");
    }

    #[test]
    fn heads_are_shed_first_then_the_slowest_body_then_nothing() {
        // A set opened 10 s ago, so that bodies can have started 5 s ago.
        let conns = Connections { epoch: Instant::now() - Duration::from_secs(10), open: Mutex::default() };
        let young = conns.add();
        let serving = conns.add();
        serving.answered();
        let slow = reading_body(&conns, 0, 10);
        let slower = reading_body(&conns, 0, 0);
        let waiting = Arc::new(Open {
            phase: AtomicU8::new(HEAD),
            accepted_at_ms: conns.now_ms() - 3000,
            body_from_ms: AtomicU64::new(0),
            body_bytes: AtomicU64::new(0),
            close: CancellationToken::new(),
        });
        conns.lock().push_back(waiting.clone());
        for c in [&slow, &slower] {
            c.body_from_ms.store(conns.now_ms() - 5000, Ordering::Relaxed);
        }
        assert_eq!(conns.shed_one(1024), Some(Shed::SlowHead));
        assert!(waiting.close.is_cancelled());
        assert_eq!(conns.shed_one(1024), Some(Shed::SlowBody));
        assert!(slower.close.is_cancelled() && !slow.close.is_cancelled());
        assert_eq!(conns.shed_slow_bodies(1024), 1);
        assert!(slow.close.is_cancelled());
        assert_eq!(conns.shed_one(1024), None, "neither a serving nor a young connection is shed");
        assert!(!young.close.is_cancelled());
        assert_eq!(conns.len(), 2);
    }
}
