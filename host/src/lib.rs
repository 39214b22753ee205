//! eventpipe: the Kubernetes event machinery (client-go `tools/record`, apimachinery
//! `watch.Broadcaster`) as a fast host whose policy comes from WebAssembly plugins.
//!
//! Data flows one way: source → [`broadcaster::Broadcaster`] → watchers →
//! [`correlator::EventCorrelator`] → [`sink::EventSink`].

pub mod clock;
pub mod event;
pub mod correlator;
pub mod sink;
