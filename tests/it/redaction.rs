//! Credentials in targets never reach any output: a secret planted in every kind of URL
//! (webhook, OTLP, NATS sink and source, HTTP source, OCI reference) is shown redacted by every
//! path that shows it: parse errors of `--sink`, `--source` and references (mistyped schemes and
//! kinds, unknown options, bad ports), config `sinks` and `source` entries, in `eventpipe run`,
//! `validate`, `config show` (text and JSON) and `plugins pull`; and in a running pipeline's
//! logs at `RUST_LOG=trace` and its `/metrics` labels.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What must never be printed: every planted password, token and secret parameter holds
/// `SEK`; the others are the first test's.
const SECRETS: [&str; 5] = ["SEK", "S3cr3tPw", "TOK", "pw@", "alice"];

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
        // A webhook URL without a host.
        "webhook:http://alice:S3cr3tPw@/e?token=TOK",
        // A NATS target that does not parse.
        "nats:nats://alice:S3cr3tPw@h:4222?stream=a.b&token=TOK",
        // Mistyped schemes and kinds (the did-you-mean shows the URL meant, redacted).
        "webhook:http//alice:SEKpw1@h/e?pass=SEKp1",
        "webhok:https://alice:SEKpw2@h/e?jwt=SEKj2",
        "otlp:htp:/alice:SEKpw3@c:4318",
        "nats:nats//SEKtok4@h:4222",
        "http://alice:SEKpw5@h/e",
        // Typos: an unknown option, a port out of range.
        "webhook:http://alice:SEKpw6@h/e?jwt=SEKj6,max_bach=5",
        "otlp:http://alice:SEKpw7@c:99999/v1/logs?signature=SEKs7",
        "nats:nats://alice:SEKpw8@h:70000?stream=S",
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

#[test]
fn source_targets_and_oci_references_with_credentials_are_redacted_in_every_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad_sources = [
        "nats:nats://alice:SEKpw1@h:4222?stream=a.b&token=SEKt1",
        "nats:nats//SEKtok2@h:4222",
        "nats:nats://alice:SEKpw3@h:4222,nats://h2:4222?streem=S",
        "http:http://alice:SEKpw4@h/e?jwt=SEKj4",
        "http:alice:SEKpw5@127.0.0.1:99999",
        "htpp:alice:SEKpw6@h",
    ];
    for source in bad_sources {
        for command in ["run", "validate"] {
            let (ok, printed) = eventpipe(command, &[format!("--source={source}"), "--sink=jsonl:-".into()]);
            assert!(!ok, "{command} --source={source} fails:\n{printed}");
            assert_redacted(&format!("{command} --source {source}"), &printed);
        }
    }
    // NATS targets that parse, on a port that refuses the connection: the NATS client's debug
    // log of each server it tries shows no credentials.
    for args in [
        ["--source=jsonl:-", "--sink=nats:nats://alice:SEKpw8@127.0.0.1:1?stream=S", "--summary-json=-"],
        ["--source=nats:nats://SEKtok9@127.0.0.1:1?stream=S", "--worker=0/1", "--sink=jsonl:-"],
    ] {
        let (ok, printed) = eventpipe("run", &args.map(String::from));
        assert!(!ok, "{args:?}:\n{printed}");
        assert!(printed.contains("connection attempt failed"), "the client's debug log is there:\n{printed}");
        assert_redacted(&format!("run {args:?}"), &printed);
    }
    // An OCI reference with credentials: on the command line and as a config plugin source.
    let reference = "oci://alice:SEKpw7@127.0.0.1:1/x/p:v1";
    let (ok, printed) =
        eventpipe("plugins", &["pull".into(), reference.into(), format!("--plugins={}", dir.path().display())]);
    assert!(!ok, "{printed}");
    assert_redacted("plugins pull", &printed);
    let config = dir.path().join("oci.toml");
    std::fs::write(&config, format!("[plugins.p]\nsource = \"{reference}@sha256:{}\"\n", "0".repeat(64))).unwrap();
    for command in ["run", "validate", "config"] {
        let mut args = vec![format!("--config={}", config.display())];
        if command == "config" {
            args.insert(0, "show".into());
        } else {
            args.extend(["--source=jsonl:-".into(), "--sink=jsonl:-".into()]);
        }
        let (ok, printed) = eventpipe(command, &args);
        assert!(!ok, "{command} with an OCI source with credentials fails:\n{printed}");
        assert_redacted(&format!("{command} with source = {reference}"), &printed);
    }
}

