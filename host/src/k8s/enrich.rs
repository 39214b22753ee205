//! Enrichment: what an event's involved object is part of, from a metadata cache of the
//! cluster (a source-side concern: the sources' events are enriched before the Broadcaster,
//! and the sinks only read what was attached, [`crate::event::enrichment`]).
//!
//! For each kind that occurs (as `involvedObject.apiVersion` / `kind`, or as an owner's), the
//! first event resolves the kind to its resource by discovery (`/api`, `/apis/GROUP/VERSION`)
//! and starts a watch of every namespace ([`store`]: metadata only, bounded, least recently
//! used out). An event then reads:
//! - the involved object's labels and annotations whose keys match the configured globs;
//! - the top owner: the controller `ownerReferences` entry followed up while the owner has one
//!   (Pod → ReplicaSet → Deployment, Job → CronJob; any kind);
//! - for a Pod, its node (`spec.nodeName`, kept from a Pod watch of full objects when node
//!   labels are wanted; else kubelet's `source.host`) and the Node's labels matching the globs;
//! - the cluster's name, as configured.
//!
//! A miss (an object newer than the watch, pushed out of the store, or replaced under its name:
//! the event's `involvedObject.uid` differs from the cached one, once per uid) costs one GET, rate
//! limited ([`GET_QPS`], [`GET_BURST`]) and counted (`eventpipe_enrich_gets_total`); a GET's
//! `404` is remembered for [`store::ABSENT_FOR`]. What cannot be resolved (deleted object:
//! `not_found`; RBAC refusal: `forbidden`; a kind discovery does not know or an event without
//! `apiVersion`: `unknown_kind`; the wait ran out: `timeout`; any other failure: `error`) is
//! counted (`eventpipe_enrich_unresolved_total{reason,kind}`), logged once per kind (WARN), and
//! leaves its fields empty. An event waits for its enrichment at most the configured wait
//! (`--enrich-wait`, 100 ms by default), then goes on with what was found.

pub mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};
use kube::api::{DynamicObject, GroupVersionKind};
use kube::discovery::Scope;

use crate::event::Event;
use crate::event::enrichment::{Enrichment, Node, Owner};
use store::{Entry, KindStore, ObjectInfo, OwnerRef, Phase, Selection};

/// The wait for an event's enrichment when none is configured: 100 ms.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(100);
/// Objects a kind's store holds when none is configured: 100,000.
pub const DEFAULT_MAX_OBJECTS: usize = 100_000;
/// GETs per second at most (a miss's read of one object), as client-go's default client QPS
/// (after the first [`GET_BURST`]).
pub const GET_QPS: f64 = 5.0;
/// GETs allowed at once before [`GET_QPS`] applies (client-go's default burst is 10; a cold
/// start sees many objects newer than their watch).
pub const GET_BURST: f64 = 50.0;
/// Owner references followed at most (a cycle, or a very deep chain, ends there).
pub const MAX_OWNER_DEPTH: usize = 8;

/// `[enrich]` of the config file and the `run` flags (each flag wins over its key): which
/// enrichments are on. Enrichment is on when any of `labels`, `annotations`, `owner`,
/// `node_labels`, `cluster` is given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnrichSettings {
    /// Globs on the involved object's label keys (`app.kubernetes.io/*`).
    pub labels: Option<Vec<String>>,
    /// Globs on its annotation keys.
    pub annotations: Option<Vec<String>>,
    /// Follow the controller owner references to the top owner.
    pub owner: Option<bool>,
    /// Globs on the label keys of a Pod's node.
    pub node_labels: Option<Vec<String>>,
    /// The cluster's name.
    pub cluster: Option<String>,
    /// The longest an event waits for its enrichment ([`DEFAULT_WAIT`]).
    pub wait: Option<Duration>,
    /// Objects each kind's store holds at most ([`DEFAULT_MAX_OBJECTS`]).
    pub max_objects: Option<usize>,
}

impl EnrichSettings {
    /// These settings, each unset one taken from `other` (the flags over the config file).
    pub fn or(self, other: Self) -> Self {
        Self {
            labels: self.labels.or(other.labels),
            annotations: self.annotations.or(other.annotations),
            owner: self.owner.or(other.owner),
            node_labels: self.node_labels.or(other.node_labels),
            cluster: self.cluster.or(other.cluster),
            wait: self.wait.or(other.wait),
            max_objects: self.max_objects.or(other.max_objects),
        }
    }

