//! Generated bindings, one module per world of `../wit` (hidden: use the crate's traits,
//! modules and export macros instead).
//!
//! `plugin` generates the shared `types` and the `log` / `config` imports once; every kind
//! world reuses them through `with`, so one `Event` type serves every kind. Each kind world's
//! `export!` macro is public so that the SDK's `export_*!` macros can expand it in the plugin
//! crate; it carries the component-type section describing the world's exports.
#![allow(missing_docs, unsafe_op_in_unsafe_fn, clippy::all)]

/// The shared types and the imports every plugin may use (`world plugin`).
pub mod plugin {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        generate_unused_types: true,
        // Borrowed import arguments: `log` takes `&[Field<'_>]`, not owned strings.
        ownership: Borrowing { duplicate_if_necessary: false },
        additional_derives: [PartialEq, Eq, Hash],
        additional_type_attributes: {
            "eventpipe:plugin/types@0.1.0/event": [#[derive(Default)]],
            "eventpipe:plugin/types@0.1.0/object-meta": [#[derive(Default)]],
            "eventpipe:plugin/types@0.1.0/object-reference": [#[derive(Default)]],
            "eventpipe:plugin/types@0.1.0/event-source": [#[derive(Default)]],
            "eventpipe:plugin/types@0.1.0/event-series": [#[derive(Default)]],
        },
    });
}

/// One kind world: its exports and public `export!` macro, reusing `plugin`'s types and
/// imports (a sink's `output` import is generated in its own module).
macro_rules! kind_world {
    ($module:ident, $world:tt, $bindings_module:tt) => {
        #[doc = concat!("World `", $world, "`.")]
        pub mod $module {
            wit_bindgen::generate!({
                path: "../wit",
                world: $world,
                runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
                with: {
                    "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
                    "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
                    "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
                },
                pub_export_macro: true,
                export_macro_name: "export",
                default_bindings_module: $bindings_module,
            });
        }
    };
}

kind_world!(aggregate_key, "aggregate-key-projected", "eventpipe_guest::bindings::aggregate_key");
kind_world!(message_combiner, "message-combiner-projected", "eventpipe_guest::bindings::message_combiner");
kind_world!(spam_key, "spam-key-projected", "eventpipe_guest::bindings::spam_key");
kind_world!(filter, "filter-enriched", "eventpipe_guest::bindings::filter");
kind_world!(sink, "sink", "eventpipe_guest::bindings::sink");
kind_world!(watcher, "watcher", "eventpipe_guest::bindings::watcher");
kind_world!(encoder, "encoder", "eventpipe_guest::bindings::encoder");
