//! The messages of Loki's push API in protobuf (`POST /loki/api/v1/push`,
//! `Content-Type: application/x-protobuf`, the body snappy-compressed in the block format), as
//! Loki's `pkg/push/push.proto` defines them (package `logproto`: `PushRequest`,
//! `StreamAdapter`, `EntryAdapter`, `LabelPairAdapter`; `google.protobuf.Timestamp` for the
//! time), written with prost's derive. Field numbers and types are the proto's; the Go-only
//! gogoproto options change no byte on the wire.

/// `logproto.PushRequest`: the streams of one push.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    /// `streams = 1`.
    #[prost(message, repeated, tag = "1")]
    pub streams: Vec<StreamAdapter>,
}

/// `logproto.StreamAdapter`: one stream's entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StreamAdapter {
    /// `labels = 1`: the label set in Prometheus' text form, `{namespace="shop", reason="BackOff"}`.
    #[prost(string, tag = "1")]
    pub labels: String,
    /// `entries = 2`, in time order.
    #[prost(message, repeated, tag = "2")]
    pub entries: Vec<EntryAdapter>,
    /// `hash = 3`: set by Loki's distributor, not by clients (0).
    #[prost(uint64, tag = "3")]
    pub hash: u64,
}

/// `logproto.EntryAdapter`: one log line.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EntryAdapter {
    /// `timestamp = 1`.
    #[prost(message, optional, tag = "1")]
    pub timestamp: Option<Timestamp>,
    /// `line = 2`.
    #[prost(string, tag = "2")]
    pub line: String,
    /// `structuredMetadata = 3` (Loki 2.9 and later; older servers skip the field).
    #[prost(message, repeated, tag = "3")]
    pub structured_metadata: Vec<LabelPairAdapter>,
}

/// `logproto.LabelPairAdapter`: one name and value of structured metadata.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPairAdapter {
    /// `name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `value = 2`.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `google.protobuf.Timestamp`: seconds and nanoseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Timestamp {
    /// `seconds = 1`.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// `nanos = 2`, in `[0, 999_999_999]`.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}
