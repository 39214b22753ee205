//! The Kubernetes-compatible read API over a [`WatchCache`] (axum routes, all `GET`), so that
//! `kubectl get events [-w]`, an informer or `kube::runtime::watcher` pointed at eventpipe see
//! its correlated events.
//!
//! | route | answer |
//! |---|---|
//! | `/api/v1/events`, `/api/v1/namespaces/{ns}/events` | an `EventList` (`resourceVersion`, `resourceVersionMatch`, `limit` / `continue`, `fieldSelector`, `labelSelector`); with `watch=true`, a watch |
//! | `/api/v1/watch/events`, `/api/v1/watch/namespaces/{ns}/events` | a watch (the deprecated watch paths) |
//! | `/api/v1/namespaces/{ns}/events/{name}` | one `Event`, or `404 NotFound` |
//! | `/api`, `/api/v1`, `/apis`, `/version` | discovery: the core group with the one resource `events` (verbs `get`, `list`, `watch`; short name `ev`), no other group |
//!
//! **Lists** are served from the cache, sorted by namespace and name, with
//! `metadata.resourceVersion` the cache's newest. `limit=N` cuts a page and sets
//! `metadata.continue` (a token of the list's resourceVersion and the last key, as the
//! apiserver's) and `remainingItemCount`; the next pages are served from the same
//! resourceVersion (rebuilt from the window), so the pages form one consistent list, or answer
//! `410 Expired` once it has left the window. `resourceVersionMatch=Exact` lists the state at
//! `resourceVersion` the same way. A `resourceVersion` newer than the cache's waits up to 3 s for
//! it, then answers `504 Timeout` ("Timeout: Too large resource version: N, current: M", a
//! `ResourceVersionTooLarge` cause, `retryAfterSeconds: 1`), as the apiserver's Cacher
//! (`storage.NewTooLargeResourceVersionError`); client-go's reflector then lists from `""`.
//! A `resourceVersionMatch` other than `Exact` / `NotOlderThan`, or one without a
//! `resourceVersion`, is `422 Invalid` ([`crate::source::request_options::list_options`]).
//!
//! **Watches** answer `200` with newline-delimited watch events (`{"type":"ADDED","object":{…}}`):
//! `resourceVersion` unset or `"0"` first sends an `ADDED` for every selected event held now,
//! then the changes; `resourceVersion=N` sends every change after `N` (replayed from the
//! window, then live; no gap, no duplicate), or — when `N` has left the window, or is ahead of
//! the newest (a version of an earlier process: the cache's versions only grow, across
//! restarts too) — one `ERROR` event with a `410 Expired` Status ("too old resource version:
//! N (M)"), after which clients re-list. `allowWatchBookmarks=true` adds a `BOOKMARK` every bookmark interval;
//! `sendInitialEvents=true` (a watch-list) ends the initial events with a bookmark annotated
//! `k8s.io/initial-events-end: "true"`; `timeoutSeconds` ends the watch after that long. Each
//! watcher's selectors give `ADDED` / `MODIFIED` / `DELETED` transitions (see [`super`]).
//!
//! **Tables**: a list, a get or a watch whose `Accept` asks for a `Table` (as `kubectl get`
//! does: `application/json;as=Table;v=v1;g=meta.k8s.io`, or `v1beta1`) is answered with the
//! apiserver's Table of Events ([`super::table`]: the columns `kubectl get events` prints, and
//! with `-o wide`), the list's `metadata` (`resourceVersion`, `continue`, `remainingItemCount`)
//! on it, and each row's object as `includeObject` asks (`Metadata` by default, `Object`,
//! `None`). A Table watch sends each change as a Table of one row (its `metadata.resourceVersion`
//! the event's), a bookmark as a Table with no row; `ERROR` events stay `Status` objects.
//!
//! Errors are Kubernetes `Status` objects ([`ApiStatus`]): `400 BadRequest` for a bad selector or
//! parameter, `404 NotFound`, `410 Expired`, `504 Timeout`. Authentication is the server's
//! (`run` puts these routes behind the ingest bearer token and refuses a non-loopback address
//! without one). Only JSON is served: a request for protobuf gets JSON, which kubectl and
//! client-go accept.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;

