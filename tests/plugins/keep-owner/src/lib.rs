//! Test fixture and example: a filter that reads each event's enrichment (world
//! `filter-enriched`). It keeps the events whose involved object's top owner is of the kind
//! configured as `owner_kind` (under `[plugins.keep-owner]`), that run on a node, and that come
//! from the cluster configured as `cluster`; it drops the rest, saying what it saw.
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::format;
use alloc::vec;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(KeepOwner);

/// Keeps the configured owner kind's events, on a node, of the configured cluster.
#[derive(Default)]
struct KeepOwner;

impl Filter for KeepOwner {
    fn fields(&self) -> Vec<EventField> {
        vec![EventField::InvolvedObjectName]
    }

    fn enrichment_fields(&self) -> Vec<EnrichmentField> {
        vec![EnrichmentField::OwnerKind, EnrichmentField::NodeName, EnrichmentField::Cluster]
    }

    fn filter_enriched(&self, _tenant: &str, event: &Event, enrichment: &Enrichment<'_>) -> Verdict {
        let wanted = eventpipe_guest::config::get("owner_kind").unwrap_or_default();
        let cluster = eventpipe_guest::config::get("cluster").unwrap_or_default();
        let (owner, node) = (enrichment.get(&EnrichmentField::OwnerKind), enrichment.get(&EnrichmentField::NodeName));
        if owner == wanted && !node.is_empty() && enrichment.get(&EnrichmentField::Cluster) == cluster {
            return Verdict::Keep;
        }
        Verdict::Drop(Some(format!("{} is owned by a {owner:?}, on node {node:?}", event.involved_object.name)))
    }

    /// Without enrichment (the single-event call tools make), nothing is known of the owner.
    fn filter(&self, tenant: &str, event: &Event) -> Verdict {
        self.filter_enriched(tenant, event, &Enrichment::none())
    }
}
