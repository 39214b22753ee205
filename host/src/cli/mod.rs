//! One module per subcommand (its flags and what it runs), and the flag groups several share.
//! Exit codes: 0 success; 1 an error (or, for `test`, a difference); 2 `replay` met bad input
//! lines; 3 a plugin failed under `--plugin-fallback fail`; 4 `run` abandoned events (retries ran
//! out, a shutdown cancelled them, or the shutdown timeout passed before they were delivered).

pub mod bench;
pub mod config;
pub mod new_plugin;
pub mod plugins;
pub mod replay;
pub mod run;
pub mod test;
pub mod top;
pub mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use eventpipe::pipeline::plan::{BuiltinSpamKey, CommandLineRules};
use eventpipe::plugin::pin::{Sha256Digest, parse_pin_flag};
use eventpipe::plugin::registry::{PluginRegistry, ReloadOutcome};
use eventpipe::plugin::{
    DEFAULT_FUEL_PER_EVENT, DEFAULT_MEMORY_LIMIT_BYTES, FallbackPolicy, Metering, PluginRuntime, PluginSettings,
};

/// Exit status when a plugin failed under the `fail` policy.
const PLUGIN_FAILED: u8 = 3;
/// Exit status when `run` abandoned events.
const ABANDONED: u8 = 4;

/// Writes `bytes` and a newline to stdout; a closed pipe (`| head`) ends quietly.
pub fn print_to_stdout(bytes: &[u8]) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(std::process::ExitCode::SUCCESS),
    }
}

/// Limits and failure policy of every plugin call.
#[derive(Args, Debug, Clone)]
pub struct PluginArgs {
    /// Fuel per event of a plugin call (≈ Wasm instructions) [default: 2000000].
    #[arg(long, value_name = "N")]
    fuel_per_event: Option<u64>,
    /// Linear-memory limit of a plugin instance, bytes [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    memory_limit_bytes: Option<usize>,
    /// What a failed plugin call does: use the client-go function (`builtin`), drop the event
    /// (`drop`), or drop it and exit with status 3 at the end (`fail`) [default: builtin].
    #[arg(long, value_enum)]
    plugin_fallback: Option<FallbackPolicy>,
}

impl PluginArgs {
    fn settings(&self) -> PluginSettings {
        PluginSettings {
            fuel_per_event: self.fuel_per_event.unwrap_or(DEFAULT_FUEL_PER_EVENT),
            memory_limit_bytes: self.memory_limit_bytes.unwrap_or(DEFAULT_MEMORY_LIMIT_BYTES),
            fallback: self.plugin_fallback.unwrap_or(FallbackPolicy::Builtin),
            ..PluginSettings::default()
        }
    }

    /// The config keys these flags give (they win over the config's `[defaults]`).
    fn given(&self) -> impl Iterator<Item = &'static str> {
        [
            ("fuel_per_event", self.fuel_per_event.is_some()),
            ("memory_limit_bytes", self.memory_limit_bytes.is_some()),
            ("fallback", self.plugin_fallback.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
    }
}

/// wasmtime's compilation cache.
#[derive(Args, Debug, Clone)]
pub struct RuntimeArgs {
    /// wasmtime's compilation cache directory [default: wasmtime's, e.g. ~/.cache/wasmtime].
    #[arg(long, value_name = "DIR")]
    compile_cache: Option<PathBuf>,
    /// Compile every plugin at start instead of using the compilation cache.
    #[arg(long, conflicts_with = "compile_cache")]
    no_compile_cache: bool,
    /// The largest plugin file read from the plugins directory, bytes; a larger one is refused
    /// (as are FIFOs, devices and sockets).
    #[arg(long, value_name = "BYTES", default_value_t = eventpipe::plugin::file::DEFAULT_MAX_PLUGIN_BYTES)]
    max_plugin_bytes: u64,
}

impl RuntimeArgs {
    /// A plugin registry (the embedded plugins) whose loads are validated with `settings`.
    fn registry(&self, settings: PluginSettings) -> anyhow::Result<PluginRegistry> {
        Ok(PluginRegistry::new(self.runtime()?)?.with_validation(settings).with_max_plugin_bytes(self.max_plugin_bytes))
    }

