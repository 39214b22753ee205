//! `eventpipe new-plugin`: a plugin project in Rust, Python, JavaScript, C or Go that builds
//! with the commands of its README.
//!
//! The sources come from the repository, compiled in: a filter and an aggregate-key function
//! are the examples of `examples/plugins/` (the `quiet-normal` filter and the
//! `namespace-reason` key function; the Rust sink is the `slack` example), the other kinds the
//! templates of `examples/templates/`. Every project carries a copy of `wit/`, so it builds on
//! its own; a Rust project also carries a copy of the Rust SDK (`guest-sdk`, in `sdk/`) and a Go
//! project one of the Go SDK (`guest-sdk/go`, in `sdk/`),
//! and a JavaScript, C or Python project whose plugin reads a key-fields batch the examples'
//! reader of packed strings (`packed.js`, `packed.h`, `packed.py`).

use std::path::{Path, PathBuf};

use crate::plugin::PluginKind;

/// The languages a project can be created in (`--lang`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust on the guest SDK (`eventpipe-guest`), `cargo build --target wasm32-wasip2`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js (or componentize-qjs).
    Js,
    /// C with clang + wasi-libc and `eventpipe-plugin-build`.
    C,
    /// Go (>= 1.24, `GOOS=wasip1`) on the Go SDK (`guest-sdk/go`) and
    /// `eventpipe-plugin-build component --stub-wasi`.
    Go,
}

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scaffold {
    /// The language.
    pub lang: Lang,
    /// The plugin kind (WIT world).
    pub kind: PluginKind,
    /// The plugin's name: lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    /// The directory to create (must not exist, or be empty).
    pub dir: PathBuf,
}

/// Why a project could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name is not a valid plugin name.
    #[error("invalid plugin name {0:?}: use lowercase letters, digits and '-', starting with a letter")]
    Name(String),
    /// The directory exists and is not empty.
    #[error("{}: exists and is not empty", .0.display())]
    Exists(PathBuf),
    /// No project of this kind in this language (encoders: Rust and Python).
    #[error("no {kind} project in {lang:?} yet: encoders are written in Rust or Python")]
    NoExample {
        /// The language asked for.
        lang: Lang,
        /// The kind asked for.
        kind: PluginKind,
    },
    /// Writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The WIT package, copied into every non-Rust project.
const WIT: [(&str, &str); 4] = [
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("host.wit", include_str!("../../../wit/host.wit")),
    ("worlds.wit", include_str!("../../../wit/worlds.wit")),
    ("host-world.wit", include_str!("../../../wit/host-world.wit")),
];
const WIT_README: &str = include_str!("../../../wit/README.md");

/// The Go SDK (`guest-sdk/go`), copied into every Go project as `sdk/`.
const GO_SDK: [(&str, &str); 17] = [
    ("go.mod", include_str!("../../../guest-sdk/go/go.mod")),
    ("README.md", include_str!("../../../guest-sdk/go/README.md")),
    ("eventpipe.go", include_str!("../../../guest-sdk/go/eventpipe.go")),
    ("internal/wit/mem.go", include_str!("../../../guest-sdk/go/internal/wit/mem.go")),
    ("internal/wit/types.go", include_str!("../../../guest-sdk/go/internal/wit/types.go")),
    ("internal/wit/imports.go", include_str!("../../../guest-sdk/go/internal/wit/imports.go")),
    ("internal/wit/host_wasm.go", include_str!("../../../guest-sdk/go/internal/wit/host_wasm.go")),
    ("internal/wit/host_other.go", include_str!("../../../guest-sdk/go/internal/wit/host_other.go")),
    ("internal/wit/packed.go", include_str!("../../../guest-sdk/go/internal/wit/packed.go")),
    ("internal/wit/projection.go", include_str!("../../../guest-sdk/go/internal/wit/projection.go")),
    ("internal/wit/guard.go", include_str!("../../../guest-sdk/go/internal/wit/guard.go")),
    ("defaults/defaults.go", include_str!("../../../guest-sdk/go/defaults/defaults.go")),
    ("filter/filter.go", include_str!("../../../guest-sdk/go/filter/filter.go")),
    ("aggregatekey/aggregatekey.go", include_str!("../../../guest-sdk/go/aggregatekey/aggregatekey.go")),
    ("messagecombiner/messagecombiner.go", include_str!("../../../guest-sdk/go/messagecombiner/messagecombiner.go")),
    ("spamkey/spamkey.go", include_str!("../../../guest-sdk/go/spamkey/spamkey.go")),
    ("watcher/watcher.go", include_str!("../../../guest-sdk/go/watcher/watcher.go")),
];

