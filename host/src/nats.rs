//! NATS JetStream, the engine eventpipe scales out on (the only broker code, through the
//! official `async-nats` client): the `nats:` target of `--sink` (publish tier) and `--source`
//! (worker tier), the stream, the subjects, the durable pull consumers of the partitions, the
//! object store of correlator snapshots and the KV bucket of the key seed. What runs on them is
//! in [`crate::pipeline::scale`].
//!
//! # Layout
//! - **Stream** `NAME` (default `EVENTS`): subjects `<prefix>.*.*`, limits retention (kept
//!   `max_age`, default 24 h), file storage, a duplicate window for `Nats-Msg-Id` (default
//!   2 min); its metadata `eventpipe.partitions` records P, fixed per stream.
//! - **Subject** of an event: `<prefix>.<tenant>.<partition>` (prefix default `events`; a tenant
//!   name's characters other than `A-Z a-z 0-9 _ -` become `_`), partition =
//!   [`crate::partition::PartitionKey::partition`] of the event among P.
//! - **Consumers**: one durable pull consumer per partition, `<durable>-<p>` (default
//!   `eventpipe-<p>`), filtered on `<prefix>.*.<p>`, acknowledging all up to a message
//!   (`AckPolicy::All`) with `ack_wait`; on a server with priority groups (2.11+) with the
//!   pinned-client policy (group `eventpipe`), so a second worker pulling the same partition
//!   stays on standby until the pinned one stops pulling for `priority_timeout`.
//! - **KV bucket** `<stream>_correlator`: key `key-seed` holds the key seed every worker adopts.
//! - **Object store** `<stream>_correlator` (the same name; JetStream keeps it in stream
//!   `OBJ_<name>`, the KV bucket in `KV_<name>`): object `<durable>-<p>` (the consumer's name)
//!   holds partition `p`'s correlator snapshot (deflated
//!   [`crate::correlator::snapshot::PartitionSnapshot`]). An object is stored in chunks
//!   (128 KiB), so a snapshot is not bounded by the server's `max_payload` (1 MiB by default),
//!   as a KV value is: a partition whose state deflates to more than that could not store it,
//!   kept its messages unacknowledged and stopped at [`MAX_ACK_PENDING`]. See [`Snapshots`].

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::pull;
use bytes::Bytes;

/// The stream a target names when it names none.
pub const DEFAULT_STREAM: &str = "EVENTS";
/// The subject prefix a target names when it names none.
pub const DEFAULT_PREFIX: &str = "events";
/// Partitions of a new stream when the sink names none.
pub const DEFAULT_PARTITIONS: u32 = 16;
/// The consumers' name prefix when the target names none.
pub const DEFAULT_DURABLE: &str = "eventpipe";
/// The priority group of pinned-client consumers.
pub const PRIORITY_GROUP: &str = "eventpipe";
/// The stream metadata key that records P.
pub const PARTITIONS_METADATA: &str = "eventpipe.partitions";
/// The KV key holding the key seed.
pub const KEY_SEED: &str = "key-seed";
/// Messages a partition's consumer may have delivered and not yet acknowledged (acknowledged
/// at each snapshot).
pub const MAX_ACK_PENDING: i64 = 100_000;

/// How long a read of the state workers share (the key seed, a snapshot) and the making of
/// the stream, buckets and consumers are tried again on a cluster whose leaders are being
/// elected (timeouts, "no responders", a replica not caught up yet) before the error counts.
pub const STATE_RETRY_FOR: Duration = Duration::from_secs(30);

/// How long one try of a request that is tried again for [`STATE_RETRY_FOR`] (the stream, the
/// buckets, the key seed, a partition's consumer, a snapshot's lookup) waits for its answer. A
/// request to a consumer or stream whose leader died is not answered until its replicas elect
/// another, and one sent before the election is never answered: short tries reach the new
/// leader soon after its election (tries overlap, one every [`RETRY_EVERY`]), instead of after
/// the client's request timeout (5 s; a consumer looked up, then made, 10 s).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a request tried again for [`STATE_RETRY_FOR`] is sent anew while no try has
/// answered (tries overlap: see [`ATTEMPT_TIMEOUT`]).
pub const RETRY_EVERY: Duration = Duration::from_millis(250);

/// The environment variables a `nats:` target takes its credentials and TLS files from (the
/// nats CLI's names): a token, a user and password (used when no server's URL gives
/// credentials: `USER:PASSWORD@` or `TOKEN@` in a URL win), the CA bundle that signs the
/// servers' certificates, and a client certificate with its key (mutual TLS).
pub const CREDENTIAL_ENV: [&str; 6] = ["NATS_TOKEN", "NATS_USER", "NATS_PASSWORD", "NATS_CA", "NATS_CERT", "NATS_KEY"];