    /// Whether any enrichment is on.
    pub fn enabled(&self) -> bool {
        self.labels.is_some()
            || self.annotations.is_some()
            || self.owner == Some(true)
            || self.node_labels.is_some()
            || self.cluster.is_some()
    }

    /// Whether anything needs the API server (everything but the cluster's name does).
    pub fn needs_cluster(&self) -> bool {
        self.labels.is_some() || self.annotations.is_some() || self.owner == Some(true) || self.node_labels.is_some()
    }
}

/// A glob list that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("enrich.{key}: {pattern:?}: {error}")]
pub struct EnrichError {
    /// `labels`, `annotations` or `node_labels`.
    pub key: &'static str,
    /// The glob.
    pub pattern: String,
    /// Why.
    pub error: String,
}

/// The globs of `patterns` (`key` names them in errors).
///
/// # Errors
/// [`EnrichError`] for the first glob that does not compile.
pub fn glob_set(key: &'static str, patterns: &[String]) -> Result<GlobSet, EnrichError> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|e| EnrichError { key, pattern: p.clone(), error: e.kind().to_string() })?;
        set.add(glob);
    }
    set.build().map_err(|e| EnrichError { key, pattern: String::new(), error: e.to_string() })
}

/// Why a lookup found nothing: the `reason` label of `eventpipe_enrich_unresolved_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unresolved {
    /// The object does not exist (deleted, or never created).
    NotFound,
    /// The API server refused the list or GET (`403`: RBAC).
    Forbidden,
    /// Discovery does not know the kind, or the event names no `apiVersion`.
    UnknownKind,
    /// The wait ran out first.
    Timeout,
    /// Any other failure (the API server unreachable, …).
    Error,
}

impl Unresolved {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::NotFound => "not_found",
            Unresolved::Forbidden => "forbidden",
            Unresolved::UnknownKind => "unknown_kind",
            Unresolved::Timeout => "timeout",
            Unresolved::Error => "error",
        }
    }
}

/// The enricher's counters.
#[derive(Debug, Default)]
pub struct EnrichCounters {
    gets: AtomicU64,
    enriched: AtomicU64,
    unresolved: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl EnrichCounters {
    /// GETs of single objects (misses).
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// Events that got an enrichment.
    pub fn enriched(&self) -> u64 {
        self.enriched.load(Ordering::Relaxed)
    }

    /// Unresolved lookups by `(reason, kind)`.
    pub fn unresolved(&self) -> BTreeMap<(&'static str, String), u64> {
        self.unresolved.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl crate::metrics::Snapshot {
    /// Adds the enricher's counters.
    pub fn add_enrich(&mut self, counters: &EnrichCounters) {
        self.add(&crate::metrics::ENRICH_GETS, &[], counters.gets());
        self.add(&crate::metrics::ENRICH_ENRICHED, &[], counters.enriched());
        for ((reason, kind), n) in counters.unresolved() {
            self.add(&crate::metrics::ENRICH_UNRESOLVED, &[("reason", reason), ("kind", &kind)], n);
        }
    }
}

/// A token bucket: [`GET_BURST`] GETs, refilled at [`GET_QPS`].
#[derive(Debug)]
struct GetLimiter(Mutex<(f64, Instant)>);

impl GetLimiter {
    fn new() -> Self {
        Self(Mutex::new((GET_BURST, Instant::now())))
    }

    /// Takes a token: how long to wait for it (zero: now).
    fn take(&self) -> Duration {
        let mut bucket = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * GET_QPS).min(GET_BURST);
        bucket.1 = now;
        bucket.0 -= 1.0;
        if bucket.0 >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-bucket.0 / GET_QPS) }
    }
}

/// A kind as events name it: `(apiVersion, kind)`.
type KindKey = (String, String);

/// What is known of a kind.
#[derive(Debug, Clone)]
enum KindState {
    /// Being resolved by discovery; its outcome comes on the channel.
    Resolving(tokio::sync::watch::Receiver<Option<Result<Arc<KindStore>, Unresolved>>>),
    /// Resolved, its store watched.
    Ready(Arc<KindStore>),
    /// Not resolvable.
    Failed(Unresolved),
}

