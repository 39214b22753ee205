//! Enrichment (`run --enrich-*`, `[enrich]`) against the real kube-apiserver (started by
//! [`crate::common::apiserver`]; no controllers run, so the objects are created with their
//! `ownerReferences`): a Node with a zone label; a Deployment, a ReplicaSet it controls and
//! Pods the ReplicaSet controls, on that Node; a CronJob → Job → Pod chain. Events about those
//! Pods, created through the API and read by `--source k8s`, reach the JSON-lines sinks with
//! the right owner, labels, node and cluster; the API server's own GET count for pods and
//! replicasets rises by no more than the number of distinct objects; a Pod deleted and created
//! again under its name carries its new labels; a tenant's `match.object_labels` routes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::apiserver::{ControlPlane, control_plane_or_skip};

const NODE_ZONE: &str = "eu-west-1a";

fn create(plane: &ControlPlane, path: &str, body: Value) -> Value {
    let (code, answer) = plane.request("POST", path, Some(&body));
    assert_eq!(code, 201, "POST {path}: {answer}");
    answer
}

fn controller(owner: &Value) -> Value {
    json!([{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    }])
}

fn template(labels: &Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "registry.invalid/c"}]}})
}

fn pod(plane: &ControlPlane, ns: &str, name: &str, labels: &Value, owner: &Value, node: &str) -> Value {
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": controller(owner)},
        "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": false, "containers": [{"name": "c", "image": "registry.invalid/c"}]},
    });
    create(plane, &format!("/api/v1/namespaces/{ns}/pods"), body)
}

/// An Event about Pod `pod` from a component of its own (`i`), so that neither the aggregator
/// nor the spam filter folds the 500 of them: each is one create in the sinks.
fn event(plane: &ControlPlane, ns: &str, pod: &Value, i: usize) {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let name = pod["metadata"]["name"].as_str().unwrap();
    let body = json!({
        "metadata": {"name": format!("{name}.{i}"), "namespace": ns},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": name, "uid": pod["metadata"]["uid"], "apiVersion": "v1"},
        "reason": "Started", "message": format!("event {i}"), "type": "Normal",
        "source": {"component": format!("component-{i}")},
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    });
    create(plane, &format!("/api/v1/namespaces/{ns}/events"), body);
}

/// The sum of the API server's `apiserver_request_total` samples with `verb="GET"` for
/// `resource`, from its `/metrics`.
fn gets(plane: &ControlPlane, resource: &str) -> f64 {
    let text = raw_get(plane, "/metrics");
    let resource = format!("resource=\"{resource}\"");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("verb=\"GET\"") && l.contains(&resource))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn raw_get(plane: &ControlPlane, path: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let options = eventpipe::k8s::KubeOptions { kubeconfig: Some(plane.kubeconfig.clone()), ..Default::default() };
        let client = eventpipe::k8s::connect(&options).await.unwrap();
        let request = http::Request::builder().uri(path).body(Vec::new()).unwrap();
        client.request_text(request).await.unwrap()
    })
}

/// A running `eventpipe run --source k8s:NS` with enrichment and a tenant config.
struct Run {
    child: Child,
    metrics: String,
}

impl Run {
    fn start(plane: &ControlPlane, ns: &str, config: &std::path::Path, out: &std::path::Path) -> Self {
        Self::start_with(plane, ns, config, out, &[])
    }

