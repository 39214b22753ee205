//! `eventpipe validate`: every problem of a config, its plugins, sinks and source listed at
//! once, without running anything (no file created, nothing contacted).

use std::process::Command;

fn validate(args: &[String]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe")).arg("validate").args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_good_setup_validates_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nsinks = [\"jsonl:{}\"]\ndrop = [{{ reasons = [\"Pulled\"] }}]\n\n[[tenants]]\nname = \"t\"\nmatch = {{ namespaces = [\"a\"] }}\nrules = {{ aggregate_key = \"by-reason\" }}\n\n[[watchers]]\nplugin = \"log\"\n",
            out.display()
        ),
    )
    .unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "").unwrap();
    let (ok, stdout, stderr) = validate(&[
        format!("--config={}", config.display()),
        format!("--plugins={}", dir.path().display()),
        format!("--source=jsonl:{}", input.display()),
    ]);
    assert!(ok, "{stderr}");
    // One tenant declared; `[defaults]` is checked beside it, not counted as a tenant.
    assert!(
        stdout.contains("ok (1 tenant(s) and the defaults, 0 route(s), 1 sink(s), 1 watcher plugin(s)"),
        "{stdout}"
    );
    assert!(!out.exists(), "validate opens no sink");
}

#[test]
fn every_problem_is_listed_with_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("half.wasm"), b"\0asm\x0d\0\x01\0").unwrap(); // a half-written component
    std::fs::write(plugins.join("notes.wasm"), b"not wasm at all").unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        "[defaults]\nsinks = [\"jsonl:/nonexistent-dir/out.jsonl\"]\n\n[[tenants]]\nname = \"a\"\nmatch = { namespaces = [\"a\"] }\nrules = { filters = [\"no-such-filter\"] }\n\n[[tenants]]\nname = \"b\"\nmatch = { namespaces = [\"b\"] }\nrules = { filters = [\"by-reason\"] }\n\n[[tenants]]\nname = \"c\"\nmatch = { namespaces = [\"c\"] }\nrules = { aggregate_key = \"by-reasn\" }\n\n[[tenants]]\nname = \"d\"\nmatch = { namespaces = [\"d\"] }\nrules = { sinks = [\"webhook:http://\"] }\n\n[[watchers]]\nplugin = \"similar-events\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = validate(&[
        format!("--config={}", config.display()),
        format!("--plugins={}", plugins.display()),
        format!("--source=jsonl:{}", dir.path().join("missing.jsonl").display()),
    ]);
    assert!(!ok);
    let problems: Vec<&str> = stderr.lines().filter(|l| l.starts_with("eventpipe validate: ")).collect();
    let has = |needles: &[&str]| problems.iter().any(|p| needles.iter().all(|n| p.contains(n)));
    assert!(has(&["half.wasm"]), "the half-written plugin file: {stderr}");
    assert!(
        has(&["notes.wasm rejected: ", "bad magic number - expected=[0x0, 0x61, 0x73, 0x6d] actual=[0x6e"]),
        "a file that is not Wasm, on one line, with no previous version to keep: {stderr}"
    );
    assert!(has(&["eventpipe.toml:7", "tenants[0].rules.filters[0]", "no-such-filter"]), "a missing plugin: {stderr}");
    assert!(
        has(&["tenants[1]", "by-reason", "is an aggregate-key plugin"]),
        "a key plugin named as a filter: {stderr}"
    );
    assert!(
        has(&["tenants[2].rules.aggregate_key", "did you mean `by-reason`?", "plugins directory"]),
        "a typo: {stderr}"
    );
    assert!(has(&["/nonexistent-dir", "does not exist"]), "a sink directory: {stderr}");
    assert!(
        has(&["eventpipe.toml:22", "tenants[3].rules.sinks[0]", "webhook:http://", "empty host"]),
        "a webhook URL without host, where it is: {stderr}"
    );
    assert!(has(&["watcher plugin similar-events", "watcher"]), "a combiner named as a watcher: {stderr}");
    assert!(has(&["missing.jsonl"]), "an unreadable source: {stderr}");
    assert!(stderr.contains("9 problem(s)"), "{stderr}");
}

