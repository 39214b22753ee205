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

/// World `aggregate-key`.
pub mod aggregate_key {
    wit_bindgen::generate!({
        path: "../wit",
        world: "aggregate-key",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::aggregate_key",
    });
}

/// World `message-combiner`.
pub mod message_combiner {
    wit_bindgen::generate!({
        path: "../wit",
        world: "message-combiner",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::message_combiner",
    });
}

/// World `spam-key`.
pub mod spam_key {
    wit_bindgen::generate!({
        path: "../wit",
        world: "spam-key",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::spam_key",
    });
}

/// World `filter`.
pub mod filter {
    wit_bindgen::generate!({
        path: "../wit",
        world: "filter",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::filter",
    });
}

/// World `sink`.
pub mod sink {
    wit_bindgen::generate!({
        path: "../wit",
        world: "sink",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::sink",
    });
}

/// World `watcher`.
pub mod watcher {
    wit_bindgen::generate!({
        path: "../wit",
        world: "watcher",
        runtime_path: "eventpipe_guest::__private::wit_bindgen::rt",
        with: {
            "eventpipe:plugin/types@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::types,
            "eventpipe:plugin/log@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::log,
            "eventpipe:plugin/config@0.1.0": eventpipe_guest::bindings::plugin::eventpipe::plugin::config,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "eventpipe_guest::bindings::watcher",
    });
}
