//! Build steps for eventpipe plugins written in languages that compile to a core Wasm module
//! (C with clang + wasi-libc): the two steps `wit-bindgen c` and `wasm-tools component new`
//! would do, as library calls, so that no extra tool has to be installed.
//!
//! - [`c_bindings`]: C bindings of one world of `wit/` (`W.h`, `W.c` and `W_component_type.o`,
//!   the object file that carries the world's type into the linked module), as
//!   `wit-bindgen c --world W --out-dir DIR WIT` does.
//! - [`componentize`]: a core module (built with those bindings) → a component, as
//!   `wasm-tools component new core.wasm -o plugin.wasm` does; optionally embedding the world
//!   first (for a module that was not linked with the `_component_type.o`).
//! - [`componentize_with`] with [`ComponentOptions::stub_wasi`]: the same for a module whose
//!   runtime imports WASI preview 1 (Go's `GOOS=wasip1`): those imports become stubs inside the
//!   module ([`stub_wasi`]), so the component imports nothing but its world.

use std::path::{Path, PathBuf};

use wit_bindgen_core::wit_parser::{Resolve, WorldId};

pub mod stub_wasi;

/// Why a build step failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The WIT directory could not be parsed, or has no such world.
    #[error("WIT {}: {reason}", path.display())]
    Wit {
        /// The WIT directory.
        path: PathBuf,
        /// The parser's explanation (with file and line).
        reason: String,
    },
    /// The binding generator failed.
    #[error("generating C bindings for world `{world}`: {reason}")]
    Bindings {
        /// The world.
        world: String,
        /// Why.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The module could not be turned into a component (not a module, missing exports, imports
    /// that do not match the world, …).
    #[error("making a component: {0}")]
    Component(String),
}

/// Parses the WIT package in `wit_dir` and selects `world` (`"filter"`, …).
///
/// # Errors
/// [`BuildError::Wit`] when the directory does not parse or lacks the world.
pub fn load_world(wit_dir: &Path, world: &str) -> Result<(Resolve, WorldId), BuildError> {
    let wit_error = |e: anyhow::Error| BuildError::Wit { path: wit_dir.to_path_buf(), reason: format!("{e:#}") };
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit_dir).map_err(wit_error)?;
    let id = resolve.select_world(&[package], Some(world)).map_err(wit_error)?;
    Ok((resolve, id))
}

/// Writes the C bindings of `world` into `out_dir` (created if needed): `W.h`, `W.c` and
/// `W_component_type.o`, `W` being the world name with `_` for `-`. Returns the files written.
///
/// # Errors
/// [`BuildError::Wit`], [`BuildError::Bindings`], or [`BuildError::Io`] on writing.
pub fn c_bindings(wit_dir: &Path, world: &str, out_dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let (mut resolve, id) = load_world(wit_dir, world)?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, id, &mut files)
        .map_err(|e| BuildError::Bindings { world: world.into(), reason: format!("{e:#}") })?;
    std::fs::create_dir_all(out_dir).map_err(|source| BuildError::Io { path: out_dir.to_path_buf(), source })?;
    let mut written = Vec::new();
    for (name, bytes) in files.iter() {
        let path = out_dir.join(name);
        std::fs::write(&path, bytes).map_err(|source| BuildError::Io { path: path.clone(), source })?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

/// Turns the core module `core` into a component. With `embed = Some((wit_dir, world))` the
/// world's type is embedded first (for a module linked without `W_component_type.o`). The
/// component is validated.
///
/// # Errors
/// [`BuildError::Wit`] for a bad WIT directory or world; [`BuildError::Component`] when the
/// module does not match its world (missing exports, unknown imports such as WASI preview 1
/// functions from libc's stdio) or is not a core module.
pub fn componentize(core: &[u8], embed: Option<(&Path, &str)>) -> Result<Vec<u8>, BuildError> {
    componentize_with(core, embed, ComponentOptions::default())
}

/// How [`componentize_with`] treats the core module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComponentOptions {
    /// Replace the module's `wasi_snapshot_preview1` imports by deterministic stubs inside it
    /// (no filesystem, network, real clock or randomness; see [`stub_wasi`]) before making the
    /// component.
    pub stub_wasi: bool,
}

