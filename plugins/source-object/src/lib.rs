//! `source-object`: the default spam-key plugin, client-go v0.26 `getSpamKey`: `source.component,
//! source.host, involvedObject.{kind, namespace, name, uid, apiVersion}`, concatenated (no
//! `type`: client-go added it in k8s 1.32).
#![cfg_attr(target_arch = "wasm32", no_std)]

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_spam_key!(eventpipe_guest::defaults::SourceObject);
