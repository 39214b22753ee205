//! The tenant stage: filters → keys → correlate, for one tenant, and [`TenantStages`], every
//! tenant of a plan with the router that picks one per event.
//!
//! This is the only implementation of a tenant's pipeline: `eventpipe run` (through the tenant
//! router watcher, [`crate::pipeline::router`]), `eventpipe replay`, `eventpipe test` and
//! [`crate::record::event_broadcaster::EventBroadcaster::start_recording_to_sink`] all run events
//! through it. Keys are computed once per tenant (one EventCorrelator per tenant, shared by all
//! its sinks).
//!
//! A batch goes through in two steps, as the EventCorrelator's own: [`TenantStages::prepare`]
//! routes every event, runs each tenant's filters (one call per filter per batch) and the key
//! functions (one call per key function per batch); then [`TenantStages::finish`] runs the
//! EventLogger and the spam filter event by event, in input order, so that a caller can call
//! `update_state` between two events exactly where client-go does.

use std::collections::HashMap;
use std::sync::Arc;

use crate::correlator::snapshot::{CorrelatorSettings, SnapshotRefused, TenantSnapshot};
use crate::correlator::{
    CorrelatorOptions, CorrelatorStats, EventCorrelateResult, EventCorrelator, Key, Occurrence, PendingState,
    PreparedEvent,
};
use crate::event::Event;
use crate::pipeline::plan::{PlannedTenant, TenantPlan, TenantRules};
use crate::plugin::filter::{Verdict, WasmFilter};

/// What the first step made of one event.
#[derive(Debug)]
pub enum Staged {
    /// A declarative `drop` / `keep` rule dropped it ([`crate::tenant::rules`]).
    Dropped {
        /// The rule's name ([`crate::tenant::rules::NOT_KEPT`] when no `keep` rule matched).
        rule: Arc<str>,
    },
    /// A filter plugin dropped it.
    Filtered {
        /// The filter's name.
        filter: String,
        /// The filter's reason, if it gave one.
        reason: Option<String>,
    },
    /// Aggregated and keyed, waiting for [`TenantStages::finish`].
    Prepared(PreparedEvent),
}

/// Why step 1 dropped an event.
#[derive(Debug)]
enum DropCause {
    /// A declarative rule, by name.
    Rule(Arc<str>),
    /// A filter plugin, by name, with its reason.
    Filter(String, Option<String>),
}

/// One tenant's filters and EventCorrelator (its LRU caches and token buckets).
pub struct TenantStage {
    name: Arc<str>,
    rules: TenantRules,
    filters: Vec<WasmFilter>,
    correlator: EventCorrelator,
}

impl std::fmt::Debug for TenantStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantStage").field("name", &self.name).field("filters", &self.filters.len()).finish()
    }
}

impl TenantStage {
    /// A stage with no filter and a new EventCorrelator with `options` (client-go defaults for
    /// zero fields): what `replay` and client-go's `StartRecordingToSink` run.
    pub fn new(name: &str, options: CorrelatorOptions) -> Self {
        Self {
            name: name.into(),
            rules: TenantRules::default(),
            filters: Vec::new(),
            correlator: EventCorrelator::new(options),
        }
    }

    /// A fresh stage for a planned tenant, with plugin instances of its own.
    pub fn planned(tenant: &PlannedTenant) -> Self {
        let (filters, options) = tenant.instantiate();
        Self {
            name: tenant.name.clone(),
            rules: tenant.rules.clone(),
            filters,
            correlator: EventCorrelator::new(options),
        }
    }

    /// The correlator's totals so far.
    pub fn stats(&self) -> CorrelatorStats {
        self.correlator.stats()
    }

    /// The tenant's name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The tenant's key functions as a snapshot records them ([`CorrelatorSettings::key_functions`]).
    pub fn key_functions(&self) -> String {
        let r = &self.rules;
        format!("{:?} {:?} {:?} {:?}", r.aggregate_key, r.message_combiner, r.spam_key, r.builtin_spam_key)
    }

    /// The tenant's correlator state ([`crate::correlator::snapshot`]).
    pub fn snapshot(&self) -> TenantSnapshot {
        TenantSnapshot {
            tenant: self.name.to_string(),
            state: self.correlator.snapshot(&self.key_functions()),
            summaries: Vec::new(), // the router partition adds its windows
        }
    }

    /// Runs the filter plugins, in order, over the events of `batch` that `dropped` does not
    /// already drop (one call per filter per batch), recording each drop with the filter's name
    /// and reason.
    fn filter(&self, batch: &[Occurrence], dropped: &mut [Option<DropCause>]) {
        let mut positions: Vec<usize> = (0..batch.len()).filter(|&i| dropped[i].is_none()).collect();
        for filter in &self.filters {
            if positions.is_empty() {
                break;
            }
            let events: Vec<&Event> = positions.iter().map(|&i| &*batch[i].event).collect();
            for (&i, verdict) in positions.iter().zip(filter.filter(&events)) {
                if let Verdict::Drop(reason) = verdict {
                    tracing::debug!(tenant = %self.name, filter = filter.handle().name(), reason = reason.as_deref().unwrap_or(""), "event filtered");
                    dropped[i] = Some(DropCause::Filter(filter.handle().name().to_string(), reason));
                }
            }
            positions.retain(|&i| dropped[i].is_none());
        }
    }

