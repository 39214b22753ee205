//! `source-object`: the default spam-key plugin, client-go `getSpamKey`: `source.component,
//! source.host, involvedObject.{kind, namespace, name, uid, apiVersion}, type`, concatenated.
#![cfg_attr(target_arch = "wasm32", no_std)]

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_spam_key!(eventpipe_guest::defaults::SourceObject);
