//! The user guide (`README.md`, `CHANGELOG.md`, `docs/`) against the binary.
//!
//! - `reference_*`: `docs/reference/cli.md` (every subcommand's `--help`) and
//!   `docs/reference/config.md` with `docs/reference/config.schema.json` (`eventpipe config
//!   schema`) are generated from the built binary. A checked-in copy that differs from what the
//!   binary prints fails; `EVENTPIPE_BLESS=1 cargo test -p eventpipe --test it docs::reference`
//!   rewrites them (the one regeneration command, idempotent). The help does not depend on the
//!   terminal: clap is built without `wrap_help` (the same bytes at any `COLUMNS`, tested), the
//!   output is a pipe (no colours), and `COLUMNS=100` is set should wrapping ever be turned on.
//!   Subcommands are listed from the help itself, nested ones (`plugins check`) included.
//! - `snippets_*`: every ` ```toml ` block goes through the config parser (`Config::parse`),
//!   and every line of a ` ```sh ` block that starts with `eventpipe` names a subcommand that
//!   exists and only long flags that subcommand's `--help` lists. A block whose info string
//!   carries `ignore` (` ```toml,ignore `, ` ```sh,ignore `) is skipped: only for a snippet that
//!   is deliberately partial.
//! - `links_*`: every relative link of the guide points at a file, and a heading, that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bless() -> bool {
    std::env::var_os("EVENTPIPE_BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// `eventpipe ARGS…` at a fixed help width; its standard output.
fn eventpipe(args: &[&str]) -> String {
    eventpipe_at(args, "100")
}

/// `eventpipe ARGS…` with `COLUMNS` set to `columns`; its standard output.
fn eventpipe_at(args: &[&str], columns: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(args)
        .env("COLUMNS", columns)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "eventpipe {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The command tree, read from `--help`.

/// One command: its path (`["plugins", "check"]`), its help text, its long flags.
struct Cmd {
    path: Vec<String>,
    help: String,
    flags: BTreeSet<String>,
}

/// The names under `Commands:` of a help text (less `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
        } else if inside {
            if !line.starts_with("  ") {
                break;
            }
            // A wrapped description is indented further than a name.
            if line.starts_with("   ") {
                continue;
            }
            let name = line.split_whitespace().next().unwrap().to_string();
            if name != "help" {
                names.push(name);
            }
        }
    }
    names
}

/// The long flags a help text defines (`  -s, --source <SOURCE>`, `      --no-watch`).
fn long_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let t = line.trim_start();
        let t = match t.strip_prefix('-') {
            Some(rest) if !rest.starts_with('-') => match rest.split_once(", ") {
                Some((_, after)) => after,
                None => continue,
            },
            _ => t,
        };
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            if !name.is_empty() && line.starts_with("  ") {
                flags.insert(format!("--{name}"));
            }
        }
    }
    flags
}