    /// Step 1 for this tenant's share of a batch: the declarative `drop` / `keep` rules, the
    /// filter plugins, then the key functions on the kept events (with `spam_exempt` rules
    /// marked). One [`Staged`] per occurrence, in order.
    pub fn prepare(&mut self, batch: Vec<Occurrence>) -> Vec<Staged> {
        let rules = &self.rules.event_rules;
        let mut dropped: Vec<Option<DropCause>> = if rules.filters() {
            batch.iter().map(|o| rules.dropped_by(&o.event).map(DropCause::Rule)).collect()
        } else {
            (0..batch.len()).map(|_| None).collect()
        };
        if !self.filters.is_empty() {
            self.filter(&batch, &mut dropped);
        }
        let exempt: Vec<bool> = if rules.spam_exempt.is_empty() {
            Vec::new()
        } else {
            batch.iter().zip(&dropped).filter(|(_, d)| d.is_none()).map(|(o, _)| rules.spam_exempt(&o.event)).collect()
        };
        let kept: Vec<Occurrence> =
            batch.into_iter().zip(&dropped).filter(|(_, d)| d.is_none()).map(|(o, _)| o).collect();
        let mut prepared = self.correlator.prepare(kept).into_iter();
        let mut exempt = exempt.into_iter();
        dropped
            .into_iter()
            .map(|d| match d {
                Some(DropCause::Rule(rule)) => Staged::Dropped { rule },
                Some(DropCause::Filter(filter, reason)) => Staged::Filtered { filter, reason },
                None => {
                    let mut p = prepared.next().expect("one prepared event per kept event");
                    if exempt.next() == Some(true) {
                        p.exempt_from_spam_filter();
                    }
                    Staged::Prepared(p)
                }
            })
            .collect()
    }

    /// Step 2 for one event: the EventLogger and the spam filter (client-go `EventCorrelate`'s
    /// second half).
    pub fn finish(&mut self, prepared: PreparedEvent) -> EventCorrelateResult {
        self.correlator.finish(prepared)
    }

    /// As [`finish`](Self::finish), handing a spam-filtered event to `skipped`
    /// ([`EventCorrelator::finish_noting_skip`]).
    pub fn finish_noting_skip(
        &mut self,
        prepared: PreparedEvent,
        skipped: impl FnOnce(&Event),
    ) -> EventCorrelateResult {
        self.correlator.finish_noting_skip(prepared, skipped)
    }

    /// client-go `UpdateState`: remember the sink's copy of a written event.
    pub fn update_state(&mut self, stored: &Event) {
        self.correlator.update_state(stored);
    }

    /// [`update_state`](Self::update_state) for an event written exactly as `finish` returned
    /// it, with its [`PreparedEvent::state_key`] (see [`EventCorrelator::update_state_keyed`]).
    pub fn update_state_keyed(&mut self, written: &Event, key: Option<Key>) {
        self.correlator.update_state_keyed(written, key);
    }

    /// `UpdateState`'s first half for a write of `written` just decided
    /// ([`EventCorrelator::begin_write`]); `key` as for
    /// [`update_state_keyed`](Self::update_state_keyed).
    pub fn begin_write(&mut self, written: &Event, key: Option<Key>) -> PendingState {
        self.correlator.begin_write(written, key)
    }

    /// `UpdateState`'s second half with the sink's copy ([`EventCorrelator::complete_write`]).
    pub fn complete_write(&mut self, pending: PendingState, stored: &Event) {
        self.correlator.complete_write(pending, stored);
    }

    /// A decided write failed for good ([`EventCorrelator::abandon_write`]).
    pub fn abandon_write(&mut self, pending: PendingState) {
        self.correlator.abandon_write(pending);
    }

    /// Both steps over a whole batch, in order, with no sink: `written` is called with each
    /// result and returns the sink's copy to remember (`None`: nothing written). One result per
    /// occurrence: `Err((filter, reason))` for a filtered event, `Err(("rule NAME", None))` for
    /// one a declarative rule dropped.
    pub fn correlate(
        &mut self,
        batch: Vec<Occurrence>,
        mut written: impl FnMut(&EventCorrelateResult) -> Option<Event>,
    ) -> Vec<Result<EventCorrelateResult, (String, Option<String>)>> {
        self.prepare(batch)
            .into_iter()
            .map(|staged| match staged {
                Staged::Filtered { filter, reason } => Err((filter, reason)),
                Staged::Dropped { rule } => Err((format!("rule {rule}"), None)),
                Staged::Prepared(p) => {
                    let result = self.finish(p);
                    if let Some(stored) = written(&result) {
                        self.update_state(&stored);
                    }
                    Ok(result)
                }
            })
            .collect()
    }
}