    /// The plugin runtime: with wasmtime's compilation cache unless `--no-compile-cache` (or
    /// no cache directory can be made).
    fn runtime(&self) -> anyhow::Result<PluginRuntime> {
        Ok(if self.no_compile_cache {
            PluginRuntime::new(Metering::Fuel)?
        } else {
            match PluginRuntime::with_cache(Metering::Fuel, self.compile_cache.as_deref()) {
                Ok(runtime) => runtime,
                // No writable cache directory (e.g. no HOME): compile every time.
                Err(e) if self.compile_cache.is_none() => {
                    tracing::warn!(error = %e, "no compilation cache");
                    PluginRuntime::new(Metering::Fuel)?
                }
                Err(e) => return Err(e.into()),
            }
        })
    }
}

/// The plugins directory of a command: `dir` when given, else `./plugins` when it exists.
fn plugins_dir(dir: Option<&Path>) -> Option<PathBuf> {
    dir.map(Path::to_path_buf).or_else(|| {
        let default = PathBuf::from("plugins");
        default.is_dir().then_some(default)
    })
}

/// The registry a command runs with: the embedded plugins (loads validated with `limits`),
/// then those of its plugins directory ([`plugins_dir`]; each refused file reported on stderr,
/// prefixed by `command`).
fn registry_with_dir(
    runtime: &RuntimeArgs,
    limits: &PluginArgs,
    dir: Option<&Path>,
    command: &str,
) -> anyhow::Result<PluginRegistry> {
    pinned_registry(runtime, limits, dir, BTreeMap::new(), &[], command)
}

/// As [`registry_with_dir`], with plugin names pinned to digests ([`PinArgs::pins`]) and
/// component `files` loaded before the plugins directory (plugins pulled from OCI registries,
/// [`OciArgs::pull`]): a plugin whose bytes do not match its pin, or a file that does not load,
/// is an error naming it (and both digests).
fn pinned_registry(
    runtime: &RuntimeArgs,
    limits: &PluginArgs,
    dir: Option<&Path>,
    pins: BTreeMap<String, Sha256Digest>,
    files: &[PathBuf],
    command: &str,
) -> anyhow::Result<PluginRegistry> {
    let registry = runtime.registry(limits.settings())?.with_pins(pins);
    for file in files {
        if let outcome @ ReloadOutcome::Rejected { .. } = registry.reload_file(file) {
            anyhow::bail!("{outcome}");
        }
    }
    let registry = match plugins_dir(dir) {
        Some(dir) => with_plugins_dir(registry, &dir, command)?,
        None => registry,
    };
    registry.verify_pins()?;
    Ok(registry)
}

/// The registry `eventpipe run` runs with (and `config show` shows): the pins of the config
/// and of `pins`, the plugins the config pulls from OCI registries ([`OciArgs::pull`]), the
/// embedded plugins and the plugins directory ([`pinned_registry`]).
///
/// # Errors
/// A config that cannot be read, a pull that fails, or a plugin refused.
fn run_registry(
    runtime: &RuntimeArgs,
    limits: &PluginArgs,
    dir: Option<&Path>,
    (pins, oci): (&PinArgs, &OciArgs),
    config: Option<&Path>,
    command: &str,
) -> anyhow::Result<PluginRegistry> {
    let mut pins = pins.pins(config)?;
    let pulled = oci.pull(config, &mut pins)?;
    pinned_registry(runtime, limits, dir, pins, &pulled, command)
}

/// Plugins pulled from OCI registries at start (`source = "oci://…"` in `[plugins.NAME]`).
#[derive(Args, Debug, Clone)]
pub struct OciArgs {
    /// Where plugins pulled from OCI registries are kept, content-addressed by digest
    /// [default: $XDG_CACHE_HOME/eventpipe/oci, else ~/.cache/eventpipe/oci].
    #[arg(long, value_name = "DIR")]
    oci_cache: Option<PathBuf>,
    /// Plain HTTP to any OCI registry (not only loopback ones).
    #[arg(long)]
    oci_insecure: bool,
}

impl OciArgs {
    /// Pulls (or reads from the cache) every plugin `config` names by `source`, verified, and
    /// adds its pin (the layer's digest) to `pins` unless the config pins it already. Returns
    /// the component files to load, `CACHE/plugins/MANIFEST-HEX/NAME.wasm`.
    ///
    /// # Errors
    /// A config that cannot be read, a registry error, or content that does not verify.
    fn pull(&self, config: Option<&Path>, pins: &mut BTreeMap<String, Sha256Digest>) -> anyhow::Result<Vec<PathBuf>> {
        let Some(config) = config else { return Ok(Vec::new()) };
        let sources = eventpipe::Config::load(config)?.sources;
        if sources.is_empty() {
            return Ok(Vec::new());
        }
        let cache = match &self.oci_cache {
            Some(dir) => dir.clone(),
            None => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::home_dir().map(|h| h.join(".cache")))
                .context("no OCI cache directory (give --oci-cache DIR)")?
                .join("eventpipe")
                .join("oci"),
        };
        let options = eventpipe::oci::OciOptions { insecure: self.oci_insecure, ..Default::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut files = Vec::new();
        for (name, reference) in sources {
            let pulled = runtime
                .block_on(eventpipe::oci::pull_cached(&reference, &cache, &options))
                .with_context(|| format!("plugin `{name}`"))?;
            let manifest = reference.digest().expect("a config source has a digest").hex().to_string();
            let file = cache.join("plugins").join(manifest).join(format!("{name}.wasm"));
            if std::fs::read(&file).ok().as_deref() != Some(pulled.bytes.as_slice()) {
                eventpipe::oci::write_atomically(&file, &pulled.bytes)?;
            }
            pins.entry(name).or_insert(pulled.layer);
            files.push(file);
        }
        Ok(files)
    }
}

/// How to reach the Kubernetes API server, for `k8s` sources and sinks (`run`, `validate`).
#[derive(Args, Debug, Clone)]
pub struct KubeConnectionArgs {
    /// A kubeconfig file [default: as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: its current context].
    #[arg(long)]
    context: Option<String>,
    /// The API server URL, overriding the kubeconfig's (e.g. `http://127.0.0.1:8001` from
    /// `kubectl proxy`).
    #[arg(long, value_name = "URL")]
    kube_server: Option<String>,
}

impl KubeConnectionArgs {
    /// The connection options these flags give.
    pub fn options(&self) -> eventpipe::k8s::KubeOptions {
        eventpipe::k8s::KubeOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            server: self.kube_server.clone(),
        }
    }
}