use super::table::{self, IncludeObject};
use super::{Frame, Predicate, Start, TooOld, Version, WatchCache};
use crate::source::http::ApiStatus;

/// How long a list at a resourceVersion newer than the cache's waits for it (the apiserver's
/// `blockTimeout`); a watch there is `410` at once (see [`WatchCache::cursor`]).
const FUTURE_RV_WAIT: Duration = Duration::from_secs(3);

/// The read API's routes over `cache` (no fallback: merged into the run's server, whose
/// fallback answers `404` as a `Status`).
pub fn router(cache: Arc<WatchCache>) -> Router {
    Router::new()
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .route("/api/v1", get(api_resources))
        .route("/version", get(version))
        .route("/api/v1/events", get(all_events))
        .route("/api/v1/namespaces/{ns}/events", get(namespaced_events))
        .route("/api/v1/namespaces/{ns}/events/{name}", get(one_event))
        .route("/api/v1/watch/events", get(watch_all))
        .route("/api/v1/watch/namespaces/{ns}/events", get(watch_namespaced))
        .with_state(cache)
}

fn json(code: StatusCode, body: Vec<u8>) -> Response {
    (code, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

async fn api_versions() -> Response {
    let body = serde_json::json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    });
    json(StatusCode::OK, body.to_string().into_bytes())
}

async fn api_groups() -> Response {
    json(StatusCode::OK, br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#.to_vec())
}

async fn api_resources() -> Response {
    let body = serde_json::json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": [{
            "name": "events",
            "singularName": "event",
            "namespaced": true,
            "kind": "Event",
            "verbs": ["get", "list", "watch"],
            "shortNames": ["ev"],
        }],
    });
    json(StatusCode::OK, body.to_string().into_bytes())
}

async fn version() -> Response {
    let body = serde_json::json!({
        "major": "1",
        "minor": "34",
        "gitVersion": concat!("v1.34.0-eventpipe.", env!("CARGO_PKG_VERSION")),
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    });
    json(StatusCode::OK, body.to_string().into_bytes())
}

/// The query parameters, percent-decoded; the last of a repeated name wins.
fn parse_query(raw: Option<&str>) -> HashMap<String, String> {
    crate::source::request_options::query_pairs(raw).into_iter().collect()
}

fn bad_request(message: impl Into<String>) -> Response {
    ApiStatus::failure(StatusCode::BAD_REQUEST, "BadRequest", message).into_response()
}

fn expired(message: impl Into<String>) -> Response {
    ApiStatus::failure(StatusCode::GONE, "Expired", message).into_response()
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query.get(name).is_some_and(|v| v == "true" || v == "1")
}

/// The predicate of the path's namespace and the selectors; `Err`: the `400` message.
fn predicate(namespace: Option<String>, query: &HashMap<String, String>) -> Result<Predicate, String> {
    let fields = super::FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))
        .map_err(|e| format!("invalid field selector: {e}"))?;
    let labels = super::LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| format!("invalid label selector: {e}"))?;
    Ok(Predicate { namespace, fields, labels })
}

/// `resourceVersion`: `None` for unset, `""` or `"0"`; `Err`: the `400` message.
fn resource_version(query: &HashMap<String, String>) -> Result<Option<u64>, String> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(rv) => rv.parse().map(Some).map_err(|_| format!("invalid resource version: {rv:?}")),
    }
}

async fn all_events(State(cache): State<Arc<WatchCache>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    list_or_watch(cache, None, &headers, parse_query(q.as_deref()), false).await
}

async fn namespaced_events(
    State(cache): State<Arc<WatchCache>>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    list_or_watch(cache, Some(ns), &headers, parse_query(q.as_deref()), false).await
}

async fn watch_all(State(cache): State<Arc<WatchCache>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    list_or_watch(cache, None, &headers, parse_query(q.as_deref()), true).await
}

async fn watch_namespaced(
    State(cache): State<Arc<WatchCache>>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    list_or_watch(cache, Some(ns), &headers, parse_query(q.as_deref()), true).await
}