/// [`componentize`] with [`ComponentOptions`].
///
/// # Errors
/// As [`componentize`]; with `stub_wasi`, [`BuildError::Component`] also when the module
/// cannot be rewritten (see [`stub_wasi::stub_wasi`]).
pub fn componentize_with(
    core: &[u8],
    embed: Option<(&Path, &str)>,
    options: ComponentOptions,
) -> Result<Vec<u8>, BuildError> {
    let component_error = |e: anyhow::Error| BuildError::Component(format!("{e:#}"));
    let mut module = if options.stub_wasi {
        stub_wasi::stub_wasi(core).map_err(|e| BuildError::Component(format!("stubbing WASI: {e}")))?
    } else {
        core.to_vec()
    };
    if let Some((wit_dir, world)) = embed {
        let (resolve, id) = load_world(wit_dir, world)?;
        wit_component::embed_component_metadata(&mut module, &resolve, id, wit_component::StringEncoding::UTF8)
            .map_err(component_error)?;
    }
    wit_component::ComponentEncoder::default()
        .module(&module)
        .map_err(component_error)?
        .validate(true)
        .encode()
        .map_err(component_error)
}

/// [`componentize`] from file to file.
///
/// # Errors
/// As [`componentize`], plus [`BuildError::Io`] on reading `core` or writing `out`.
pub fn componentize_file(core: &Path, out: &Path, embed: Option<(&Path, &str)>) -> Result<(), BuildError> {
    componentize_file_with(core, out, embed, ComponentOptions::default())
}

/// [`componentize_with`] from file to file.
///
/// # Errors
/// As [`componentize_with`], plus [`BuildError::Io`] on reading `core` or writing `out`.
pub fn componentize_file_with(
    core: &Path,
    out: &Path,
    embed: Option<(&Path, &str)>,
    options: ComponentOptions,
) -> Result<(), BuildError> {
    let bytes = std::fs::read(core).map_err(|source| BuildError::Io { path: core.to_path_buf(), source })?;
    let component = componentize_with(&bytes, embed, options)?;
    std::fs::write(out, component).map_err(|source| BuildError::Io { path: out.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wit_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit")
    }

    #[test]
    fn c_bindings_of_every_world_are_written() {
        let out = tempfile::tempdir().unwrap();
        for world in ["filter", "aggregate-key", "message-combiner", "spam-key", "sink", "watcher"] {
            let files = c_bindings(&wit_dir(), world, out.path()).unwrap();
            let stem = world.replace('-', "_");
            let names: Vec<String> =
                files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
            assert_eq!(names, [format!("{stem}.c"), format!("{stem}.h"), format!("{stem}_component_type.o")]);
            let header = std::fs::read_to_string(out.path().join(format!("{stem}.h"))).unwrap();
            assert!(header.contains(&format!("exports_{stem}_")), "{world}: export prototypes in the header");
        }
    }

    #[test]
    fn an_unknown_world_is_named_in_the_error() {
        let out = tempfile::tempdir().unwrap();
        let error = c_bindings(&wit_dir(), "no-such-world", out.path()).unwrap_err().to_string();
        assert!(error.contains("no-such-world"), "{error}");
    }

    #[test]
    fn a_module_that_does_not_export_its_world_is_refused() {
        // `(module)` in binary: magic + version only.
        let empty = b"\0asm\x01\0\0\0";
        let error = componentize(empty, Some((&wit_dir(), "filter"))).unwrap_err().to_string();
        assert!(error.contains("filter"), "{error}");
        let error = componentize(b"not wasm", None).unwrap_err().to_string();
        assert!(error.starts_with("making a component"), "{error}");
    }
}