/// Pinned plugins ([`eventpipe::plugin::pin`]).
#[derive(Args, Debug, Clone)]
pub struct PinArgs {
    /// Pin plugin NAME to the SHA-256 digest of its component bytes: any other version of it
    /// is refused, at start and on hot reload. Repeatable; wins over the config's `digest` of
    /// `[plugins.NAME]`.
    #[arg(long, value_name = "NAME=sha256:HEX", value_parser = parse_pin_flag)]
    plugin_digest: Vec<(String, Sha256Digest)>,
}

impl PinArgs {
    /// The pins: the `digest` keys of `config`'s `[plugins.NAME]` tables, then the flags.
    ///
    /// # Errors
    /// The config's error when it cannot be read or parsed.
    fn pins(&self, config: Option<&Path>) -> anyhow::Result<BTreeMap<String, Sha256Digest>> {
        let mut pins = match config {
            Some(path) => eventpipe::Config::load(path)?.pins,
            None => BTreeMap::new(),
        };
        pins.extend(self.plugin_digest.iter().cloned());
        Ok(pins)
    }
}

/// `registry` with the plugins of `dir` loaded (each refused file is reported on stderr,
/// prefixed by `command`).
fn with_plugins_dir(registry: PluginRegistry, dir: &Path, command: &str) -> anyhow::Result<PluginRegistry> {
    let (registry, outcomes) =
        registry.with_dir(dir).with_context(|| format!("plugins directory {}", dir.display()))?;
    for outcome in outcomes.iter().filter(|o| matches!(o, ReloadOutcome::Rejected { .. })) {
        eprintln!("{command}: {outcome}");
    }
    Ok(registry)
}

