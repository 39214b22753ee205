//! What enrichment costs, without an API server: an [`Enricher`] whose metadata cache is
//! seeded ([`Enricher::seed`]) with synthesised objects, as its watches would fill it.
//!
//! - CPU: passes over the bundled stream (`examples/data/occurrences.jsonl`) as `run` makes
//!   them: the source side's enrichment step (batches of 256 looked up together, each found
//!   enrichment attached to its event), the tenant stage with the default plugins, and the
//!   webhook's JSON item of each write (which carries the enrichment) — or the same without
//!   the enrichment step. Every involved object of the stream is in the cache: each Pod with
//!   labels, a ReplicaSet → Deployment owner chain and a node; the other kinds with labels.
//! - Memory: Pods seeded into a fresh cache (with labels, an owner reference and a node name:
//!   what a full-object Pod watch keeps when node labels are configured).

use std::collections::BTreeMap;
use std::sync::Arc;

use eventpipe::correlator::Occurrence;
use eventpipe::event::enrichment::Enriched;
use eventpipe::k8s::enrich::{EnrichSettings, Enricher};
use eventpipe::pipeline::plan::TenantPlan;
use eventpipe::sink::SinkPatch;
use eventpipe::sink::retry::Verb;
use eventpipe::sink::webhook::{BatchEncoding, JsonItems};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Events enriched together, as the source side batches them.
const ENRICH_BATCH: usize = 256;
/// Nodes the synthesised Pods run on.
const NODES: usize = 24;

/// The enrichment configured: `app.kubernetes.io/*` and `team` labels, the top owner, the
/// node's zone, a cluster name.
pub fn settings() -> EnrichSettings {
    EnrichSettings {
        labels: Some(vec!["app.kubernetes.io/*".into(), "team".into()]),
        owner: Some(true),
        node_labels: Some(vec!["topology.kubernetes.io/zone".into()]),
        cluster: Some("bench".into()),
        ..EnrichSettings::default()
    }
}

/// A fresh enricher of [`settings`], with nothing cached.
pub fn enricher() -> Enricher {
    Enricher::new(&settings(), None).expect("the globs compile")
}

/// The labels of an object named `name` of `app`: three the globs keep, one they do not.
fn labels(app: &str, name: &str) -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name", app),
        ("app.kubernetes.io/instance", name),
        ("team", if app.len() % 2 == 0 { "payments" } else { "platform" }),
        ("pod-template-hash", "5d8f7c9b4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Metadata of `namespace`/`name` with `uid`, labels of `app`, and `owner` as its controller.
fn meta(namespace: &str, name: &str, uid: String, app: &str, owner: Option<(&str, &str, String)>) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid),
        labels: Some(labels(app, name)),
        owner_references: owner.map(|(api_version, kind, owner)| {
            vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: owner.clone(),
                uid: format!("uid-{kind}-{owner}"),
                controller: Some(true),
                ..OwnerReference::default()
            }]
        }),
        ..ObjectMeta::default()
    }
}

/// `name` without its last `-segment` (a Pod's ReplicaSet, a ReplicaSet's Deployment), or
/// `name` itself.
fn parent(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(head, _)| head)
}

/// The name of synthesised node `i`.
fn node_name(i: usize) -> String {
    format!("ip-10-0-{}-{}.us-west-2.compute.internal", i / 8, i % 8 + 10)
}

/// A node's metadata: a zone label (from the name's length) and one the globs do not keep.
fn node_meta(name: &str) -> ObjectMeta {
    let mut meta = meta("", name, format!("uid-node-{name}"), "node", None);
    let zone = format!("us-west-2{}", ['a', 'b', 'c'][name.len() % 3]);
    meta.labels = Some(BTreeMap::from([
        ("topology.kubernetes.io/zone".to_string(), zone),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
    ]));
    meta
}