/// The Go SDK's sink package (`sink/`), copied with [`GO_SDK`].
const GO_SDK_SINK: [(&str, &str); 3] = [
    ("sink/sink.go", include_str!("../../../guest-sdk/go/sink/sink.go")),
    ("sink/output_wasm.go", include_str!("../../../guest-sdk/go/sink/output_wasm.go")),
    ("sink/output_other.go", include_str!("../../../guest-sdk/go/sink/output_other.go")),
];

/// The Rust guest SDK (`guest-sdk`, crate `eventpipe-guest`), copied into every Rust project
/// as `sdk/`, with a manifest of its own ([`RUST_SDK_MANIFEST`]): the project depends on it by
/// `path = "sdk"` and the SDK's version, so it builds offline, and wherever it is moved.
const RUST_SDK: [(&str, &str); 13] = [
    ("README.md", include_str!("../../../guest-sdk/README.md")),
    ("src/bindings.rs", include_str!("../../../guest-sdk/src/bindings.rs")),
    ("src/config.rs", include_str!("../../../guest-sdk/src/config.rs")),
    ("src/defaults.rs", include_str!("../../../guest-sdk/src/defaults.rs")),
    ("src/export.rs", include_str!("../../../guest-sdk/src/export.rs")),
    ("src/json.rs", include_str!("../../../guest-sdk/src/json.rs")),
    ("src/lib.rs", include_str!("../../../guest-sdk/src/lib.rs")),
    ("src/log.rs", include_str!("../../../guest-sdk/src/log.rs")),
    ("src/output.rs", include_str!("../../../guest-sdk/src/output.rs")),
    ("src/packed.rs", include_str!("../../../guest-sdk/src/packed.rs")),
    ("src/prelude.rs", include_str!("../../../guest-sdk/src/prelude.rs")),
    ("src/projection.rs", include_str!("../../../guest-sdk/src/projection.rs")),
    ("src/runtime.rs", include_str!("../../../guest-sdk/src/runtime.rs")),
];

/// The manifest of the Rust SDK's copy: the SDK's, without what it inherits from the
/// repository's workspace.
const RUST_SDK_MANIFEST: &str = include_str!("../../../examples/templates/rust/sdk-Cargo.toml.in");

/// The WIT world a new project builds: its kind's, or the kind's `*-projected` world where the
/// project's source declares what it reads (the Python aggregate key: `key_fields`,
/// `local_key_field`), or `filter-enriched` for a filter of an SDK that builds it (Rust, Go).
fn project_world(lang: Lang, kind: PluginKind) -> &'static str {
    match (lang, kind) {
        (Lang::Python, PluginKind::AggregateKey) => "aggregate-key-projected",
        (Lang::Rust | Lang::Go, PluginKind::Filter) => "filter-enriched",
        _ => kind.world(),
    }
}

/// The main source file of a project: (file name, text); `None` for an encoder in a language
/// without an encoder example (encoders: Rust and Python).
fn source(lang: Lang, kind: PluginKind) -> Option<(&'static str, &'static str)> {
    use PluginKind as K;
    Some(match lang {
        Lang::Rust => (
            "src/lib.rs",
            match kind {
                K::Filter => include_str!("../../../examples/plugins/rust/filter/src/lib.rs"),
                K::AggregateKey => include_str!("../../../examples/plugins/rust/aggregate-key/src/lib.rs"),
                K::Sink => include_str!("../../../examples/templates/rust/sink.rs"),
                K::Encoder => include_str!("../../../examples/plugins/rust/slack/src/lib.rs"),
                K::MessageCombiner => include_str!("../../../examples/templates/rust/message-combiner.rs"),
                K::SpamKey => include_str!("../../../examples/templates/rust/spam-key.rs"),
                K::Watcher => include_str!("../../../examples/templates/rust/watcher.rs"),
            },
        ),
        Lang::Python => (
            "app.py",
            match kind {
                K::Filter => include_str!("../../../examples/plugins/python/filter/app.py"),
                K::AggregateKey => include_str!("../../../examples/plugins/python/aggregate-key/app.py"),
                K::MessageCombiner => include_str!("../../../examples/templates/python/message-combiner.py"),
                K::SpamKey => include_str!("../../../examples/templates/python/spam-key.py"),
                K::Sink => include_str!("../../../examples/templates/python/sink.py"),
                K::Watcher => include_str!("../../../examples/templates/python/watcher.py"),
                K::Encoder => include_str!("../../../examples/plugins/python/slack/app.py"),
            },
        ),
        Lang::Js => (
            "plugin.js",
            match kind {
                K::Filter => include_str!("../../../examples/plugins/js/filter.js"),
                K::AggregateKey => include_str!("../../../examples/plugins/js/aggregate-key.js"),
                K::MessageCombiner => include_str!("../../../examples/templates/js/message-combiner.js"),
                K::SpamKey => include_str!("../../../examples/templates/js/spam-key.js"),
                K::Sink => include_str!("../../../examples/templates/js/sink.js"),
                K::Watcher => include_str!("../../../examples/templates/js/watcher.js"),
                K::Encoder => return None,
            },
        ),
        Lang::C => (
            "plugin.c",
            match kind {
                K::Filter => include_str!("../../../examples/plugins/c/filter/quiet_normal.c"),
                K::AggregateKey => include_str!("../../../examples/plugins/c/aggregate-key/namespace_reason.c"),
                K::MessageCombiner => include_str!("../../../examples/templates/c/message-combiner.c"),
                K::SpamKey => include_str!("../../../examples/templates/c/spam-key.c"),
                K::Sink => include_str!("../../../examples/templates/c/sink.c"),
                K::Watcher => include_str!("../../../examples/templates/c/watcher.c"),
                K::Encoder => return None,
            },
        ),
        Lang::Go => (
            "main.go",
            match kind {
                K::Filter => include_str!("../../../examples/plugins/go/filter/main.go"),
                K::AggregateKey => include_str!("../../../examples/plugins/go/aggregate-key/main.go"),
                K::MessageCombiner => include_str!("../../../examples/templates/go/message-combiner.go"),
                K::SpamKey => include_str!("../../../examples/templates/go/spam-key.go"),
                K::Sink => include_str!("../../../examples/templates/go/sink.go"),
                K::Watcher => include_str!("../../../examples/templates/go/watcher.go"),
                K::Encoder => return None,
            },
        ),
    })
}

