//! `eventpipe top`: a live view of a running instance, read from its `GET /metrics`
//! ([`crate::metrics`]), in the manner of `vector top`.
//!
//! - [`Scrape::parse`] reads the text exposition format (OpenMetrics or Prometheus text 0.0.4):
//!   every sample by name and label set;
//! - [`View::new`] turns two scrapes into what is shown: counters become rates (the difference of
//!   two scrapes over the time between them; a counter that went down was reset and counts from
//!   zero), gauges are shown as they are;
//! - [`render`] draws a [`View`] into a ratatui [`Frame`] (pure: tested on a `TestBackend`);
//! - [`Scraper`] fetches the endpoint (hyper's client, plain HTTP, optionally with a bearer
//!   token).
//!
//! The plugin table shows calls/s, events/s, nanoseconds per event inside the plugin's calls
//! (`eventpipe_plugin_call_seconds_total` over `eventpipe_plugin_events_total`) and fuel per
//! event (fuel ≈ Wasm instructions).

use std::collections::BTreeMap;
use std::time::Duration;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};

/// A sample's labels, sorted by name.
pub type Labels = Vec<(String, String)>;

/// One scrape: every sample by its exposed name (a counter's with `_total`), then by label set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// Samples by name, then by (sorted) labels.
    pub samples: BTreeMap<String, BTreeMap<Labels, f64>>,
}

/// A line of the exposition text that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// The line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub message: String,
}

impl Scrape {
    /// Reads exposition text: `# TYPE` / `# HELP` / `# UNIT` / `# EOF` and other comments are
    /// skipped; each sample line is `name{label="value",…} value [timestamp] [# exemplar]`, label
    /// values with `\\`, `\"` and `\n` escapes.
    ///
    /// # Errors
    /// [`ParseError`] for a sample line that is not of that form.
    pub fn parse(text: &str) -> Result<Scrape, ParseError> {
        let mut scrape = Scrape::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, labels, value) = parse_sample(line).map_err(|message| ParseError { line: i + 1, message })?;
            scrape.samples.entry(name.to_string()).or_default().insert(labels, value);
        }
        Ok(scrape)
    }

    /// The value of the sample `name` with exactly these labels (in any order).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut key: Labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        key.sort();
        self.samples.get(name)?.get(&key).copied()
    }

    /// Every sample named `name`, by labels.
    pub fn series(&self, name: &str) -> impl Iterator<Item = (&Labels, f64)> {
        self.samples.get(name).into_iter().flat_map(|m| m.iter().map(|(l, v)| (l, *v)))
    }
}

/// The value of label `key` in `labels` (`""` when absent).
fn label<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
}

/// `name{labels} value …` → its parts.
fn parse_sample(line: &str) -> Result<(&str, Labels, f64), String> {
    let end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
    let name = &line[..end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return Err(format!("bad metric name in {line:?}"));
    }
    let mut rest = &line[end..];
    let mut labels = Labels::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            // Skip separators, then either `}` or `key="value"`.
            while chars.next_if(|(_, c)| *c == ',' || c.is_whitespace()).is_some() {}
            let Some((start, c)) = chars.next() else { return Err(format!("unterminated labels in {line:?}")) };
            if c == '}' {
                rest = &after[start + 1..];
                break;
            }
            let mut key_end = start + c.len_utf8();
            while let Some((i, c)) = chars.next_if(|(_, c)| *c != '=') {
                key_end = i + c.len_utf8();
            }
            let key = after[start..key_end].trim();
            if chars.next().is_none() || chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("expected `=\"` after label {key:?} in {line:?}"));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated label value in {line:?}")),
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("unterminated label value in {line:?}")),
                    },
                    Some((_, c)) => value.push(c),
                }
            }
            labels.push((key.to_string(), value));
        }
    }
    labels.sort();
    let value = rest.split_whitespace().next().ok_or_else(|| format!("no value in {line:?}"))?;
    let value: f64 = value.parse().map_err(|_| format!("bad value {value:?} in {line:?}"))?;
    Ok((name, labels, value))
}

/// A counter's rate over the last interval (`None` before the second scrape) and its total.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rate {
    /// Per second, between the last two scrapes.
    pub per_sec: Option<f64>,
    /// The counter's value at the last scrape.
    pub total: f64,
}

