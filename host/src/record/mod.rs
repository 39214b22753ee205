//! client-go's `tools/record`: the recording API applications call.
//!
//! - [`recorder`]: the [`EventRecorder`](recorder::EventRecorder) (`Event`, `Eventf`,
//!   `AnnotatedEventf`), which makes events and never blocks its caller.
//! - [`event_broadcaster`]: the [`EventBroadcaster`](event_broadcaster::EventBroadcaster)
//!   (`StartRecordingToSink`, `StartLogging`, `StartEventWatcher`).
//! - [`series`]: the `events.k8s.io/v1` EventSeries recorder (`k8s.io/client-go/tools/events`).

pub mod event_broadcaster;
pub mod recorder;
pub mod series;
