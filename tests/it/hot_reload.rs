//! Hot reload of plugins and of the tenant config, through `eventpipe run` as a process: swaps
//! under load lose and duplicate nothing and take effect in order; broken files and configs
//! never replace working ones.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// A running `eventpipe run --source jsonl:-` whose stderr lines arrive on a channel.
pub(crate) struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    pub(crate) fn start(args: &[String]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            // One partition: these tests read results in input order across objects.
            .args(["run", "--source=jsonl:-", "--summary-json", "--workers=1"])
            .args(args)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("eventpipe runs");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { stdin: child.stdin.take(), child, stderr: rx, seen: Vec::new() }
    }

    /// Waits for a stderr line containing every one of `parts`; returns it.
    pub(crate) fn wait_for(&mut self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        if let Some(line) = self.seen.iter().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if parts.iter().all(|p| line.contains(p)) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {parts:?} on stderr; saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// As [`wait_for`](Self::wait_for), among the lines not seen yet only.
    pub(crate) fn wait_for_next(&mut self, parts: &[&str]) -> String {
        let seen = std::mem::take(&mut self.seen);
        let line = self.wait_for(parts);
        self.seen = seen.into_iter().chain(std::mem::take(&mut self.seen)).collect();
        line
    }

    pub(crate) fn send(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin, waits for the exit, returns the JSON summary and all stderr lines.
    pub(crate) fn finish(mut self) -> (Value, Vec<String>) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.stderr.iter());
        assert!(status.success(), "eventpipe run failed:\n{}", self.seen.join("\n"));
        let summary = self.seen.iter().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
        (summary, self.seen)
    }
}

pub(crate) fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Event `i` of a synthetic stream: its own object, so every event is its own group.
fn event_line(i: usize) -> String {
    serde_json::json!({
        "metadata": {"name": format!("obj-{i}.1"), "namespace": "swap"},
        "involvedObject": {"kind": "Pod", "namespace": "swap", "name": format!("obj-{i}"), "uid": format!("uid-{i}")},
        "reason": "Test", "message": format!("m{i}"), "type": "Normal",
        "source": {"component": "test"},
        "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
    })
    .to_string()
        + "\n"
}

/// The tagger fixture with its version marker rewritten to `version`.
fn tagger_version(base: &[u8], version: usize) -> Vec<u8> {
    const MARKER: &[u8] = b"eventpipe-test-tag:000";
    let at = base.windows(MARKER.len()).position(|w| w == MARKER).expect("the marker is in the component");
    assert_eq!(base.windows(MARKER.len()).filter(|w| *w == MARKER).count(), 1, "the marker occurs once");
    let mut bytes = base.to_vec();
    bytes[at + MARKER.len() - 3..at + MARKER.len()].copy_from_slice(format!("{version:03}").as_bytes());
    bytes
}

fn digest(bytes: &[u8]) -> String {
    format!("digest {}", eventpipe::plugin::pin::Sha256Digest::of(bytes).short())
}

/// Installs `bytes` as `dir/name.wasm`: written elsewhere and renamed in (atomic), or written in
/// place in four slow chunks (each pause longer than the reload debounce, so incomplete files
/// are seen and must be refused).
fn install(dir: &Path, name: &str, bytes: &[u8], atomic: bool) {
    let target = dir.join(format!("{name}.wasm"));
    if atomic {
        let tmp = dir.join(format!(".{name}.wasm.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &target).unwrap();
    } else {
        let mut file = std::fs::File::create(&target).unwrap();
        for chunk in bytes.chunks(bytes.len().div_ceil(4)) {
            file.write_all(chunk).unwrap();
            file.flush().unwrap();
            std::thread::sleep(Duration::from_millis(60));
        }
    }
}

fn arg(name: &str, value: impl AsRef<Path>) -> String {
    format!("--{name}={}", value.as_ref().display())
}

/// `eventpipe run` reading stdin, with the tagger fixture (version 0) as `plugins/tagger.wasm`
/// and a config in which every event aggregates (max_events 1), so every result's message comes
/// from the combiner; started and its plugin confirmed live.
struct TaggerRun {
    run: Running,
    plugins: std::path::PathBuf,
    config: std::path::PathBuf,
    base: Vec<u8>,
    out: std::path::PathBuf,
}

impl TaggerRun {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        let plugins = dir.join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        let base = std::fs::read(common::fixture_plugin("tagger")).unwrap();
        std::fs::write(plugins.join("tagger.wasm"), tagger_version(&base, 0)).unwrap();
        let config = dir.join("eventpipe.toml");
        std::fs::write(&config, "[defaults]\nmessage_combiner = \"tagger\"\nmax_events = 1\nburst = 1000000\n")
            .unwrap();
        let out = dir.join("out.jsonl");
        let mut args = vec![
            arg("sink", format!("jsonl:{}", out.display())),
            arg("plugins", &plugins),
            arg("config", &config),
            arg("compile-cache", dir.join("cache")),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut run = Running::start(&args);
        run.wait_for(&["plugin `tagger`", &digest(&tagger_version(&base, 0)), "is live"]);
        Self { run, plugins, config, base, out }
    }
}

#[test]
fn plugin_swaps_under_load_lose_nothing_and_take_effect_in_order() {
    const SWAPS: usize = 21;
    const PER_SWAP: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let TaggerRun { mut run, plugins, base, out, .. } = TaggerRun::start(dir.path(), &["--delivery=wait"]);

    // (first event index sent after version k was confirmed live, k)
    let mut confirmed = Vec::new();
    let mut sent = 0;
    for version in 1..=SWAPS {
        let text: String = (sent..sent + PER_SWAP).map(event_line).collect();
        run.send(&text);
        sent += PER_SWAP;
        let bytes = tagger_version(&base, version);
        install(&plugins, "tagger", &bytes, version % 2 == 0);
        run.wait_for(&["plugin `tagger`", &digest(&bytes), "is live"]);
        confirmed.push((sent, version));
    }
    let text: String = (sent..sent + PER_SWAP).map(event_line).collect();
    run.send(&text);
    sent += PER_SWAP;
    let (summary, _) = run.finish();

    let results = lines(&out);
    assert_eq!(results.len(), sent, "exactly one result per input: {summary}");
    assert!(sent >= 100_000);
    let mut last = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["event"]["involvedObject"]["name"], format!("obj-{i}"), "results in input order, none lost");
        let message = r["event"]["message"].as_str().unwrap();
        let (tag, rest) = message.strip_prefix("[tag:").and_then(|m| m.split_once("] ")).expect(message);
        assert_eq!(rest, format!("m{i}"));
        let tag: usize = tag.parse().unwrap();
        assert!(tag >= last, "result {i} has version {tag} after version {last}");
        let floor = confirmed.iter().filter(|&&(from, _)| i >= from).map(|&(_, v)| v).max().unwrap_or(0);
        assert!(tag >= floor, "result {i} sent after version {floor} went live came from version {tag}");
        last = tag;
    }
    assert_eq!(last, SWAPS, "the last version serves at the end");
    assert!(summary["plugin_swaps"].as_u64().unwrap() >= SWAPS as u64, "{summary}");
}