/// The default replicas on a server that reports `cluster_size` servers (1 alone, else up to 3:
/// a replicated stream survives one node down at R3, and more replicas only slow writes).
pub fn default_replicas(cluster_size: usize) -> usize {
    cluster_size.clamp(1, 3)
}

/// A `nats:` target: `nats:nats://[USER:PASSWORD@]HOST:PORT[,nats://HOST:PORT…][?KEY=VALUE&…]`,
/// as `--sink` and `--source` take it: one server, or several of a cluster (comma-separated;
/// the client connects to any, learns the others from it, and reconnects across them);
/// `tls://` for TLS. Credentials come from the URL (`USER:PASSWORD@` or `TOKEN@`, percent-encoded
/// where a character is not allowed there), else from [`CREDENTIAL_ENV`]. Keys (durations in seconds):
///
/// | key | default | what |
/// |---|---|---|
/// | `stream` | `EVENTS` | the JetStream stream |
/// | `prefix` | `events` | the subject prefix |
/// | `partitions` | the stream's, else 16 | P (a sink creating the stream sets it) |
/// | `durable` | `eventpipe` | consumer name prefix (`<durable>-<p>`) |
/// | `bucket` | `<stream>_correlator` | the KV bucket of the key seed and the object store of snapshots |
/// | `ack_wait` | 30 | seconds before an unacknowledged message is delivered again |
/// | `priority_timeout` | 5 | seconds a pinned worker keeps its partition without pulling: how soon a restarted or standby worker takes over a dead one's |
/// | `max_age` | 86400 | seconds the stream keeps a message |
/// | `duplicate_window` | 120 | seconds `Nats-Msg-Id` deduplicates over |
/// | `replicas` | cluster size, at most 3 | stream and bucket replicas ([`default_replicas`] of the servers the first one reports) |
/// | `pinned` | `auto` | `auto` (pinned clients where the server has priority groups), `false` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsTarget {
    /// The server URLs, comma-separated (credentials included, shown redacted).
    pub url: crate::redact::RedactedUrl,
    /// The stream.
    pub stream: String,
    /// The subject prefix.
    pub prefix: String,
    /// P, if given.
    pub partitions: Option<u32>,
    /// The consumers' name prefix.
    pub durable: String,
    /// The name of the object store of snapshots and of the KV bucket of the key seed.
    pub bucket: String,
    /// Redelivery after this long without an acknowledgement.
    pub ack_wait: Duration,
    /// How long a pinned client keeps its pin without pulling.
    pub priority_timeout: Duration,
    /// How long the stream keeps messages.
    pub max_age: Duration,
    /// The stream's deduplication window.
    pub duplicate_window: Duration,
    /// Replicas of the stream and the bucket (`None`: [`default_replicas`]).
    pub replicas: Option<usize>,
    /// Use pinned-client priority groups where the server has them.
    pub pinned: bool,
}

/// A `nats:` target that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NatsTargetError(String);

/// The credentials a server's URL gives.
#[derive(Clone, PartialEq, Eq)]
enum UrlCredentials {
    /// `nats://USER:PASSWORD@HOST`.
    UserPassword(String, String),
    /// `nats://TOKEN@HOST`.
    Token(String),
}

