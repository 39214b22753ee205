//! Event sources: decoding real event streams into the core/v1 model, the Kubernetes API
//! watch, and HTTP ingest.

pub mod decode;
pub mod http;
pub mod k8s;
mod spec;

pub use spec::{SourceSpec, SourceSpecError};