impl Rate {
    fn add(self, other: Rate) -> Rate {
        let per_sec = match (self.per_sec, other.per_sec) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        Rate { per_sec, total: self.total + other.total }
    }
}

/// A row of the "Events in" table.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRow {
    /// The source (`jsonl:…`, `http:…`, `k8s`).
    pub source: String,
    /// `eventpipe_events_in_total`.
    pub events: Rate,
}

/// A row of the "Tenants" table.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRow {
    /// The tenant.
    pub tenant: String,
    /// `eventpipe_events_routed_total`.
    pub routed: Rate,
    /// `eventpipe_spam_skipped_total`.
    pub spam_skipped: Rate,
    /// `eventpipe_record_retries_total` (`recordToSink` attempts beyond the first).
    pub retries: Rate,
    /// `eventpipe_sink_write_failures_total`, every outcome.
    pub write_failures: Rate,
}

/// A row of the "Sink writes" table.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteRow {
    /// The tenant.
    pub tenant: String,
    /// `create`, `patch` or `series_counted`.
    pub verb: String,
    /// `eventpipe_sink_writes_total`.
    pub writes: Rate,
}

/// A row of the "Plugins" table.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginRow {
    /// The plugin.
    pub plugin: String,
    /// The tenant using it.
    pub tenant: String,
    /// `eventpipe_plugin_calls_total`.
    pub calls: Rate,
    /// `eventpipe_plugin_events_total`.
    pub events: Rate,
    /// Fuel consumed per event: over the last interval when it had events, else over the run.
    pub fuel_per_event: Option<f64>,
    /// Nanoseconds inside calls per event passed to the plugin, as fuel per event.
    pub ns_per_event: Option<f64>,
    /// `eventpipe_plugin_failures_total`, every reason.
    pub failures: Rate,
}

/// A row of the "Queued sinks" table (webhook sinks).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRow {
    /// The sink.
    pub sink: String,
    /// `eventpipe_sink_queue_depth`, events.
    pub depth: f64,
    /// `eventpipe_sink_queue_capacity`, events.
    pub capacity: f64,
    /// `eventpipe_sink_sent_total`.
    pub sent: Rate,
    /// `eventpipe_sink_retries_total`.
    pub retries: Rate,
    /// `eventpipe_sink_failures_total`.
    pub failures: Rate,
    /// `eventpipe_sink_dropped_total`, every reason.
    pub dropped: Rate,
}

/// A row of the "Drops" table: one series that counts lost events.
#[derive(Debug, Clone, PartialEq)]
pub struct DropRow {
    /// Where: `watcher incoming`, `tenant payments`, `sink audit`, `plugin p / tenant t`.
    pub place: String,
    /// Why: the series' `reason` or `outcome` label.
    pub reason: String,
    /// The counter.
    pub drops: Rate,
}

/// What `eventpipe top` shows: one scrape, with rates from the one before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// The endpoint.
    pub url: String,
    /// Seconds between the two scrapes the rates come from (`None`: only one scrape yet).
    pub interval_secs: Option<f64>,
    /// Events in per source.
    pub sources: Vec<SourceRow>,
    /// Per tenant.
    pub tenants: Vec<TenantRow>,
    /// Sink writes per tenant and verb.
    pub writes: Vec<WriteRow>,
    /// Per plugin and tenant.
    pub plugins: Vec<PluginRow>,
    /// Queued (webhook) sinks.
    pub sinks: Vec<SinkRow>,
    /// Series of lost events that are not zero: watcher queue drops, `recordToSink` failures,
    /// queued-sink drops, plugin drops.
    pub drops: Vec<DropRow>,
    /// The last scrape's error, when it failed (the view is then the one before).
    pub error: Option<String>,
}

/// Rates between two scrapes `secs` apart.
struct Diff<'a> {
    prev: Option<&'a Scrape>,
    cur: &'a Scrape,
    secs: f64,
}