/// The metadata cache and what it attaches: [`Enricher::enrich`] gives an event's
/// [`Enrichment`].
pub struct Enricher {
    client: Option<kube::Client>,
    cluster: Option<String>,
    labels: bool,
    annotations: bool,
    owner: bool,
    node_labels: Option<GlobSet>,
    selection: Selection,
    wait: Duration,
    max_objects: usize,
    kinds: Mutex<HashMap<KindKey, KindState>>,
    logged: Mutex<HashSet<String>>,
    limiter: GetLimiter,
    /// uids whose object was read again because the cache held another object of that name.
    checked_uids: Mutex<lru::LruCache<String, ()>>,
    /// Stores were given objects by [`Enricher::seed`]: lookups run without a client.
    seeded: AtomicBool,
    counters: Arc<EnrichCounters>,
}

impl std::fmt::Debug for Enricher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enricher")
            .field("cluster", &self.cluster)
            .field("wait", &self.wait)
            .field("max_objects", &self.max_objects)
            .field("objects", &self.objects())
            .finish_non_exhaustive()
    }
}

impl Enricher {
    /// An enricher of `settings` reading the cluster through `client` (`None`: only the
    /// cluster's name is attached). Watches start as kinds occur.
    ///
    /// # Errors
    /// [`EnrichError`] when a glob does not compile.
    pub fn new(settings: &EnrichSettings, client: Option<kube::Client>) -> Result<Self, EnrichError> {
        let set = |key, list: &Option<Vec<String>>| list.as_deref().map(|l| glob_set(key, l)).transpose();
        Ok(Self {
            client,
            cluster: settings.cluster.clone(),
            labels: settings.labels.is_some(),
            annotations: settings.annotations.is_some(),
            owner: settings.owner == Some(true),
            node_labels: set("node_labels", &settings.node_labels)?,
            selection: Selection {
                labels: set("labels", &settings.labels)?,
                annotations: set("annotations", &settings.annotations)?,
            },
            wait: settings.wait.unwrap_or(DEFAULT_WAIT),
            max_objects: settings.max_objects.unwrap_or(DEFAULT_MAX_OBJECTS),
            kinds: Mutex::new(HashMap::new()),
            logged: Mutex::new(HashSet::new()),
            limiter: GetLimiter::new(),
            checked_uids: Mutex::new(lru::LruCache::new(std::num::NonZeroUsize::new(4096).expect("not 0"))),
            seeded: AtomicBool::new(false),
            counters: Arc::new(EnrichCounters::default()),
        })
    }

    /// Puts the object `meta` (of kind `(apiVersion, kind)`, namespaced or cluster-scoped;
    /// `node_name`: a Pod's `spec.nodeName`) into its kind's store as its watch would (only
    /// what the settings select is kept), creating the store, taken as listed, on first use.
    /// Lookups then run without a client: a kind never seeded is unresolved (`error`), an
    /// object not in its store `not_found`.
    ///
    /// For the benches, which have no API server: the metadata cache's CPU and memory costs
    /// are measured on seeded stores. Not part of the supported interface.
    #[doc(hidden)]
    pub fn seed(
        &self,
        (api_version, kind): (&str, &str),
        namespaced: bool,
        meta: &kube::core::ObjectMeta,
        node_name: Option<String>,
    ) {
        let key = (api_version.to_owned(), kind.to_owned());
        let store = {
            let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
            match kinds.get(&key) {
                Some(KindState::Ready(store)) => store.clone(),
                _ => {
                    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
                    let resource = kube::api::ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
                    let store = Arc::new(KindStore::new(resource, namespaced, self.max_objects));
                    store.mark_synced();
                    kinds.insert(key, KindState::Ready(store.clone()));
                    store
                }
            }
        };
        let group = api_version.split_once('/').map_or("", |(group, _)| group);
        let info = self.selection_of(kind, group).info(meta, node_name);
        let (namespace, name) = (meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""));
        store.put(namespace, name, Entry::Present(Arc::new(info)));
        self.seeded.store(true, Ordering::Relaxed);
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<EnrichCounters> {
        self.counters.clone()
    }

    /// Objects held by every kind's store (the bench's memory figure).
    pub fn objects(&self) -> usize {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        kinds.values().map(|k| if let KindState::Ready(s) = k { s.len() } else { 0 }).sum()
    }