/// The reader of packed strings the examples share, as (file name, text), when the source of a
/// project imports it: in Python, JavaScript and C for the kinds whose batch export reads a
/// key-fields batch (aggregate key, message combiner, spam key), and for the JavaScript sink,
/// which writes UTF-8 with its encoder. (Rust and Go projects have it in their SDK.)
fn packed_strings_reader(lang: Lang, kind: PluginKind) -> Option<(&'static str, &'static str)> {
    use PluginKind as K;
    let reads_batch = matches!(kind, K::AggregateKey | K::MessageCombiner | K::SpamKey);
    match lang {
        Lang::Python if reads_batch => Some(("packed.py", include_str!("../../../examples/plugins/python/packed.py"))),
        Lang::Js if reads_batch || kind == K::Sink => {
            Some(("packed.js", include_str!("../../../examples/plugins/js/packed.js")))
        }
        Lang::C if reads_batch => Some(("packed.h", include_str!("../../../examples/plugins/c/packed.h"))),
        _ => None,
    }
}

/// Where a tenant config names a plugin of `kind`.
fn config_key(kind: PluginKind, name: &str) -> String {
    match kind {
        PluginKind::Filter => format!("filters = [\"{name}\"]"),
        PluginKind::AggregateKey => format!("aggregate_key = \"{name}\""),
        PluginKind::MessageCombiner => format!("message_combiner = \"{name}\""),
        PluginKind::SpamKey => format!("spam_key = \"{name}\""),
        PluginKind::Sink => format!("sinks = [\"plugin:{name}\"]"),
        PluginKind::Watcher => "watchers are run by `eventpipe test` only for now".into(),
        PluginKind::Encoder => format!("sinks = [\"webhook:https://hooks.example/…,encoder={name}\"]"),
    }
}

/// The name an example source carries for `kind` (the filter, aggregate-key and Rust sink
/// sources are the examples of `examples/plugins/`; the templates carry `{{name}}` instead).
fn example_name(kind: PluginKind) -> Option<&'static str> {
    match kind {
        PluginKind::Filter => Some("quiet-normal"),
        PluginKind::AggregateKey => Some("namespace-reason"),
        PluginKind::Encoder => Some("slack"),
        _ => None,
    }
}