impl Diff<'_> {
    /// The counter `name` with `labels` (a series missing from the earlier scrape started at 0).
    fn rate(&self, name: &str, labels: &Labels) -> Rate {
        let get = |s: &Scrape| s.samples.get(name).and_then(|m| m.get(labels)).copied();
        let total = get(self.cur).unwrap_or(0.0);
        let per_sec = self.prev.filter(|_| self.secs > 0.0).map(|prev| {
            let before = get(prev).unwrap_or(0.0);
            // A counter that went down was reset: it counted `total` since.
            let delta = if total >= before { total - before } else { total };
            delta / self.secs
        });
        Rate { per_sec, total }
    }

    /// The sum of every series of `name` whose label `key` is `value`.
    fn rate_sum(&self, name: &str, key: &str, value: &str) -> Rate {
        self.sum_where(name, |l| label(l, key) == value)
    }

    fn sum_where(&self, name: &str, keep: impl Fn(&Labels) -> bool) -> Rate {
        self.cur.series(name).filter(|(l, _)| keep(l)).fold(Rate::default(), |sum, (l, _)| sum.add(self.rate(name, l)))
    }
}

impl View {
    /// The view of `cur`, with rates over `elapsed` since `prev` (none without `prev`).
    pub fn new(url: &str, prev: Option<&Scrape>, cur: &Scrape, elapsed: Duration) -> View {
        let secs = elapsed.as_secs_f64();
        let d = Diff { prev, cur, secs };
        let sources = cur
            .series("eventpipe_events_in_total")
            .map(|(l, _)| SourceRow {
                source: label(l, "source").to_string(),
                events: d.rate("eventpipe_events_in_total", l),
            })
            .collect();
        let tenants = cur
            .series("eventpipe_events_routed_total")
            .map(|(l, _)| {
                let tenant = label(l, "tenant");
                TenantRow {
                    tenant: tenant.to_string(),
                    routed: d.rate("eventpipe_events_routed_total", l),
                    spam_skipped: d.rate_sum("eventpipe_spam_skipped_total", "tenant", tenant),
                    retries: d.rate_sum("eventpipe_record_retries_total", "tenant", tenant),
                    write_failures: d.rate_sum("eventpipe_sink_write_failures_total", "tenant", tenant),
                }
            })
            .collect();
        let writes = cur
            .series("eventpipe_sink_writes_total")
            .map(|(l, _)| WriteRow {
                tenant: label(l, "tenant").to_string(),
                verb: label(l, "verb").to_string(),
                writes: d.rate("eventpipe_sink_writes_total", l),
            })
            .collect();
        let plugins = cur
            .series("eventpipe_plugin_calls_total")
            .map(|(l, _)| {
                let (plugin, tenant) = (label(l, "plugin"), label(l, "tenant"));
                let same = |o: &Labels| label(o, "plugin") == plugin && label(o, "tenant") == tenant;
                let events = d.rate("eventpipe_plugin_events_total", l);
                let fuel = d.rate("eventpipe_plugin_fuel_consumed_total", l);
                let per_event = |r: &Rate| match (r.per_sec, events.per_sec) {
                    (Some(f), Some(e)) if e > 0.0 => Some(f / e),
                    _ if events.total > 0.0 => Some(r.total / events.total),
                    _ => None,
                };
                let fuel_per_event = per_event(&fuel);
                let ns_per_event =
                    per_event(&d.rate("eventpipe_plugin_call_seconds_total", l)).map(|seconds| seconds * 1e9);
                PluginRow {
                    plugin: plugin.to_string(),
                    tenant: tenant.to_string(),
                    calls: d.rate("eventpipe_plugin_calls_total", l),
                    events,
                    fuel_per_event,
                    ns_per_event,
                    failures: d.sum_where("eventpipe_plugin_failures_total", same),
                }
            })
            .collect();
        let sinks = cur
            .series("eventpipe_sink_queue_capacity")
            .map(|(l, capacity)| {
                let sink = label(l, "sink");
                SinkRow {
                    sink: sink.to_string(),
                    depth: cur.series("eventpipe_sink_queue_depth").find(|(o, _)| *o == l).map_or(0.0, |(_, v)| v),
                    capacity,
                    sent: d.rate("eventpipe_sink_sent_total", l),
                    retries: d.rate("eventpipe_sink_retries_total", l),
                    failures: d.rate("eventpipe_sink_failures_total", l),
                    dropped: d.rate_sum("eventpipe_sink_dropped_total", "sink", sink),
                }
            })
            .collect();
        let mut drops = Vec::new();
        // (family, the labels naming the place, the label saying why: none for plugin drops)
        let families = [
            ("eventpipe_watcher_dropped_total", ["watcher", ""], "reason"),
            ("eventpipe_sink_write_failures_total", ["tenant", ""], "outcome"),
            ("eventpipe_sink_dropped_total", ["sink", ""], "reason"),
            ("eventpipe_plugin_drops_total", ["plugin", "tenant"], ""),
        ];
        for (name, place, why) in families {
            for (l, total) in cur.series(name) {
                if total > 0.0 {
                    let place = place
                        .iter()
                        .filter(|k| !k.is_empty())
                        .map(|k| format!("{k} {}", label(l, k)))
                        .collect::<Vec<_>>()
                        .join(" / ");
                    let reason = if why.is_empty() { "plugin failed" } else { label(l, why) };
                    drops.push(DropRow { place, reason: reason.to_string(), drops: d.rate(name, l) });
                }
            }
        }
        View {
            url: url.to_string(),
            interval_secs: prev.map(|_| secs),
            sources,
            tenants,
            writes,
            plugins,
            sinks,
            drops,
            error: None,
        }
    }
}