/// Every tenant of a plan, live: the plan's router and one [`TenantStage`] per tenant.
pub struct TenantStages {
    plan: Arc<TenantPlan>,
    stages: Vec<TenantStage>,
}

impl std::fmt::Debug for TenantStages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantStages").field("stages", &self.stages).finish()
    }
}

impl TenantStages {
    /// Fresh stages for every tenant of `plan`.
    pub fn new(plan: Arc<TenantPlan>) -> Self {
        let stages = plan.tenants.iter().map(TenantStage::planned).collect();
        Self { plan, stages }
    }

    /// Takes `plan` (a config reload, or a drop-in filter added or removed): tenants whose rules
    /// did not change keep their stage (correlator state); tenants whose filters alone changed
    /// keep their correlator state and take the new filters; changed or new tenants start
    /// fresh; removed tenants are dropped.
    pub fn adopt(&mut self, plan: Arc<TenantPlan>) {
        let mut old: HashMap<Arc<str>, TenantStage> = self.stages.drain(..).map(|s| (s.name.clone(), s)).collect();
        self.stages = plan
            .tenants
            .iter()
            .map(|t| match old.remove(&t.name) {
                Some(kept) if kept.rules == t.rules => kept,
                Some(mut kept) if TenantRules { filters: t.rules.filters.clone(), ..kept.rules.clone() } == t.rules => {
                    kept.filters = t.instantiate().0;
                    kept.rules = t.rules.clone();
                    kept
                }
                _ => TenantStage::planned(t),
            })
            .collect();
        self.plan = plan;
    }

    /// Every tenant's correlator state, in plan order ([`crate::correlator::snapshot`]).
    pub fn snapshot(&self) -> Vec<TenantSnapshot> {
        self.stages.iter().map(TenantStage::snapshot).collect()
    }

    /// Restores the tenants' correlator states (meant for fresh stages). A tenant the plan no
    /// longer has is left out; a tenant the snapshot lacks starts fresh.
    ///
    /// # Errors
    /// [`SnapshotRefused::Options`] for the first tenant whose settings differ; nothing is
    /// restored then (every tenant starts fresh).
    pub fn restore(&mut self, tenants: Vec<TenantSnapshot>) -> Result<(), SnapshotRefused> {
        let mut matched = Vec::new();
        for t in tenants {
            let Some(i) = self.position(&t.tenant) else { continue };
            let stage = &self.stages[i];
            let run: CorrelatorSettings = stage.correlator.settings(&stage.key_functions());
            if t.state.settings != run {
                return Err(SnapshotRefused::Options {
                    tenant: t.tenant,
                    snapshot: Box::new(t.state.settings),
                    run: Box::new(run),
                });
            }
            matched.push((i, t));
        }
        for (i, t) in matched {
            let stage = &mut self.stages[i];
            let keys = stage.key_functions();
            stage.correlator.restore(&t.tenant, &keys, t.state)?;
        }
        Ok(())
    }

    /// The plan these stages run.
    pub fn plan(&self) -> &Arc<TenantPlan> {
        &self.plan
    }

    /// The stage of tenant `i` (an index into the plan's tenants).
    pub fn stage_mut(&mut self, i: usize) -> &mut TenantStage {
        &mut self.stages[i]
    }

    /// The index of the tenant called `name`, if the plan has one.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.stages.iter().position(|s| &*s.name == name)
    }

    /// Step 1 for a batch: routes every occurrence to its tenant, then prepares each tenant's
    /// share (in input order within it). Returns `(tenant index, staged)` per occurrence, in
    /// input order.
    pub fn prepare(&mut self, batch: Vec<Occurrence>) -> Vec<(usize, Staged)> {
        let owners: Vec<usize> = batch.iter().map(|o| self.plan.route(&o.event)).collect();
        if self.stages.len() == 1 {
            return self.stages[0].prepare(batch).into_iter().map(|s| (0, s)).collect();
        }
        let mut shares: Vec<Vec<Occurrence>> = self.stages.iter().map(|_| Vec::new()).collect();
        for (o, &t) in batch.into_iter().zip(&owners) {
            shares[t].push(o);
        }
        let mut staged: Vec<std::vec::IntoIter<Staged>> =
            self.stages.iter_mut().zip(shares).map(|(stage, share)| stage.prepare(share).into_iter()).collect();
        owners.into_iter().map(|t| (t, staged[t].next().expect("one staged event per routed event"))).collect()
    }

    /// Step 2 for one event of tenant `tenant`.
    pub fn finish(&mut self, tenant: usize, prepared: PreparedEvent) -> EventCorrelateResult {
        self.stages[tenant].finish(prepared)
    }

    /// As [`finish`](Self::finish), handing a spam-filtered event to `skipped`.
    pub fn finish_noting_skip(
        &mut self,
        tenant: usize,
        prepared: PreparedEvent,
        skipped: impl FnOnce(&Event),
    ) -> EventCorrelateResult {
        self.stages[tenant].finish_noting_skip(prepared, skipped)
    }
}
