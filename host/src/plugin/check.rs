//! `eventpipe plugins check FILE.wasm`: load a component, tell its kind, run it once on a
//! sample event, report what it answered, the fuel it used and its peak memory.

use std::sync::{Arc, Mutex};

use super::bindings as wit;
use super::call::{CallCost, CallFailure, Caller};
use super::convert::{to_wit, unpack};
use super::projection::{ProjectedFilter, ProjectedKeys};
use super::sink::DeliverBatch;
use super::{Plugin, PluginHandle, PluginKind, PluginRuntime, PluginSettings};
use crate::event::Event;
use crate::tenant::DEFAULT_TENANT;

/// A kubelet event of the kind every plugin must handle.
pub fn sample_event() -> Event {
    serde_json::from_str(
        r#"{"metadata":{"name":"web-0.17cb5b99f8638000","namespace":"default"},
            "involvedObject":{"kind":"Pod","namespace":"default","name":"web-0","uid":"7d3c2a1e","apiVersion":"v1","fieldPath":"spec.containers{app}"},
            "reason":"BackOff","message":"Back-off restarting failed container app in pod web-0",
            "source":{"component":"kubelet","host":"node-1"},"firstTimestamp":"2025-01-01T00:00:00Z",
            "lastTimestamp":"2025-01-01T00:00:00Z","count":1,"type":"Warning",
            "reportingComponent":"kubelet","reportingInstance":"node-1"}"#,
    )
    .expect("the sample event parses")
}

/// What `plugins check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Plugin name (the file stem).
    pub name: String,
    /// Its kind.
    pub kind: PluginKind,
    /// What it answered for the sample event, human-readable.
    pub answer: String,
    /// Fuel the call used and the instance's peak memory.
    pub cost: CallCost,
}

/// Why a check failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// It is not a loadable plugin.
    #[error(transparent)]
    Load(#[from] super::PluginError),
    /// It loaded but failed on the sample event.
    #[error("plugin `{plugin}` ({kind}) failed on the sample event: {failure}")]
    Call {
        /// Plugin name.
        plugin: String,
        /// Plugin kind.
        kind: PluginKind,
        /// What went wrong.
        failure: CallFailure,
    },
}

/// Loads `path` and runs it once on [`sample_event`].
///
/// # Errors
/// [`CheckError`] naming what is wrong: unreadable file, not a component, no plugin world,
/// unsatisfiable imports, or a failed call (trap, fuel, memory, guest error, garbage).
pub fn check(
    runtime: &PluginRuntime,
    path: &std::path::Path,
    settings: PluginSettings,
) -> Result<CheckReport, CheckError> {
    let bytes = std::fs::read(path).map_err(|error| CheckError::Read { path: path.display().to_string(), error })?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    let plugin = runtime.load(&name, &bytes, super::PluginOrigin::File(path.to_path_buf()))?;
    validate(plugin, settings)
}

/// Runs a loaded plugin once on [`sample_event`] with `settings` (what hot reload does before a
/// new version may serve).
///
/// # Errors
/// [`CheckError::Call`] when the call fails (trap, fuel, memory, guest error, garbage).
pub fn validate(plugin: Arc<Plugin>, settings: PluginSettings) -> Result<CheckReport, CheckError> {
    let (name, kind) = (plugin.name().to_string(), plugin.kind());
    let handle = PluginHandle::fixed(plugin, DEFAULT_TENANT, settings);
    let (answer, cost) =
        run_once(&handle).map_err(|failure| CheckError::Call { plugin: name.clone(), kind, failure })?;
    Ok(CheckReport { name, kind, answer, cost })
}

fn run_once(handle: &PluginHandle) -> Result<(String, CallCost), CallFailure> {
    let event = sample_event();
    let kind = handle.kind();
    let export = kind.batch_export();
    match kind {
        PluginKind::AggregateKey | PluginKind::MessageCombiner | PluginKind::SpamKey => {
            let keys = ProjectedKeys::new(handle.clone());
            let (answer, cost, _, projection) = keys.call(&[&event])?;
            let packed = answer.map_err(CallFailure::GuestError)?;
            let expected = if kind == PluginKind::AggregateKey { 2 } else { 1 };
            let strings = unpack(&packed, expected).map_err(CallFailure::Garbage)?;
            let mut shown: Vec<String> = strings.iter().map(|s| format!("{:?}", String::from_utf8_lossy(s))).collect();
            // A local key declared to be a key field is that field of the event, as the host takes it.
            if let (Some(field), Some(local)) = (projection.local_key(&event), shown.get_mut(1)) {
                *local = format!("{field:?}");
            }
            Ok((format!("{} (reads {})", shown.join(", "), projection.describe()), cost))
        }
        PluginKind::Filter => {
            let filter = ProjectedFilter::new(handle.clone());
            let (verdicts, cost) = filter.call_costed(&[&event])?;
            let (_, projection) = filter.fields()?;
            match verdicts.as_slice() {
                [v] => Ok((format!("{v:?} (reads {})", projection.describe()), cost)),
                other => Err(CallFailure::Garbage(format!("{} verdicts for 1 event", other.len()))),
            }
        }
        PluginKind::Sink => {
            let written: Arc<Mutex<Vec<u8>>> = Arc::default();
            let sink = written.clone();
            let output: super::state::OutputFn = Arc::new(move |b: &[u8]| {
                sink.lock().map_err(|e| e.to_string())?.extend_from_slice(b);
                Ok(())
            });
            let caller: DeliverBatch = Caller::new(handle.clone(), export, Some(output));
            let ((results,), cost) =
                caller.call((DEFAULT_TENANT.into(), vec![wit::SinkRequest::Create(to_wit(&event))]), 1)?;
            let written = String::from_utf8_lossy(&written.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
            match results.as_slice() {
                [Ok(_)] => Ok((format!("created; wrote {:?}", written.trim_end()), cost)),
                [Err(e)] => Ok((format!("refused: {e:?}"), cost)),
                other => Err(CallFailure::Garbage(format!("{} results for 1 request", other.len()))),
            }
        }
        PluginKind::Encoder => {
            type Encode = Caller<(String, Vec<wit::EncoderWrite>), (Result<wit::EncodedRequest, String>,)>;
            let caller: Encode = Caller::new(handle.clone(), export, None);
            let write =
                wit::EncoderWrite { request: wit::SinkRequest::Create(to_wit(&event)), enrichment: String::new() };
            let ((answer,), cost) = caller.call((DEFAULT_TENANT.into(), vec![write]), 1)?;
            let request = answer.map_err(CallFailure::GuestError)?;
            let content_type = if request.content_type.is_empty() { "application/json" } else { &request.content_type };
            let body = String::from_utf8_lossy(&request.body);
            Ok((format!("{content_type}, {} more header(s), body {:?}", request.headers.len(), body.trim_end()), cost))
        }
        PluginKind::Watcher => {
            let caller: Caller<(Vec<wit::Event>,), ()> = Caller::new(handle.clone(), export, None);
            let ((), cost) = caller.call((vec![to_wit(&event)],), 1)?;
            Ok(("watched".into(), cost))
        }
    }
}