#[test]
fn a_broken_plugin_file_and_a_broken_config_are_refused_while_the_old_ones_keep_serving() {
    let dir = tempfile::tempdir().unwrap();
    let TaggerRun { mut run, plugins, config, out, .. } = TaggerRun::start(dir.path(), &["--metrics=127.0.0.1:0"]);
    let metrics = run.wait_for(&["metrics on http://"]);
    let addr = metrics.split_once("http://").unwrap().1.trim_end_matches("/metrics").to_string();
    run.send(&(0..10).map(event_line).collect::<String>());

    install(&plugins, "tagger", b"\0asm this is not a component", true);
    let refused = run.wait_for(&["plugin `tagger`", "rejected, previous version kept"]);
    assert!(refused.contains("tagger.wasm"), "{refused}");
    std::fs::write(&config, "[defaults]\nmessage_combiner = \"tagger\"\nmax_events = \"one\"\n").unwrap();
    let refused = run.wait_for(&["config rejected, previous config kept"]);
    assert!(refused.contains("eventpipe.toml:3") && refused.contains("max_events"), "{refused}");
    std::fs::write(&config, "[defaults]\nmessage_combiner = \"no-such-plugin\"\n").unwrap();
    let refused = run.wait_for(&["config rejected", "no plugin named `no-such-plugin`"]);
    assert!(refused.contains("eventpipe.toml:2"), "{refused}");
    let scrape = get(&addr, "/metrics");
    let rejected = scrape.lines().find(|l| l.starts_with("eventpipe_config_reloads_total{result=\"rejected\"}"));
    assert_eq!(rejected.and_then(|l| l.rsplit(' ').next()), Some("2"), "both configs counted:\n{scrape}");

    run.send(&(10..20).map(event_line).collect::<String>());
    let (summary, stderr) = run.finish();
    let results = lines(&out);
    assert_eq!(results.len(), 20, "{summary}");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["event"]["message"], format!("[tag:000] m{i}"), "the old plugin and config still serve");
    }
    assert_eq!(summary["rejected_reloads"], 3, "{summary}");
    let said = |needle: &str| stderr.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(said("rejected, previous version kept"), 1, "each refusal is printed once: {stderr:?}");
    assert_eq!(said("config rejected"), 2, "each refusal is printed once: {stderr:?}");
}

/// The body of `GET PATH` from the HTTP server at `addr` (HOST:PORT).
fn get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or(response)
}

/// The peak resident memory of process `pid`, bytes (`VmHWM` in `/proc/PID/status`).
#[cfg(target_os = "linux")]
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).map(|v| v.trim().trim_end_matches(" kB"));
    kb.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0) * 1024
}

#[cfg(target_os = "linux")]
fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success(), "mkfifo {}", path.display());
}

