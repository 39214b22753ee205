//! `eventpipe top`: the exposition parser and the rates on text the real metrics module writes,
//! the view rendered on a test terminal, the command against an unreachable or live endpoint;
//! and the progress bar of `run` and `replay`, silent when stderr is not a terminal.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventpipe::commands::top::{Rate, Scrape, View, render};
use eventpipe::metrics::Metrics;
use eventpipe::pipeline::router::RouterStats;
use eventpipe::plugin::{CallFailure, PluginStatsSnapshot};
use eventpipe::sink::SinkStats;
use eventpipe::sink::webhook::WebhookStats;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// What the metrics source reads at each scrape (the counters a run would hand over).
#[derive(Default)]
struct Activity {
    events_in: u64,
    router: RouterStats,
    plugin: PluginStatsSnapshot,
    incoming_dropped: u64,
    webhook: WebhookStats,
}

fn metrics(activity: &Arc<Mutex<Activity>>) -> Metrics {
    let metrics = Metrics::new();
    let a = activity.clone();
    metrics.add_source(move |s| {
        let a = a.lock().unwrap();
        s.add_events_in("jsonl:in.jsonl", a.events_in);
        s.add_router(&a.router);
        s.add_plugin_stats("by-reason", "payments", &a.plugin);
        s.add_watcher_dropped("incoming", "queue_full", a.incoming_dropped);
        s.add_sink_stats("audit-hook", &a.webhook);
    });
    metrics
}

fn set(activity: &Arc<Mutex<Activity>>, step: u64) {
    let mut a = activity.lock().unwrap();
    a.events_in = 100 * step;
    a.router.tenants.insert(
        "payments".into(),
        SinkStats {
            received: 60 * step,
            created: 20 * step,
            patched: 10 * step,
            skipped: 4 * step,
            retries: 2 * step,
            gave_up: step,
            ..SinkStats::default()
        },
    );
    a.router
        .tenants
        .insert("default".into(), SinkStats { received: 40 * step, created: 40 * step, ..Default::default() });
    let mut failures = [0; CallFailure::LABELS.len()];
    failures[CallFailure::LABELS.iter().position(|l| *l == "trap").unwrap()] = step;
    a.plugin = PluginStatsSnapshot {
        calls: 3 * step,
        events: 60 * step,
        fuel_consumed: 60 * step * 1500 + if step > 1 { 60 * 500 } else { 0 },
        // 2 µs inside calls per event.
        call_nanos: 60 * step * 2000,
        failures: step,
        failures_by_reason: failures,
        drops: 0,
        ..PluginStatsSnapshot::default()
    };
    a.incoming_dropped = 6 * step;
    a.webhook =
        WebhookStats { sent: 30 * step, retries: step, queue_depth: 7, queue_capacity: 1000, ..Default::default() };
}

/// Two scrapes of the real encoder, two seconds apart.
fn two_scrapes() -> (Scrape, Scrape) {
    let activity = Arc::new(Mutex::new(Activity::default()));
    let metrics = metrics(&activity);
    set(&activity, 1);
    let first = Scrape::parse(&metrics.encode().unwrap()).unwrap();
    set(&activity, 3);
    let second = Scrape::parse(&metrics.encode().unwrap()).unwrap();
    (first, second)
}

fn rate(per_sec: f64, total: f64) -> Rate {
    Rate { per_sec: Some(per_sec), total }
}