/// A rate for a table cell: `-` before the second scrape; `12.3`, `4.5k`, `6.7M`.
pub fn format_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_string(), format_number)
}

/// A number for a table cell: one decimal, with `k` / `M` / `G` above a thousand.
pub fn format_number(n: f64) -> String {
    let a = n.abs();
    if a >= 1e9 {
        format!("{:.1}G", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else if n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

/// One table: a title, a header, rows of cells (a single `none` row when empty), column widths.
fn table(frame: &mut Frame, area: Rect, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let widest = rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0);
            Constraint::Length(widest.max(h.chars().count()) as u16)
        })
        .collect();
    let rows = if rows.is_empty() { vec![vec!["none".to_string()]] } else { rows };
    let table = Table::new(rows.into_iter().map(Row::new), widths)
        .header(Row::new(header.iter().copied()).style(Style::default().add_modifier(Modifier::BOLD)))
        .column_spacing(2)
        .block(Block::default().borders(Borders::ALL).title(title));
    frame.render_widget(table, area);
}

/// Draws `view`: a status line, then the tables (events in, tenants, sink writes, plugins,
/// queued sinks, drops), each as tall as its rows.
pub fn render(frame: &mut Frame, view: &View) {
    let rate = |r: &Rate| format_rate(r.per_sec);
    let total = |r: &Rate| format_number(r.total);
    let sources: Vec<Vec<String>> =
        view.sources.iter().map(|s| vec![s.source.clone(), rate(&s.events), total(&s.events)]).collect();
    let tenants: Vec<Vec<String>> = view
        .tenants
        .iter()
        .map(|t| {
            vec![
                t.tenant.clone(),
                rate(&t.routed),
                rate(&t.spam_skipped),
                rate(&t.retries),
                rate(&t.write_failures),
                total(&t.routed),
            ]
        })
        .collect();
    let writes: Vec<Vec<String>> =
        view.writes.iter().map(|w| vec![w.tenant.clone(), w.verb.clone(), rate(&w.writes), total(&w.writes)]).collect();
    let plugins: Vec<Vec<String>> = view
        .plugins
        .iter()
        .map(|p| {
            vec![
                p.plugin.clone(),
                p.tenant.clone(),
                rate(&p.calls),
                rate(&p.events),
                p.ns_per_event.map_or_else(|| "-".to_string(), format_number),
                p.fuel_per_event.map_or_else(|| "-".to_string(), format_number),
                rate(&p.failures),
                total(&p.events),
            ]
        })
        .collect();
    let sinks: Vec<Vec<String>> = view
        .sinks
        .iter()
        .map(|s| {
            vec![
                s.sink.clone(),
                format!("{}/{}", format_number(s.depth), format_number(s.capacity)),
                rate(&s.sent),
                rate(&s.retries),
                rate(&s.failures),
                rate(&s.dropped),
            ]
        })
        .collect();
    let drops: Vec<Vec<String>> =
        view.drops.iter().map(|d| vec![d.place.clone(), d.reason.clone(), rate(&d.drops), total(&d.drops)]).collect();

    let height = |rows: &Vec<Vec<String>>| Constraint::Length(rows.len().max(1) as u16 + 3);
    let areas = Layout::vertical([
        Constraint::Length(1),
        height(&sources),
        height(&tenants),
        height(&writes),
        height(&plugins),
        height(&sinks),
        height(&drops),
        Constraint::Min(0),
    ])
    .split(frame.area());

    let every = view
        .interval_secs
        .map_or_else(|| "waiting for a second scrape".to_string(), |s| format!("rates over {s:.1} s"));
    let mut status = format!("eventpipe top  {}  {every}  (q quits)", view.url);
    if let Some(error) = &view.error {
        status = format!("{status}  last scrape failed: {error}");
    }
    frame.render_widget(Paragraph::new(Line::from(status)), areas[0]);
    table(frame, areas[1], " Events in ", &["source", "events/s", "total"], sources);
    table(
        frame,
        areas[2],
        " Tenants ",
        &["tenant", "routed/s", "spam skipped/s", "record retries/s", "write failures/s", "routed"],
        tenants,
    );
    table(frame, areas[3], " Sink writes ", &["tenant", "verb", "writes/s", "total"], writes);
    table(
        frame,
        areas[4],
        " Plugins (ns/event inside calls; fuel ≈ Wasm instructions) ",
        &["plugin", "tenant", "calls/s", "events/s", "ns/event", "fuel/event", "failures/s", "events"],
        plugins,
    );
    table(
        frame,
        areas[5],
        " Queued sinks ",
        &["sink", "queue/capacity", "sent/s", "retries/s", "failures/s", "dropped/s"],
        sinks,
    );
    table(frame, areas[6], " Drops ", &["where", "why", "drops/s", "total"], drops);
}

