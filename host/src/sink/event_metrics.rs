//! The `metrics` sink (`--sink metrics[,max_series=N]`): counts what is written, per tenant,
//! event type, involved object namespace and kind, and reason, as
//! `eventpipe_events_total{tenant,type,involved_object_namespace,involved_object_kind,reason}`
//! on `/metrics` — the labels of rhobs/kube-events-exporter's `kube_events_total`, with the
//! tenant.
//!
//! It counts sink writes of correlated events: one per create, patch or update the tenant
//! stage makes (after aggregation, the spam filter and rules), as every other sink of the
//! tenant receives them; an event the spam filter skipped is not counted, and a repeat that
//! became a patch is counted again. It stores nothing and never fails ([`Stored::AsSent`]).
//!
//! # Cardinality
//! Reasons and namespaces are open-ended, so the series are capped: at most `max_series`
//! (default [`DEFAULT_MAX_SERIES`]) label sets across the run's tenants. A write whose label
//! set is new once the cap is reached is counted under its tenant's `other` series (every
//! label but `tenant` is [`OTHER`]) and in `eventpipe_events_folded_total{tenant}`. Series
//! already counted keep counting. The run has one table: every tenant's `metrics` sink shares
//! it, with the cap (and the labels) of the first one opened.
//!
//! # Enrichment labels
//! With `,workload=true` a series also has `workload`, the top owner of the involved object as
//! `Kind/name` (`Deployment/checkout`, from enrichment's `owner`, `docs/enrichment.md`); with
//! `,cluster=true`, `cluster` (enrichment's cluster name). An event without that enrichment has
//! them empty. They are part of the series' key, so they count against the same cap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use compact_str::CompactString;

use super::{EventSink, SinkError, SinkPatch, Stored};
use crate::event::Event;

/// Series counted at most, by default.
pub const DEFAULT_MAX_SERIES: usize = 1000;
/// The label value of the series that takes what the cap folds.
pub const OTHER: &str = "other";

/// One series' labels: tenant, type, involved object namespace, kind, reason, then workload
/// and cluster (empty unless counted, [`EnrichmentLabels`]).
type Key = (Arc<str>, CompactString, CompactString, CompactString, CompactString, CompactString, CompactString);

/// Which enrichment labels the series have besides kube-events-exporter's
/// (`metrics,workload=true,cluster=true`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnrichmentLabels {
    /// `workload`: the involved object's top owner, `Kind/name`.
    pub workload: bool,
    /// `cluster`: the cluster's name.
    pub cluster: bool,
}

#[derive(Debug, Default)]
struct Table {
    series: HashMap<Key, u64>,
    /// Per tenant: writes folded into its `other` series.
    folded: HashMap<Arc<str>, u64>,
}

/// The run's event counters (see the [module docs](self)); shared by every tenant's
/// [`EventMetricsSink`].
#[derive(Debug)]
pub struct EventCounts {
    max_series: usize,
    labels: EnrichmentLabels,
    table: Mutex<Table>,
}

impl EventCounts {
    /// An empty table that holds at most `max_series` series (at least 1) besides the `other` ones.
    pub fn new(max_series: usize) -> Arc<Self> {
        Self::with_labels(max_series, EnrichmentLabels::default())
    }

    /// As [`new`](Self::new), the series also labelled with `labels`.
    pub fn with_labels(max_series: usize, labels: EnrichmentLabels) -> Arc<Self> {
        Arc::new(Self { max_series: max_series.max(1), labels, table: Mutex::default() })
    }

    /// The cap, series.
    pub fn max_series(&self) -> usize {
        self.max_series
    }

