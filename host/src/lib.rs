//! eventpipe: the Kubernetes event machinery (client-go `tools/record`, apimachinery
//! `watch.Broadcaster`) as a fast host whose policy comes from WebAssembly plugins.
//!
//! Data flows one way: source → [`broadcaster::Broadcaster`] → watchers →
//! [`correlator::EventCorrelator`] → [`sink::EventSink`].

pub mod broadcaster;
pub mod clock;
pub mod config;
pub mod correlator;
pub mod delivery;
pub mod event;
pub mod event_broadcaster;
pub mod golden;
pub mod k8s;
pub mod logging;
pub mod metrics;
pub mod plan;
pub mod plugin;
pub mod recorder;
pub mod reload;
pub mod replay;
pub mod router;
pub mod run;
pub mod scaffold;
pub mod series;
pub mod sink;
pub mod source;
pub mod stage;
pub mod tenant;
pub mod watchers;