/// Seeds `enricher` with every involved object of `occurrences` (its uid as the event names
/// it); Pods with their ReplicaSet and Deployment and a node (kubelet's host where the event
/// names one). Returns the objects seeded.
pub fn seed_stream(enricher: &Enricher, occurrences: &[Occurrence]) -> usize {
    let mut seen = std::collections::HashSet::new();
    for i in 0..NODES {
        enricher.seed(("v1", "Node"), false, &node_meta(&node_name(i)), None);
    }
    for o in occurrences {
        let io = &o.event.involved_object;
        let api_version = if io.api_version.is_empty() { "v1" } else { io.api_version.as_str() };
        if io.name.is_empty()
            || !seen.insert((
                api_version.to_string(),
                io.kind.to_string(),
                io.namespace.to_string(),
                io.name.to_string(),
            ))
        {
            continue;
        }
        let namespaced = io.kind != "Node" && io.kind != "Namespace";
        // As the enricher reads it: the object's namespace, else the event's.
        let namespace = match (namespaced, io.namespace.as_str()) {
            (false, _) => "",
            (true, "") => o.event.metadata.namespace.as_str(),
            (true, namespace) => namespace,
        };
        if io.kind == "Pod" {
            let (replica_set, deployment) = (parent(&io.name), parent(parent(&io.name)));
            let rs = meta(
                namespace,
                replica_set,
                format!("uid-ReplicaSet-{replica_set}"),
                deployment,
                Some(("apps/v1", "Deployment", deployment.into())),
            );
            enricher.seed(("apps/v1", "ReplicaSet"), true, &rs, None);
            let d = meta(namespace, deployment, format!("uid-Deployment-{deployment}"), deployment, None);
            enricher.seed(("apps/v1", "Deployment"), true, &d, None);
            // kubelet's host is the Pod's node; other sources' Pods go on a synthesised one.
            let host = o.event.source.host.as_str();
            let node = if host.is_empty() { node_name(io.name.len() % NODES) } else { host.to_string() };
            if !host.is_empty() {
                enricher.seed(("v1", "Node"), false, &node_meta(&node), None);
            }
            let pod = meta(
                namespace,
                &io.name,
                io.uid.to_string(),
                deployment,
                Some(("apps/v1", "ReplicaSet", replica_set.into())),
            );
            enricher.seed(("v1", "Pod"), true, &pod, Some(node));
        } else {
            let object = meta(namespace, &io.name, io.uid.to_string(), parent(&io.name), None);
            enricher.seed((api_version, &io.kind), namespaced, &object, None);
        }
    }
    enricher.objects()
}

/// Seeds `enricher` with `n` Pods in 50 namespaces, each with four labels (three kept), a
/// ReplicaSet controller reference and a node name; the Pods' metadata is made one at a time,
/// so that only what the cache keeps stays allocated.
pub fn seed_pods(enricher: &Enricher, n: usize) {
    for i in 0..n {
        let (app, namespace) = (format!("service-{}", i / 40), format!("team-{:02}", i % 50));
        let replica_set = format!("{app}-{:09x}", (i / 10).wrapping_mul(0x9e37_79b9) & 0xf_ffff_ffff);
        let name = format!("{replica_set}-{:05x}", i.wrapping_mul(0x2545_f491) & 0xf_ffff);
        let uid = format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", i, i % 0xffff, i % 0xfff, i % 0xfff, i);
        let pod = meta(&namespace, &name, uid, &app, Some(("apps/v1", "ReplicaSet", replica_set)));
        enricher.seed(("v1", "Pod"), true, &pod, Some(node_name(i % NODES)));
    }
}

/// The default tenant plan (`eventpipe run`'s with no flags: the default Wasm key plugins).
pub fn plan() -> Arc<TenantPlan> {
    use eventpipe::plugin::registry::PluginRegistry;
    use eventpipe::plugin::{Metering, PluginRuntime};
    let registry = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).expect("runtime")).expect("embedded plugins");
    let rules = eventpipe::pipeline::plan::CommandLineRules::default().rules(&registry).expect("default rules");
    Arc::new(TenantPlan::build_unopened(&rules, None, &registry).expect("the default plan"))
}

/// One pass of `input` as `run` makes it: with `enricher`, each batch of [`ENRICH_BATCH`]
/// events enriched together on `runtime` and what was found attached; then the tenant stage
/// of `plan`, each write encoded as the webhook's JSON item. Returns the bytes written.
pub fn pass(
    plan: &Arc<TenantPlan>,
    mut input: Vec<Occurrence>,
    enricher: Option<&Enricher>,
    runtime: &tokio::runtime::Runtime,
) -> usize {
    if let Some(enricher) = enricher {
        for batch in input.chunks_mut(ENRICH_BATCH) {
            let found =
                runtime.block_on(futures_util::future::join_all(batch.iter().map(|o| enricher.enrich(&o.event))));
            for (o, found) in batch.iter_mut().zip(found) {
                if let Some(enrichment) = found {
                    o.event.enrichment = Enriched::new(enrichment);
                }
            }
        }
    }
    let mut bytes = 0;
    eventpipe::commands::bench::pass_writing(plan, input, |event| {
        bytes += JsonItems.encode(Verb::Create, event, SinkPatch::Bytes(&[])).expect("the write encodes").len();
    });
    bytes
}