    /// As [`Run::start`], with `extra` arguments.
    fn start_with(
        plane: &ControlPlane,
        ns: &str,
        config: &std::path::Path,
        out: &std::path::Path,
        extra: &[String],
    ) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch", "--metrics=127.0.0.1:0", "--replay-existing"])
            .args(extra)
            .arg(format!("--source=k8s:{ns}"))
            .arg(format!("--sink=jsonl:{}", out.display()))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .args(["--enrich-labels=app.kubernetes.io/*,team", "--enrich-owner", "--cluster-name=prod-eu"])
            .arg("--enrich-node-labels=topology.kubernetes.io/*")
            // A cold start's first lists on a loaded test machine take longer than the 100 ms
            // default; every line is checked here.
            .arg("--enrich-wait=20000")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let metrics = crate::common::metrics_address_draining(&mut child);
        Run { child, metrics }
    }

    fn sample(&self, name: &str) -> Option<f64> {
        let mut conn = TcpStream::connect(&self.metrics).unwrap();
        write!(conn, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.metrics).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        // A family without labels is written `name{} value`.
        answer.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            rest.strip_prefix("{}").unwrap_or(rest).strip_prefix(' ')?.parse().ok()
        })
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn wait_for_lines(paths: &[&std::path::Path], n: usize, limit: Duration) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let all: Vec<Value> = paths.iter().flat_map(|p| lines(p)).collect();
        if all.len() >= n {
            return all;
        }
        assert!(start.elapsed() < limit, "{} of {n} lines after {limit:?}", all.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn events_carry_their_pods_owner_labels_node_and_cluster_and_route_by_object_labels() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("enrich");
    // No controller manager: the namespace's default ServiceAccount, which Pods need, is ours to make.
    create(
        plane,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}, "automountServiceAccountToken": false}),
    );
    let node_name = format!("{ns}-node");
    create(
        plane,
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": {
            "topology.kubernetes.io/zone": NODE_ZONE, "kubernetes.io/hostname": node_name}}}),
    );
    // Deployment → ReplicaSet → 4 Pods, labelled for the payments team.
    let app = json!({"app.kubernetes.io/name": "checkout", "team": "payments", "pod-template-hash": "5d8f"});
    let selector = json!({"matchLabels": {"app.kubernetes.io/name": "checkout"}});
    let deployment = create(
        plane,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "checkout"},
               "spec": {"selector": selector, "template": template(&app)}}),
    );
    let replica_set = create(
        plane,
        &format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "checkout-5d8f", "labels": app, "ownerReferences": controller(&deployment)},
               "spec": {"selector": selector, "template": template(&app)}}),
    );
    let mut pods: Vec<Value> =
        (0..4).map(|i| pod(plane, &ns, &format!("checkout-5d8f-{i}"), &app, &replica_set, &node_name)).collect();
    // CronJob → Job → Pod (batch/v1beta1 CronJob: the API server's version has no batch/v1 one).
    let job_labels = json!({"app.kubernetes.io/name": "report", "team": "batch"});
    let cron_job = create(
        plane,
        &format!("/apis/batch/v1beta1/namespaces/{ns}/cronjobs"),
        json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "report"},
               "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {
                   "metadata": {"labels": job_labels},
                   "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.invalid/c"}]}}}}}}),
    );
    let job = create(
        plane,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs"),
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "report-1", "ownerReferences": controller(&cron_job)},
               "spec": {"template": {"metadata": {"labels": job_labels},
                   "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.invalid/c"}]}}}}),
    );
    pods.push(pod(plane, &ns, "report-1-x7k2p", &job_labels, &job, &node_name));

    let dir = tempfile::tempdir().unwrap();
    let (out, payments) = (dir.path().join("out.jsonl"), dir.path().join("payments.jsonl"));
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        format!(
            "[[tenants]]\nname = \"payments\"\nmatch = {{ object_labels = {{ team = \"pay*\" }} }}\nrules = {{ sinks = [\"jsonl:{}\"] }}\n",
            payments.display()
        ),
    )
    .unwrap();

    for i in 0..500 {
        event(plane, &ns, &pods[i % pods.len()], i);
    }
    let (pod_gets, rs_gets) = (gets(plane, "pods"), gets(plane, "replicasets"));
    let run = Run::start(plane, &ns, &config, &out);
    let all = wait_for_lines(&[&out, &payments], 500, Duration::from_secs(120));
    assert_eq!(all.len(), 500);

    for line in &all {
        let pod = line["event"]["involvedObject"]["name"].as_str().unwrap();
        let e = &line["enrichment"];
        assert_eq!(e["cluster"], "prod-eu", "{line}");
        assert_eq!(
            e["node"],
            json!({"name": node_name, "labels": {"topology.kubernetes.io/zone": NODE_ZONE}}),
            "{line}"
        );
        assert!(e.get("annotations").is_none(), "not configured: absent: {line}");
        if pod.starts_with("checkout") {
            assert_eq!(e["labels"], json!({"app.kubernetes.io/name": "checkout", "team": "payments"}), "{line}");
            let owner = json!({"kind": "Deployment", "name": "checkout", "uid": deployment["metadata"]["uid"], "apiVersion": "apps/v1"});
            assert_eq!(e["owner"], owner, "{line}");
        } else {
            assert_eq!(e["labels"], job_labels, "{line}");
            let owner = json!({"kind": "CronJob", "name": "report", "uid": cron_job["metadata"]["uid"], "apiVersion": "batch/v1beta1"});
            assert_eq!(e["owner"], owner, "{line}");
        }
    }
    // The tenant's match on the object's labels routed: payments' Pods to its sink, the rest not.
    let (mine, rest) = (lines(&payments), lines(&out));
    assert_eq!(mine.len(), 400, "4 of 5 Pods are the payments team's");
    assert!(mine.iter().all(|l| l["enrichment"]["labels"]["team"] == "payments"));
    assert!(rest.iter().all(|l| l["enrichment"]["labels"]["team"] == "batch") && rest.len() == 100);
    // The event itself is as the API server has it: enrichment sits beside it.
    assert!(all.iter().all(|l| l["event"].get("enrichment").is_none()));

    // The steady stream cost no GET per event: at most one per distinct object.
    let (pod_gets, rs_gets) = (gets(plane, "pods") - pod_gets, gets(plane, "replicasets") - rs_gets);
    assert!(pod_gets <= 5.0, "{pod_gets} GETs of pods for 5 Pods");
    assert!(rs_gets <= 1.0, "{rs_gets} GETs of replicasets for 1 ReplicaSet");
    assert_eq!(run.sample("eventpipe_enrich_enriched_total"), Some(500.0));

    // A filter plugin reads the enrichment (world `filter-enriched`): `keep-owner` keeps the
    // events of objects a Deployment owns, on a node, of cluster prod-eu. A second run lists
    // the same 500 events: the Deployment's 400 pass, the CronJob's 100 are dropped.
    let (filtered, filtered_config) = (dir.path().join("filtered.jsonl"), dir.path().join("filtered.toml"));
    std::fs::write(
        &filtered_config,
        "[defaults]\nfilters = [\"keep-owner\"]\n[plugins.keep-owner]\nowner_kind = \"Deployment\"\ncluster = \"prod-eu\"\n",
    )
    .unwrap();
    let plugins = crate::common::plugins_dir(dir.path(), &["keep-owner"]);
    let filtering =
        Run::start_with(plane, &ns, &filtered_config, &filtered, &[format!("--plugins={}", plugins.display())]);
    let kept = wait_for_lines(&[&filtered], 400, Duration::from_secs(120));
    let dropped = || filtering.sample("eventpipe_filtered_total{tenant=\"default\"}").unwrap_or(0.0);
    let start = Instant::now();
    while dropped() < 100.0 {
        assert!(start.elapsed() < Duration::from_secs(60), "{} dropped", dropped());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(dropped(), 100.0, "the CronJob's Pod's events, each dropped once");
    assert_eq!(kept.len(), 400, "the Deployment's Pods' events pass the plugin");
    assert!(kept.iter().all(|l| l["enrichment"]["owner"]["kind"] == "Deployment"), "{kept:?}");
    assert_eq!(lines(&filtered).len(), 400, "the CronJob's events do not");
    drop(filtering);

    // A Pod deleted (at once: no kubelet here to end it gracefully) and created again under its
    // name: its events carry the new labels.
    let name = "checkout-5d8f-0";
    let (code, answer) =
        plane.request("DELETE", &format!("/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0"), None);
    assert_eq!(code, 200, "{answer}");
    let relabelled = json!({"app.kubernetes.io/name": "checkout", "team": "billing"});
    let again = pod(plane, &ns, name, &relabelled, &replica_set, &node_name);
    event(plane, &ns, &again, 1000);
    let all = wait_for_lines(&[&out, &payments], 501, Duration::from_secs(60));
    let last = all.iter().find(|l| l["event"]["metadata"]["name"] == format!("{name}.1000")).expect("the new event");
    assert_eq!(last["enrichment"]["labels"], relabelled, "{last}");
    assert_eq!(last["event"]["involvedObject"]["uid"], again["metadata"]["uid"]);
    // No longer the payments team's: the default sink got it.
    assert!(lines(&out).iter().any(|l| l["event"]["metadata"]["name"] == format!("{name}.1000")));
}