    /// The enrichment of `event`, found within the configured wait: `None` when nothing was
    /// found (nothing is attached then).
    pub async fn enrich(&self, event: &Event) -> Option<Arc<Enrichment>> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut enrichment = Enrichment { cluster: self.cluster.clone(), ..Enrichment::default() };
        let reads = self.client.is_some() || self.seeded.load(Ordering::Relaxed);
        if reads && !event.involved_object.name.is_empty() {
            self.about_object(event, deadline, &mut enrichment).await;
        }
        if enrichment.is_empty() {
            return None;
        }
        self.counters.enriched.fetch_add(1, Ordering::Relaxed);
        Some(Arc::new(enrichment))
    }

    async fn about_object(&self, event: &Event, deadline: tokio::time::Instant, out: &mut Enrichment) {
        let o = &event.involved_object;
        let namespace = if o.namespace.is_empty() { event.metadata.namespace.as_str() } else { o.namespace.as_str() };
        let Some(object) = self.lookup((&o.api_version, &o.kind), namespace, (&o.name, &o.uid), deadline).await else {
            return;
        };
        if self.labels {
            out.labels = Some(object.labels.clone());
        }
        if self.annotations {
            out.annotations = Some(object.annotations.clone());
        }
        if self.owner
            && let Some(first) = &object.controller
        {
            out.owner = Some(self.top_owner(first.clone(), namespace, deadline).await);
        }
        if let Some(globs) = &self.node_labels
            && o.kind == "Pod"
        {
            let kubelet = (event.source.component == "kubelet").then(|| event.source.host.to_string());
            if let Some(name) = object.node_name.clone().or(kubelet).filter(|n| !n.is_empty()) {
                let labels = match self.lookup(("v1", "Node"), "", (&name, ""), deadline).await {
                    Some(node) => node
                        .labels
                        .iter()
                        .filter(|(k, _)| globs.is_match(k.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    None => BTreeMap::new(),
                };
                out.node = Some(Node { name, labels });
            }
        }
    }

    /// The top owner above `first` (the involved object's controller reference).
    async fn top_owner(&self, first: OwnerRef, namespace: &str, deadline: tokio::time::Instant) -> Owner {
        let mut top = first;
        for _ in 0..MAX_OWNER_DEPTH {
            let Some(owner) =
                self.lookup((&top.api_version, &top.kind), namespace, (&top.name, &top.uid), deadline).await
            else {
                break;
            };
            match &owner.controller {
                Some(next) => top = next.clone(),
                None => break,
            }
        }
        Owner { kind: top.kind, name: top.name, uid: top.uid, api_version: top.api_version }
    }

    /// The object `namespace`/`name` of kind `(apiVersion, kind)` (with `uid` when not empty),
    /// or `None` (counted, logged once per kind).
    async fn lookup(
        &self,
        (api_version, kind): (&str, &str),
        namespace: &str,
        (name, uid): (&str, &str),
        deadline: tokio::time::Instant,
    ) -> Option<Arc<ObjectInfo>> {
        let found = tokio::time::timeout_at(deadline, self.find((api_version, kind), namespace, (name, uid)))
            .await
            .unwrap_or(Err(Unresolved::Timeout));
        match found {
            Ok(object) => Some(object),
            Err(reason) => {
                self.unresolved(reason, kind);
                None
            }
        }
    }

    fn unresolved(&self, reason: Unresolved, kind: &str) {
        *self
            .counters
            .unresolved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((reason.as_str(), kind.to_owned()))
            .or_default() += 1;
        if self.logged.lock().unwrap_or_else(|p| p.into_inner()).insert(kind.to_owned()) {
            tracing::warn!(
                kind,
                reason = reason.as_str(),
                "enrichment: an object of kind {kind} could not be resolved ({}); its events go on without it (logged once per kind)",
                reason.as_str()
            );
        }
    }

    /// The object from the store, else (listed, not there; or another object of that name
    /// than `uid`, not yet replaced by the watch) from a GET.
    async fn find(
        &self,
        kind: (&str, &str),
        namespace: &str,
        (name, uid): (&str, &str),
    ) -> Result<Arc<ObjectInfo>, Unresolved> {
        let store = self.store(kind).await?;
        let current = |o: &ObjectInfo| uid.is_empty() || o.uid == uid;
        if let Some(entry) = store.get(namespace, name) {
            match entry {
                Entry::Present(o) if current(&o) => return Ok(o),
                // Once per uid: events about an object replaced since do not GET each time.
                Entry::Present(o) if self.checked(uid) => return Ok(o),
                Entry::Present(_) => return self.get(&store, namespace, name).await,
                Entry::Absent(at) if at.elapsed() < store::ABSENT_FOR => return Err(Unresolved::NotFound),
                Entry::Absent(_) => {}
            }
        }
        // Wait for the first list: a steady stream is answered from it, without a GET.
        let mut phase = store.phase();
        let now = *phase.wait_for(|p| *p != Phase::Listing).await.map_err(|_| Unresolved::Error)?;
        if now == Phase::Forbidden {
            return Err(Unresolved::Forbidden);
        }
        if let Some(Entry::Present(o)) = store.get(namespace, name)
            && current(&o)
        {
            return Ok(o);
        }
        self.get(&store, namespace, name).await
    }

    /// What is kept of objects of `kind` in `group`: for Nodes, the labels `node_labels`
    /// selects; for every other kind, the labels and annotations `labels` / `annotations` do.
    fn selection_of(&self, kind: &str, group: &str) -> Selection {
        if kind == "Node" && group.is_empty() {
            Selection { labels: self.node_labels.clone(), annotations: None }
        } else {
            self.selection.clone()
        }
    }

    /// Whether a GET was already made for an object of `uid` not matching its cache entry (then
    /// remembered).
    fn checked(&self, uid: &str) -> bool {
        let mut checked = self.checked_uids.lock().unwrap_or_else(|p| p.into_inner());
        checked.put(uid.to_owned(), ()).is_some()
    }

    /// One GET of `namespace`/`name`, rate limited and counted.
    async fn get(&self, store: &KindStore, namespace: &str, name: &str) -> Result<Arc<ObjectInfo>, Unresolved> {
        let client = self.client.clone().ok_or(Unresolved::Error)?;
        tokio::time::sleep(self.limiter.take()).await;
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        let api: kube::Api<DynamicObject> = if store.namespaced {
            kube::Api::namespaced_with(client, namespace, &store.resource)
        } else {
            kube::Api::all_with(client, &store.resource)
        };
        let full = self.node_labels.is_some() && store.resource.kind == "Pod" && store.resource.group.is_empty();
        let got = if full {
            api.get(name).await.map(|o| {
                let node = o.data.pointer("/spec/nodeName").and_then(|v| v.as_str()).map(str::to_owned);
                self.selection.info(&o.metadata, node)
            })
        } else {
            let selection = self.selection_of(&store.resource.kind, &store.resource.group);
            api.get_metadata(name).await.map(|o| selection.info(&o.metadata, None))
        };
        match got {
            Ok(info) => {
                let info = Arc::new(info);
                store.put(namespace, name, Entry::Present(info.clone()));
                Ok(info)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                store.put(namespace, name, Entry::Absent(Instant::now()));
                Err(Unresolved::NotFound)
            }
            Err(kube::Error::Api(s)) if s.code == 403 => Err(Unresolved::Forbidden),
            Err(_) => Err(Unresolved::Error),
        }
    }

    /// The store of `(apiVersion, kind)`, resolving the kind and starting its watch the
    /// first time.
    async fn store(&self, (api_version, kind): (&str, &str)) -> Result<Arc<KindStore>, Unresolved> {
        if api_version.is_empty() || kind.is_empty() {
            return Err(Unresolved::UnknownKind);
        }
        let key = (api_version.to_owned(), kind.to_owned());
        let mut resolving = {
            let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
            match kinds.get(&key) {
                Some(KindState::Ready(store)) => return Ok(store.clone()),
                Some(KindState::Failed(reason)) => return Err(*reason),
                Some(KindState::Resolving(rx)) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    kinds.insert(key.clone(), KindState::Resolving(rx.clone()));
                    self.start(key.clone(), tx);
                    rx
                }
            }
        };
        let resolved = resolving.wait_for(Option::is_some).await.map_err(|_| Unresolved::Error)?.clone();
        let resolved = resolved.expect("resolved");
        // Settle the kind: ready, or failed for good; a transient failure is tried again.
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        match &resolved {
            Ok(store) => _ = kinds.insert(key, KindState::Ready(store.clone())),
            Err(Unresolved::Error) => _ = kinds.remove(&key),
            Err(reason) => _ = kinds.insert(key, KindState::Failed(*reason)),
        }
        resolved
    }

    /// Resolves `key` by discovery in a task of its own (it outlives an event's wait), then
    /// starts its watch.
    fn start(&self, key: KindKey, tx: tokio::sync::watch::Sender<Option<Result<Arc<KindStore>, Unresolved>>>) {
        let Some(client) = self.client.clone() else {
            tx.send_replace(Some(Err(Unresolved::Error)));
            return;
        };
        let (group, version) = key.0.split_once('/').unwrap_or(("", key.0.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &key.1);
        let selection = self.selection_of(&key.1, group);
        let full = self.node_labels.is_some() && group.is_empty() && key.1 == "Pod";
        let max_objects = self.max_objects;
        // The state map is settled by the first caller to see the outcome (`store`).
        tokio::spawn(async move {
            let outcome = match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok((resource, caps)) => {
                    let store: Arc<KindStore> =
                        Arc::new(KindStore::new(resource, caps.scope == Scope::Namespaced, max_objects));
                    tokio::spawn(store.clone().watch(client, selection, full));
                    Ok(store)
                }
                Err(kube::Error::Api(s)) if s.code == 403 => Err(Unresolved::Forbidden),
                Err(kube::Error::Api(s)) if s.code == 404 => Err(Unresolved::UnknownKind),
                Err(kube::Error::Discovery(_)) => Err(Unresolved::UnknownKind),
                Err(_) => Err(Unresolved::Error),
            };
            tx.send_replace(Some(outcome));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn meta(namespace: &str, name: &str, labels: &[(&str, &str)], owner: Option<(&str, &str)>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            owner_references: owner.map(|(kind, name)| {
                vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: format!("uid-{name}"),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[tokio::test]
    async fn a_seeded_cache_answers_without_a_client_keeping_only_what_is_selected() {
        let settings = EnrichSettings {
            labels: Some(vec!["team".into()]),
            owner: Some(true),
            node_labels: Some(vec!["zone".into()]),
            ..EnrichSettings::default()
        };
        let enricher = Enricher::new(&settings, None).unwrap();
        let pod = meta(
            "shop",
            "web-5d8f-x2k9p",
            &[("team", "payments"), ("pod-template-hash", "5d8f")],
            Some(("ReplicaSet", "web-5d8f")),
        );
        enricher.seed(("v1", "Pod"), true, &pod, Some("node-a".into()));
        enricher.seed(
            ("apps/v1", "ReplicaSet"),
            true,
            &meta("shop", "web-5d8f", &[], Some(("Deployment", "web"))),
            None,
        );
        enricher.seed(("apps/v1", "Deployment"), true, &meta("shop", "web", &[], None), None);
        let mut node = meta("", "node-a", &[("zone", "a"), ("os", "linux")], None);
        node.namespace = None;
        enricher.seed(("v1", "Node"), false, &node, None);
        assert_eq!(enricher.objects(), 4);

        let mut event = Event::default();
        event.involved_object.api_version = "v1".into();
        event.involved_object.kind = "Pod".into();
        event.involved_object.namespace = "shop".into();
        event.involved_object.name = "web-5d8f-x2k9p".into();
        event.involved_object.uid = "uid-web-5d8f-x2k9p".into();
        let found = enricher.enrich(&event).await.expect("enriched");
        assert_eq!(found.labels, Some(BTreeMap::from([("team".to_string(), "payments".to_string())])));
        assert_eq!(found.owner.as_ref().map(|o| (o.kind.as_str(), o.name.as_str())), Some(("Deployment", "web")));
        let node = found.node.as_ref().expect("the node");
        assert_eq!((node.name.as_str(), node.labels.len()), ("node-a", 1));

        event.involved_object.name = "gone".into();
        event.involved_object.uid = "uid-gone".into();
        assert_eq!(enricher.enrich(&event).await, None, "a miss: no client to GET with");
        assert_eq!(enricher.counters().unresolved().values().sum::<u64>(), 1);
    }
}
