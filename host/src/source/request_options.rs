//! The query parameters of an API request and apimachinery's validation of them, so that a
//! request the apiserver refuses is refused here the same way, before anything is done: the
//! write options (`dryRun`, `fieldManager`, `fieldValidation` of `CreateOptions`,
//! `PatchOptions`, `UpdateOptions`) of HTTP ingest, and `resourceVersionMatch` of the read
//! API's `ListOptions`.
//!
//! As the apiserver's handlers (`handlers/create.go`, `patch.go`, `update.go`, `get.go`), a
//! refusal is `422 Invalid` built by `errors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io",
//! Kind: "CreateOptions"}, "", errs)`: message `CreateOptions.meta.k8s.io "" is invalid:
//! dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"` (several errors in
//! `[…, …]`), `details.group` / `details.kind` the options' kind, one `details.causes` entry
//! per error (`FieldValueNotSupported`, `FieldValueForbidden`, `FieldValueTooLong`,
//! `FieldValueInvalid`). The texts are apimachinery's `validation.ValidateDryRun`,
//! `ValidateFieldManager`, `ValidateFieldValidation` and
//! `internalversion/validation.ValidateListOptions`.

use axum::http::StatusCode;

use super::api_status::{ApiStatus, StatusCause, StatusDetails};

/// Longest `fieldManager`, bytes (apimachinery's `FieldManagerMaxLength`).
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The query's `name=value` pairs in order, percent-decoded (`+` is a space, as in a form);
/// a name may come several times (`dryRun=All&dryRun=All`). Never fails: a bad escape stays
/// as it is.
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(hi), Some(lo)) => {
                            out.push((hi * 16 + lo) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Go's `%q` of a string, near enough (JSON escapes).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn cause(reason: &str, field: &str, message: String) -> StatusCause {
    StatusCause { reason: reason.into(), message, field: field.into() }
}

fn not_supported(field: &str, value: String, supported: &[&str]) -> StatusCause {
    let supported: Vec<String> = supported.iter().map(|s| quoted(s)).collect();
    let message = format!("Unsupported value: {value}: supported values: {}", supported.join(", "));
    cause("FieldValueNotSupported", field, message)
}

fn forbidden(field: &str, detail: &str) -> StatusCause {
    cause("FieldValueForbidden", field, format!("Forbidden: {detail}"))
}

/// `422 Invalid` for `causes` of the options `kind` (see the module docs); `None` when there
/// is no cause.
pub fn invalid(kind: &str, causes: Vec<StatusCause>) -> Option<ApiStatus> {
    if causes.is_empty() {
        return None;
    }
    let errors: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    let errors = if errors.len() == 1 { errors.concat() } else { format!("[{}]", errors.join(", ")) };
    let message = format!("{kind}.meta.k8s.io \"\" is invalid: {errors}");
    let details = StatusDetails { group: "meta.k8s.io".into(), kind: kind.into(), causes, ..StatusDetails::default() };
    Some(ApiStatus::failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message).with_details(details))
}