/// `text` with the example's name replaced by `name` in each of its spellings (`quiet-normal`,
/// `quiet_normal`, `QuietNormal`), so that a new project is named after itself.
fn rename_example(text: &str, kind: PluginKind, name: &str) -> String {
    let Some(example) = example_name(kind) else { return text.to_string() };
    let camel = |n: &str| -> String {
        n.split('-')
            .map(|part| {
                let mut chars = part.chars();
                chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
            })
            .collect()
    };
    // The type name only where code names it (prose such as "Slack-style" stays).
    let (from, to) = (camel(example), camel(name));
    let mut text = text.to_string();
    for (before, after) in [("struct ", " "), ("struct ", ";"), ("for ", " "), ("(", ")"), ("", " {"), ("", "::")] {
        text = text.replace(&format!("{before}{from}{after}"), &format!("{before}{to}{after}"));
    }
    // Go: `newQuietNormal` and the unexported type `quietNormal`.
    let lower = |n: String| -> String {
        let mut chars = n.chars();
        chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
    };
    text = text.replace(&format!("new{from}"), &format!("new{to}"));
    text = text.replace(&lower(from), &lower(to));
    text.replace(example, name).replace(&example.replace('-', "_"), &name.replace('-', "_"))
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

/// Creates the project `s` describes; returns the files written, in order.
///
/// # Errors
/// [`ScaffoldError`]: a bad name, a non-empty directory, a missing or wrong SDK path (Rust), or
/// an I/O error.
pub fn scaffold(s: &Scaffold) -> Result<Vec<PathBuf>, ScaffoldError> {
    if !valid_name(&s.name) {
        return Err(ScaffoldError::Name(s.name.clone()));
    }
    if s.dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(ScaffoldError::Exists(s.dir.clone()));
    }
    let world = project_world(s.lang, s.kind);
    let stem = world.replace('-', "_");
    let crate_name = s.name.replace('-', "_");
    let fill = |text: &str| {
        text.replace("{{name}}", &s.name)
            .replace("{{world}}", world)
            .replace("{{stem}}", &stem)
            .replace("{{crate}}", &crate_name)
            .replace("{{sdk_version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{config_key}}", &config_key(s.kind, &s.name))
    };
    let mut files: Vec<(String, String)> = Vec::new();
    let (main, text) = source(s.lang, s.kind).ok_or(ScaffoldError::NoExample { lang: s.lang, kind: s.kind })?;
    files.push((main.into(), rename_example(&fill(text), s.kind, &s.name)));
    if let Some((file, text)) = packed_strings_reader(s.lang, s.kind) {
        files.push((file.into(), text.into()));
    }
    match s.lang {
        Lang::Rust => {
            files.push(("Cargo.toml".into(), fill(include_str!("../../../examples/templates/rust/Cargo.toml.in"))));
            // The versions the SDK is tested with (cargo prunes what the project does not use).
            files.push(("Cargo.lock".into(), include_str!("../../../plugins/Cargo.lock").into()));
            files.push(("README.md".into(), fill(include_str!("../../../examples/templates/rust/README.md.in"))));
            files.push((".gitignore".into(), "/target\n*.wasm\n".into()));
            files.push(("sdk/Cargo.toml".into(), fill(RUST_SDK_MANIFEST)));
            for (file, text) in RUST_SDK {
                files.push((format!("sdk/{file}"), text.into()));
            }
        }
        Lang::Python => {
            files.push(("build.sh".into(), fill(include_str!("../../../examples/templates/python/build.sh.in"))));
            files.push(("README.md".into(), fill(include_str!("../../../examples/templates/python/README.md.in"))));
            files.push((".gitignore".into(), ".venv/\n__pycache__/\n*.wasm\n".into()));
        }
        Lang::Js => {
            files.push(("package.json".into(), fill(include_str!("../../../examples/templates/js/package.json.in"))));
            files.push(("README.md".into(), fill(include_str!("../../../examples/templates/js/README.md.in"))));
            files.push((".gitignore".into(), "node_modules/\n*.wasm\n".into()));
        }
        Lang::C => {
            files.push(("build.sh".into(), fill(include_str!("../../../examples/templates/c/build.sh.in"))));
            files.push(("README.md".into(), fill(include_str!("../../../examples/templates/c/README.md.in"))));
            files.push((".gitignore".into(), "gen/\n*.wasm\n".into()));
        }
        Lang::Go => {
            files.push(("go.mod".into(), fill(include_str!("../../../examples/templates/go/go.mod.in"))));
            files.push(("build.sh".into(), fill(include_str!("../../../examples/templates/go/build.sh.in"))));
            files.push(("README.md".into(), fill(include_str!("../../../examples/templates/go/README.md.in"))));
            files.push((".gitignore".into(), "*.wasm\n".into()));
            for (file, text) in GO_SDK.iter().chain(&GO_SDK_SINK) {
                files.push((format!("sdk/{file}"), (*text).into()));
            }
        }
    }
    for (file, text) in WIT {
        files.push((format!("wit/{file}"), text.into()));
    }
    files.push(("wit/README.md".into(), WIT_README.into()));
    let mut written = Vec::with_capacity(files.len());
    for (file, text) in files {
        let path = s.dir.join(&file);
        let io = |source| ScaffoldError::Io { path: path.clone(), source };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, text).map_err(io)?;
        if file == "build.sh" {
            make_executable(&path).map_err(io)?;
        }
        written.push(path);
    }
    Ok(written)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(lang: Lang, kind: PluginKind, dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
        scaffold(&Scaffold { lang, kind, name: "my-plugin".into(), dir: dir.to_path_buf() })
    }

    #[test]
    fn every_language_and_kind_gets_a_project_with_its_world_filled_in() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js, Lang::C, Lang::Go] {
            for kind in PluginKind::ALL {
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path().join("my-plugin");
                let files = match new(lang, kind, &dir) {
                    Err(ScaffoldError::NoExample { .. })
                        if kind == PluginKind::Encoder && matches!(lang, Lang::Js | Lang::C | Lang::Go) =>
                    {
                        assert!(!dir.exists(), "{lang:?}: nothing written for an encoder");
                        continue;
                    }
                    other => other.unwrap(),
                };
                // The project's own files (the SDK and WIT copies are verbatim).
                for f in files.iter().filter(|f| !f.starts_with(dir.join("sdk")) && !f.starts_with(dir.join("wit"))) {
                    let text = std::fs::read_to_string(f).unwrap();
                    assert!(!text.contains("{{"), "{lang:?} {kind}: placeholder left in {}", f.display());
                }
                let main = std::fs::read_to_string(&files[0]).unwrap();
                for example in [
                    "quiet-normal",
                    "quiet_normal",
                    "QuietNormal",
                    "namespace-reason",
                    "NamespaceReason",
                    "struct Slack",
                ] {
                    assert!(!main.contains(example), "{lang:?} {kind}: the example's name {example} is left in");
                }
                // A helper module the source imports is written beside it, and only then.
                for (import, helper) in [
                    ("from './packed.js'", "packed.js"),
                    ("#include \"packed.h\"", "packed.h"),
                    ("from packed import", "packed.py"),
                ] {
                    assert_eq!(main.contains(import), dir.join(helper).is_file(), "{lang:?} {kind}: {helper}");
                }
                let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
                assert!(!readme.contains("dlmalloc"), "the SDK's allocator is talc");
                assert!(readme.starts_with("# my-plugin\n"), "{lang:?} {kind}");
                assert!(readme.contains(&format!("`{}` plugin", project_world(lang, kind))), "{lang:?} {kind}");
                assert!(dir.join("wit/worlds.wit").is_file(), "{lang:?}: the WIT is copied");
            }
        }
    }

    #[test]
    fn the_rust_project_depends_on_its_copy_of_the_sdk_by_version() {
        let tmp = tempfile::tempdir().unwrap();
        new(Lang::Rust, PluginKind::Filter, tmp.path()).unwrap();
        let manifest = std::fs::read_to_string(tmp.path().join("Cargo.toml")).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            manifest.contains(&format!("eventpipe-guest = {{ path = \"sdk\", version = \"{version}\" }}")),
            "{manifest}"
        );
        assert!(manifest.contains("name = \"my_plugin\""));
        let sdk = std::fs::read_to_string(tmp.path().join("sdk/Cargo.toml")).unwrap();
        assert!(
            sdk.contains("name = \"eventpipe-guest\"") && sdk.contains(&format!("version = \"{version}\"")),
            "{sdk}"
        );
        assert!(!sdk.contains(".workspace"), "the copy inherits nothing: {sdk}");
    }

    /// The copy is the whole SDK: every source file of `guest-sdk/src`.
    #[test]
    fn the_rust_sdk_copy_has_every_source_file() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/src");
        let mut files: Vec<String> = std::fs::read_dir(src)
            .unwrap()
            .map(|e| format!("src/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        files.sort();
        let copied: Vec<&str> = RUST_SDK.iter().map(|(f, _)| *f).filter(|f| f.starts_with("src/")).collect();
        assert_eq!(copied, files);
    }

    #[test]
    fn bad_names_and_existing_directories_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["", "My", "1x", "a_b", "x-"] {
            let s = Scaffold { lang: Lang::C, kind: PluginKind::Filter, name: bad.into(), dir: tmp.path().join("x") };
            assert!(matches!(scaffold(&s), Err(ScaffoldError::Name(_))), "{bad:?}");
        }
        std::fs::write(tmp.path().join("f"), "").unwrap();
        let s = Scaffold { lang: Lang::C, kind: PluginKind::Filter, name: "x".into(), dir: tmp.path().into() };
        assert!(matches!(scaffold(&s), Err(ScaffoldError::Exists(_))));
    }
}
