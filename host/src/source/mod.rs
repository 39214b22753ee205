//! Event sources: decoding real event streams into the core/v1 model, and the Kubernetes API
//! watch.

pub mod decode;
pub mod k8s;