#[test]
fn a_config_syntax_error_is_one_problem_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, "[defaults]\nburst = \"many\"\n").unwrap();
    let (ok, _, stderr) = validate(&[format!("--config={}", config.display()), "--sink=jsonl:-".into()]);
    assert!(!ok);
    assert!(stderr.contains("eventpipe.toml:2") && stderr.contains("defaults.burst"), "{stderr}");
    assert!(stderr.contains("1 problem(s)"), "{stderr}");
}

/// `eventpipe config schema` is a JSON Schema that knows every key of the config (a key it
/// does not know is refused, as the parser refuses it) and describes them.
#[test]
fn the_config_schema_covers_every_key_and_refuses_unknown_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(["config", "schema"]).output().unwrap();
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defs = &schema["$defs"];
    // Every key a config may hold, as the parser knows them.
    let sample = r#"
[defaults]
aggregate_key = "builtin"
message_combiner = "builtin"
spam_key = "builtin"
filters = []
max_events = 10
max_interval_seconds = 600
burst = 25
qps = 0.5
lru_cache_size = 4096
fuel_per_event = 1
memory_limit_bytes = 1
fallback = "drop"
sinks = ["jsonl:-"]
partition_key = "namespace"
drop = [{ name = "n", namespaces = ["a"], kinds = ["Pod"], reasons = ["R"], types = ["Normal"], message = "m", labels = { a = "b" }, source_components = ["c"], source_hosts = ["h"], headers = { h = "v" } }]
keep = [{ kinds = ["Pod"] }]
spam_exempt = [{ kinds = ["Pod"] }]
suppressed_summary_seconds = 60
[plugins.p]
k = "v"
[[tenants]]
name = "t"
match = { kinds = ["Pod"] }
rules = { burst = 1, routes = [{ name = "tr", sinks = ["jsonl:-"] }] }
[[routes]]
name = "r"
match = { types = ["Warning"] }
min_count = 3
rate = "10/min"
sinks = ["jsonl:-"]
[[watchers]]
plugin = "log"
queue_length = 10
full_channel_behavior = "wait"
[watch_cache]
size = 100
age_seconds = 60
objects = 100
event_ttl_seconds = 600
queue_length = 10
budget_seconds = 2.5
bookmark_interval_seconds = 30
"#;
    eventpipe::config::Config::parse(sample, std::path::Path::new("sample.toml"))
        .expect("the sample is a valid config");
    let sample: toml::Table = sample.parse().unwrap();
    let props = |def: &str| -> Vec<String> {
        let d = if def.is_empty() { &schema } else { &defs[def] };
        assert_eq!(d["additionalProperties"], false, "{def} refuses unknown keys");
        d["properties"].as_object().unwrap().keys().cloned().collect()
    };
    let known = |def: &str, table: &toml::Table| {
        let props = props(def);
        for key in table.keys() {
            assert!(props.contains(key), "{def} lacks {key}");
        }
    };
    known("", &sample);
    known("RawRules", sample["defaults"].as_table().unwrap());
    known("RawMatch", sample["defaults"]["drop"][0].as_table().unwrap());
    known("RawTenant", sample["tenants"][0].as_table().unwrap());
    known("RawRules", sample["tenants"][0]["rules"].as_table().unwrap());
    known("RawRoute", sample["routes"][0].as_table().unwrap());
    known("RawRoute", sample["tenants"][0]["rules"]["routes"][0].as_table().unwrap());
    known("RawWatcher", sample["watchers"][0].as_table().unwrap());
    known("RawWatchCache", sample["watch_cache"].as_table().unwrap());
    assert!(defs["RawRules"]["properties"]["burst"]["description"].as_str().unwrap().contains("client-go"));
    assert_eq!(
        defs["RawWatcher"]["properties"]["full_channel_behavior"]["anyOf"][0]["$ref"],
        "#/$defs/FullChannelBehaviorName"
    );
}