#[test]
fn the_parser_reads_the_metrics_module_and_counters_become_rates() {
    let (first, second) = two_scrapes();
    assert_eq!(second.value("eventpipe_events_in_total", &[("source", "jsonl:in.jsonl")]), Some(300.0));
    assert_eq!(second.value("eventpipe_sink_writes_total", &[("verb", "patch"), ("tenant", "payments")]), Some(30.0));
    assert_eq!(second.value("eventpipe_sink_queue_depth", &[("sink", "audit-hook")]), Some(7.0));

    let view = View::new("http://x/metrics", Some(&first), &second, Duration::from_secs(2));
    assert_eq!(view.interval_secs, Some(2.0));
    assert_eq!(view.sources.len(), 1);
    assert_eq!(view.sources[0].events, rate(100.0, 300.0));

    let payments = view.tenants.iter().find(|t| t.tenant == "payments").unwrap();
    assert_eq!(payments.routed, rate(60.0, 180.0));
    assert_eq!(payments.spam_skipped, rate(4.0, 12.0));
    assert_eq!(payments.retries, rate(2.0, 6.0));
    // Every outcome: gave_up only here.
    assert_eq!(payments.write_failures, rate(1.0, 3.0));

    let write = |tenant: &str, verb: &str| {
        view.writes.iter().find(|w| w.tenant == tenant && w.verb == verb).map(|w| w.writes).unwrap()
    };
    assert_eq!(write("payments", "create"), rate(20.0, 60.0));
    assert_eq!(write("payments", "patch"), rate(10.0, 30.0));
    assert_eq!(write("default", "create"), rate(40.0, 120.0));

    let plugin = &view.plugins[0];
    assert_eq!((plugin.plugin.as_str(), plugin.tenant.as_str()), ("by-reason", "payments"));
    assert_eq!(plugin.calls, rate(3.0, 9.0));
    assert_eq!(plugin.events, rate(60.0, 180.0));
    // Over the interval: (120 × 1500 + 30,000) fuel for 120 events.
    assert_eq!(plugin.fuel_per_event, Some(1750.0));
    assert_eq!(plugin.ns_per_event.map(f64::round), Some(2000.0), "eventpipe_plugin_call_seconds_total per event");
    assert_eq!(plugin.failures, rate(1.0, 3.0));

    let sink = &view.sinks[0];
    assert_eq!((sink.sink.as_str(), sink.depth, sink.capacity), ("audit-hook", 7.0, 1000.0));
    assert_eq!((sink.sent, sink.retries), (rate(30.0, 90.0), rate(1.0, 3.0)));

    let drops: Vec<_> = view.drops.iter().map(|d| (d.place.as_str(), d.reason.as_str(), d.drops)).collect();
    assert!(drops.contains(&("watcher incoming", "queue_full", rate(6.0, 18.0))), "{drops:?}");
    assert!(drops.contains(&("tenant payments", "gave_up", rate(1.0, 3.0))), "{drops:?}");
    assert_eq!(drops.len(), 2, "only series that counted something: {drops:?}");

    // The first scrape alone: totals, no rates yet; fuel per event over the whole run.
    let view = View::new("http://x/metrics", None, &first, Duration::ZERO);
    assert_eq!(view.interval_secs, None);
    assert_eq!(view.sources[0].events, Rate { per_sec: None, total: 100.0 });
    assert_eq!(view.plugins[0].fuel_per_event, Some(1500.0));
}

/// The terminal's text, one string per row.
fn screen(view: &View, width: u16, height: u16) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| render(frame, view)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    (0..height).map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect::<String>()).collect()
}

/// The row holding every one of `cells`, in order, as separate words.
fn row_with<'a>(rows: &'a [String], cells: &[&str]) -> &'a str {
    rows.iter()
        .find(|r| {
            let words: Vec<&str> = r.split(|c: char| c.is_whitespace() || c == '│').filter(|w| !w.is_empty()).collect();
            words.windows(cells.len()).any(|w| w == cells)
        })
        .unwrap_or_else(|| panic!("no row with {cells:?} in\n{}", rows.join("\n")))
}