/// Sinks whose URLs carry credentials in every form: user information, a token as the user,
/// and secret query parameters (`pass`, `jwt`, `token`, `X-Amz-Signature`, `api_key`).
fn sinks_with_credentials(port: u16) -> Vec<String> {
    vec![
        format!("webhook:http://alice:SEKpw1@127.0.0.1:{port}/e?pass=SEKp1&jwt=SEKj1&x=1,max_batch=5"),
        format!("otlp:http://alice:SEKpw2@127.0.0.1:{port}/v1/logs?X-Amz-Signature=SEKs2&api_key=SEKk2"),
        format!("webhook:https://SEKtok3@127.0.0.1:{port}/t?token=SEKt3,delivery=at-most-once"),
    ]
}

#[test]
fn config_show_and_validate_show_working_targets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let sinks = sinks_with_credentials(9);
    let nats = "nats:nats://alice:SEKpw4@127.0.0.1:4222,nats://SEKtok4@127.0.0.1:4223?stream=S";
    let config = dir.path().join("eventpipe.toml");
    let listed: Vec<String> = sinks.iter().map(|s| format!("{s:?}")).collect();
    std::fs::write(
        &config,
        format!(
            "[defaults]\nsinks = [{}]\n[[tenants]]\nname = \"t\"\nmatch = {{ namespaces = [\"t\"] }}\nrules = {{ sinks = [{:?}] }}\n",
            listed.join(", "),
            sinks[0]
        ),
    )
    .unwrap();
    let flags: Vec<String> = sinks.iter().map(|s| format!("--sink={s}")).collect();
    for output in ["text", "json"] {
        // From the config…
        let (ok, printed) = eventpipe(
            "config",
            &["show".into(), format!("--config={}", config.display()), format!("--output={output}")],
        );
        assert!(ok, "{printed}");
        assert_redacted(&format!("config show --output={output} (config)"), &printed);
        // …and from flags.
        let mut args = vec!["show".to_string(), format!("--output={output}")];
        args.extend(flags.iter().cloned());
        let (ok, printed) = eventpipe("config", &args);
        assert!(ok, "{printed}");
        assert_redacted(&format!("config show --output={output} (flags)"), &printed);
    }
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "").unwrap();
    for format in ["text", "json"] {
        let mut args = vec![format!("--source=jsonl:{}", input.display()), format!("--format={format}")];
        args.extend(flags.iter().cloned());
        args.push(format!("--config={}", config.display()));
        let (ok, printed) = eventpipe("validate", &args);
        assert!(ok, "{printed}");
        assert!(SECRETS.iter().all(|s| !printed.contains(s)), "validate --format={format}:\n{printed}");
        let (ok, printed) =
            eventpipe("validate", &[format!("--source={nats}"), "--sink=jsonl:-".into(), format!("--format={format}")]);
        assert!(ok, "{printed}");
        assert!(SECRETS.iter().all(|s| !printed.contains(s)), "validate --source={nats}:\n{printed}");
    }
}

/// `GET /metrics` at `addr`, as text.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_running_pipeline_logs_at_trace_and_labels_metrics_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let stream =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl")).unwrap();
    std::fs::write(&input, stream.lines().take(20).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    // An endpoint that accepts the connection and closes it: every write fails and is retried,
    // so the sinks' failure paths log too.
    let endpoint = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = endpoint.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in endpoint.incoming() {
            drop(conn);
        }
    });
    let mut args = vec![
        "run".to_string(),
        "--no-watch".into(),
        "--follow".into(),
        "--metrics=127.0.0.1:0".into(),
        format!("--source=jsonl:{}", input.display()),
        "--sink=metrics".into(),
    ];
    args.extend(sinks_with_credentials(port).iter().map(|s| format!("--sink={s}")));
    let mut run = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(&args)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = crate::common::stderr_lines(&mut run);
    let mut printed = String::new();
    let mut metrics = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Until the metrics address is announced and the sinks have failed writes to count.
    let scraped = loop {
        while let Ok(line) = lines.recv_timeout(Duration::from_millis(50)) {
            if let Some((_, addr)) = line.split_once("metrics on http://") {
                metrics = Some(addr.trim().trim_end_matches("/metrics").to_string());
            }
            printed += &line;
            printed.push('\n');
        }
        if let Some(addr) = &metrics {
            let text = scrape(addr);
            if text.contains("eventpipe_sink_") && text.matches("REDACTED").count() >= 3 && printed.contains("retry") {
                break text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no failed writes counted after 60 s:\n{}",
            &printed[printed.len().saturating_sub(4000)..]
        );
    };
    let _ = Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let _ = run.wait();
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
        printed += &line;
        printed.push('\n');
    }
    assert!(printed.contains("TRACE"), "the log is at trace level");
    assert_redacted("/metrics", &scraped);
    assert_redacted("the run's log at RUST_LOG=trace", &printed);
}
