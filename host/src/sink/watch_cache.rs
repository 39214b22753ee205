//! The sink side of the [`WatchCache`]: an [`EventSink`] that stores what the tenant router
//! writes as an apiserver stores it, so that the read API serves the correlated events as they
//! would exist in a cluster.
//!
//! `run --serve` adds it to every tenant's sinks (a tap: [`crate::pipeline::plan`] appends it when the
//! [`super::set::SinkSet`] has a cache), with delivery mode `wait`: its writes complete at
//! once, and an at-least-once position never waits for it (an in-memory cache starts empty
//! with each run anyway). client-go's `recordToSink` drives it like any sink:
//!
//! | call | answer |
//! |---|---|
//! | create | `ADDED`, the event with its resourceVersion; `409 AlreadyExists` when the name is held (dropped, as client-go drops it) |
//! | patch | the patch applied to the held event (`MODIFIED`); `404 NotFound` when it is not held, and `recordToSink` creates it whole; an empty patch stores the event whole, as the Kubernetes sink's `PUT` does |
//! | update | stored whole (`MODIFIED`, or `ADDED` when not held) |

use std::sync::Arc;

use async_trait::async_trait;

use super::{EventSink, SinkError, StatusError, Stored};
use crate::event::Event;
use crate::watch_cache::{WatchCache, WriteError};

/// The watch cache as a sink (see the module docs).
#[derive(Debug, Clone)]
pub struct WatchCacheSink(pub Arc<WatchCache>);

fn status(error: WriteError) -> SinkError {
    let (code, reason) = match &error {
        WriteError::AlreadyExists(_) => (409, super::REASON_ALREADY_EXISTS),
        WriteError::NotFound(_) => (404, "NotFound"),
        WriteError::BadPatch(_) => (400, "BadRequest"),
    };
    SinkError::Status(StatusError { code, reason: reason.into(), message: error.to_string(), causes: Vec::new() })
}

#[async_trait]
impl EventSink for WatchCacheSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.0.create(event).map(Stored::copy).map_err(status)
    }

    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        Ok(Stored::copy(self.0.update(event)))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        if patch.trim_ascii().is_empty() {
            return Ok(Stored::copy(self.0.update(event)));
        }
        self.0.patch(&event.metadata.namespace, &event.metadata.name, patch).map(Stored::copy).map_err(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::EventCorrelateResult;
    use crate::correlator::logger::EventPatch;
    use crate::sink::retry::Verb;
    use crate::sink::{RetryPolicy, WriteOutcome};
    use crate::watch_cache::{Predicate, WatchCacheConfig};

    fn event(count: i32, message: &str) -> Event {
        let mut e = Event::default();
        e.metadata.name = "web-0.17".into();
        e.metadata.namespace = "shop".into();
        e.involved_object.kind = "Pod".into();
        e.involved_object.name = "web-0".into();
        e.reason = "BackOff".into();
        e.message = message.into();
        e.count = count;
        e
    }

    #[tokio::test]
    async fn record_to_sink_creates_then_patches_the_held_event() {
        let cache = WatchCache::new(WatchCacheConfig::default(), crate::clock::system());
        let sink = WatchCacheSink(cache.clone());
        let (policy, cancel) = (RetryPolicy::default(), tokio_util::sync::CancellationToken::new());
        let first = EventCorrelateResult { skip: false, event: Some(Box::new(event(1, "a"))), patch: None };
        let (outcome, stored) = sink.write(first, &policy, &cancel).await;
        assert!(matches!(outcome, WriteOutcome::Written { verb: Verb::Create, .. }), "{outcome:?}");
        let Some(crate::sink::StoredEvent::Copy(stored)) = stored else { panic!("the cache's copy: {stored:?}") };
        assert_eq!((stored.metadata.resource_version.as_str(), stored.kind.as_str()), ("1", "Event"));
        assert!(!stored.metadata.uid.is_empty() && stored.metadata.creation_timestamp.is_some());

        let patch = EventPatch::for_event(&event(2, "b"));
        let repeat = EventCorrelateResult { skip: false, event: Some(Box::new(event(2, "b"))), patch: Some(patch) };
        let (outcome, stored) = sink.write(repeat, &policy, &cancel).await;
        assert!(matches!(outcome, WriteOutcome::Written { verb: Verb::Patch, .. }), "{outcome:?}");
        let held = cache.get("shop", "web-0.17").unwrap();
        assert_eq!((held.event.count, held.event.message.as_str(), held.rv), (2, "b", 2));
        assert_eq!(held.event.metadata.uid, stored.unwrap().event().metadata.uid, "the create's uid stays");

        // A patch of an event the cache never held: 404, then recordToSink creates it whole.
        let mut other = event(5, "c");
        other.metadata.name = "web-0.18".into();
        let patch = EventPatch::for_event(&other);
        let result = EventCorrelateResult { skip: false, event: Some(Box::new(other)), patch: Some(patch) };
        let (outcome, _) = sink.write(result, &policy, &cancel).await;
        assert!(matches!(outcome, WriteOutcome::Written { verb: Verb::Create, .. }), "{outcome:?}");
        let (rv, items) = cache.list(&Predicate::default(), None).unwrap();
        assert_eq!((rv, items.len()), (3, 2));
        assert!(matches!(sink.create(&event(1, "a")).await, Err(SinkError::Status(s)) if s.code == 409));
    }
}
