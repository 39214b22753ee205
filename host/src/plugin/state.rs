//! What a plugin's `Store` holds: its identity (for logs), its config, its memory limiter, and
//! the host side of the WIT imports (`log`, `config`, `output`).

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::ResourceLimiter;

use super::bindings::{config, log, output};

/// Longest log message or field value a plugin can emit, bytes; longer ones are truncated.
pub const MAX_LOG_VALUE_BYTES: usize = 16 << 10;

/// Where a sink plugin's `output.write` bytes go.
pub type OutputFn = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// The host data of one plugin instance's `Store`.
pub struct PluginState {
    plugin: Arc<str>,
    tenant: Arc<str>,
    config: BTreeMap<String, String>,
    output: Option<OutputFn>,
    limiter: MemoryLimiter,
}

impl PluginState {
    pub(super) fn new(
        plugin: Arc<str>,
        tenant: Arc<str>,
        config: BTreeMap<String, String>,
        memory_limit: usize,
        output: Option<OutputFn>,
    ) -> Self {
        Self { plugin, tenant, config, output, limiter: MemoryLimiter { limit: memory_limit, peak: 0 } }
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
    }

    /// The largest linear memory this instance has asked for, bytes.
    pub fn peak_memory_bytes(&self) -> usize {
        self.limiter.peak
    }
}

/// Enforces the memory limit (a grow past it traps, the same for every guest language: C's
/// `malloc` would otherwise just return NULL) and remembers the peak, for `plugins check`.
struct MemoryLimiter {
    limit: usize,
    peak: usize,
}

/// A plugin grew its memory past its limit; carried in the trap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded: growing linear memory to {desired} bytes, limit {limit} bytes")]
pub struct MemoryLimitExceeded {
    /// What the guest asked for, bytes.
    pub desired: usize,
    /// The plugin's limit, bytes.
    pub limit: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded { desired, limit: self.limit }));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

fn truncated(s: String) -> String {
    if s.len() <= MAX_LOG_VALUE_BYTES {
        return s;
    }
    let mut end = MAX_LOG_VALUE_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl super::bindings::eventpipe::plugin::types::Host for PluginState {}

impl log::Host for PluginState {
    fn enabled(&mut self, level: log::Level) -> bool {
        match level {
            log::Level::Trace => {
                tracing::enabled!(target: "eventpipe::plugin", tracing::Level::TRACE)
            }
            log::Level::Debug => {
                tracing::enabled!(target: "eventpipe::plugin", tracing::Level::DEBUG)
            }
            log::Level::Info => {
                tracing::enabled!(target: "eventpipe::plugin", tracing::Level::INFO)
            }
            log::Level::Warn => {
                tracing::enabled!(target: "eventpipe::plugin", tracing::Level::WARN)
            }
            log::Level::Error => {
                tracing::enabled!(target: "eventpipe::plugin", tracing::Level::ERROR)
            }
        }
    }

    fn log(&mut self, level: log::Level, message: String, fields: Vec<log::Field>) {
        let message = truncated(message);
        let fields = fields
            .into_iter()
            .map(|log::Field { key, value }| {
                let key = if key == "plugin" || key == "tenant" { format!("plugin.{key}") } else { key };
                format!("{key}={:?}", truncated(value))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let (plugin, tenant) = (&*self.plugin, &*self.tenant);
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "eventpipe::plugin", plugin, tenant, fields, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "eventpipe::plugin", plugin, tenant, fields, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "eventpipe::plugin", plugin, tenant, fields, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "eventpipe::plugin", plugin, tenant, fields, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "eventpipe::plugin", plugin, tenant, fields, "{message}")
            }
        }
    }
}

impl config::Host for PluginState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }

    fn entries(&mut self) -> Vec<(String, String)> {
        self.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl output::Host for PluginState {
    fn write(&mut self, bytes: Vec<u8>) -> Result<(), String> {
        match &self.output {
            Some(out) => out(&bytes),
            None => Err(format!("plugin `{}` has no output destination", self.plugin)),
        }
    }
}
