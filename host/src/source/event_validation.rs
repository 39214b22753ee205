//! The apiserver's validation of a core/v1 Event written through the API, as kube-apiserver
//! v1.19 runs it in `rest.BeforeCreate` / `BeforeUpdate`: first the Event strategy's
//! `ValidateEventCreate` (`legacyValidateEvent` for core/v1), then the generic
//! `ValidateObjectMetaAccessor` with `ValidatePathSegmentName`. HTTP ingest answers what fails
//! with the apiserver's `422 Invalid`: `Event "NAME" is invalid: …`, one `details.causes` entry
//! per error ([`invalid`]).
//!
//! An Event without `eventTime` (what `tools/record` writes) needs little: its
//! `involvedObject.namespace` must be the Event's namespace (or be empty for an Event in
//! `default`). One with `eventTime` (what `tools/events` writes) also needs
//! `reportingController` (a qualified name), `reportingInstance`, `action` and `reason`, each
//! within its length limit.

use std::sync::LazyLock;

use axum::http::StatusCode;
use regex::Regex;

use crate::event::Event;
use crate::http_server::api_status::{ApiStatus, StatusCause, StatusDetails};

/// `ReportingInstanceLengthLimit`, `ActionLengthLimit`, `ReasonLengthLimit`: characters (bytes,
/// as Go's `len`).
const FIELD_LENGTH_LIMIT: usize = 128;
/// `NoteLengthLimit`: the message's limit, bytes.
const NOTE_LENGTH_LIMIT: usize = 1024;

/// One `field.Error`: its type (the `metav1.CauseType`), path, value and detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueRequired` or `FieldValueInvalid`.
    pub kind: FieldErrorKind,
    /// The field path, e.g. `involvedObject.namespace`.
    pub field: String,
    /// The value shown (`Invalid` only).
    pub value: String,
    /// What is wrong (may be empty).
    pub detail: String,
}

/// The `field.ErrorType`s this validation gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `field.Required`: `Required value`.
    Required,
    /// `field.Invalid`: `Invalid value: "…"`.
    Invalid,
}

impl FieldError {
    fn required(field: &str) -> Self {
        Self { kind: FieldErrorKind::Required, field: field.into(), value: String::new(), detail: String::new() }
    }

    fn invalid(field: &str, value: &str, detail: impl Into<String>) -> Self {
        Self { kind: FieldErrorKind::Invalid, field: field.into(), value: value.into(), detail: detail.into() }
    }