/// Every command, depth first in the order `--help` lists them.
fn command_tree() -> Vec<Cmd> {
    fn walk(path: Vec<String>, out: &mut Vec<Cmd>) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = eventpipe(&args);
        let children = subcommands(&help);
        out.push(Cmd { flags: long_flags(&help), help, path: path.clone() });
        for child in children {
            let mut p = path.clone();
            p.push(child);
            walk(p, out);
        }
    }
    let mut out = Vec::new();
    walk(Vec::new(), &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// The generated reference.

const REGENERATE: &str = "EVENTPIPE_BLESS=1 cargo test -p eventpipe --test it docs::reference";

fn cli_md(tree: &[Cmd]) -> String {
    let mut md = String::from("# Command-line reference\n\n");
    md.push_str(&format!(
        "Every subcommand's `--help`, as the binary prints it. Generated: do not edit; after a change to \
         the command line, regenerate with\n\n```sh,ignore\n{REGENERATE}\n```\n\n"
    ));
    for cmd in tree {
        let name = std::iter::once("eventpipe").chain(cmd.path.iter().map(String::as_str)).collect::<Vec<_>>();
        md.push_str(&format!("- [`{}`](#{})\n", name.join(" "), name.join("-")));
    }
    for cmd in tree {
        let name = std::iter::once("eventpipe").chain(cmd.path.iter().map(String::as_str)).collect::<Vec<_>>();
        md.push_str(&format!("\n## `{}`\n\n```text\n{}\n```\n", name.join(" "), cmd.help.trim_end()));
    }
    md
}

/// The name a schema definition is shown under: the config's own words, without the parser's
/// `Raw` prefix (`RawRules` → `Rules`).
fn def_name(reference: &str) -> &str {
    let name = reference.rsplit('/').next().unwrap();
    name.strip_prefix("Raw").unwrap_or(name)
}

/// A JSON Schema type in a few words: `string`, `integer or null`, `list of string`, `Rules`.
fn schema_type(s: &serde_json::Value) -> String {
    if let Some(r) = s.get("$ref").and_then(|r| r.as_str()) {
        return format!("[`{0}`](#{1})", def_name(r), def_name(r).to_lowercase());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(list) = s.get(key).and_then(|l| l.as_array()) {
            return list.iter().map(schema_type).collect::<Vec<_>>().join(" or ");
        }
    }
    if let Some(values) = s.get("enum").and_then(|e| e.as_array()) {
        return values.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ");
    }
    if let Some(c) = s.get("const") {
        return format!("`{c}`");
    }
    let one = |t: &str| match t {
        "array" => match s.get("items") {
            Some(items) => format!("list of {}", schema_type(items)),
            None => "list".into(),
        },
        "object" => match s.get("additionalProperties").filter(|a| a.is_object()) {
            Some(values) => format!("map of {}", schema_type(values)),
            None => "table".into(),
        },
        t => t.to_string(),
    };
    match s.get("type") {
        Some(serde_json::Value::String(t)) => one(t),
        Some(serde_json::Value::Array(ts)) => {
            ts.iter().filter_map(|t| t.as_str()).map(one).collect::<Vec<_>>().join(" or ")
        }
        _ => "any".into(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

fn properties_table(md: &mut String, object: &serde_json::Value) {
    let Some(props) = object.get("properties").and_then(|p| p.as_object()) else {
        md.push_str("(no keys)\n");
        return;
    };
    md.push_str("| key | type | default | description |\n|---|---|---|---|\n");
    for (key, prop) in props {
        let default = prop.get("default").map_or_else(|| "—".to_string(), |d| format!("`{d}`"));
        let description = prop.get("description").and_then(|d| d.as_str()).map(one_line).unwrap_or_default();
        md.push_str(&format!("| `{key}` | {} | {default} | {description} |\n", schema_type(prop)));
    }
}

fn config_md(schema: &serde_json::Value) -> String {
    let mut md = String::from("# Config reference\n\n");
    md.push_str(&format!(
        "The tenant config file (TOML, `eventpipe run --config FILE`), key by key, from its JSON Schema \
         ([`config.schema.json`](config.schema.json), what `eventpipe config schema` prints). The guide \
         explains the keys: [tenants, rules, summaries and shadows](../tenants.md). Generated: do not \
         edit; regenerate with\n\n```sh,ignore\n{REGENERATE}\n```\n\n"
    ));
    if let Some(d) = schema.get("description").and_then(|d| d.as_str()) {
        md.push_str(&format!("{}\n\n", one_line(d)));
    }
    md.push_str("## The file (top level)\n\n");
    properties_table(&mut md, schema);
    let defs = schema.get("$defs").or_else(|| schema.get("definitions")).and_then(|d| d.as_object());
    for (name, def) in defs.into_iter().flatten() {
        md.push_str(&format!("\n## {}\n\n", def_name(name)));
        if let Some(d) = def.get("description").and_then(|d| d.as_str()) {
            md.push_str(&format!("{}\n\n", one_line(d)));
        }
        if def.get("properties").is_some() {
            properties_table(&mut md, def);
        } else {
            md.push_str(&format!("Type: {}.\n", schema_type(def)));
        }
    }
    md
}

/// Compares `path` with `text`, or (blessing) writes it.
fn check_generated(path: &Path, text: &str, stale: &mut Vec<String>) {
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        return;
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if current != text {
        let line = current.lines().zip(text.lines()).position(|(a, b)| a != b).map_or_else(
            || format!("lengths {} and {} lines", current.lines().count(), text.lines().count()),
            |i| format!("first difference at line {}", i + 1),
        );
        stale.push(format!("{} ({line})", path.strip_prefix(repo()).unwrap_or(path).display()));
    }
}

#[test]
fn reference_matches_the_binary() {
    let tree = command_tree();
    let schema: serde_json::Value = serde_json::from_str(&eventpipe(&["config", "schema"])).unwrap();
    let dir = repo().join("docs/reference");
    let mut stale = Vec::new();
    check_generated(&dir.join("cli.md"), &cli_md(&tree), &mut stale);
    check_generated(&dir.join("config.md"), &config_md(&schema), &mut stale);
    check_generated(
        &dir.join("config.schema.json"),
        &format!("{}\n", serde_json::to_string_pretty(&schema).unwrap()),
        &mut stale,
    );
    assert!(
        stale.is_empty(),
        "the checked-in reference differs from the binary: {stale:?}; regenerate with `{REGENERATE}`"
    );
}

#[test]
fn reference_lists_every_subcommand_and_flag_of_run() {
    let tree = command_tree();
    let paths: BTreeSet<String> = tree.iter().map(|c| c.path.join(" ")).collect();
    for expected in
        ["run", "replay", "test", "bench", "validate", "top", "plugins", "plugins check", "config", "config schema"]
    {
        assert!(paths.contains(expected), "no `eventpipe {expected}` in {paths:?}");
    }
    let run = tree.iter().find(|c| c.path == ["run"]).unwrap();
    // The reference does not depend on the width of the terminal that regenerates it.
    assert_eq!(eventpipe_at(&["run", "--help"], "40"), run.help);
    assert_eq!(eventpipe_at(&["run", "--help"], "250"), run.help);
    assert!(run.flags.contains("--source") && run.flags.contains("--sink") && run.flags.contains("--log-format"));
    // Every long flag of `run` is somewhere in the chapters under docs/, beyond the generated
    // reference.
    let guide: String = guide_files()
        .iter()
        .filter(|p| p.starts_with(repo().join("docs")) && !p.ends_with("reference/cli.md"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let missing: Vec<&String> = run
        .flags
        .iter()
        .filter(|f| !["--help", "--version"].contains(&f.as_str()) && !guide.contains(f.as_str()))
        .collect();
    assert!(missing.is_empty(), "flags of `eventpipe run` the guide never names: {missing:?}");
}

// ---------------------------------------------------------------------------------------------
// Snippets.

/// `README.md`, `CHANGELOG.md` and every Markdown file under `docs/`.
fn guide_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![repo().join("README.md"), repo().join("CHANGELOG.md")];
    walk(&repo().join("docs"), &mut files);
    files
}

/// One fenced block: its file, first line, language, whether it is marked `ignore`, its text.
struct Block {
    file: PathBuf,
    line: usize,
    lang: String,
    ignore: bool,
    text: String,
}

fn blocks(file: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut open: Option<(usize, String, bool, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    let mut parts = info.trim().split(',');
                    let lang = parts.next().unwrap_or("").trim().to_string();
                    let ignore = parts.any(|p| p.trim() == "ignore");
                    open = Some((i + 1, lang, ignore, indent, String::new()));
                }
            }
            Some((start, lang, ignore, ind, body)) => {
                if t.starts_with("```") {
                    out.push(Block {
                        file: file.to_path_buf(),
                        line: *start,
                        lang: std::mem::take(lang),
                        ignore: *ignore,
                        text: std::mem::take(body),
                    });
                    open = None;
                } else {
                    body.push_str(line.get(*ind..).unwrap_or(t));
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "{}: a code block is not closed", file.display());
    out
}

/// Shell words, quotes removed, with `|`, `&&`, `;`, `&`, `>`, `<` as words of their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    in_word = true;
                }
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                '>' | '<' | ';' if !in_word || !word.is_empty() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                    }
                    words.push(c.to_string());
                    in_word = false;
                }
                _ => {
                    word.push(c);
                    in_word = true;
                }
            },
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The commands of a `sh` block: continuation lines joined, comments dropped.
fn shell_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = match line.find(" #") {
            Some(i) => &line[..i],
            None if line.trim_start().starts_with('#') => "",
            None => line,
        };
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands.push(current);
    commands.into_iter().map(|c| c.trim().trim_start_matches("$ ").to_string()).filter(|c| !c.is_empty()).collect()
}