/// A problem of `[defaults]` that every tenant inherits is listed once.
#[test]
fn an_inherited_problem_is_listed_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        "[defaults]\naggregate_key = \"by-reasn\"\nsinks = [\"jsonl:-\"]\n[[tenants]]\nname = \"t\"\nmatch = { namespaces = [\"a\"] }\n",
    )
    .unwrap();
    let (ok, _, stderr) = validate(&[format!("--config={}", config.display())]);
    assert!(!ok);
    assert_eq!(stderr.matches("no plugin named `by-reasn`").count(), 1, "{stderr}");
    assert!(stderr.contains("1 problem(s)"), "{stderr}");
}

/// Every problem of one tenant is listed, not only its first.
#[test]
fn every_problem_of_one_tenant_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        "[defaults]\nsinks = [\"jsonl:-\"]\naggregate_key = \"no-such-key\"\nspam_key = \"similar-events\"\nfilters = [\"by-reason\", \"no-such-filter\"]\n",
    )
    .unwrap();
    let (ok, _, stderr) = validate(&[format!("--config={}", config.display())]);
    assert!(!ok);
    for needle in [
        "defaults.aggregate_key: no plugin named `no-such-key`",
        "is a message-combiner plugin, not a spam-key plugin",
        "is an aggregate-key plugin, not a filter plugin",
        "defaults.filters[1]: no plugin named `no-such-filter`",
    ] {
        assert!(stderr.contains(needle), "{needle} missing:\n{stderr}");
    }
    assert!(stderr.contains("4 problem(s)"), "{stderr}");
}

/// A type error, an unknown key (with the key it most likely meant) and a misspelt plugin are
/// all named in one run, each at its line; `--format json` gives the same as objects for CI.
#[test]
fn a_type_error_an_unknown_key_and_a_misspelt_plugin_are_all_listed_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        "[defaults]\nsinks = [\"jsonl:-\"]\nburst = \"many\"\nmax_evnts = 5\naggregate_key = \"by-reasn\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = validate(&[format!("--config={}", config.display())]);
    assert!(!ok);
    for needle in [
        "eventpipe.toml:3:9: defaults.burst: invalid type: string \"many\", expected i64",
        "eventpipe.toml:4:1: defaults.max_evnts: unknown field `max_evnts`",
        "did you mean `max_events`?",
        "eventpipe.toml:5: defaults.aggregate_key: no plugin named `by-reasn`",
    ] {
        assert!(stderr.contains(needle), "{needle} missing:\n{stderr}");
    }
    assert!(stderr.contains("3 problem(s)"), "{stderr}");

    let (ok, stdout, stderr) = validate(&[format!("--config={}", config.display()), "--format=json".into()]);
    assert!(!ok, "{stderr}");
    let problems: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let problems = problems.as_array().unwrap();
    let at: Vec<_> = problems.iter().map(|p| (p["line"].as_u64(), p["column"].as_u64(), p["key"].as_str())).collect();
    assert_eq!(
        at,
        [
            (Some(3), Some(9), Some("defaults.burst")),
            (Some(4), Some(1), Some("defaults.max_evnts")),
            (Some(5), None, Some("defaults.aggregate_key")),
        ],
        "{stdout}"
    );
    assert!(problems.iter().all(|p| p["file"].as_str().unwrap().ends_with("eventpipe.toml")), "{stdout}");
    assert!(problems[2]["message"].as_str().unwrap().contains("did you mean `by-reason`?"), "{stdout}");

    // All well: an empty array and status 0.
    std::fs::write(&config, "[defaults]\nsinks = [\"jsonl:-\"]\n").unwrap();
    let (ok, stdout, stderr) = validate(&[format!("--config={}", config.display()), "--format=json".into()]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "[]");
}