    /// `field.Error.ErrorBody()`: `Required value`, or `Invalid value: "V"`, then `: DETAIL`
    /// when there is a detail.
    pub fn body(&self) -> String {
        let head = match self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Invalid => format!("Invalid value: {}", go_quote(&self.value)),
        };
        if self.detail.is_empty() { head } else { format!("{head}: {}", self.detail) }
    }

    /// The `metav1.CauseType`.
    fn cause_type(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// What the apiserver refuses in `event` (namespace and name already set, as after
/// `BeforeCreate` defaulted them), in its order; empty when it would be stored.
pub fn validate(event: &Event) -> Vec<FieldError> {
    let errors = legacy_validate_event(event);
    if !errors.is_empty() {
        return errors;
    }
    validate_object_meta_name(&event.metadata.name)
}

/// The apiserver's `422 Invalid` for `errors` of Event `name` (as `errors.NewInvalid`).
pub fn invalid(name: &str, errors: &[FieldError]) -> ApiStatus {
    let listed = match errors {
        [one] => one.to_string(),
        many => format!("[{}]", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    };
    let causes = errors
        .iter()
        .map(|e| StatusCause { reason: e.cause_type().into(), message: e.body(), field: e.field.clone() })
        .collect();
    ApiStatus::failure(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("Event {} is invalid: {listed}", go_quote(name)),
    )
    .with_details(StatusDetails { name: name.into(), kind: "Event".into(), causes, ..StatusDetails::default() })
}

/// `legacyValidateEvent` of kube-apiserver v1.19 (`pkg/apis/core/validation/events.go`).
fn legacy_validate_event(event: &Event) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let (namespace, involved) = (event.metadata.namespace.as_str(), event.involved_object.namespace.as_str());
    if event.event_time.is_none() {
        // The Event's namespace and its object's agree; an object without one (a cluster-scoped
        // object) goes with `default` (old clients) or no namespace.
        let agrees =
            if involved.is_empty() { namespace.is_empty() || namespace == "default" } else { namespace == involved };
        if !agrees {
            errors.push(FieldError::invalid("involvedObject.namespace", involved, "does not match event.namespace"));
        }
    } else {
        if involved.is_empty() && namespace != "default" && namespace != "kube-system" {
            errors.push(FieldError::invalid("involvedObject.namespace", involved, "does not match event.namespace"));
        }
        let controller = event.reporting_component.as_str();
        if controller.is_empty() {
            errors.push(FieldError::required("reportingController"));
        }
        for message in qualified_name_errors(controller) {
            errors.push(FieldError::invalid("reportingController", controller, message));
        }
        if event.reporting_instance.is_empty() {
            errors.push(FieldError::required("reportingInstance"));
        }
        if event.reporting_instance.len() > FIELD_LENGTH_LIMIT {
            errors.push(FieldError::invalid(
                "reportingInstance",
                "",
                format!("can have at most {FIELD_LENGTH_LIMIT} characters"),
            ));
        }
        if event.action.is_empty() {
            errors.push(FieldError::required("action"));
        }
        if event.action.len() > FIELD_LENGTH_LIMIT {
            errors.push(FieldError::invalid("action", "", format!("can have at most {FIELD_LENGTH_LIMIT} characters")));
        }
        if event.reason.is_empty() {
            errors.push(FieldError::required("reason"));
        }
        if event.reason.len() > FIELD_LENGTH_LIMIT {
            errors.push(FieldError::invalid("reason", "", format!("can have at most {FIELD_LENGTH_LIMIT} characters")));
        }
        if event.message.len() > NOTE_LENGTH_LIMIT {
            errors.push(FieldError::invalid("message", "", format!("can have at most {NOTE_LENGTH_LIMIT} characters")));
        }
    }
    for message in dns1123_subdomain_errors(namespace) {
        errors.push(FieldError::invalid("namespace", namespace, message));
    }
    errors
}

/// `ValidateObjectMetaAccessor`'s name check with `path.ValidatePathSegmentName` (the name is
/// a URL path segment).
fn validate_object_meta_name(name: &str) -> Vec<FieldError> {
    let mut messages = Vec::new();
    if name == "." || name == ".." {
        messages.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            messages.push(format!("may not contain '{bad}'"));
        }
    }
    messages.into_iter().map(|m| FieldError::invalid("metadata.name", name, m)).collect()
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const DNS1123_SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// apimachinery's `RegexError`: `MSG (e.g. 'A',  or 'B', regex used for validation is 'FMT')`
/// (two spaces before `or`, as v1.19 writes it).
fn regex_error(message: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: String =
        examples.iter().enumerate().map(|(i, e)| format!("{}'{e}', ", if i > 0 { " or " } else { "" })).collect();
    format!("{message} (e.g. {examples}regex used for validation is '{fmt}')")
}

/// apimachinery's `IsDNS1123Subdomain`.
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    static RE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(&format!("^{DNS1123_SUBDOMAIN_FMT}$")).expect("a valid regex"));
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if !RE.is_match(value) {
        errors.push(regex_error(
            "a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errors
}

/// apimachinery's `IsQualifiedName`: an optional DNS subdomain prefix and `/`, then a name of
/// at most 63 characters.
fn qualified_name_errors(value: &str) -> Vec<String> {
    static RE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(&format!("^{QUALIFIED_NAME_FMT}$")).expect("a valid regex"));
    const MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
    let examples = ["MyName", "my.name", "123-abc"];
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(dns1123_subdomain_errors(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(MESSAGE, QUALIFIED_NAME_FMT, &examples)
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_string());
    }
    if !RE.is_match(name) {
        errors.push(format!("name part {}", regex_error(MESSAGE, QUALIFIED_NAME_FMT, &examples)));
    }
    errors
}

/// Go's `%q` of a string: double-quoted, `"` and `\` and control characters escaped.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: serde_json::Value) -> Event {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_record_event_needs_only_its_objects_namespace() {
        let ok = event(
            serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}, "involvedObject": {"namespace": "ns"}}),
        );
        assert!(validate(&ok).is_empty());
        let cluster_scoped = event(serde_json::json!({"metadata": {"name": "a", "namespace": "default"}}));
        assert!(validate(&cluster_scoped).is_empty());
        let bare = event(serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}}));
        let errors = validate(&bare);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "involvedObject.namespace: Invalid value: \"\": does not match event.namespace"
        );
        let status = invalid("a", &errors);
        assert_eq!(status.code, 422);
        assert_eq!(
            status.message,
            "Event \"a\" is invalid: involvedObject.namespace: Invalid value: \"\": does not match event.namespace"
        );
    }

    #[test]
    fn an_events_api_event_needs_its_reporting_fields_action_and_reason() {
        let e = event(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"}, "involvedObject": {"namespace": "ns"},
            "eventTime": "2025-01-01T00:00:00.000000Z"
        }));
        let fields: Vec<String> = validate(&e).iter().map(|e| e.field.clone()).collect();
        assert_eq!(
            fields,
            [
                "reportingController",
                "reportingController",
                "reportingController",
                "reportingInstance",
                "action",
                "reason"
            ]
        );
        let status = invalid("a", &validate(&e));
        assert!(
            status.message.starts_with("Event \"a\" is invalid: [reportingController: Required value, "),
            "{}",
            status.message
        );
    }

    #[test]
    fn names_that_are_no_path_segment_are_refused() {
        for (name, message) in
            [("..", "may not be '..'"), ("a/b", "may not contain '/'"), ("a%b", "may not contain '%'")]
        {
            let e = event(serde_json::json!({"metadata": {"name": name, "namespace": "default"}}));
            assert_eq!(validate(&e)[0].detail, message);
        }
    }

    #[test]
    fn qualified_names_follow_apimachinery() {
        assert!(qualified_name_errors("kubelet").is_empty());
        assert!(qualified_name_errors("example.com/my-controller").is_empty());
        assert_eq!(qualified_name_errors("-bad").len(), 1);
        assert_eq!(qualified_name_errors(&"a".repeat(64)), ["name part must be no more than 63 characters"]);
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
    }
}