/// What is wrong with one `eventpipe …` command line, if anything.
fn check_command(line: &str, tree: &BTreeMap<Vec<String>, BTreeSet<String>>) -> Result<(), String> {
    let words = shell_words(line);
    let end = words.iter().position(|w| ["|", "||", "&&", ";", "&", ">", "<", "2>"].contains(&w.as_str()));
    let words = &words[1..end.unwrap_or(words.len())];
    let mut path: Vec<String> = Vec::new();
    let mut rest = words;
    while let Some((first, tail)) = rest.split_first() {
        let mut next = path.clone();
        next.push(first.clone());
        if tree.contains_key(&next) {
            path = next;
            rest = tail;
        } else {
            break;
        }
    }
    let flags = &tree[&path];
    if path.is_empty() {
        // Only the top level's own flags (`eventpipe --version`) may follow a bare `eventpipe`.
        if let Some(w) = rest.iter().find(|w| !w.starts_with('-')) {
            return Err(format!("`eventpipe {w}`: no such subcommand"));
        }
    }
    for w in rest {
        let w = w.trim_start_matches(['[', '(']);
        if let Some(name) = w.strip_prefix("--") {
            let name: String = name.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            if name.is_empty() {
                continue;
            }
            if !flags.contains(&format!("--{name}")) {
                return Err(format!("`eventpipe {}` has no --{name}", path.join(" ")));
            }
        }
    }
    Ok(())
}

