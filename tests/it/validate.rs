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
    assert!(stdout.contains("ok (2 tenant(s), 1 sink(s), 1 watcher plugin(s)"), "{stdout}");
    assert!(!out.exists(), "validate opens no sink");
}

#[test]
fn every_problem_is_listed_with_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("half.wasm"), b"\0asm\x0d\0\x01\0").unwrap(); // a half-written component
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        "[defaults]\nsinks = [\"jsonl:/nonexistent-dir/out.jsonl\", \"webhook:http://\"]\n\n[[tenants]]\nname = \"a\"\nmatch = { namespaces = [\"a\"] }\nrules = { filters = [\"no-such-filter\"] }\n\n[[tenants]]\nname = \"b\"\nmatch = { namespaces = [\"b\"] }\nrules = { filters = [\"by-reason\"] }\n\n[[tenants]]\nname = \"c\"\nmatch = { namespaces = [\"c\"] }\nrules = { aggregate_key = \"by-reasn\" }\n\n[[watchers]]\nplugin = \"similar-events\"\n",
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
    assert!(has(&["webhook:http://"]), "a webhook URL without host: {stderr}");
    assert!(has(&["watcher plugin similar-events", "watcher"]), "a combiner named as a watcher: {stderr}");
    assert!(has(&["missing.jsonl"]), "an unreadable source: {stderr}");
    assert!(stderr.contains("8 problem(s)"), "{stderr}");
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