impl std::str::FromStr for NatsTarget {
    type Err = NatsTargetError;
    /// Parses the part after `nats:` (`nats://HOST:PORT?…`; `tls://` too).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The caller shows the value (redacted); the error says what is wrong with it.
        let fail = NatsTargetError;
        let (url, query) = s.split_once('?').unwrap_or((s, ""));
        for server in url.split(',') {
            if !(server.starts_with("nats://") || server.starts_with("tls://")) {
                return Err(fail("expected nats://HOST:PORT[,nats://HOST:PORT…][?stream=NAME&partitions=P…]".into()));
            }
            if server.parse::<async_nats::ServerAddr>().is_err() {
                return Err(fail(format!("{}: not a server URL", crate::redact::RedactedUrl::new(server))));
            }
        }
        let mut t = NatsTarget {
            url: url.into(),
            stream: DEFAULT_STREAM.into(),
            prefix: DEFAULT_PREFIX.into(),
            partitions: None,
            durable: DEFAULT_DURABLE.into(),
            bucket: String::new(),
            ack_wait: Duration::from_secs(30),
            priority_timeout: Duration::from_secs(5),
            max_age: Duration::from_secs(86_400),
            duplicate_window: Duration::from_secs(120),
            replicas: None,
            pinned: true,
        };
        let name = |v: &str, what: &str| {
            if !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                Ok(v.to_string())
            } else {
                Err(fail(format!("{what} {v:?}: only A-Z a-z 0-9 _ -")))
            }
        };
        let seconds = |v: &str, key: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0 && s.is_finite())
                .map(Duration::from_secs_f64)
                .ok_or_else(|| fail(format!("{key}={v}: expected seconds > 0")))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "stream" => t.stream = name(value, "stream")?,
                "prefix" => {
                    if value.is_empty() || value.split('.').any(|p| name(p, "prefix").is_err()) {
                        return Err(fail(format!("prefix {value:?}: tokens of A-Z a-z 0-9 _ - separated by dots")));
                    }
                    t.prefix = value.to_string();
                }
                "partitions" => {
                    t.partitions = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|p| (1..=4096).contains(p))
                            .ok_or_else(|| fail(format!("partitions={value}: expected 1 to 4096")))?,
                    )
                }
                "durable" => t.durable = name(value, "durable")?,
                "bucket" => t.bucket = name(value, "bucket")?,
                "ack_wait" => t.ack_wait = seconds(value, key)?,
                "priority_timeout" => t.priority_timeout = seconds(value, key)?,
                "max_age" => t.max_age = seconds(value, key)?,
                "duplicate_window" => t.duplicate_window = seconds(value, key)?,
                "replicas" => {
                    t.replicas = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|r| (1..=5).contains(r))
                            .ok_or_else(|| fail(format!("replicas={value}: expected 1 to 5")))?,
                    )
                }
                "pinned" => {
                    t.pinned = match value {
                        "auto" | "true" => true,
                        "false" => false,
                        _ => return Err(fail(format!("pinned={value}: expected auto or false"))),
                    }
                }
                _ => return Err(fail(format!("unknown key {key:?}"))),
            }
        }
        if t.bucket.is_empty() {
            t.bucket = format!("{}_correlator", t.stream);
        }
        Ok(t)
    }
}

/// The target with its URL's credentials redacted, and its stream (what logs show).
impl std::fmt::Display for NatsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<String> = self.servers().map(|s| crate::redact::RedactedUrl::new(s).to_string()).collect();
        write!(f, "nats:{}?stream={}", servers.join(","), self.stream)
    }
}

/// A failure talking to NATS, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{target}: {doing}: {message}")]
pub struct NatsError {
    /// The target (redacted).
    pub target: String,
    /// What was being done.
    pub doing: &'static str,
    /// The client's error.
    pub message: String,
}

impl NatsTarget {
    fn error(&self, doing: &'static str) -> impl Fn(&dyn std::fmt::Display) -> NatsError + '_ {
        move |e| NatsError { target: self.to_string(), doing, message: e.to_string() }
    }

    /// The server URLs given.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.url.expose().split(',')
    }

    /// Connects to one of the servers (the client reconnects by itself after a lost
    /// connection, without limit, to any server given or learnt from the cluster), with the
    /// credentials and TLS files of [`CREDENTIAL_ENV`]; TLS is required when a server is
    /// `tls://` or a TLS file is given.
    ///
    /// # Errors
    /// [`NatsError`] when no server can be reached, or a TLS file cannot be read.
    pub async fn connect(&self) -> Result<async_nats::Client, NatsError> {
        self.connect_with(|name| std::env::var(name).ok().filter(|v| !v.is_empty())).await
    }

    /// [`connect`](Self::connect) with the variables of [`CREDENTIAL_ENV`] read through `env`.
    async fn connect_with(&self, env: impl Fn(&str) -> Option<String>) -> Result<async_nats::Client, NatsError> {
        let (servers, credentials) = self.servers_and_credentials().map_err(|e| self.error("connecting")(&e))?;
        let mut options = async_nats::ConnectOptions::new().name("eventpipe").max_reconnects(None);
        match credentials {
            Some(UrlCredentials::UserPassword(user, password)) => options = options.user_and_password(user, password),
            Some(UrlCredentials::Token(token)) => options = options.token(token),
            None => {
                if let Some(token) = env("NATS_TOKEN") {
                    options = options.token(token);
                }
                if let (Some(user), Some(password)) = (env("NATS_USER"), env("NATS_PASSWORD")) {
                    options = options.user_and_password(user, password);
                }
            }
        }
        let mut tls = self.servers().any(|s| s.starts_with("tls://"));
        if let Some(ca) = env("NATS_CA") {
            options = options.add_root_certificates(ca.into());
            tls = true;
        }
        if let (Some(cert), Some(key)) = (env("NATS_CERT"), env("NATS_KEY")) {
            options = options.add_client_certificate(cert.into(), key.into());
            tls = true;
        }
        options.require_tls(tls).connect(servers).await.map_err(|e| self.error("connecting")(&e))
    }

