//! The order check of the NATS publisher ([`crate::pipeline::scale::publish`]): each
//! publication expects the stream's last sequence to be the one the publication before it got
//! (`Nats-Expected-Last-Sequence`), predicted from the last acknowledgement and the window. A
//! stream leader checks that header before it stores the message (nats-server, single server
//! and cluster alike), so a publication lost in flight — its leader died, or the server the
//! client was connected to — makes every later one of the window refused, and the window is
//! sent again in order: none is stored before one sent earlier.
//!
//! (Not `Nats-Expected-Last-Msg-Id`: nats-server 2.15 checks that one only when a replica
//! applies the message, and takes a refusal there for a write error that stops every replica
//! of a replicated stream, which then has no leader until the servers restart.)
//!
//! The prediction counts every publication of the window as stored anew. A duplicate (its
//! `Nats-Msg-Id` stored already, e.g. re-read by a restarted publisher) takes no sequence, so
//! the publications after a run of duplicates are refused once and sent again with the
//! sequence the refusal reports. Another publisher writing to the same stream makes every
//! prediction wrong: after two such refusals within [`FOREIGN_WINDOW`] the check is suspended
//! for [`SUSPEND_FOR`] (logged), and publications are sent without it.

use std::time::{Duration, Instant};

/// Two refusals that show another writer within this long suspend the check.
pub const FOREIGN_WINDOW: Duration = Duration::from_secs(10);

/// How long the check stays suspended once another writer was seen.
pub const SUSPEND_FOR: Duration = Duration::from_secs(60);

/// The publisher's view of the stream's last sequence, and whether the check is on.
#[derive(Debug, Clone)]
pub struct SequenceChain {
    /// The stream's last sequence as far as this publisher knows (its last acknowledgement, a
    /// refusal's report, or the stream's at start); `None`: unknown, nothing is expected.
    base: Option<u64>,
    /// While set and in the future, publications carry no expectation.
    suspended_until: Option<Instant>,
    /// When the last refusal that showed another writer came.
    last_foreign: Option<Instant>,
}

/// What a refusal ([`SequenceChain::refused`]) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The stream holds fewer messages than predicted (duplicates took no sequence, or a
    /// publication was lost): send the window again, at once.
    Behind,
    /// The stream holds more than this publisher wrote: another writer (send again, at once).
    Foreign,
    /// A second [`Refusal::Foreign`] within [`FOREIGN_WINDOW`]: the check is now suspended for
    /// [`SUSPEND_FOR`].
    Suspended,
}

impl SequenceChain {
    /// A chain starting from the stream's last sequence `last_sequence` (0: empty; `None`:
    /// unknown, the check starts with the first acknowledgement).
    pub fn new(last_sequence: Option<u64>) -> Self {
        Self { base: last_sequence, suspended_until: None, last_foreign: None }
    }

    /// The `Nats-Expected-Last-Sequence` of the publication at `index` of the window (0: its
    /// front, the oldest unacknowledged), all before it sent: the base plus `index`. `None`
    /// while the base is unknown or the check is suspended.
    pub fn expectation(&self, index: usize, now: Instant) -> Option<u64> {
        if self.suspended_until.is_some_and(|until| now < until) {
            return None;
        }
        self.base.map(|base| base + index as u64)
    }

    /// The front was acknowledged as stored at `sequence` (or as a duplicate of what is stored
    /// there): the base moves up to it, never down (an old duplicate's sequence is behind it).
    pub fn acknowledged(&mut self, sequence: u64) {
        self.base = Some(self.base.map_or(sequence, |base| base.max(sequence)));
    }

    /// The front, sent expecting `expected`, was refused: the stream's last sequence is
    /// `actual`, which becomes the base.
    pub fn refused(&mut self, expected: u64, actual: u64, now: Instant) -> Refusal {
        self.base = Some(actual);
        if actual < expected {
            return Refusal::Behind;
        }
        let again = self.last_foreign.is_some_and(|at| now.duration_since(at) < FOREIGN_WINDOW);
        self.last_foreign = Some(now);
        if again {
            self.suspended_until = Some(now + SUSPEND_FOR);
            return Refusal::Suspended;
        }
        Refusal::Foreign
    }
}

/// The stream's last sequence a `wrong last sequence` refusal reports (the server's text,
/// `wrong last sequence: 1234`, as the client shows it), `None` when it gives none.
pub fn refused_last_sequence(error: &str) -> Option<u64> {
    let (_, after) = error.rsplit_once("wrong last sequence: ")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_follow_the_window_from_the_last_acknowledgement() {
        let now = Instant::now();
        let mut chain = SequenceChain::new(Some(10));
        assert_eq!([0, 1, 2].map(|i| chain.expectation(i, now)), [Some(10), Some(11), Some(12)]);
        // The front stored at 11: the one after it (now the front) expects 11.
        chain.acknowledged(11);
        assert_eq!(chain.expectation(0, now), Some(11));
        // An old duplicate (stored long ago at 4) does not move the base back.
        chain.acknowledged(4);
        assert_eq!(chain.expectation(0, now), Some(11));
        assert_eq!(SequenceChain::new(None).expectation(0, now), None, "unknown base: no expectation");
        let mut fresh = SequenceChain::new(None);
        fresh.acknowledged(7);
        assert_eq!(fresh.expectation(1, now), Some(8));
    }

    #[test]
    fn a_refusal_rebases_and_a_second_foreign_one_soon_after_suspends_the_check() {
        let now = Instant::now();
        let mut chain = SequenceChain::new(Some(100));
        // Duplicates took no sequence: the stream is behind the prediction.
        assert_eq!(chain.refused(103, 100, now), Refusal::Behind);
        assert_eq!(chain.expectation(0, now), Some(100));
        // Another writer: once is taken for a stray, twice within the window suspends.
        assert_eq!(chain.refused(100, 140, now), Refusal::Foreign);
        assert_eq!(chain.expectation(0, now), Some(140));
        assert_eq!(chain.refused(140, 150, now + FOREIGN_WINDOW / 2), Refusal::Suspended);
        assert_eq!(chain.expectation(0, now + FOREIGN_WINDOW / 2), None);
        // After the suspension it checks again, from the last base.
        let later = now + FOREIGN_WINDOW / 2 + SUSPEND_FOR;
        assert_eq!(chain.expectation(2, later), Some(152));
        // Two foreign refusals further apart than the window do not suspend.
        assert_eq!(chain.refused(152, 160, later), Refusal::Foreign);
        assert_eq!(chain.refused(160, 170, later + FOREIGN_WINDOW), Refusal::Foreign);
    }

    #[test]
    fn the_refused_sequence_is_read_from_the_clients_text() {
        let text = "wrong last sequence: wrong last sequence: 1234 (code 400, error code 10071)";
        assert_eq!(refused_last_sequence(text), Some(1234));
        assert_eq!(refused_last_sequence("wrong last sequence: 0"), Some(0));
        assert_eq!(refused_last_sequence("timed out: didn't receive ack in time"), None);
        assert_eq!(refused_last_sequence("wrong last sequence: wrong last sequence: x"), None);
    }
}