#[cfg(target_os = "linux")]
impl Running {
    /// As [`wait_for`](Self::wait_for), killing the process (and failing) as soon as its peak
    /// memory passes `max_rss` bytes.
    fn wait_for_within(&mut self, parts: &[&str], max_rss: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rss = peak_rss(self.child.id());
            if rss > max_rss {
                let _ = self.child.kill();
                panic!("peak memory {} MiB > {} MiB while waiting for {parts:?}", rss >> 20, max_rss >> 20);
            }
            if let Some(line) = self.seen.iter().find(|l| parts.iter().all(|p| l.contains(p))) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no line with {parts:?} on stderr; saw:\n{}", self.seen.join("\n"));
            if let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(50)) {
                self.seen.push(line);
            }
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn fifos_and_device_links_in_the_plugins_directory_are_refused_once_and_never_stop_the_reloads() {
    const MAX_RSS: u64 = 200 << 20;
    let dir = tempfile::tempdir().unwrap();
    let TaggerRun { mut run, plugins, base, out, .. } = TaggerRun::start(dir.path(), &[]);
    // The FIFO first: before the fix it blocked the reload thread for good (and the device
    // link would then never be read, so memory stays safe either way).
    mkfifo(&plugins.join("fifo.wasm"));
    let refused = run.wait_for_within(&["plugin `fifo`", "is a FIFO, not a regular file"], MAX_RSS);
    assert!(refused.contains("fifo.wasm"), "{refused}");
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.wasm")).unwrap();
    run.wait_for_within(&["plugin `zero`", "/dev/zero is a character device, not a regular file"], MAX_RSS);
    // Events still flow, and a valid plugin renamed in afterwards goes live.
    run.send(&(0..10).map(event_line).collect::<String>());
    let bytes = tagger_version(&base, 1);
    install(&plugins, "tagger", &bytes, true);
    run.wait_for_within(&["plugin `tagger`", &digest(&bytes), "is live"], MAX_RSS);
    // Touching the special files again reports nothing new.
    // (`touch` sets the times without opening the file; renaming the FIFO away and back would
    // show a reload that looks between the two renames a new plugin, `fifo2`, to refuse.)
    for special in ["zero.wasm", "fifo.wasm"] {
        let _ = Command::new("touch").arg("-h").arg(plugins.join(special)).status();
    }
    std::thread::sleep(Duration::from_millis(300));
    let peak = peak_rss(run.child.id());
    assert!(peak < MAX_RSS, "peak memory {} MiB", peak >> 20);
    run.send(&(10..20).map(event_line).collect::<String>());
    let (summary, stderr) = run.finish();
    assert_eq!(lines(&out).len(), 20, "{summary}");
    let said = |needle: &str| stderr.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(said("is a FIFO, not a regular file"), 1, "refused once: {stderr:?}");
    assert_eq!(said("is a character device, not a regular file"), 1, "refused once: {stderr:?}");

    // At start-up the same files are refused with one line each, and the run goes on.
    let (plugins, out) = (dir.path().join("plugins-at-start"), dir.path().join("out2.jsonl"));
    std::fs::create_dir(&plugins).unwrap();
    mkfifo(&plugins.join("fifo.wasm"));
    std::os::unix::fs::symlink("/dev/zero", plugins.join("zero.wasm")).unwrap();
    std::fs::write(plugins.join("big.wasm"), vec![0u8; 2048]).unwrap();
    let mut run = Running::start(&[
        arg("sink", format!("jsonl:{}", out.display())),
        arg("plugins", &plugins),
        "--max-plugin-bytes=1024".into(),
    ]);
    run.wait_for_within(&["plugin `fifo`", "is a FIFO, not a regular file"], MAX_RSS);
    run.wait_for_within(&["plugin `zero`", "is a character device, not a regular file"], MAX_RSS);
    run.wait_for_within(&["plugin `big`", "larger than the limit of 1024 bytes"], MAX_RSS);
    run.send(&event_line(0));
    let (summary, _) = run.finish();
    assert_eq!(lines(&out).len(), 1, "{summary}");
}

/// A plugin checked with `eventpipe plugins check` (which compiles it optimized into the
/// compilation cache) goes live optimized when dropped in, from the cache: no quick tier, no
/// second compilation. Content not checked before goes live on the quick tier.
#[test]
fn a_checked_plugin_goes_live_optimized_from_the_compilation_cache() {
    let dir = tempfile::tempdir().unwrap();
    let TaggerRun { mut run, plugins, base, .. } = TaggerRun::start(dir.path(), &[]);
    let checked = tagger_version(&base, 7);
    let candidate = dir.path().join("tagger.wasm");
    std::fs::write(&candidate, &checked).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["plugins", "check"])
        .arg(arg("compile-cache", dir.path().join("cache")))
        .arg(&candidate)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    install(&plugins, "tagger", &checked, true);
    let live = run.wait_for(&["plugin `tagger`", &digest(&checked), "is live"]);
    assert!(live.contains("(optimized, compiled in "), "{live}");
    let unchecked = tagger_version(&base, 8);
    install(&plugins, "tagger", &unchecked, true);
    let live = run.wait_for(&["plugin `tagger`", &digest(&unchecked), "is live"]);
    assert!(live.contains("(quick tier, compiled in "), "{live}");
    run.finish();
}
