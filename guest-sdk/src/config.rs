//! The plugin's own configuration (WIT interface `eventpipe:plugin/config`): the string
//! key/value table the host config gives this plugin. Read it when your plugin value is built
//! (in its `Default` impl): it does not change during an instance's life.
//!
//! Off wasm32 (native unit tests) the config is empty.

use alloc::string::String;
use alloc::vec::Vec;

#[cfg(target_arch = "wasm32")]
use crate::bindings::plugin::eventpipe::plugin::config as host;

/// The value of `key`, or `None` when the config does not set it.
pub fn get(key: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    {
        host::get(key)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = key;
        None
    }
}

/// Every `(key, value)` entry, sorted by key.
pub fn entries() -> Vec<(String, String)> {
    #[cfg(target_arch = "wasm32")]
    {
        host::entries()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Vec::new()
    }
}
