//! Event sources: decoding real event streams into the core/v1 model, and HTTP ingest.

pub mod decode;
pub mod http;