/// Every TOML syntax error is listed with its line and column, not only the first.
#[test]
fn every_syntax_error_is_listed_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, "[defaults]\nburst = \nmax_events = 3\n\n[[tenants]\nname = \"t\"\n").unwrap();
    let (ok, _, stderr) = validate(&[format!("--config={}", config.display())]);
    assert!(!ok);
    assert!(stderr.contains("eventpipe.toml:2:"), "{stderr}");
    assert!(stderr.contains("eventpipe.toml:5:"), "{stderr}");
}

/// `validate` as `run` would start: with a `k8s` sink and no Kubernetes config anywhere (no
/// kubeconfig, no in-cluster service account), it fails with `run`'s error, without
/// connecting to anything.
fn validate_without_cluster(args: &[String]) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg("validate")
        .args(args)
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// A kubeconfig for a server at `server`, without credentials.
fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_kubernetes_sink_without_a_kubernetes_config_fails_as_run_would() {
    let (ok, _, stderr) = validate_without_cluster(&["--sink=k8s".into()]);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("kubernetes config: "), "{stderr}");
    // The same with a `k8s` source, and for run itself.
    let (ok, _, source_stderr) = validate_without_cluster(&["--source=k8s".into(), "--sink=jsonl:-".into()]);
    assert!(!ok && source_stderr.contains("kubernetes config: "), "{source_stderr}");

    // A kubeconfig that parses is enough without `--connect`, though nothing listens there.
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), "http://127.0.0.1:1");
    let with_config = [format!("--kubeconfig={}", config.display()), "--sink=k8s".into()];
    let (ok, stdout, stderr) = validate_without_cluster(&with_config);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("ok ("), "{stdout}");
    // `--connect` asks the server, and names it.
    let (ok, _, stderr) = validate_without_cluster(&[&with_config[..], &["--connect".into()]].concat());
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("GET /version") && stderr.contains("127.0.0.1:1"), "{stderr}");
    // A kubeconfig that does not parse is named.
    std::fs::write(&config, "clusters: [oops").unwrap();
    let (ok, _, stderr) = validate_without_cluster(&with_config);
    assert!(!ok && stderr.contains(&config.display().to_string()), "{stderr}");
}

#[test]
fn a_sink_path_that_cannot_be_written_is_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file would be, and a directory in which no file can be made.
    let (ok, _, stderr) =
        validate(&[format!("--sink=jsonl:{}", dir.path().display()), "--sink=jsonl:/proc/eventpipe-out.jsonl".into()]);
    assert!(!ok);
    assert!(stderr.contains("is a directory"), "{stderr}");
    assert!(stderr.contains("directory /proc: not writable"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left behind");
    // An existing file is written by appending to it: validate leaves it as it was.
    let file = dir.path().join("out.jsonl");
    std::fs::write(&file, "kept\n").unwrap();
    let (ok, _, stderr) = validate(&[format!("--sink=jsonl:{}", file.display())]);
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept\n");
}

#[test]
fn connect_reaches_every_server_and_names_each_that_failed() {
    // Two ports nothing listens on, and one that listens.
    let closed = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (webhook_port, nats_port) = (closed(), closed());
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open_port = open.local_addr().unwrap().port();
    let args = [
        format!("--sink=webhook:http://127.0.0.1:{webhook_port}/events"),
        format!("--sink=otlp:http://127.0.0.1:{open_port}"),
        format!("--source=nats:nats://127.0.0.1:{nats_port}"),
    ];
    // Without --connect nothing is reached.
    let (ok, _, stderr) = validate(&args);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = validate(&[&args[..], &["--connect".into()]].concat());
    assert!(!ok);
    let problems: Vec<&str> = stderr.lines().filter(|l| l.starts_with("eventpipe validate: ")).collect();
    assert!(
        problems.iter().any(|p| p.contains(&format!("127.0.0.1:{webhook_port}")) && p.contains("webhook:")),
        "{stderr}"
    );
    assert!(problems.iter().any(|p| p.contains("source nats:") && p.contains(&nats_port.to_string())), "{stderr}");
    assert!(!problems.iter().any(|p| p.contains("otlp:")), "the listening host is reached: {stderr}");
    assert!(stderr.contains("2 problem(s)"), "{stderr}");
}