/// The filter plugins given on the command line (`run`, `bench`).
#[derive(Args, Debug, Clone)]
pub struct FilterArgs {
    /// A filter plugin to run before correlation: a plugin name or a component file. Repeatable,
    /// run in the order given. Replaces the config's `[defaults]` filters and the plugins
    /// directory's drop-in filters (a tenant that lists its own `filters` keeps them).
    #[arg(long, value_name = "NAME|FILE.wasm")]
    filter: Vec<String>,
}

impl FilterArgs {
    /// `rules` with these filters (none given: the config's and the plugins directory's).
    fn apply(self, mut rules: CommandLineRules) -> CommandLineRules {
        rules.filters = self.filter;
        rules
    }
}

/// client-go `CorrelatorOptions` and the key functions, as flags; an unset number is client-go's
/// default.
#[derive(Args, Debug, Clone)]
pub struct CorrelatorArgs {
    /// Entries in each of the three LRU caches [default: 4096; negative: they keep nothing, as
    /// in client-go].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    lru_cache_size: Option<i64>,
    /// Spam filter bucket size per source + object, events [default: 25].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    burst: Option<i64>,
    /// Spam filter refill rate, events per second [default: 1/300].
    #[arg(long, value_name = "EVENTS_PER_SECOND", allow_negative_numbers = true)]
    qps: Option<f32>,
    /// Distinct messages per aggregate key within the interval before aggregating [default: 10].
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_events: Option<i64>,
    /// Aggregation window, seconds [default: 600].
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    max_interval_seconds: Option<i64>,
    /// The spam filter's built-in key: `source-object` (client-go v0.26) or `source-object-type`
    /// (client-go ≥ 1.32: Normal and Warning events get separate buckets; always native).
    #[arg(long, value_enum, default_value_t = BuiltinSpamKey::SourceObject)]
    spam_key: BuiltinSpamKey,
    /// Use the native built-in key functions instead of the (identical) default Wasm plugins.
    #[arg(long)]
    builtin: bool,
    /// An aggregate-key plugin replacing the default `by-reason`: a name or a component file.
    #[arg(long, value_name = "NAME|FILE.wasm", conflicts_with = "builtin")]
    aggregate_key_plugin: Option<String>,
    /// A message-combiner plugin replacing the default `similar-events`.
    #[arg(long, value_name = "NAME|FILE.wasm", conflicts_with = "builtin")]
    message_combiner_plugin: Option<String>,
    /// A spam-key plugin replacing the default `source-object`.
    #[arg(long, value_name = "NAME|FILE.wasm", conflicts_with = "builtin")]
    spam_key_plugin: Option<String>,
}

impl CorrelatorArgs {
    /// The command line's rules, with the plugin limits of `plugin`.
    fn rules(&self, plugin: &PluginArgs) -> CommandLineRules {
        let given = [
            ("lru_cache_size", self.lru_cache_size.is_some()),
            ("burst", self.burst.is_some()),
            ("qps", self.qps.is_some()),
            ("max_events", self.max_events.is_some()),
            ("max_interval_seconds", self.max_interval_seconds.is_some()),
            ("aggregate_key", self.builtin || self.aggregate_key_plugin.is_some()),
            ("message_combiner", self.builtin || self.message_combiner_plugin.is_some()),
            (
                "spam_key",
                self.builtin || self.spam_key_plugin.is_some() || self.spam_key != BuiltinSpamKey::SourceObject,
            ),
        ];
        CommandLineRules {
            filters: Vec::new(),
            given: given.into_iter().filter_map(|(key, given)| given.then_some(key)).chain(plugin.given()).collect(),
            lru_cache_size: self.lru_cache_size.unwrap_or(0),
            burst: self.burst.unwrap_or(0),
            qps: self.qps.unwrap_or(0.0),
            max_events: self.max_events.unwrap_or(0),
            max_interval_seconds: self.max_interval_seconds.unwrap_or(0),
            builtin: self.builtin,
            aggregate_key_plugin: self.aggregate_key_plugin.clone(),
            message_combiner_plugin: self.message_combiner_plugin.clone(),
            spam_key_plugin: self.spam_key_plugin.clone(),
            spam_key: self.spam_key,
            plugin: plugin.settings(),
        }
    }
}