/// Why a scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The URL is not an `http://` URL.
    #[error("{0:?}: expected an http:// URL (e.g. http://127.0.0.1:9090/metrics)")]
    Url(String),
    /// No connection, or no answer.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What failed, with its causes.
        message: String,
    },
    /// No answer within the timeout.
    #[error("{url}: no answer within {timeout:?}")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// An answer other than `200`.
    #[error("{url} answered {status}{hint}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status.
        status: http::StatusCode,
        /// What to do about it, if known.
        hint: &'static str,
    },
    /// The answer is not exposition text.
    #[error("{url}: not metrics text: {error}")]
    Parse {
        /// The endpoint.
        url: String,
        /// The bad line.
        error: ParseError,
    },
}

/// Largest `/metrics` answer read, bytes.
const MAX_BODY: usize = 16 << 20;

/// Fetches and parses one endpoint's metrics.
#[derive(Debug)]
pub struct Scraper {
    url: String,
    uri: http::Uri,
    token: Option<String>,
    timeout: Duration,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Empty<bytes::Bytes>,
    >,
}

impl Scraper {
    /// A scraper of `url` (`http://…`), sending `Authorization: Bearer TOKEN` when `token` is
    /// given, giving up on a scrape after `timeout`. Needs a tokio runtime to scrape.
    ///
    /// # Errors
    /// [`ScrapeError::Url`] when `url` is not an `http://` URL.
    pub fn new(url: &str, token: Option<String>, timeout: Duration) -> Result<Self, ScrapeError> {
        let uri: http::Uri = url.parse().map_err(|_| ScrapeError::Url(url.to_string()))?;
        if uri.scheme() != Some(&http::uri::Scheme::HTTP) || uri.host().is_none() {
            return Err(ScrapeError::Url(url.to_string()));
        }
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        Ok(Self { url: url.to_string(), uri, token, timeout, client })
    }

    /// The endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `GET` the endpoint and parse its answer.
    ///
    /// # Errors
    /// [`ScrapeError`]: unreachable, too slow, not `200`, or not exposition text.
    pub async fn scrape(&self) -> Result<Scrape, ScrapeError> {
        match tokio::time::timeout(self.timeout, self.fetch()).await {
            Ok(result) => result,
            Err(_) => Err(ScrapeError::Timeout { url: self.url.clone(), timeout: self.timeout }),
        }
    }

    async fn fetch(&self) -> Result<Scrape, ScrapeError> {
        use http_body_util::BodyExt;
        let unreachable =
            |e: &dyn std::error::Error| ScrapeError::Unreachable { url: self.url.clone(), message: chain(e) };
        let mut request = http::Request::get(self.uri.clone());
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(http_body_util::Empty::new()).map_err(|e| unreachable(&e))?;
        let response = self.client.request(request).await.map_err(|e| unreachable(&e))?;
        let status = response.status();
        if status != http::StatusCode::OK {
            let hint = match status {
                http::StatusCode::UNAUTHORIZED if self.token.is_none() => " (set $EVENTPIPE_INGEST_TOKEN)",
                http::StatusCode::UNAUTHORIZED => " (is $EVENTPIPE_INGEST_TOKEN the instance's?)",
                http::StatusCode::NOT_FOUND => " (the metrics are at /metrics)",
                _ => "",
            };
            return Err(ScrapeError::Status { url: self.url.clone(), status, hint });
        }
        let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| unreachable(e.as_ref()))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        Scrape::parse(&text).map_err(|error| ScrapeError::Parse { url: self.url.clone(), error })
    }
}

