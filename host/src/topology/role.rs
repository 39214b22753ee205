//! What this process is in a scale-out ([`crate::pipeline::scale`]), chosen once from the
//! options: a `nats:` sink makes it the publish tier (alone), a `nats:` source the worker tier,
//! anything else a single host.

use crate::delivery::Delivery;
use crate::nats::NatsTarget;
use crate::pipeline::scale::WorkerIndex;
use crate::sink::{SinkEntry, SinkSpec};
use crate::source::SourceSpec;

use super::RunError;

/// The role of a run, with what it needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// Source → Broadcaster → tenant router → sinks, in this process.
    SingleHost,
    /// The publish tier: source → Broadcaster → tenant routing → JetStream subjects
    /// `<prefix>.<tenant>.<partition>`; the tenants' sinks are the workers'.
    Publisher {
        /// The stream published to.
        target: NatsTarget,
    },
    /// The worker tier: this worker's partitions of the stream, each through a router
    /// partition of its own, in place of a source (the Broadcaster's router stays idle).
    Worker {
        /// The stream consumed.
        target: NatsTarget,
        /// Which partitions this worker takes.
        index: WorkerIndex,
    },
}

impl Role {
    /// The role of a run reading `source`, writing to the command line's `sinks`, with
    /// `--worker` (`worker`) and `delivery`.
    ///
    /// # Errors
    /// [`RunError::Scale`] for a `nats:` sink beside other sinks, `--worker` without a `nats:`
    /// source, a `nats:` source with at-least-once delivery, or a `nats:` source and sink
    /// together.
    pub fn choose(
        source: &SourceSpec,
        sinks: &[SinkEntry],
        worker: Option<WorkerIndex>,
        delivery: &Delivery,
    ) -> Result<Self, RunError> {
        let publish_to = sinks.iter().find_map(|s| match &s.spec {
            SinkSpec::Nats(target) => Some((**target).clone()),
            _ => None,
        });
        if publish_to.is_some() && sinks.len() > 1 {
            return Err(RunError::Scale("a nats: sink publishes every event; give it as the only --sink".into()));
        }
        let works_on = match source {
            SourceSpec::Nats(target) => Some((**target).clone()),
            _ => None,
        };
        if worker.is_some() && works_on.is_none() {
            return Err(RunError::Scale("--worker needs a nats: source".into()));
        }
        if works_on.is_some() && matches!(delivery, Delivery::AtLeastOnce { .. }) {
            return Err(RunError::Scale(
                "a nats: source acknowledges JetStream after every sink acknowledged and the state was \
                 snapshotted; --delivery at-least-once does not apply"
                    .into(),
            ));
        }
        match (publish_to, works_on) {
            (None, None) => Ok(Role::SingleHost),
            (Some(target), None) => Ok(Role::Publisher { target }),
            (None, Some(target)) => {
                Ok(Role::Worker { target, index: worker.unwrap_or(WorkerIndex { index: 0, count: 1 }) })
            }
            (Some(_), Some(_)) => Err(RunError::Scale(
                "a nats: source is the worker tier and a nats: sink the publish tier; give one of them".into(),
            )),
        }
    }

    /// Whether this is the publish tier.
    pub fn publishes(&self) -> bool {
        matches!(self, Role::Publisher { .. })
    }

    /// Whether this is the worker tier.
    pub fn works(&self) -> bool {
        matches!(self, Role::Worker { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sinks(specs: &[&str]) -> Vec<SinkEntry> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn choose(source: &str, sink: &[&str], worker: Option<WorkerIndex>) -> Result<Role, String> {
        Role::choose(&source.parse().unwrap(), &sinks(sink), worker, &Delivery::Wait).map_err(|e| e.to_string())
    }

    #[test]
    fn the_role_follows_the_nats_source_or_sink() {
        assert_eq!(choose("jsonl:-", &["jsonl:-"], None), Ok(Role::SingleHost));
        let publisher = choose("jsonl:-", &["nats:nats://127.0.0.1:4222"], None).unwrap();
        assert!(publisher.publishes() && !publisher.works(), "{publisher:?}");
        let worker =
            choose("nats:nats://127.0.0.1:4222", &["jsonl:-"], Some(WorkerIndex { index: 1, count: 3 })).unwrap();
        assert!(worker.works() && !worker.publishes(), "{worker:?}");
        assert!(matches!(worker, Role::Worker { index: WorkerIndex { index: 1, count: 3 }, .. }), "{worker:?}");
        let all = choose("nats:nats://127.0.0.1:4222", &["jsonl:-"], None).unwrap();
        assert!(matches!(all, Role::Worker { index: WorkerIndex { index: 0, count: 1 }, .. }), "{all:?}");
    }

    #[test]
    fn inconsistent_scale_outs_are_refused() {
        let beside = choose("jsonl:-", &["nats:nats://127.0.0.1:4222", "jsonl:-"], None).unwrap_err();
        assert!(beside.contains("only --sink"), "{beside}");
        let worker = choose("jsonl:-", &["jsonl:-"], Some(WorkerIndex { index: 0, count: 2 })).unwrap_err();
        assert!(worker.contains("--worker needs a nats: source"), "{worker}");
        let both = choose("nats:nats://127.0.0.1:4222", &["nats:nats://127.0.0.1:4222"], None).unwrap_err();
        assert!(both.contains("give one of them"), "{both}");
        let state = Delivery::AtLeastOnce { state_file: "state.json".into() };
        let at_least_once =
            Role::choose(&"nats:nats://127.0.0.1:4222".parse().unwrap(), &sinks(&["jsonl:-"]), None, &state)
                .unwrap_err()
                .to_string();
        assert!(at_least_once.contains("at-least-once does not apply"), "{at_least_once}");
    }
}