#[test]
fn the_view_renders_rates_per_source_tenant_verb_plugin_sink_and_drop() {
    let (first, second) = two_scrapes();
    let view = View::new("http://127.0.0.1:9090/metrics", Some(&first), &second, Duration::from_secs(2));
    let rows = screen(&view, 120, 48);
    assert!(rows[0].contains("http://127.0.0.1:9090/metrics") && rows[0].contains("rates over 2.0 s"), "{}", rows[0]);
    row_with(&rows, &["source", "events/s", "total"]);
    row_with(&rows, &["jsonl:in.jsonl", "100", "300"]);
    // tenant, routed/s, spam skipped/s, record retries/s, write failures/s, routed
    row_with(&rows, &["payments", "60", "4", "2", "1", "180"]);
    row_with(&rows, &["default", "40", "0", "0", "0", "120"]);
    row_with(&rows, &["payments", "patch", "10", "30"]);
    // plugin, tenant, calls/s, events/s, ns/event, fuel/event, failures/s, events
    row_with(&rows, &["by-reason", "payments", "3", "60", "2.0k", "1.8k", "1", "180"]);
    row_with(&rows, &["audit-hook", "7/1.0k", "30", "1", "0", "0"]);
    row_with(&rows, &["watcher", "incoming", "queue_full", "6", "18"]);
    row_with(&rows, &["tenant", "payments", "gave_up", "1", "3"]);
    assert!(rows.iter().any(|r| r.contains("fuel/event")), "the column says what it is");

    // Before the second scrape: `-` for rates; an empty table says so; a failed scrape shows.
    let mut view = View::new(
        "http://h/metrics",
        None,
        &Scrape::parse("eventpipe_events_in_total{source=\"k8s\"} 5\n").unwrap(),
        Duration::ZERO,
    );
    view.error = Some("cannot reach http://h/metrics: connection refused".into());
    let rows = screen(&view, 160, 30);
    assert!(rows[0].contains("waiting for a second scrape") && rows[0].contains("last scrape failed: cannot reach"));
    row_with(&rows, &["k8s", "-", "5"]);
    assert!(rows.iter().filter(|r| r.contains("none")).count() >= 5, "{}", rows.join("\n"));
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn top(args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
    command.arg("top").args(args).stdin(Stdio::null());
    match token {
        Some(t) => command.env("EVENTPIPE_INGEST_TOKEN", t),
        None => command.env_remove("EVENTPIPE_INGEST_TOKEN"),
    };
    let out = command.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn top_against_an_unreachable_url_exits_1_with_one_line_and_leaves_the_terminal_alone() {
    let url = format!("http://127.0.0.1:{}/metrics", closed_port());
    let (code, stdout, stderr) = top(&["--metrics-url", &url, "--interval", "0.2"], None);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&format!("eventpipe: top: cannot reach {url}: ")), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stdout.contains('\x1b') && !stderr.contains('\x1b'), "no terminal sequences: {stdout:?} {stderr:?}");

    let (code, _, stderr) = top(&["--metrics-url", "https://example.invalid/metrics"], None);
    assert_eq!(code, 1);
    assert!(stderr.contains("expected an http:// URL"), "{stderr}");

    // `top HOST:PORT` scrapes `http://HOST:PORT/metrics`.
    let port = closed_port();
    let (code, _, stderr) = top(&[&format!("127.0.0.1:{port}")], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.starts_with(&format!("eventpipe: top: cannot reach http://127.0.0.1:{port}/metrics: ")), "{stderr}");
}

/// Serves `metrics` (behind `token` when given) on a loopback port until the test ends.
fn serve(metrics: Metrics, token: Option<&str>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let router = eventpipe::metrics::router(Arc::new(metrics));
    let router = match token {
        Some(t) => eventpipe::source::http::with_bearer(router, eventpipe::source::http::BearerToken::new(t).unwrap()),
        None => router,
    };
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    format!("http://{addr}/metrics")
}

