//! Filters that read the enrichment (world `filter-enriched`), in Rust (fixture `keep-owner`)
//! and in Go (the same filter, written here against the Go SDK): each gets the enrichment
//! fields it declared, packed after its event fields, and decides on them; a filter of the
//! plain `filter` world keeps loading and gets none.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use eventpipe::event::Event;
use eventpipe::event::enrichment::{Enriched, Enrichment, Node, Owner};
use eventpipe::plugin::filter::{Verdict, WasmFilter};
use eventpipe::plugin::{Metering, PluginHandle, PluginRuntime, PluginSettings};

use crate::common;

/// `keep-owner` in Go: keeps the events of objects whose top owner is of the configured
/// `owner_kind`, on a node, of the configured `cluster`.
const GO_KEEP_OWNER: &str = r#"package main

import (
	eventpipe "github.com/eventpipe/eventpipe/guest-sdk/go"
	"github.com/eventpipe/eventpipe/guest-sdk/go/filter"
)

type keepOwner struct{ kind, cluster string }

func (keepOwner) Fields() []eventpipe.EventField {
	return []eventpipe.EventField{eventpipe.FieldInvolvedObjectName}
}

func (keepOwner) EnrichmentFields() []eventpipe.EnrichmentField {
	return []eventpipe.EnrichmentField{eventpipe.EnrichmentOwnerKind, eventpipe.EnrichmentNodeName, eventpipe.EnrichmentCluster}
}

func (k keepOwner) FilterEnriched(tenant string, e *eventpipe.Event, en eventpipe.Enrichment) eventpipe.Verdict {
	owner, node := en.Get(eventpipe.EnrichmentOwnerKind), en.Get(eventpipe.EnrichmentNodeName)
	if owner == k.kind && node != "" && en.Get(eventpipe.EnrichmentCluster) == k.cluster {
		return eventpipe.Keep
	}
	return eventpipe.Drop(e.InvolvedObject.Name + " is owned by a " + owner)
}

func (k keepOwner) Filter(tenant string, e *eventpipe.Event) eventpipe.Verdict {
	return k.FilterEnriched(tenant, e, eventpipe.Enrichment{})
}

func init() {
	filter.Register(func() eventpipe.Filter {
		kind, _ := eventpipe.Config("owner_kind")
		cluster, _ := eventpipe.Config("cluster")
		return keepOwner{kind, cluster}
	})
}

func main() {}
"#;

/// Builds [`GO_KEEP_OWNER`] into a component of `world` under `dir`; `None` (skipped) without Go
/// outside CI.
fn build_go(dir: &Path, world: &str) -> Option<std::path::PathBuf> {
    let go = match crate::example_plugins::go_command() {
        Ok(go) => go,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: {why}");
            return None;
        }
        Err(why) => panic!("{why}"),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = dir.join("go-keep-owner");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("main.go"), GO_KEEP_OWNER).unwrap();
    let sdk = root.join("guest-sdk/go").canonicalize().unwrap();
    std::fs::write(
        src.join("go.mod"),
        format!(
            "module keepowner\n\ngo 1.24\n\nrequire github.com/eventpipe/eventpipe/guest-sdk/go v0.0.0\n\n\
             replace github.com/eventpipe/eventpipe/guest-sdk/go => {}\n",
            sdk.display()
        ),
    )
    .unwrap();
    let core = dir.join("keep-owner.core.wasm");
    let status = Command::new(&go)
        .current_dir(&src)
        .envs([("GOOS", "wasip1"), ("GOARCH", "wasm"), ("GOPROXY", "off"), ("GOFLAGS", "-mod=mod")])
        .args(["build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s", "-o"])
        .arg(&core)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "go build");
    let file = dir.join(format!("keep-owner-{world}.wasm"));
    let options = eventpipe_plugin_build::ComponentOptions { stub_wasi: true };
    eventpipe_plugin_build::componentize_file_with(&core, &file, Some((&root.join("wit"), world)), options).unwrap();
    Some(file)
}

fn config() -> PluginSettings {
    let config = [("owner_kind", "Deployment"), ("cluster", "prod-eu")];
    PluginSettings {
        config: config.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..PluginSettings::default()
    }
}

fn load(file: &Path) -> PluginHandle {
    let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
    PluginHandle::fixed(runtime.load_file("keep-owner", file).unwrap(), "default", config())
}

/// An event about Pod `name`, enriched with `owner` (a kind), on `node`, in cluster `prod-eu`;
/// `owner` `None`: no enrichment at all.
fn event(name: &str, owner: Option<&str>, node: &str) -> Event {
    let mut e = Event { reason: "BackOff".into(), ..Event::default() };
    e.involved_object.kind = "Pod".into();
    e.involved_object.name = name.into();
    if let Some(kind) = owner {
        let owner = Owner { kind: kind.into(), name: "web".into(), uid: "u".into(), api_version: "apps/v1".into() };
        e.enrichment = Enriched::new(Arc::new(Enrichment {
            cluster: Some("prod-eu".into()),
            owner: Some(owner),
            node: (!node.is_empty()).then(|| Node { name: node.into(), labels: Default::default() }),
            ..Enrichment::default()
        }));
    }
    e
}

/// Keep, drop (a CronJob's), drop (no node), drop (no enrichment), keep.
fn check(filter: &WasmFilter, what: &str) {
    let events = [
        event("web-0", Some("Deployment"), "node-a"),
        event("report-1", Some("CronJob"), "node-a"),
        event("web-1", Some("Deployment"), ""),
        event("bare", None, ""),
        event("web-2", Some("Deployment"), "node-b"),
    ];
    let refs: Vec<&Event> = events.iter().collect();
    let kept: Vec<bool> = filter.filter(&refs).iter().map(|v| *v == Verdict::Keep).collect();
    assert_eq!(kept, [true, false, false, false, true], "{what}");
}

#[test]
fn a_rust_filter_reads_the_enrichment_it_declared() {
    let plugin = load(&common::fixture_plugin("keep-owner"));
    assert!(plugin.slot().load().is_some_and(|p| p.declares_enrichment_fields()));
    check(&WasmFilter::new(plugin).unwrap(), "Rust");
}

#[test]
fn a_go_filter_reads_the_enrichment_and_a_plain_filter_world_component_gets_none() {
    let dir = tempfile::tempdir().unwrap();
    let Some(enriched) = build_go(dir.path(), "filter-enriched") else { return };
    let plugin = load(&enriched);
    assert!(plugin.slot().load().is_some_and(|p| p.declares_enrichment_fields()));
    check(&WasmFilter::new(plugin).unwrap(), "Go");

    // The same code componentized for the plain `filter` world (as every filter was built
    // before `filter-enriched`): it loads, is asked for no enrichment, and so sees none.
    let plain = load(&build_go(dir.path(), "filter").unwrap());
    assert!(plain.slot().load().is_some_and(|p| !p.declares_enrichment_fields()));
    let filter = WasmFilter::new(plain).unwrap();
    let events = [event("web-0", Some("Deployment"), "node-a")];
    let refs: Vec<&Event> = events.iter().collect();
    assert!(
        matches!(&filter.filter(&refs)[..], [Verdict::Drop(Some(r))] if r.contains("owned by a ")),
        "no enrichment"
    );
}
