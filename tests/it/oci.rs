//! Plugins in an OCI registry, against a real one: the CNCF distribution registry (Debian's
//! `docker-registry`) on a loopback port. `plugins push` then `plugins pull` gives back the
//! same bytes; a pull by a wrong digest fails; a config's `source = "oci://…@sha256:…"` is
//! pulled at start, verified, cached and runs (from the cache once the registry is gone).
//! Skipped when `docker-registry` is not installed, unless `CI` is set.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use eventpipe::plugin::embedded::BY_REASON;
use eventpipe::plugin::pin::Sha256Digest;

/// A `docker-registry serve` on 127.0.0.1, stopped on drop.
struct Registry {
    child: Child,
    addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The registry binary, or `None` (the test is skipped) when it is not installed and `CI` is
/// not set.
fn registry_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("docker-registry"))
        .find(|bin| bin.is_file());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "docker-registry is not installed (.ci/run installs it)");
        eprintln!("skipped: docker-registry is not installed (apt-get install docker-registry)");
    }
    found
}

impl Registry {
    fn start(bin: &Path, dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        let storage = dir.join("storage");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                storage.display()
            ),
        )
        .unwrap();
        let child = Command::new(bin).arg("serve").arg(&config).stdout(Stdio::null()).spawn().unwrap();
        let registry = Self { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            use std::io::{Read, Write};
            if let Ok(mut conn) = std::net::TcpStream::connect(&registry.addr) {
                let _ = write!(conn, "GET /v2/ HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", registry.addr);
                let mut answer = String::new();
                let _ = conn.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") {
                    return registry;
                }
            }
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn eventpipe(args: &[String]) -> Output {
    // No credentials of the machine's user: an empty docker config directory.
    let empty = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(args).env("DOCKER_CONFIG", empty.path()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn plugins_go_through_a_registry_unchanged_and_a_config_source_runs() {
    let Some(bin) = registry_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start(&bin, dir.path());
    // by-reason with a custom section: a component of its own digest, the same plugin.
    let mut component = BY_REASON.to_vec();
    component.extend_from_slice(&[0, 4, 3, b'o', b'c', b'i']);
    let file = dir.path().join("by-reason.wasm");
    std::fs::write(&file, &component).unwrap();
    let cache = format!("--compile-cache={}", dir.path().join("cache").display());

    let tagged = format!("oci://{}/eventpipe/by-reason:v1", registry.addr);
    let out = eventpipe(&["plugins".into(), "push".into(), file.display().to_string(), tagged.clone(), cache.clone()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pinned = text(&out.stdout).trim().to_string();
    assert!(pinned.starts_with(&format!("{tagged}@sha256:")), "{pinned}");

    // By tag and by digest: the same bytes, named after the repository or --name.
    let plugins = dir.path().join("plugins");
    for (reference, name) in [(&tagged, None), (&pinned, Some("again"))] {
        let mut args =
            vec!["plugins".into(), "pull".into(), reference.clone(), format!("--plugins={}", plugins.display())];
        args.extend(name.map(|n| format!("--name={n}")));
        let out = eventpipe(&args);
        assert!(out.status.success(), "{reference}: {}", text(&out.stderr));
        let pulled = std::fs::read(plugins.join(format!("{}.wasm", name.unwrap_or("by-reason")))).unwrap();
        assert!(pulled == component, "{reference}: other bytes came back");
    }
    assert_eq!(std::fs::read_dir(&plugins).unwrap().count(), 2, "no temporary file is left");

    // A digest that is not the manifest's: refused, nothing written.
    let wrong = format!("{tagged}@{}", Sha256Digest::of(b"another manifest"));
    let out = eventpipe(&[
        "plugins".into(),
        "pull".into(),
        wrong,
        format!("--plugins={}", dir.path().join("none").display()),
    ]);
    assert!(!out.status.success());
    assert!(!dir.path().join("none").join("by-reason.wasm").exists());

    // A config naming the plugin by source: pulled at start, verified, and it runs; then from
    // the cache with the registry gone.
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, format!("[plugins.by-reason]\nsource = \"{pinned}\"\n")).unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"metadata\":{\"name\":\"p.1\",\"namespace\":\"n\"},\"involvedObject\":{\"kind\":\"Pod\",\"namespace\":\"n\",\"name\":\"p\"},\"reason\":\"Started\",\"message\":\"m\",\"type\":\"Normal\",\"source\":{\"component\":\"kubelet\"},\"count\":1}\n").unwrap();
    let run = |what: &str| {
        let _ = std::fs::remove_file(dir.path().join("out.jsonl"));
        let out = eventpipe(&[
            "run".into(),
            format!("--source=jsonl:{}", input.display()),
            format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()),
            format!("--config={}", config.display()),
            format!("--oci-cache={}", dir.path().join("oci").display()),
            cache.clone(),
        ]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        let live = format!("digest {}", Sha256Digest::of(&component).short());
        assert!(
            stderr.lines().any(|l| l.contains("plugin `by-reason`") && l.contains(&live) && l.contains("is live")),
            "{what}: the pulled plugin serves: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap().lines().count(), 1, "{what}");
    };
    run("pulled");
    // `config show` shows the plan `run` loads: the pulled plugin, not the embedded one of the
    // same name.
    let out = eventpipe(&[
        "config".into(),
        "show".into(),
        "--output=json".into(),
        format!("--config={}", config.display()),
        format!("--oci-cache={}", dir.path().join("oci").display()),
        cache.clone(),
    ]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "config show: {}", text(&out.stderr));
    assert!(shown.contains(Sha256Digest::of(&component).hex()), "config show names the pulled plugin: {shown}");
    assert!(!shown.contains(Sha256Digest::of(BY_REASON).hex()), "not the embedded one: {shown}");
    let layer = dir.path().join("oci").join("blobs").join("sha256").join(Sha256Digest::of(&component).hex());
    assert!(std::fs::read(&layer).unwrap() == component, "the cache holds the layer by its digest");
    drop(registry);
    run("cached");
}

/// A plain-HTTP server on every address (`0.0.0.0`) of a free port, answering every request
/// with a 404; stopped on drop.
struct PlainHttp {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PlainHttp {
    fn start() -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = conn.read(&mut [0; 4096]);
                let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Self { port, stop }
    }
}

impl Drop for PlainHttp {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[test]
fn a_plain_http_registry_off_loopback_is_refused_with_the_tls_cause_and_the_insecure_hint() {
    // 0.0.0.0 reaches this machine but is not a loopback host: HTTPS is tried against it.
    let server = PlainHttp::start();
    let dir = tempfile::tempdir().unwrap();
    let reference = format!("oci://0.0.0.0:{}/some/plugin:1", server.port);
    let hint = "the registry may serve plain HTTP";
    let pull = |insecure: bool| {
        let mut args = vec![
            "plugins".into(),
            "pull".into(),
            reference.clone(),
            format!("--plugins={}", dir.path().join("plugins").display()),
        ];
        args.extend(insecure.then(|| "--insecure".to_string()));
        eventpipe(&args)
    };
    let out = pull(false);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let line =
        stderr.lines().find(|l| l.contains(&reference)).unwrap_or_else(|| panic!("names the reference: {stderr}"));
    // HTTPS was tried, and the cause follows reqwest's own text.
    let tried = format!("error sending request for url (https://0.0.0.0:{}/v2/): ", server.port);
    assert!(line.contains(&tried), "{line}");
    assert!(line.contains("InvalidContentType") || line.contains("corrupt message"), "the TLS cause: {line}");
    assert!(line.contains(hint) && line.contains("`--insecure`"), "the hint: {line}");
    assert!(line.contains("`--oci-insecure` on `run`"), "the hint: {line}");

    // Asked for plain HTTP: the registry is reached (and answers 404), no hint.
    let out = pull(true);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("404") && stderr.contains("http://0.0.0.0:"), "{stderr}");
    assert!(!stderr.contains(hint), "{stderr}");

    // A config's source, pulled by `run`: the same hint, and none with `--oci-insecure`.
    let config = dir.path().join("eventpipe.toml");
    let pinned = format!("{reference}@{}", Sha256Digest::of(b"a manifest"));
    std::fs::write(&config, format!("[plugins.remote]\nsource = \"{pinned}\"\n")).unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "").unwrap();
    let run = |insecure: bool| {
        let mut args = vec![
            "run".into(),
            format!("--source=jsonl:{}", input.display()),
            format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()),
            format!("--config={}", config.display()),
            format!("--oci-cache={}", dir.path().join("oci").display()),
            format!("--compile-cache={}", dir.path().join("cache").display()),
        ];
        args.extend(insecure.then(|| "--oci-insecure".to_string()));
        eventpipe(&args)
    };
    let out = run(false);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("plugin `remote`") && stderr.contains(hint), "{stderr}");
    let out = run(true);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("404") && !stderr.contains(hint), "{stderr}");
}