    /// The server addresses without their user information, and the credentials that
    /// information gives: `USER:PASSWORD@` a user and password, `TOKEN@` a token (both
    /// percent-decoded). The client sends one set of credentials to every server, so servers
    /// that give different ones are refused. The addresses are what the client logs: without
    /// credentials, its debug logs of them show none.
    ///
    /// # Errors
    /// A server that does not parse, or servers that give different credentials.
    fn servers_and_credentials(&self) -> Result<(Vec<async_nats::ServerAddr>, Option<UrlCredentials>), String> {
        let decode = |text: &str| percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned();
        let mut credentials = None;
        let mut servers = Vec::new();
        for server in self.servers() {
            let mut url = server.parse::<async_nats::ServerAddr>().map_err(|e| e.to_string())?.into_inner();
            let given = match (url.username(), url.password()) {
                ("", None) => None,
                (user, Some(password)) => Some(UrlCredentials::UserPassword(decode(user), decode(password))),
                (token, None) => Some(UrlCredentials::Token(decode(token))),
            };
            if given.is_some() {
                if credentials.is_some() && credentials != given {
                    return Err("the servers' URLs give different credentials (one set is sent to every server)".into());
                }
                credentials = given;
                // A URL with a host always takes these.
                let _ = url.set_username("");
                let _ = url.set_password(None);
            }
            servers.push(async_nats::ServerAddr::from_url(url).map_err(|e| e.to_string())?);
        }
        Ok((servers, credentials))
    }

    /// The replicas of what this target makes: the target's, else [`default_replicas`] of the
    /// cluster the connected server reports (the client URLs it advertises; none alone).
    pub fn replicas(&self, js: &jetstream::Context) -> usize {
        self.replicas.unwrap_or_else(|| default_replicas(js.client().server_info().connect_urls.len()))
    }

    /// The subjects of every tenant's events in `partition` (a consumer's filter).
    pub fn partition_filter(&self, partition: u32) -> String {
        format!("{}.*.{partition}", self.prefix)
    }

    /// The subject of an event of `tenant` in `partition`.
    pub fn subject(&self, tenant: &str, partition: u32) -> String {
        format!("{}.{}.{partition}", self.prefix, subject_token(tenant))
    }

    /// The stream, created if missing with P = `partitions` (else the target's, else
    /// [`DEFAULT_PARTITIONS`]) and [`replicas`](Self::replicas); returns it and its P (its
    /// metadata's, for a stream that exists), once it has a leader (a cluster's). Tried again
    /// for [`STATE_RETRY_FOR`] while a cluster elects leaders.
    ///
    /// # Errors
    /// [`NatsError`] when the stream cannot be read or made, or exists with another P than the
    /// target names.
    pub async fn stream(
        &self,
        js: &jetstream::Context,
        create: bool,
    ) -> Result<(jetstream::stream::Stream, u32), NatsError> {
        let doing = if create { "making the stream" } else { "finding the stream (publish to it first)" };
        let (stream, info) = retrying(doing, || async {
            let mut stream = match js.get_stream(&self.stream).await {
                Ok(stream) => stream,
                Err(_) if create => {
                    let partitions = self.partitions.unwrap_or(DEFAULT_PARTITIONS);
                    let config = jetstream::stream::Config {
                        name: self.stream.clone(),
                        subjects: vec![format!("{}.*.*", self.prefix)],
                        retention: jetstream::stream::RetentionPolicy::Limits,
                        storage: jetstream::stream::StorageType::File,
                        max_age: self.max_age,
                        duplicate_window: self.duplicate_window,
                        num_replicas: self.replicas(js),
                        metadata: [(PARTITIONS_METADATA.to_string(), partitions.to_string())].into(),
                        ..Default::default()
                    };
                    js.get_or_create_stream(config).await.map_err(|e| e.to_string())?
                }
                Err(e) => return Err(e.to_string()),
            };
            let info = stream.info().await.map_err(|e| e.to_string())?.clone();
            // A stream just made on a cluster has no leader for a moment: publications then
            // fail with no responders while later ones may be stored, out of order.
            if info.cluster.as_ref().is_some_and(|c| c.leader.is_none()) {
                return Err("the stream has no leader yet".into());
            }
            Ok((stream, info))
        })
        .await
        .map_err(|e| self.error(doing)(&e))?;
        let recorded = info.config.metadata.get(PARTITIONS_METADATA).and_then(|p| p.parse::<u32>().ok());
        let partitions = match (recorded, self.partitions) {
            (Some(r), Some(given)) if r != given => {
                return Err(self.error("checking partitions")(&format!(
                    "the stream has {r} partitions, the target says {given} (P is fixed per stream)"
                )));
            }
            (Some(r), _) => r,
            (None, given) => given.unwrap_or(DEFAULT_PARTITIONS),
        };
        Ok((stream, partitions))
    }