    /// Counts one write of `event` for `tenant`.
    pub fn count(&self, tenant: &Arc<str>, event: &Event) {
        let o = &event.involved_object;
        let enrichment = event.enrichment.get();
        let workload = match enrichment.and_then(|e| e.owner.as_ref()) {
            Some(owner) if self.labels.workload => compact_str::format_compact!("{}/{}", owner.kind, owner.name),
            _ => CompactString::default(),
        };
        let cluster = match enrichment.and_then(|e| e.cluster.as_deref()) {
            Some(cluster) if self.labels.cluster => CompactString::from(cluster),
            _ => CompactString::default(),
        };
        let key: Key = (
            tenant.clone(),
            event.type_.clone(),
            o.namespace.clone(),
            o.kind.clone(),
            event.reason.clone(),
            workload,
            cluster,
        );
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = table.series.get_mut(&key) {
            *n += 1;
        } else if table.series.len() < self.max_series {
            table.series.insert(key, 1);
        } else {
            *table.folded.entry(tenant.clone()).or_default() += 1;
        }
    }

    /// Every series (tenant, type, namespace, kind, reason, workload, cluster) with its count,
    /// and per tenant what was folded into `other`.
    fn read(&self) -> (Vec<(Key, u64)>, Vec<(Arc<str>, u64)>) {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let series = table.series.iter().map(|(k, n)| (k.clone(), *n)).collect();
        (series, table.folded.iter().map(|(t, n)| (t.clone(), *n)).collect())
    }
}

/// One tenant's `metrics` sink: counts each call into the run's [`EventCounts`].
#[derive(Debug)]
pub struct EventMetricsSink {
    tenant: Arc<str>,
    counts: Arc<EventCounts>,
}

impl EventMetricsSink {
    /// `tenant`'s sink counting into `counts`.
    pub fn new(tenant: &str, counts: Arc<EventCounts>) -> Self {
        Self { tenant: tenant.into(), counts }
    }

    fn count(&self, event: &Event) -> Result<Stored, SinkError> {
        self.counts.count(&self.tenant, event);
        Ok(Stored::AsSent)
    }
}

#[async_trait]
impl EventSink for EventMetricsSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.count(event)
    }

    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.count(event)
    }

    async fn patch(&self, event: &Event, _patch: &[u8]) -> Result<Stored, SinkError> {
        self.count(event)
    }

    /// Counted without serialising the patch.
    async fn patch_observed(&self, event: &Event, _patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        self.count(event)
    }
}

/// kube-events-exporter's labels (`base`), then the enrichment's that are counted.
fn with_enrichment<'a>(
    base: [(&'static str, &'a str); 5],
    counted: EnrichmentLabels,
    workload: &'a str,
    cluster: &'a str,
) -> Vec<(&'static str, &'a str)> {
    let mut labels = base.to_vec();
    if counted.workload {
        labels.push(("workload", workload));
    }
    if counted.cluster {
        labels.push(("cluster", cluster));
    }
    labels
}

