//! Event sources: decoding real event streams into the core/v1 model.

pub mod decode;