    /// Gives `stream` (a bucket's) at least the replicas of the events stream, when there is
    /// one (or [`replicas`](Self::replicas), when that is more): a bucket made while a cluster was
    /// still forming, or by an older version, may have fewer, and then loses its quorum with
    /// one node. JetStream moves a stream to more replicas in place.
    ///
    /// # Errors
    /// The client's error, as text.
    async fn same_replicas(&self, js: &jetstream::Context, stream: &str) -> Result<(), String> {
        // No events stream (yet): the target's replicas.
        let stream_replicas = match js.get_stream(&self.stream).await {
            Ok(mut events) => events.info().await.map_err(|e| e.to_string())?.config.num_replicas,
            Err(_) => 0,
        };
        let wanted = stream_replicas.max(self.replicas(js));
        let mut bucket = js.get_stream(stream).await.map_err(|e| e.to_string())?;
        let mut config = bucket.info().await.map_err(|e| e.to_string())?.config.clone();
        if config.num_replicas < wanted {
            tracing::info!(stream, from = config.num_replicas, to = wanted, "giving the bucket the stream's replicas");
            config.num_replicas = wanted;
            js.update_stream(config).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The key seed's bucket, created if missing (history 1, [`replicas`](Self::replicas)), with
    /// at least the events stream's replicas (`same_replicas`), read
    /// through its stream leader ([`leader_reads`]).
    ///
    /// # Errors
    /// [`NatsError`] when it cannot be read or made (for [`STATE_RETRY_FOR`]).
    pub async fn bucket(&self, js: &jetstream::Context) -> Result<jetstream::kv::Store, NatsError> {
        retrying("making the key seed bucket", || async {
            if js.get_key_value(&self.bucket).await.is_err() {
                js.create_key_value(jetstream::kv::Config {
                    bucket: self.bucket.clone(),
                    history: 1,
                    num_replicas: self.replicas(js),
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            }
            self.same_replicas(js, &format!("KV_{}", self.bucket)).await?;
            leader_reads(js, &format!("KV_{}", self.bucket)).await?;
            js.get_key_value(&self.bucket).await.map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| self.error("making the key seed bucket")(&e))
    }

    /// The object store of snapshots (same name as the KV bucket), created if missing
    /// ([`replicas`](Self::replicas)), with at least the events stream's replicas
    /// (`same_replicas`), read through its stream leader
    /// ([`leader_reads`]).
    ///
    /// # Errors
    /// [`NatsError`] when it cannot be read or made (for [`STATE_RETRY_FOR`]).
    pub async fn snapshots(&self, js: &jetstream::Context, kv: jetstream::kv::Store) -> Result<Snapshots, NatsError> {
        let objects = retrying("making the snapshot object store", || async {
            if js.get_object_store(&self.bucket).await.is_err() {
                js.create_object_store(jetstream::object_store::Config {
                    bucket: self.bucket.clone(),
                    num_replicas: self.replicas(js),
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            }
            self.same_replicas(js, &format!("OBJ_{}", self.bucket)).await?;
            leader_reads(js, &format!("OBJ_{}", self.bucket)).await?;
            js.get_object_store(&self.bucket).await.map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| self.error("making the snapshot object store")(&e))?;
        Ok(Snapshots { objects, kv })
    }

    /// The key seed every worker of this stream hashes with: the bucket's, or `proposed` when
    /// the bucket has none yet (the first worker's own, stored only if no other was).
    ///
    /// # Errors
    /// [`NatsError`] when the bucket can be neither written nor read (for [`STATE_RETRY_FOR`]),
    /// or holds something else than 8 bytes.
    pub async fn key_seed(&self, bucket: &jetstream::kv::Store, proposed: u64) -> Result<u64, NatsError> {
        let stored = retrying("reading the key seed", || async {
            // Stored here: the seed is ours; refused (another worker's is there, or the create
            // timed out during an election): read it, from the leader, until it is there.
            if bucket.create(KEY_SEED, Bytes::copy_from_slice(&proposed.to_le_bytes())).await.is_ok() {
                return Ok(Bytes::copy_from_slice(&proposed.to_le_bytes()));
            }
            bucket.get(KEY_SEED).await.map_err(|e| e.to_string())?.ok_or_else(|| "not stored yet".to_string())
        })
        .await
        .map_err(|e| self.error("reading the key seed")(&e))?;
        <[u8; 8]>::try_from(&stored[..])
            .map(u64::from_le_bytes)
            .map_err(|_| self.error("reading the key seed")(&"not 8 bytes"))
    }

    /// The durable pull consumer of `partition`, created if missing: all messages from the
    /// stream's start, acknowledged all-up-to, with the pinned-client policy when `pinned`.
    ///
    /// # Errors
    /// [`NatsError`] when it cannot be read or made.
    pub async fn consumer(
        &self,
        stream: &jetstream::stream::Stream,
        partition: u32,
        pinned: bool,
    ) -> Result<jetstream::consumer::Consumer<pull::Config>, NatsError> {
        let name = format!("{}-{partition}", self.durable);
        let mut config = pull::Config {
            durable_name: Some(name.clone()),
            name: Some(name.clone()),
            filter_subject: self.partition_filter(partition),
            ack_policy: jetstream::consumer::AckPolicy::All,
            ack_wait: self.ack_wait,
            max_ack_pending: MAX_ACK_PENDING,
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        };
        if pinned {
            config.priority_policy = jetstream::consumer::PriorityPolicy::PinnedClient;
            config.priority_groups = vec![PRIORITY_GROUP.to_string()];
            config.priority_timeout = self.priority_timeout;
        }
        retrying("making the partition's consumer", || async {
            stream.get_or_create_consumer(&name, config.clone()).await.map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| self.error("making the partition's consumer")(&e))
    }

    /// An ephemeral pull consumer that reads partition `partition` of `stream` from stream
    /// sequence `from` (in memory, one replica, no acknowledgements, gone 30 s after its last
    /// use): for reading again what a durable consumer delivered to a client now gone. Made as
    /// in `retrying` while the cluster elects the leader that makes it, each try under a name
    /// of its own: a consumer placed on the dead node (the meta leader does not know it is gone
    /// yet) never answers, and a try under its name would wait on it again. The consumers of the
    /// tries not taken go 30 s after they were made.
    ///
    /// # Errors
    /// [`NatsError`] when it cannot be made (for [`STATE_RETRY_FOR`]).
    pub async fn reader(
        &self,
        stream: &jetstream::stream::Stream,
        partition: u32,
        from: u64,
    ) -> Result<jetstream::consumer::Consumer<pull::Config>, NatsError> {
        let config = pull::Config {
            filter_subject: self.partition_filter(partition),
            deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence { start_sequence: from },
            ack_policy: jetstream::consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            memory_storage: true,
            num_replicas: 1,
            ..Default::default()
        };
        retrying("making a reader of the partition", || {
            let name = format!("{}-{partition}-reader-{}", self.durable, uuid::Uuid::new_v4().simple());
            let config = pull::Config { name: Some(name), ..config.clone() };
            async move { stream.create_consumer(config).await.map_err(|e| e.to_string()) }
        })
        .await
        .map_err(|e| self.error("making a reader of the partition")(&e))
    }
}

/// Tries `attempt` (`doing` names it in the debug log) until one try succeeds, for up to
/// [`STATE_RETRY_FOR`]; then the last error. A new try starts every [`RETRY_EVERY`] while none
/// has answered, each waiting up to [`ATTEMPT_TIMEOUT`] for its answer (so up to 8 are in flight):
/// a request sent while a stream or consumer has no leader is never answered, so the first one
/// sent after the election answers within [`RETRY_EVERY`] of it, where tries made one after
/// another would each wait out their timeout first. Every try must therefore be safe to make
/// twice at once (reads, and makes of what may exist).
async fn retrying<T, F: std::future::Future<Output = Result<T, String>>>(
    doing: &str,
    mut attempt: impl FnMut() -> F,
) -> Result<T, String> {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + STATE_RETRY_FOR;
    let mut tries = futures_util::stream::FuturesUnordered::new();
    let mut last = no_answer();
    loop {
        if tokio::time::Instant::now() < deadline {
            tries.push(tokio::time::timeout(ATTEMPT_TIMEOUT, attempt()));
        } else if tries.is_empty() {
            return Err(last);
        }
        let next_try = tokio::time::sleep(RETRY_EVERY);
        tokio::pin!(next_try);
        loop {
            tokio::select! {
                Some(answer) = tries.next() => match answer {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(error)) => last = error,
                    Err(_) => last = no_answer(),
                },
                () = &mut next_try => break,
            }
        }
        tracing::debug!(doing, error = %last, "JetStream not ready; trying again");
    }
}

/// Turns off direct gets on `stream` (a KV bucket's or an object store's, which the client
/// makes with them on), so that its reads go to the stream leader: a direct get may be answered
/// by a replica that has not caught up, which reads as "missing" (a key seed just stored, the
/// snapshot just written) on a cluster.
///
/// # Errors
/// The client's error, as text.
async fn leader_reads(js: &jetstream::Context, stream: &str) -> Result<(), String> {
    let mut stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
    let info = stream.info().await.map_err(|e| e.to_string())?;
    if info.config.allow_direct {
        let config = jetstream::stream::Config { allow_direct: false, ..info.config.clone() };
        js.update_stream(config).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `tenant` as one subject token: characters other than `A-Z a-z 0-9 _ -` become `_` (dots,
/// spaces and wildcards cannot be in a token); empty becomes `_`.
pub fn subject_token(tenant: &str) -> String {
    if tenant.is_empty() {
        return "_".into();
    }
    tenant.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Whether a server of this version (`2.11.0`, `v2.15.1`) has consumer priority groups with
/// pinned clients (2.11 and later).
pub fn has_priority_groups(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 11)
}

/// The KV key of partition `p`'s snapshot for the consumers named `durable` (the consumer's
/// own name: each consumer group keeps its own state).
pub fn snapshot_key(durable: &str, partition: u32) -> String {
    format!("{durable}-{partition}")
}

/// Where partitions keep their correlator snapshots: a JetStream object store, so that a
/// snapshot of any size is stored (in chunks), with a read fallback to the KV bucket, where
/// earlier versions kept snapshots of up to 1 MiB (of snapshot format 1, which a restore refuses
/// with a message: the partition starts fresh and says why).
pub struct Snapshots {
    objects: jetstream::object_store::ObjectStore,
    kv: jetstream::kv::Store,
}

impl Snapshots {
    /// Stores `bytes` (already [`pack`]ed) as object `key`, replacing what it held. A reader
    /// sees the old object or the new one, never a part.
    ///
    /// # Errors
    /// The client's error, as text.
    pub async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        let mut reader = bytes;
        self.objects.put(key, &mut reader).await.map(drop).map_err(|e| e.to_string())
    }

    /// The bytes stored as `key`: the object, else (a snapshot an earlier version stored) the KV
    /// value of that key; `None` when there is neither. Read from the stream leader; the lookup
    /// and the object's first chunk are tried again as in `retrying` (a leader being elected),
    /// and a read that stalls after them starts over, for [`STATE_RETRY_FOR`].
    ///
    /// # Errors
    /// The client's error, as text.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        use jetstream::object_store::GetErrorKind;
        let deadline = tokio::time::Instant::now() + STATE_RETRY_FOR;
        loop {
            let found = retrying("reading the snapshot", || async {
                match self.objects.get(key).await {
                    Ok(object) => {
                        let mut object = Box::new(object);
                        let first = read_chunk(&mut object).await?;
                        Ok(Stored::Object(object, first))
                    }
                    Err(e) if e.kind() == GetErrorKind::NotFound => {
                        self.kv.get(key).await.map(|v| Stored::Value(v.map(|b| b.to_vec()))).map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                }
            })
            .await?;
            let (object, first) = match found {
                Stored::Value(value) => return Ok(value),
                Stored::Object(object, first) => (object, first),
            };
            match read_object(object, first).await {
                Ok(bytes) => return Ok(Some(bytes)),
                Err(error) if tokio::time::Instant::now() >= deadline => return Err(error),
                Err(error) => tracing::debug!(%error, "reading the snapshot object; trying again"),
            }
        }
    }
}

/// What [`Snapshots::get`] found for a key: an object with its first chunk read (empty: the
/// object is), or the KV value (or nothing).
enum Stored {
    Object(Box<jetstream::object_store::Object>, Vec<u8>),
    Value(Option<Vec<u8>>),
}

/// The next bytes of `object` (up to 64 KiB), empty at its end.
///
/// # Errors
/// The client's error, as text.
async fn read_chunk(object: &mut jetstream::object_store::Object) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let mut chunk = vec![0u8; 64 * 1024];
    let read = object.read(&mut chunk).await.map_err(|e| e.to_string())?;
    chunk.truncate(read);
    Ok(chunk)
}

/// `object`'s bytes after `first` (its first chunk), read to the end; an error when none came
/// for [`ATTEMPT_TIMEOUT`] (the store's leader died while it was read: its chunks come again
/// once another is elected). The read as a whole is not bounded: a large snapshot takes what it
/// takes.
async fn read_object(mut object: Box<jetstream::object_store::Object>, first: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut bytes = first;
    if bytes.is_empty() {
        return Ok(bytes);
    }
    loop {
        let chunk = tokio::time::timeout(ATTEMPT_TIMEOUT, read_chunk(&mut object)).await.map_err(|_| no_answer())??;
        if chunk.is_empty() {
            return Ok(bytes);
        }
        bytes.extend_from_slice(&chunk);
    }
}

/// The error of a try not answered within [`ATTEMPT_TIMEOUT`].
fn no_answer() -> String {
    format!("no answer within {} s (a leader being elected)", ATTEMPT_TIMEOUT.as_secs())
}

/// Deflates a snapshot for the object store (fast compression: snapshots are taken every few
/// seconds).
pub fn pack(snapshot: &[u8]) -> Bytes {
    use std::io::Write;
    let mut z = flate2::write::DeflateEncoder::new(Vec::with_capacity(snapshot.len() / 2), flate2::Compression::fast());
    z.write_all(snapshot).expect("writing to memory");
    Bytes::from(z.finish().expect("writing to memory"))
}

/// Inflates what [`pack`] made.
///
/// # Errors
/// The inflater's error on bytes that are not deflate.
pub fn unpack(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::with_capacity(bytes.len() * 3);
    flate2::read::DeflateDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_defaults_and_redact() {
        let t: NatsTarget = "nats://u:secret@127.0.0.1:4222?stream=EV&partitions=8&ack_wait=2.5".parse().unwrap();
        assert_eq!((t.stream.as_str(), t.partitions, t.prefix.as_str()), ("EV", Some(8), "events"));
        assert_eq!((t.ack_wait, t.bucket.as_str()), (Duration::from_millis(2500), "EV_correlator"));
        assert_eq!(t.to_string(), "nats:nats://REDACTED@127.0.0.1:4222?stream=EV");
        assert_eq!(t.subject("pay.ments *", 3), "events.pay_ments__.3");
        for bad in
            ["http://x", "nats://h?partitions=0", "nats://h?stream=a.b", "nats://h?what=1", "nats://h?ack_wait=-1"]
        {
            assert!(bad.parse::<NatsTarget>().is_err(), "{bad}");
        }
        let cluster: NatsTarget =
            "nats://u:secret@127.0.0.1:18901,nats://127.0.0.1:18902,tls://h:4222?replicas=3".parse().unwrap();
        assert_eq!(cluster.servers().collect::<Vec<_>>().len(), 3);
        assert_eq!((cluster.replicas, t.replicas), (Some(3), None));
        assert_eq!(
            cluster.to_string(),
            "nats:nats://REDACTED@127.0.0.1:18901,nats://127.0.0.1:18902,tls://h:4222?stream=EVENTS"
        );
        assert!("nats://h:1,http://h:2".parse::<NatsTarget>().is_err());
        assert!("nats://h:1,nats://h:x".parse::<NatsTarget>().is_err());
        assert_eq!([0, 1, 2, 3, 5].map(default_replicas), [1, 1, 2, 3, 3]);
        assert!(has_priority_groups("2.11.0") && has_priority_groups("v2.15.1") && !has_priority_groups("2.9.10"));
        assert_eq!(unpack(&pack(b"snapshot bytes")).unwrap(), b"snapshot bytes");
    }

    #[test]
    fn url_credentials_leave_the_addresses_for_the_connect_options() {
        let credentials = |target: &str| {
            let t: NatsTarget = target.parse().unwrap();
            let (servers, credentials) = t.servers_and_credentials().unwrap();
            assert!(servers.iter().all(|s| !s.has_user_pass() && s.password().is_none()), "{target}");
            assert!(servers.iter().all(|s| !format!("{s:?}").contains("p%40ss")), "{servers:?}");
            credentials
        };
        assert!(
            credentials("nats://alice:p%40ss@h:4222,nats://h2:4222")
                == Some(UrlCredentials::UserPassword("alice".into(), "p@ss".into()))
        );
        assert!(credentials("nats://s3cr3t@h:4222") == Some(UrlCredentials::Token("s3cr3t".into())));
        assert!(credentials("nats://h:4222").is_none());
        let mixed: NatsTarget = "nats://a:b@h:1,nats://c:d@h:2".parse().unwrap();
        assert!(mixed.servers_and_credentials().is_err());
    }
}