#[test]
fn top_scrapes_with_the_token_before_it_needs_a_terminal() {
    let token = "s3cret-token-for-top";
    let url = serve(Metrics::new(), Some(token));
    let (code, _, stderr) = top(&["--metrics-url", &url], None);
    assert_eq!(code, 1);
    assert!(stderr.contains("answered 401 Unauthorized (set $EVENTPIPE_INGEST_TOKEN)"), "{stderr}");
    // With the token the scrape works; stdout is not a terminal, so it stops there, cleanly.
    let (code, stdout, stderr) = top(&["--metrics-url", &url], Some(token));
    assert_eq!(code, 1);
    assert_eq!(stderr.trim(), "eventpipe: top: standard output is not a terminal");
    assert!(stdout.is_empty());
}

/// `script` (util-linux) runs a command on a pseudo-terminal, when it is installed.
fn script_available() -> bool {
    Command::new("script").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// `command` run by a shell on a 120×40 pseudo-terminal; `input` typed after `wait`. Killed
/// (and the test failed) if it has not ended within a minute.
fn on_a_terminal(command: &str, input: &[u8], wait: Duration) -> (i32, String) {
    let mut child = Command::new("script")
        .args(["-qec", &format!("stty cols 120 rows 40; {command}"), "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    });
    std::thread::sleep(wait);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{command}: still running after a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

#[test]
fn top_on_a_terminal_shows_the_tables_and_q_restores_the_terminal() {
    if !script_available() {
        eprintln!("skipped: no `script` to make a terminal");
        return;
    }
    let activity = Arc::new(Mutex::new(Activity::default()));
    set(&activity, 1);
    let url = serve(metrics(&activity), None);
    let command = format!("{} top --metrics-url {url} --interval 0.2", env!("CARGO_BIN_EXE_eventpipe"));
    let (code, out) = on_a_terminal(&command, b"q", Duration::from_millis(1500));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\x1b[?1049h"), "entered the alternate screen: {out:?}");
    assert!(out.contains("\x1b[?1049l"), "and left it: {out:?}");
    // Words, not phrases: the terminal output moves the cursor between words.
    for text in ["Events", "Tenants", "jsonl:in.jsonl", "payments", "audit-hook", "fuel/event"] {
        assert!(out.contains(text), "{text} on screen: {out:?}");
    }
}

/// An input file of `n` events.
fn events_file(dir: &Path, n: usize) -> std::path::PathBuf {
    let path = dir.join("in.jsonl");
    let mut text = String::new();
    for i in 0..n {
        text += &format!(
            "{{\"metadata\":{{\"name\":\"e{i}\",\"namespace\":\"ns\"}},\"involvedObject\":{{\"kind\":\"Pod\",\"name\":\"p{}\"}},\"reason\":\"R\",\"message\":\"m{i}\"}}\n",
            i % 50
        );
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// What a progress bar would leave in stderr.
fn has_progress(stderr: &str) -> bool {
    stderr.contains('\r') || stderr.contains("events/s") || stderr.contains("lines/s") || stderr.contains("=>")
}

#[test]
fn run_and_replay_print_no_progress_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let input = events_file(dir.path(), 2000);
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--builtin", "--no-watch"])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("read 2000 events"), "{stderr}");
    assert!(!has_progress(&stderr), "{stderr:?}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["replay", "--builtin"])
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    assert!(!has_progress(&stderr), "{stderr:?}");
}

#[test]
fn run_and_replay_show_progress_on_a_terminal() {
    if !script_available() {
        eprintln!("skipped: no `script` to make a terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = events_file(dir.path(), 2000);
    let bin = env!("CARGO_BIN_EXE_eventpipe");
    let run = format!(
        "{bin} run --builtin --no-watch --source=jsonl:{} --sink=jsonl:{}",
        input.display(),
        dir.path().join("out.jsonl").display()
    );
    let (code, out) = on_a_terminal(&run, b"", Duration::ZERO);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("events/s") && out.contains("read 2000 events"), "{out:?}");

    let replay = format!("{bin} replay --builtin < {} > /dev/null", input.display());
    let (code, out) = on_a_terminal(&replay, b"", Duration::ZERO);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("lines/s"), "{out:?}");
}