#[test]
fn snippets_parse_and_name_real_subcommands_and_flags() {
    let tree: BTreeMap<Vec<String>, BTreeSet<String>> = command_tree().into_iter().map(|c| (c.path, c.flags)).collect();
    let scratch = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    let (mut configs, mut commands) = (0, 0);
    for file in guide_files() {
        for block in blocks(&file) {
            let at = format!("{}:{}", block.file.strip_prefix(repo()).unwrap().display(), block.line);
            if block.ignore {
                continue;
            }
            match block.lang.as_str() {
                "toml" => {
                    configs += 1;
                    let path = scratch.path().join("eventpipe.toml");
                    if let Err(e) = eventpipe::Config::parse(&block.text, &path) {
                        problems.push(format!("{at}: {e}"));
                    }
                }
                "sh" | "bash" | "shell" | "console" => {
                    for command in shell_commands(&block.text) {
                        if command == "eventpipe" || command.starts_with("eventpipe ") {
                            commands += 1;
                            if let Err(e) = check_command(&command, &tree) {
                                problems.push(format!("{at}: {e}: {command}"));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{} snippet(s) do not hold:\n{}", problems.len(), problems.join("\n"));
    assert!(
        configs >= 4 && commands >= 25,
        "{configs} config and {commands} command snippets: the guide lost its examples?"
    );
}

#[test]
fn snippets_checker_catches_a_wrong_flag_and_a_bad_config() {
    let tree: BTreeMap<Vec<String>, BTreeSet<String>> = command_tree().into_iter().map(|c| (c.path, c.flags)).collect();
    assert!(check_command("eventpipe run --source jsonl:- --sink jsonl:- < in.jsonl > out", &tree).is_ok());
    assert!(check_command("eventpipe plugins check my.wasm", &tree).is_ok());
    assert!(check_command("eventpipe run --no-such-flag", &tree).unwrap_err().contains("--no-such-flag"));
    assert!(check_command("eventpipe replay --sink jsonl:-", &tree).is_err(), "--sink is run's, not replay's");
    assert!(check_command("eventpipe frobnicate", &tree).is_err());
    assert!(check_command("eventpipe top | eventpipe run --nope", &tree).is_ok(), "only the first command is read");
    assert_eq!(
        shell_commands("eventpipe run \\\n  --sink k   # a comment\n# only a comment\n"),
        ["eventpipe run    --sink k"]
    );
    let path = Path::new("eventpipe.toml");
    assert!(eventpipe::Config::parse("[defaults]\nburst = \"x\"\n", path).is_err());
    assert!(eventpipe::Config::parse("[defaults]\nburst = 3\n", path).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Links.

/// Guide pages written alongside this one and merged separately: links to them may run ahead.
const PAGES_IN_FLIGHT: [&str; 4] =
    ["plugins-directory.md", "security.md", "plugins-supply-chain.md", "kubectl-and-validate.md"];

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` removed, spaces
/// as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || ['-', '_', ' '].contains(c))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated one gets `-1`, `-2`, … as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            let base = slug(line.trim_start_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
            *n += 1;
        }
    }
    out
}

#[test]
fn links_point_at_files_and_headings_that_exist() {
    assert_eq!(slug(" `eventpipe run`: source → tenant stages → sinks"), "eventpipe-run-source--tenant-stages--sinks");
    let mut broken = Vec::new();
    for file in guide_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut in_code = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if in_code {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(close) = after.find(')') else { break };
                let target = &after[..close];
                rest = &after[close..];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (target_file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved =
                    if target_file.is_empty() { file.clone() } else { file.parent().unwrap().join(target_file) };
                let in_flight = PAGES_IN_FLIGHT.iter().any(|p| resolved.ends_with(p));
                let at = format!("{}:{}: {target}", file.strip_prefix(repo()).unwrap().display(), i + 1);
                if in_flight {
                    continue;
                }
                if !resolved.exists() {
                    broken.push(at);
                } else if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                    let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
                    if !headings.contains(anchor) {
                        broken.push(format!("{at} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to files or headings that do not exist:\n{}", broken.join("\n"));
}

/// The config reference's default column is filled from the schema, whose defaults are the
/// ones `run` applies (client-go's for the correlator).
#[test]
fn the_config_reference_gives_each_default() {
    let schema: serde_json::Value = serde_json::from_str(&eventpipe(&["config", "schema"])).unwrap();
    let rules = &schema["$defs"]["RawRules"]["properties"];
    let default = |key: &str| rules[key]["default"].clone();
    assert_eq!(default("burst"), eventpipe::correlator::DEFAULT_SPAM_BURST);
    assert_eq!(default("qps").as_f64().unwrap(), 1.0 / 300.0);
    assert_eq!(default("max_events"), eventpipe::correlator::DEFAULT_AGGREGATE_MAX_EVENTS);
    assert_eq!(default("max_interval_seconds"), eventpipe::correlator::DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS);
    assert_eq!(default("lru_cache_size"), eventpipe::correlator::MAX_LRU_CACHE_ENTRIES);
    assert_eq!(default("fuel_per_event"), eventpipe::plugin::DEFAULT_FUEL_PER_EVENT);
    let md = std::fs::read_to_string(repo().join("docs/reference/config.md")).unwrap();
    assert!(md.contains("| `burst` | integer or null | `25` |"), "the default column is filled");
    assert!(md.contains("| `queue_length` | integer or null | `1000` |"), "a watcher's queue");
    // A key without a default says so; no cell of the column is empty.
    for row in md.lines().filter(|l| l.starts_with("| `")) {
        assert_ne!(row.split(" | ").nth(2), Some(""), "{row}");
    }
}