/// An error and its causes, `: `-separated, a cause already in the text left out.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        cause = c.source();
    }
    out
}

/// The metrics URL of `target`, as `eventpipe top TARGET` takes it: a URL as it is (with
/// `/metrics` when it has no path), else `HOST:PORT` as `http://HOST:PORT/metrics`.
pub fn metrics_url(target: &str) -> String {
    let url = if target.contains("://") { target.to_string() } else { format!("http://{target}") };
    let authority = url.find("://").map_or(0, |i| i + 3);
    match url[authority..].find('/') {
        None => format!("{url}/metrics"),
        Some(slash) if authority + slash + 1 == url.len() => format!("{url}metrics"),
        Some(_) => url,
    }
}

#[cfg(test)]
mod tests {

    /// `top 127.0.0.1:9477`, `top http://h:9477` and `top http://h:9477/metrics` scrape the same
    /// endpoint; a URL with another path keeps it.
    #[test]
    fn a_host_and_port_or_a_url_names_the_metrics_endpoint() {
        for target in
            ["127.0.0.1:9477", "http://127.0.0.1:9477", "http://127.0.0.1:9477/", "http://127.0.0.1:9477/metrics"]
        {
            assert_eq!(metrics_url(target), "http://127.0.0.1:9477/metrics", "{target}");
        }
        assert_eq!(metrics_url("http://h:1/custom/metrics"), "http://h:1/custom/metrics");
        assert_eq!(metrics_url("[::1]:9090"), "http://[::1]:9090/metrics");
    }

    use super::*;

    #[test]
    fn parses_labels_with_escapes_timestamps_and_special_values() {
        let text = "# TYPE a counter\n\
                    a_total{x=\"q\\\"uo\\\\te\\n\",y=\"2\"} 3 1700000000\n\
                    b +Inf\n\
                    c{} NaN\n\
                    d{z=\"{,}\"} 1.5e3 # {trace=\"1\"} 1\n\
                    # EOF\n";
        let s = Scrape::parse(text).unwrap();
        assert_eq!(s.value("a_total", &[("y", "2"), ("x", "q\"uo\\te\n")]), Some(3.0));
        assert_eq!(s.value("b", &[]), Some(f64::INFINITY));
        assert!(s.value("c", &[]).unwrap().is_nan());
        assert_eq!(s.value("d", &[("z", "{,}")]), Some(1500.0));
    }

    #[test]
    fn a_bad_line_is_an_error_with_its_number() {
        for bad in ["x{a=\"1\" 2", "x{a=1} 2", "x", "x{a=\"1\"} nope", "{a=\"1\"} 2"] {
            let e = Scrape::parse(&format!("# HELP x y\n{bad}\n")).unwrap_err();
            assert_eq!(e.line, 2, "{bad}: {e}");
        }
    }

    #[test]
    fn a_counter_that_went_down_was_reset() {
        let prev = Scrape::parse("x_total{t=\"a\"} 100\n").unwrap();
        let cur = Scrape::parse("x_total{t=\"a\"} 30\nx_total{t=\"b\"} 8\n").unwrap();
        let d = Diff { prev: Some(&prev), cur: &cur, secs: 2.0 };
        let a = vec![("t".to_string(), "a".to_string())];
        assert_eq!(d.rate("x_total", &a), Rate { per_sec: Some(15.0), total: 30.0 });
        // A series new since the last scrape started at zero.
        assert_eq!(d.rate_sum("x_total", "t", "b"), Rate { per_sec: Some(4.0), total: 8.0 });
        let first = Diff { prev: None, cur: &cur, secs: 0.0 };
        assert_eq!(first.rate("x_total", &a).per_sec, None);
    }

    #[test]
    fn numbers_for_cells() {
        assert_eq!(format_rate(None), "-");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(1234.0), "1.2k");
        assert_eq!(format_number(5_600_000.0), "5.6M");
    }
}