async fn one_event(
    State(cache): State<Arc<WatchCache>>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Response {
    let shape = match Shape::of(&headers, &parse_query(q.as_deref())) {
        Ok(shape) => shape,
        Err(message) => return bad_request(message),
    };
    let Some(version) = cache.get(&ns, &name) else {
        return ApiStatus::failure(StatusCode::NOT_FOUND, "NotFound", format!("events \"{name}\" not found"))
            .into_response();
    };
    match shape {
        Shape::Object => json(StatusCode::OK, version.json().to_vec()),
        Shape::Table { api_version, include } => {
            let mut metadata = serde_json::Map::new();
            metadata.insert("resourceVersion".into(), version.rv.to_string().into());
            let row = table::row(&version.event, &version.json(), include, api_version, cache.now());
            table_response(api_version, table::table(api_version, &metadata, vec![row]))
        }
    }
}

/// What an answer holds: the objects themselves, or a Table of them.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Object,
    Table { api_version: &'static str, include: IncludeObject },
}

impl Shape {
    /// From the `Accept` header and `includeObject`; `Err`: the `400` message.
    fn of(headers: &HeaderMap, query: &HashMap<String, String>) -> Result<Self, String> {
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        match table::table_version(accept) {
            None => Ok(Shape::Object),
            Some(api_version) => {
                let include = IncludeObject::parse(query.get("includeObject").map(String::as_str))?;
                Ok(Shape::Table { api_version, include })
            }
        }
    }
}

fn table_response(api_version: &str, body: Vec<u8>) -> Response {
    let content_type = HeaderValue::from_str(&table::content_type(api_version)).expect("a valid header value");
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn list_or_watch(
    cache: Arc<WatchCache>,
    namespace: Option<String>,
    headers: &HeaderMap,
    query: HashMap<String, String>,
    watch: bool,
) -> Response {
    let watching = watch || flag(&query, "watch");
    let pairs: Vec<(String, String)> = query.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Err(status) = crate::source::request_options::list_options(&pairs, watching) {
        return status.into_response();
    }
    let (predicate, rv, shape) =
        match (predicate(namespace, &query), resource_version(&query), Shape::of(headers, &query)) {
            (Ok(predicate), Ok(rv), Ok(shape)) => (predicate, rv, shape),
            (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => return bad_request(message),
        };
    if watching {
        serve_watch(&cache, predicate, rv, &query, shape)
    } else {
        serve_list(&cache, predicate, rv, &query, shape).await
    }
}

/// The `continue` token: the list's resourceVersion and the last key sent, as the apiserver's
/// (`{"v":"meta.k8s.io/v1","rv":N,"start":"ns/name"}`, base64url without padding).
#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    v: String,
    rv: u64,
    start: String,
}

fn encode_continue(rv: u64, last: &Version) -> String {
    let token = Continue {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: format!("{}/{}", last.event.metadata.namespace, last.event.metadata.name),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("serialisable"))
}

fn decode_continue(token: &str) -> Option<(u64, (String, String))> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
    let token: Continue = serde_json::from_slice(&bytes).ok()?;
    let (ns, name) = token.start.split_once('/')?;
    (token.v == "meta.k8s.io/v1").then(|| (token.rv, (ns.to_string(), name.to_string())))
}

async fn serve_list(
    cache: &WatchCache,
    predicate: Predicate,
    rv: Option<u64>,
    query: &HashMap<String, String>,
    shape: Shape,
) -> Response {
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => None,
        Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return bad_request("invalid limit"),
    };
    let exact = query.get("resourceVersionMatch").map(String::as_str) == Some("Exact");
    let (at, after) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => match decode_continue(token) {
            Some((rv, key)) => (Some(rv), Some(key)),
            None => return bad_request("continue key is not valid"),
        },
        None => {
            if let Some(rv) = rv
                && rv > cache.resource_version()
                && !cache.wait_for(rv, FUTURE_RV_WAIT).await
            {
                let mut status = ApiStatus::failure(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    // storage.NewTooLargeResourceVersionError: errors.NewTimeoutError's message.
                    format!("Timeout: Too large resource version: {rv}, current: {}", cache.resource_version()),
                );
                status.details = Some(crate::source::http::StatusDetails {
                    causes: vec![crate::source::http::StatusCause {
                        reason: "ResourceVersionTooLarge".into(),
                        message: "Too large resource version".into(),
                        field: String::new(),
                    }],
                    retry_after_seconds: Some(1),
                    ..Default::default()
                });
                return status.into_response();
            }
            (if exact { rv } else { None }, None)
        }
    };
    let (list_rv, mut items) = match cache.list(&predicate, at) {
        Ok(listed) => listed,
        Err(TooOld { asked, oldest }) if after.is_some() => {
            return expired(format!(
                "The provided continue parameter is too old to display a consistent list result \
                 (resourceVersion {asked}, oldest retained {oldest}). You can start a new list without the continue parameter."
            ));
        }
        Err(TooOld { asked, oldest }) => {
            return expired(format!("too old resource version: {asked} ({oldest})"));
        }
    };
    if let Some(after) = &after {
        let start = items.partition_point(|v| v.key() <= *after);
        items.drain(..start);
    }
    let (continue_token, remaining) = match limit {
        Some(n) if items.len() > n => {
            let remaining = items.len() - n;
            items.truncate(n);
            (Some(encode_continue(list_rv, items.last().expect("n ≥ 1"))), Some(remaining))
        }
        _ => (None, None),
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert("resourceVersion".into(), list_rv.to_string().into());
    if let (Some(token), Some(remaining)) = (continue_token, remaining) {
        metadata.insert("continue".into(), token.into());
        metadata.insert("remainingItemCount".into(), remaining.into());
    }
    if let Shape::Table { api_version, include } = shape {
        let now = cache.now();
        let rows = items.iter().map(|v| table::row(&v.event, &v.json(), include, api_version, now)).collect();
        return table_response(api_version, table::table(api_version, &metadata, rows));
    }
    let mut body = Vec::with_capacity(64 + items.len() * 1024);
    body.extend_from_slice(br#"{"kind":"EventList","apiVersion":"v1","metadata":"#);
    serde_json::to_writer(&mut body, &metadata).expect("serialisable");
    body.extend_from_slice(br#","items":["#);
    for (i, version) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&version.json());
    }
    body.extend_from_slice(b"]}");
    json(StatusCode::OK, body)
}