/// The options of a write (`kind`: `CreateOptions`, `PatchOptions` or `UpdateOptions`) in
/// `query`: whether it is a dry run (`dryRun=All`: answered, not stored).
///
/// # Errors
/// The `422` of an unsupported `dryRun`, a `fieldManager` longer than
/// [`FIELD_MANAGER_MAX_LENGTH`] bytes or with a character that is not printable, an
/// unsupported `fieldValidation` (the apiserver's `ValidateCreateOptions` and its siblings).
pub fn write_options(kind: &str, query: &[(String, String)]) -> Result<bool, Box<ApiStatus>> {
    fn values<'q>(query: &'q [(String, String)], name: &'static str) -> impl Iterator<Item = &'q str> {
        query.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    let mut causes = Vec::new();
    let dry_run: Vec<&str> = values(query, "dryRun").collect();
    if dry_run.iter().any(|v| *v != "All") {
        let list: Vec<String> = dry_run.iter().map(|v| quoted(v)).collect();
        causes.push(not_supported("dryRun", format!("[]string{{{}}}", list.join(", ")), &["All"]));
    }
    if let Some(manager) = values(query, "fieldManager").last() {
        if manager.len() > FIELD_MANAGER_MAX_LENGTH {
            let message = format!("Too long: may not be more than {FIELD_MANAGER_MAX_LENGTH} bytes");
            causes.push(cause("FieldValueTooLong", "fieldManager", message));
        }
        for (i, c) in manager.char_indices().filter(|(_, c)| c.is_control() || *c == '\u{fffd}') {
            let message =
                format!("Invalid value: {}: invalid character U+{:04X} (at position {i})", quoted(manager), c as u32);
            causes.push(cause("FieldValueInvalid", "fieldManager", message));
        }
    }
    if let Some(v) = values(query, "fieldValidation").last()
        && !["", "Ignore", "Strict", "Warn"].contains(&v)
    {
        causes.push(not_supported("fieldValidation", quoted(v), &["", "Ignore", "Strict", "Warn"]));
    }
    match invalid(kind, causes) {
        Some(status) => Err(Box::new(status)),
        None => Ok(!dry_run.is_empty()),
    }
}

/// apimachinery's `ValidateListOptions` of `resourceVersionMatch` (`watch`: only the value is
/// checked, since a watch-list sends `NotOlderThan`): `Exact` or `NotOlderThan`, only with a
/// `resourceVersion`, not with `continue`, and `Exact` not at `"0"`.
///
/// # Errors
/// The `422 Invalid` of `ListOptions` naming every problem.
pub fn list_options(query: &[(String, String)], watch: bool) -> Result<(), Box<ApiStatus>> {
    let last = |name: &str| query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("");
    let (matching, rv, continue_) = (last("resourceVersionMatch"), last("resourceVersion"), last("continue"));
    if matching.is_empty() {
        return Ok(());
    }
    let mut causes = Vec::new();
    if !watch {
        if rv.is_empty() {
            causes.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !continue_.is_empty() {
            causes
                .push(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"));
        }
    }
    if matching != "Exact" && matching != "NotOlderThan" {
        causes.push(not_supported("resourceVersionMatch", quoted(matching), &["Exact", "NotOlderThan", ""]));
    }
    if !watch && matching == "Exact" && rv == "0" {
        causes.push(forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    invalid("ListOptions", causes).map_or(Ok(()), |status| Err(Box::new(status)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Vec<(String, String)> {
        query_pairs(Some(s))
    }

    #[test]
    fn queries_are_decoded_in_order_with_repeats() {
        assert_eq!(
            q("a=b%3Dc&dryRun=All&dryRun=x+y&e&=f"),
            [("a", "b=c"), ("dryRun", "All"), ("dryRun", "x y"), ("e", ""), ("", "f")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn write_options_are_checked_as_the_apiserver_does() {
        assert_eq!(write_options("CreateOptions", &q("")).unwrap(), false);
        assert_eq!(
            write_options("CreateOptions", &q("dryRun=All&fieldManager=kubectl&fieldValidation=Strict")).unwrap(),
            true
        );
        let status = write_options("CreateOptions", &q("dryRun=Bogus")).unwrap_err();
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            status.message,
            r#"CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All""#
        );
        let details = status.details.unwrap();
        assert_eq!((details.group.as_str(), details.kind.as_str()), ("meta.k8s.io", "CreateOptions"));
        assert_eq!(details.causes[0].reason, "FieldValueNotSupported");
        let long = "m".repeat(129);
        let status =
            write_options("PatchOptions", &q(&format!("fieldManager={long}&fieldValidation=Loud"))).unwrap_err();
        assert!(
            status.message.starts_with(r#"PatchOptions.meta.k8s.io "" is invalid: [fieldManager: Too long"#),
            "{}",
            status.message
        );
        assert!(status.message.contains(
            r#"fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"]"#
        ));
        let status = write_options("UpdateOptions", &q("fieldManager=a%07b")).unwrap_err();
        assert!(status.message.ends_with("invalid character U+0007 (at position 1)"), "{}", status.message);
    }

    #[test]
    fn resource_version_match_is_checked_as_the_apiserver_does() {
        assert!(list_options(&q("resourceVersion=5&resourceVersionMatch=Exact"), false).is_ok());
        assert!(list_options(&q("resourceVersion=5&resourceVersionMatch=NotOlderThan"), false).is_ok());
        assert!(list_options(&q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan"), true).is_ok());
        let status = list_options(&q("resourceVersion=5&resourceVersionMatch=Bogus"), false).unwrap_err();
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            status.message,
            r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", """#
        );
        let status = list_options(&q("resourceVersionMatch=Exact"), false).unwrap_err();
        assert!(
            status.message.contains("Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
        );
        let status = list_options(&q("resourceVersion=0&resourceVersionMatch=Exact"), false).unwrap_err();
        assert!(status.message.contains(r#"resourceVersionMatch "exact" is forbidden for resourceVersion "0""#));
    }
}