impl crate::metrics::Snapshot {
    /// Adds the event counters: `eventpipe_events_total` per series, each tenant's `other`
    /// series and `eventpipe_events_folded_total` (0 for a tenant nothing was folded for).
    pub fn add_event_counts(&mut self, counts: &EventCounts) {
        use crate::metrics::{EVENTS, EVENTS_FOLDED};
        self.present(&EVENTS);
        self.present(&EVENTS_FOLDED);
        let (series, folded) = counts.read();
        let labelled = |base, workload, cluster| with_enrichment(base, counts.labels, workload, cluster);
        for ((tenant, type_, namespace, kind, reason, workload, cluster), n) in &series {
            let base = [
                ("tenant", &**tenant),
                ("type", type_.as_str()),
                ("involved_object_namespace", namespace.as_str()),
                ("involved_object_kind", kind.as_str()),
                ("reason", reason.as_str()),
            ];
            self.add(&EVENTS, &labelled(base, workload, cluster), *n);
            self.add(&EVENTS_FOLDED, &[("tenant", tenant)], 0);
        }
        for (tenant, n) in &folded {
            let base = [
                ("tenant", &**tenant),
                ("type", OTHER),
                ("involved_object_namespace", OTHER),
                ("involved_object_kind", OTHER),
                ("reason", OTHER),
            ];
            self.add(&EVENTS, &labelled(base, OTHER, OTHER), *n);
            self.add(&EVENTS_FOLDED, &[("tenant", tenant)], *n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{EVENTS, EVENTS_FOLDED, Snapshot};

    fn event(ns: &str, reason: &str) -> Event {
        let mut e = Event::default();
        e.involved_object.namespace = ns.into();
        e.involved_object.kind = "Pod".into();
        e.reason = reason.into();
        e.type_ = "Normal".into();
        e
    }

    #[tokio::test]
    async fn writes_are_counted_per_label_set_and_new_ones_past_the_cap_fold_into_other() {
        let counts = EventCounts::new(2);
        let (a, b) = (EventMetricsSink::new("a", counts.clone()), EventMetricsSink::new("b", counts.clone()));
        a.create(&event("shop", "Pulled")).await.unwrap();
        a.patch(&event("shop", "Pulled"), b"{}").await.unwrap();
        b.create(&event("shop", "Pulled")).await.unwrap();
        a.create(&event("web", "Killing")).await.unwrap(); // a third label set: folded
        b.create(&event("shop", "Pulled")).await.unwrap(); // known: still counted
        let mut s = Snapshot::default();
        s.add_event_counts(&counts);
        let series = |tenant, ns, reason| {
            let labels = [
                ("tenant", tenant),
                ("type", if ns == OTHER { OTHER } else { "Normal" }),
                ("involved_object_namespace", ns),
                ("involved_object_kind", if ns == OTHER { OTHER } else { "Pod" }),
                ("reason", reason),
            ];
            s.get(&EVENTS, &labels)
        };
        assert_eq!(series("a", "shop", "Pulled"), Some(2));
        assert_eq!(series("b", "shop", "Pulled"), Some(2));
        assert_eq!(series("a", "web", "Killing"), None);
        assert_eq!(series("a", OTHER, OTHER), Some(1));
        assert_eq!(s.get(&EVENTS_FOLDED, &[("tenant", "a")]), Some(1));
        assert_eq!(s.get(&EVENTS_FOLDED, &[("tenant", "b")]), Some(0));
    }

    #[tokio::test]
    async fn workload_and_cluster_label_the_series_when_asked_for_and_count_against_the_cap() {
        use crate::event::enrichment::{Enriched, Enrichment, Owner};
        let enriched = |owner: &str| {
            let mut e = event("shop", "Pulled");
            e.enrichment = Enriched::new(Arc::new(Enrichment {
                cluster: Some("prod-eu".into()),
                owner: Some(Owner { kind: "Deployment".into(), name: owner.into(), ..Owner::default() }),
                ..Enrichment::default()
            }));
            e
        };
        let labels = EnrichmentLabels { workload: true, cluster: true };
        let counts = EventCounts::with_labels(2, labels);
        let sink = EventMetricsSink::new("a", counts.clone());
        sink.create(&enriched("checkout")).await.unwrap();
        sink.create(&enriched("checkout")).await.unwrap();
        sink.create(&event("shop", "Pulled")).await.unwrap(); // not enriched: empty labels
        sink.create(&enriched("cart")).await.unwrap(); // a third series: folded
        let mut s = Snapshot::default();
        s.add_event_counts(&counts);
        let base = [
            ("tenant", "a"),
            ("type", "Normal"),
            ("involved_object_namespace", "shop"),
            ("involved_object_kind", "Pod"),
            ("reason", "Pulled"),
        ];
        let series = |workload, cluster| s.get(&EVENTS, &with_enrichment(base, labels, workload, cluster));
        assert_eq!(series("Deployment/checkout", "prod-eu"), Some(2));
        assert_eq!(series("", ""), Some(1));
        assert_eq!(series("Deployment/cart", "prod-eu"), None);
        assert_eq!(s.get(&EVENTS_FOLDED, &[("tenant", "a")]), Some(1));

        // Without them, enriched events count in kube-events-exporter's series.
        let plain = EventCounts::new(10);
        EventMetricsSink::new("a", plain.clone()).create(&enriched("checkout")).await.unwrap();
        let mut s = Snapshot::default();
        s.add_event_counts(&plain);
        assert_eq!(s.get(&EVENTS, &base), Some(1));
    }
}
