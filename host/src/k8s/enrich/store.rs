//! The metadata of one kind's objects, as a reflector keeps it (kube's
//! `kube::runtime::reflector`), fed by a watch of every namespace: a metadata-only
//! `kube::runtime::watcher` (`Api<PartialObjectMeta<_>>`: `PartialObjectMetadata`, no spec, no status), or for Pods
//! when node labels are wanted a full-object `watcher` of which only `spec.nodeName` is kept.
//! The watch lists, then watches, resumes from its last resourceVersion and relists on
//! `410 Gone`, with kube's default backoff, as the events watch does.
//!
//! Unlike kube's reflector store it is bounded: at most `max_objects` entries, the least
//! recently used (read or written) out first. An object pushed out is read again with one GET
//! when an event asks for it. Entries keep only what enrichment reads: the uid, the labels and
//! annotations whose keys the configured globs select, the controller owner reference and a
//! Pod's node name.

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use globset::GlobSet;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// How long a GET's "not found" is remembered, so that events about a deleted object cost
/// one GET per this period, not one per event.
pub const ABSENT_FOR: Duration = Duration::from_secs(60);

/// A controller owner reference (`metadata.ownerReferences[]` with `controller: true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// `apiVersion` (`apps/v1`).
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
}

/// What is kept of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// The labels whose keys match the label globs.
    pub labels: BTreeMap<String, String>,
    /// The annotations whose keys match the annotation globs.
    pub annotations: BTreeMap<String, String>,
    /// The controller owner reference, if any.
    pub controller: Option<OwnerRef>,
    /// A Pod's `spec.nodeName` (only from a full-object Pod watch or GET).
    pub node_name: Option<String>,
}

/// Which keys of an object are kept.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Label keys kept (`None`: none).
    pub labels: Option<GlobSet>,
    /// Annotation keys kept (`None`: none).
    pub annotations: Option<GlobSet>,
}

impl Selection {
    /// The kept part of `meta` (and `node_name`).
    pub fn info(&self, meta: &ObjectMeta, node_name: Option<String>) -> ObjectInfo {
        let pick = |set: &Option<GlobSet>, map: &Option<BTreeMap<String, String>>| match (set, map) {
            (Some(set), Some(map)) => {
                map.iter().filter(|(k, _)| set.is_match(k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            _ => BTreeMap::new(),
        };
        let controller =
            meta.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| OwnerRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
            });
        ObjectInfo {
            uid: meta.uid.clone().unwrap_or_default(),
            labels: pick(&self.labels, &meta.labels),
            annotations: pick(&self.annotations, &meta.annotations),
            controller,
            node_name,
        }
    }
}

/// Where a kind's watch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Listing for the first time: the store is not complete yet.
    Listing,
    /// Listed once: the store holds every object (up to the cap), kept current by the watch.
    Synced,
    /// The list was refused (`403`: RBAC); retried with backoff.
    Forbidden,
}

/// One entry: the object, or a GET's "not found" and when.
#[derive(Debug, Clone)]
pub enum Entry {
    /// The object.
    Present(Arc<ObjectInfo>),
    /// A GET found nothing at this instant.
    Absent(Instant),
}

/// A bounded store of one kind's objects by `(namespace, name)` (namespace empty for
/// cluster-scoped kinds).
#[derive(Debug)]
pub struct KindStore {
    /// The kind's resource (from discovery).
    pub resource: ApiResource,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
    entries: Mutex<lru::LruCache<(String, String), Entry>>,
    phase: watch::Sender<Phase>,
}

impl KindStore {
    /// An empty store of `resource`'s objects, holding `max_objects` at most (at least 1).
    pub fn new(resource: ApiResource, namespaced: bool, max_objects: usize) -> Self {
        let cap = NonZeroUsize::new(max_objects.max(1)).expect("at least 1");
        Self {
            resource,
            namespaced,
            entries: Mutex::new(lru::LruCache::new(cap)),
            phase: watch::channel(Phase::Listing).0,
        }
    }