/// One watch event as a line of the watch stream; with a Table `shape`, its object is a Table of
/// one row (no row for a bookmark), at `now` (the cache's clock).
fn encode_frame(frame: &Frame, shape: Shape, now: impl FnOnce() -> chrono::DateTime<chrono::Utc>) -> Bytes {
    let mut line = Vec::with_capacity(1024);
    match (frame, shape) {
        (Frame::Event(served), Shape::Table { api_version, include }) => {
            let version = &served.object;
            let mut metadata = serde_json::Map::new();
            metadata.insert("resourceVersion".into(), version.rv.to_string().into());
            let row = table::row(&version.event, &version.json(), include, api_version, now());
            line.extend_from_slice(br#"{"type":""#);
            line.extend_from_slice(served.type_.as_str().as_bytes());
            line.extend_from_slice(br#"","object":"#);
            line.extend_from_slice(&table::table(api_version, &metadata, vec![row]));
            line.push(b'}');
        }
        (Frame::Bookmark { rv, .. }, Shape::Table { api_version, .. }) => {
            let mut metadata = serde_json::Map::new();
            metadata.insert("resourceVersion".into(), rv.to_string().into());
            line.extend_from_slice(br#"{"type":"BOOKMARK","object":"#);
            line.extend_from_slice(&table::table(api_version, &metadata, Vec::new()));
            line.push(b'}');
        }
        (Frame::Event(served), Shape::Object) => {
            line.extend_from_slice(br#"{"type":""#);
            line.extend_from_slice(served.type_.as_str().as_bytes());
            line.extend_from_slice(br#"","object":"#);
            line.extend_from_slice(&served.object.json());
            line.push(b'}');
        }
        (Frame::Bookmark { rv, initial_events_end }, Shape::Object) => {
            let mut event =
                crate::event::Event { kind: "Event".into(), api_version: "v1".into(), ..Default::default() };
            event.metadata.resource_version = compact_str::ToCompactString::to_compact_string(rv);
            if *initial_events_end {
                event.metadata.annotations.insert("k8s.io/initial-events-end".into(), "true".into());
            }
            line.extend_from_slice(br#"{"type":"BOOKMARK","object":"#);
            serde_json::to_writer(&mut line, &event).expect("serialisable");
            line.push(b'}');
        }
        (Frame::Expired(TooOld { asked, oldest }), _) => {
            let status = ApiStatus::failure(
                StatusCode::GONE,
                "Expired",
                format!("too old resource version: {asked} ({oldest})"),
            );
            line.extend_from_slice(br#"{"type":"ERROR","object":"#);
            serde_json::to_writer(&mut line, &status).expect("serialisable");
            line.push(b'}');
        }
    }
    line.push(b'\n');
    Bytes::from(line)
}

fn serve_watch(
    cache: &Arc<WatchCache>,
    predicate: Predicate,
    rv: Option<u64>,
    query: &HashMap<String, String>,
    shape: Shape,
) -> Response {
    let timeout = match query.get("timeoutSeconds").map(|t| t.parse::<u64>()) {
        None => None,
        Some(Ok(0)) => None,
        Some(Ok(s)) => Some(Duration::from_secs(s)),
        Some(Err(_)) => return bad_request("invalid timeoutSeconds"),
    };
    let bookmarks = flag(query, "allowWatchBookmarks");
    let initial_events = flag(query, "sendInitialEvents");
    let start = match (rv, initial_events) {
        (_, true) | (None, false) => Start::State,
        (Some(rv), false) => Start::After(rv),
    };
    let frames = match cache.stream(start, predicate, bookmarks, initial_events && bookmarks) {
        Ok(stream) => stream.into_inner(),
        Err(too_old) => {
            // As the apiserver: a watch that cannot start is still a `200` watch, whose one
            // event is the error.
            let line = encode_frame(&Frame::Expired(too_old), shape, chrono::Utc::now);
            return watch_response(Body::from(line), shape);
        }
    };
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let cache = Arc::clone(cache);
    let stream = futures_util::stream::unfold(frames, move |mut frames| {
        let cache = Arc::clone(&cache);
        async move {
            let frame = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, frames.recv()).await.ok().flatten(),
                None => frames.recv().await,
            }?;
            Some((Ok::<_, Infallible>(encode_frame(&frame, shape, || cache.now())), frames))
        }
    });
    watch_response(Body::from_stream(stream), shape)
}

fn watch_response(body: Body, shape: Shape) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    let content_type = match shape {
        Shape::Object => HeaderValue::from_static("application/json"),
        Shape::Table { api_version, .. } => {
            HeaderValue::from_str(&table::content_type(api_version)).expect("a valid header value")
        }
    };
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let q = parse_query(Some(
            "fieldSelector=involvedObject.kind%3DPod%2Creason%3DBackOff&watch=true&labelSelector=a+in+(b)&x=%zz",
        ));
        assert_eq!(q["fieldSelector"], "involvedObject.kind=Pod,reason=BackOff");
        assert_eq!(q["labelSelector"], "a in (b)");
        assert_eq!(q["x"], "%zz");
        assert!(flag(&q, "watch") && !flag(&q, "allowWatchBookmarks"));
    }

    #[test]
    fn continue_tokens_round_trip() {
        let v = Version::new(
            7,
            {
                let mut e = crate::event::Event::default();
                e.metadata.namespace = "a".into();
                e.metadata.name = "b.1".into();
                e
            },
            chrono::Utc::now(),
        );
        let token = encode_continue(42, &v);
        assert_eq!(decode_continue(&token), Some((42, ("a".to_string(), "b.1".to_string()))));
        assert_eq!(decode_continue("nonsense"), None);
    }
}
