//! Credentials in sink targets never reach any output: every error path that shows a target
//! (`--sink` parse errors, config `sinks` entries, webhook URLs that cannot be used, NATS
//! targets), in `eventpipe run` and `eventpipe validate`, shows it redacted.

use std::process::{Command, Stdio};

/// What must never be printed.
const SECRETS: [&str; 4] = ["S3cr3tPw", "TOK", "pw@", "alice"];

/// Runs `eventpipe COMMAND ARGS…` on empty input; its exit status and everything it printed.
fn eventpipe(command: &str, args: &[String]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg(command)
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), printed)
}

fn assert_redacted(what: &str, printed: &str) {
    for secret in SECRETS {
        assert!(!printed.contains(secret), "{what}: `{secret}` printed:\n{printed}");
    }
    assert!(printed.contains("REDACTED"), "{what}: the target is shown, redacted:\n{printed}");
}

#[test]
fn sink_targets_with_credentials_are_redacted_in_every_error_of_run_and_validate() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "").unwrap();
    let source = format!("--source=jsonl:{}", input.display());
    let bad_sinks = [
        // Not a delivery mode: the `--sink` parser's error.
        "webhook:http://alice:S3cr3tPw@h/e?token=TOK,delivery=bogus",
        // Not a sink form at all.
        "ftp://alice:pw@h/x?token=TOK",
        // A webhook URL that parses as a sink but cannot be used (no host).
        "webhook:http://alice:S3cr3tPw@/e?token=TOK",
        // A NATS target that does not parse.
        "nats:nats://alice:S3cr3tPw@h:4222?stream=a.b&token=TOK",
    ];
    for (i, sink) in bad_sinks.iter().enumerate() {
        for command in ["run", "validate"] {
            // On the command line…
            let (ok, printed) = eventpipe(command, &[source.clone(), format!("--sink={sink}")]);
            assert!(!ok, "{command} --sink={sink} fails:\n{printed}");
            assert_redacted(&format!("{command} --sink {sink}"), &printed);
            // …and in the config's `sinks`.
            let config = dir.path().join(format!("config-{i}.toml"));
            std::fs::write(&config, format!("[defaults]\nsinks = [\"{sink}\"]\n")).unwrap();
            let (ok, printed) = eventpipe(command, &[source.clone(), format!("--config={}", config.display())]);
            assert!(!ok, "{command} with sinks = [{sink}] fails:\n{printed}");
            assert_redacted(&format!("{command} with sinks = [{sink}]"), &printed);
        }
    }
}

#[test]
fn an_api_server_url_with_credentials_is_redacted_where_it_cannot_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let event = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/events.jsonl")).unwrap();
    std::fs::write(&input, event.lines().next().unwrap()).unwrap();
    // Port 1 refuses the connection: the k8s sink's first write logs that the API server cannot
    // be reached, naming it.
    let args = [
        format!("--source=jsonl:{}", input.display()),
        "--sink=k8s".into(),
        "--kube-server=http://alice:S3cr3tPw@127.0.0.1:1/?token=TOK".into(),
        "--shutdown-timeout=2".into(),
    ];
    let (_, printed) = eventpipe("run", &args);
    assert!(printed.contains("cannot reach the Kubernetes API"), "{printed}");
    assert_redacted("run --kube-server", &printed);
}