    /// The entry of `namespace`/`name`, marked as used.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Entry> {
        let key = (if self.namespaced { namespace } else { "" }.to_owned(), name.to_owned());
        self.lock().get(&key).cloned()
    }

    /// Records `entry` for `namespace`/`name`.
    pub fn put(&self, namespace: &str, name: &str, entry: Entry) {
        let key = (if self.namespaced { namespace } else { "" }.to_owned(), name.to_owned());
        self.lock().put(key, entry);
    }

    /// Objects (and remembered absences) held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The watch's phase now, and a receiver of its changes.
    pub fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Marks the store listed: what it holds is taken as every object of its kind (a seeded
    /// store, [`super::Enricher::seed`]).
    pub(super) fn mark_synced(&self) {
        self.phase.send_replace(Phase::Synced);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, lru::LruCache<(String, String), Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key_of(meta: &ObjectMeta) -> (String, String) {
        (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
    }

    /// Keeps this store current from a watch of every namespace through `client` until the
    /// store's last user is gone: metadata only, or full objects (reading `spec.nodeName`)
    /// with `full`.
    pub async fn watch(self: Arc<Self>, client: kube::Client, selection: Selection, full: bool) {
        let resource = self.resource.clone();
        let config = watcher::Config::default().any_semantic();
        let weak = Arc::downgrade(&self);
        drop(self);
        if full {
            let api: kube::Api<DynamicObject> = kube::Api::all_with(client, &resource);
            let stream = watcher(api, config).default_backoff();
            run(weak, stream, move |o: DynamicObject| {
                let node = o.data.pointer("/spec/nodeName").and_then(|v| v.as_str()).map(str::to_owned);
                (Self::key_of(&o.metadata), selection.info(&o.metadata, node))
            })
            .await
        } else {
            let api: kube::Api<PartialObjectMeta<DynamicObject>> = kube::Api::all_with(client, &resource);
            let stream = watcher(api, config).default_backoff();
            run(weak, stream, move |o: PartialObjectMeta<DynamicObject>| {
                (Self::key_of(&o.metadata), selection.info(&o.metadata, None))
            })
            .await
        }
    }
}

/// Applies `stream`'s events to the store behind `store` (while it lives): `Init` … `InitDone`
/// replaces the listed set (objects not listed again are removed), `Apply` / `Delete` change one.
async fn run<K, S, F>(store: std::sync::Weak<KindStore>, stream: S, info: F)
where
    S: futures_util::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    F: Fn(K) -> ((String, String), ObjectInfo),
{
    let mut stream = std::pin::pin!(stream);
    let mut listed: HashSet<(String, String)> = HashSet::new();
    while let Some(item) = stream.next().await {
        let Some(store) = store.upgrade() else { return };
        match item {
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(o)) => {
                let (key, info) = info(o);
                listed.insert(key.clone());
                store.lock().put(key, Entry::Present(Arc::new(info)));
            }
            Ok(watcher::Event::InitDone) => {
                {
                    let mut entries = store.lock();
                    let stale: Vec<_> = entries
                        .iter()
                        .filter(|(k, e)| matches!(e, Entry::Present(_)) && !listed.contains(*k))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in stale {
                        entries.pop(&k);
                    }
                }
                listed = HashSet::new();
                store.phase.send_replace(Phase::Synced);
            }
            Ok(watcher::Event::Apply(o)) => {
                let (key, info) = info(o);
                store.lock().put(key, Entry::Present(Arc::new(info)));
            }
            Ok(watcher::Event::Delete(o)) => {
                let (key, _) = info(o);
                store.lock().pop(&key);
            }
            Err(e) => {
                let forbidden = matches!(
                    &e,
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 403
                );
                if forbidden && *store.phase.borrow() != Phase::Synced {
                    store.phase.send_replace(Phase::Forbidden);
                }
                tracing::debug!(resource = %store.resource.plural, "enrichment watch: {e}");
            }
        }
    }
}
