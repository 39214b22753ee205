//! The Helm chart (`examples/kubernetes/helm/eventpipe`), rendered without `helm`: a small
//! renderer of the Go-template subset the chart keeps to (actions with `{{-` / `-}}` trimming,
//! comments, `if` / `else if` / `else`, `with`, `range`, `define` / `include`, pipelines, and
//! the functions `quote`, `toYaml`, `indent`, `nindent`, `default`, `eq`, `ne`, `not`, `and`,
//! `or`, `add`, `printf` (`%s`), `trunc`, `trimSuffix`, `contains`). A value path missing from
//! `values.yaml` is an error (helm would print nothing), so a typo in a template fails here.
//!
//! Checked: every document parses as YAML; the ClusterRole has exactly the verbs eventpipe
//! uses (and the same rules as `examples/kubernetes/eventpipe.yaml`); the probes ask
//! `/healthz` and `/readyz` on the metrics port that `--metrics 0.0.0.0:PORT` serves; every
//! flag of the container's arguments is one `eventpipe run` has; the tenant config loads; the
//! StatefulSet (with its headless governing Service), ServiceMonitor and plugin-source toggles;
//! leader election (on by default: replicas, flags, downward-API variables, the Lease's Role,
//! the PodDisruptionBudget, anti-affinity, RollingUpdate; off: one pod, Recreate); every value
//! of `values.yaml` changes what the chart renders; the plain manifests of
//! `examples/kubernetes/` roll out one writer (or elect one) and govern their StatefulSets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kubernetes/helm/eventpipe")
}

// ---------------------------------------------------------------------------------------------
// The template subset.

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Output(Pipeline),
    /// `(condition, body)` branches, then the `else` body.
    If(Vec<(Pipeline, Vec<Node>)>, Vec<Node>),
    With(Pipeline, Vec<Node>, Vec<Node>),
    Range(Pipeline, Vec<Node>),
}

type Pipeline = Vec<Command>;
type Command = Vec<Term>;

#[derive(Debug, Clone)]
enum Term {
    Field(Vec<String>),
    Root(Vec<String>),
    Str(String),
    Int(i64),
    Func(String),
    Sub(Pipeline),
}

/// One lexed piece: text, or an action's inner text.
enum Piece {
    Text(String),
    Action(String),
}

fn lex(src: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").expect("an action is closed");
        let mut inner = &after[..close];
        if let Some(i) = inner.strip_prefix("- ") {
            text = text.trim_end().to_string();
            inner = i;
        }
        trim_next = false;
        if let Some(i) = inner.strip_suffix(" -") {
            trim_next = true;
            inner = i;
        }
        pieces.push(Piece::Text(text));
        let inner = inner.trim();
        if !(inner.starts_with("/*") && inner.ends_with("*/")) {
            pieces.push(Piece::Action(inner.to_string()));
        }
        rest = &after[close + 2..];
    }
    pieces.push(Piece::Text(if trim_next { rest.trim_start().to_string() } else { rest.to_string() }));
    pieces
}

/// Parses the pieces into nodes; `define` blocks go into `defines`.
struct Parser<'a> {
    pieces: std::vec::IntoIter<Piece>,
    defines: &'a mut BTreeMap<String, Vec<Node>>,
}

/// How a list of nodes ended.
enum Ending {
    Eof,
    End,
    Else,
    ElseIf(Pipeline),
}

impl Parser<'_> {
    fn list(&mut self) -> (Vec<Node>, Ending) {
        let mut nodes = Vec::new();
        while let Some(piece) = self.pieces.next() {
            let action = match piece {
                Piece::Text(t) => {
                    if !t.is_empty() {
                        nodes.push(Node::Text(t));
                    }
                    continue;
                }
                Piece::Action(a) => a,
            };
            let (word, rest) = action.split_once(' ').unwrap_or((&action, ""));
            match word {
                "end" => return (nodes, Ending::End),
                "else" if rest.starts_with("if ") => return (nodes, Ending::ElseIf(pipeline(&rest[3..]))),
                "else" => return (nodes, Ending::Else),
                "if" => {
                    let mut branches = vec![];
                    let mut cond = pipeline(rest);
                    let otherwise = loop {
                        let (body, end) = self.list();
                        branches.push((cond, body));
                        match end {
                            Ending::ElseIf(c) => cond = c,
                            Ending::Else => break self.until_end(),
                            Ending::End => break vec![],
                            Ending::Eof => panic!("`if {rest}` has no end"),
                        }
                    };
                    nodes.push(Node::If(branches, otherwise));
                }
                "with" => {
                    let (body, end) = self.list();
                    let otherwise = match end {
                        Ending::Else => self.until_end(),
                        Ending::End => vec![],
                        _ => panic!("`with {rest}`: unsupported end"),
                    };
                    nodes.push(Node::With(pipeline(rest), body, otherwise));
                }
                "range" => nodes.push(Node::Range(pipeline(rest), self.until_end())),
                "define" => {
                    let name = rest.trim().trim_matches('"').to_string();
                    let body = self.until_end();
                    self.defines.insert(name, body);
                }
                _ => nodes.push(Node::Output(pipeline(&action))),
            }
        }
        (nodes, Ending::Eof)
    }

    fn until_end(&mut self) -> Vec<Node> {
        match self.list() {
            (nodes, Ending::End) => nodes,
            _ => panic!("a block has no `end`"),
        }
    }
}

fn parse(src: &str, defines: &mut BTreeMap<String, Vec<Node>>) -> Vec<Node> {
    let mut parser = Parser { pieces: lex(src).into_iter(), defines };
    match parser.list() {
        (nodes, Ending::Eof) => nodes,
        _ => panic!("an `end` or `else` outside a block"),
    }
}

/// Splits an action into words: `(`, `)`, `|`, string literals and bare words.
fn words(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = src.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' => {
                chars.next();
            }
            '(' | ')' | '|' => {
                out.push(c.to_string());
                chars.next();
            }
            '"' => {
                let mut s = String::from('"');
                chars.next();
                while let Some(c) = chars.next() {
                    s.push(c);
                    if c == '\\' {
                        s.push(chars.next().unwrap());
                    } else if c == '"' {
                        break;
                    }
                }
                out.push(s);
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if " \t\n()|".contains(c) {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                out.push(s);
            }
        }
    }
    out
}

fn pipeline(src: &str) -> Pipeline {
    let words = words(src);
    let mut at = 0;
    let p = parse_pipeline(&words, &mut at);
    assert_eq!(at, words.len(), "trailing words in `{src}`");
    p
}

fn parse_pipeline(words: &[String], at: &mut usize) -> Pipeline {
    let mut commands = vec![vec![]];
    while *at < words.len() {
        let w = &words[*at];
        *at += 1;
        let term = match w.as_str() {
            ")" => {
                *at -= 1;
                break;
            }
            "|" => {
                commands.push(vec![]);
                continue;
            }
            "(" => {
                let sub = parse_pipeline(words, at);
                assert_eq!(words.get(*at).map(String::as_str), Some(")"));
                *at += 1;
                Term::Sub(sub)
            }
            "." => Term::Field(vec![]),
            w if w.starts_with('"') => Term::Str(serde_json::from_str(w).expect("a Go string literal")),
            w if w.starts_with('.') => Term::Field(w[1..].split('.').map(String::from).collect()),
            "$" => Term::Root(vec![]),
            w if w.starts_with("$.") => Term::Root(w[2..].split('.').map(String::from).collect()),
            w if w.parse::<i64>().is_ok() => Term::Int(w.parse().unwrap()),
            w => Term::Func(w.to_string()),
        };
        commands.last_mut().unwrap().push(term);
    }
    assert!(commands.iter().all(|c| !c.is_empty()), "an empty command in a pipeline");
    commands
}

/// Go template truth: false, 0, "", null and empty collections are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A value as text output prints it.
fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        other => panic!("printing a collection: {other}"),
    }
}

fn indent(n: usize, s: &str) -> String {
    let pad = " ".repeat(n);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

struct Renderer {
    defines: BTreeMap<String, Vec<Node>>,
    root: Value,
}

impl Renderer {
    fn render(&self, nodes: &[Node], dot: &Value, out: &mut String) {
        for node in nodes {
            match node {
                Node::Text(t) => out.push_str(t),
                Node::Output(p) => out.push_str(&text(&self.eval(p, dot))),
                Node::If(branches, otherwise) => {
                    let body = branches.iter().find(|(c, _)| truthy(&self.eval(c, dot))).map(|(_, b)| b);
                    self.render(body.unwrap_or(otherwise), dot, out);
                }
                Node::With(p, body, otherwise) => {
                    let v = self.eval(p, dot);
                    if truthy(&v) { self.render(body, &v, out) } else { self.render(otherwise, dot, out) }
                }
                Node::Range(p, body) => match self.eval(p, dot) {
                    Value::Array(items) => items.iter().for_each(|item| self.render(body, item, out)),
                    Value::Null => {}
                    other => panic!("range over {other}"),
                },
            }
        }
    }

    fn eval(&self, pipeline: &Pipeline, dot: &Value) -> Value {
        let mut piped: Option<Value> = None;
        for command in pipeline {
            let value = match &command[0] {
                // Helm's `.Files.Get PATH`: a file of the chart.
                Term::Field(path) | Term::Root(path) if path == &["Files", "Get"] => {
                    let mut args: Vec<Value> = command[1..].iter().map(|t| self.term(t, dot)).collect();
                    args.extend(piped.take());
                    self.call("Files.Get", args, dot)
                }
                Term::Func(name) => {
                    let mut args: Vec<Value> = command[1..].iter().map(|t| self.term(t, dot)).collect();
                    args.extend(piped.take());
                    self.call(name, args, dot)
                }
                term => {
                    assert!(command.len() == 1 && piped.is_none(), "not a function: {command:?}");
                    self.term(term, dot)
                }
            };
            piped = Some(value);
        }
        piped.expect("a pipeline has a command")
    }

    fn term(&self, term: &Term, dot: &Value) -> Value {
        let walk = |mut v: &Value, path: &[String]| {
            for key in path {
                v = v.get(key).unwrap_or_else(|| panic!("no value `{key}` (path {path:?}) in {v}"));
            }
            v.clone()
        };
        match term {
            Term::Field(path) => walk(dot, path),
            Term::Root(path) => walk(&self.root, path),
            Term::Str(s) => Value::String(s.clone()),
            Term::Int(i) => json!(i),
            Term::Sub(p) => self.eval(p, dot),
            Term::Func(name) => self.call(name, vec![], dot),
        }
    }

    fn call(&self, name: &str, args: Vec<Value>, _dot: &Value) -> Value {
        let s = |i: usize| text(&args[i]);
        let n = |i: usize| args[i].as_i64().unwrap_or_else(|| panic!("{name}: not a number: {}", args[i])) as usize;
        match (name, args.len()) {
            ("include", 2) => {
                let body = self.defines.get(&s(0)).unwrap_or_else(|| panic!("no template {}", s(0)));
                let mut out = String::new();
                self.render(body, &args[1], &mut out);
                Value::String(out)
            }
            ("quote", 1) => Value::String(serde_json::to_string(&s(0)).unwrap()),
            ("toYaml", 1) => Value::String(serde_norway::to_string(&args[0]).unwrap().trim_end().to_string()),
            ("indent", 2) => Value::String(indent(n(0), &s(1))),
            ("nindent", 2) => Value::String(format!("\n{}", indent(n(0), &s(1)))),
            ("default", 2) => {
                if truthy(&args[1]) {
                    args[1].clone()
                } else {
                    args[0].clone()
                }
            }
            ("eq", 2) => Value::Bool(args[0] == args[1]),
            ("ne", 2) => Value::Bool(args[0] != args[1]),
            ("not", 1) => Value::Bool(!truthy(&args[0])),
            ("and", _) => args.iter().find(|a| !truthy(a)).unwrap_or(args.last().unwrap()).clone(),
            ("or", _) => args.iter().find(|a| truthy(a)).unwrap_or(args.last().unwrap()).clone(),
            ("add", 2) => json!(n(0) + n(1)),
            ("printf", _) => {
                let mut out = s(0);
                for i in 1..args.len() {
                    out = out.replacen("%s", &s(i), 1);
                }
                assert!(!out.contains('%'), "printf: only %s is supported: {out}");
                Value::String(out)
            }
            ("trunc", 2) => Value::String(s(1).chars().take(n(0)).collect()),
            ("trimSuffix", 2) => Value::String(s(1).strip_suffix(&s(0)).map_or(s(1), String::from)),
            ("contains", 2) => Value::Bool(s(1).contains(&s(0))),
            ("Files.Get", 1) => {
                let path = chart_dir().join(s(0));
                Value::String(std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            }
            _ => panic!("unsupported function {name}/{}", args.len()),
        }
    }
}

/// `a` with `b` merged in (objects key by key, anything else replaced), as `--set` / `-f` do.
fn merge(a: &mut Value, b: &Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// Every YAML document of `text` that is not empty, as JSON values.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The chart rendered with `values` over `values.yaml` (release `ep` in namespace `monitoring`):
/// every document of every template, parsed.
fn render(values: Value) -> Vec<Value> {
    let dir = chart_dir();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let chart: Value = serde_norway::from_str(&read(&dir.join("Chart.yaml"))).unwrap();
    let mut all_values: Value = serde_norway::from_str(&read(&dir.join("values.yaml"))).unwrap();
    merge(&mut all_values, &values);
    let root = json!({
        "Values": all_values,
        "Release": {"Name": "ep", "Namespace": "monitoring", "Service": "Helm"},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
    });
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir.join("templates")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut defines = BTreeMap::new();
    let templates: Vec<(PathBuf, Vec<Node>)> =
        files.iter().map(|f| (f.clone(), parse(&read(f), &mut defines))).collect();
    let renderer = Renderer { defines, root: root.clone() };
    let mut docs = Vec::new();
    for (file, nodes) in templates {
        if file.extension().is_some_and(|e| e == "tpl") {
            continue;
        }
        let mut out = String::new();
        renderer.render(&nodes, &root, &mut out);
        docs.extend(documents(&out));
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected, got {}", found.len());
    found[0]
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter().map(|d| d["kind"].as_str().unwrap().to_string()).collect()
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn args(workload: &Value) -> Vec<String> {
    container(workload)["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

fn volume<'a>(workload: &'a Value, name: &str) -> &'a Value {
    let volumes = workload["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    volumes.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no volume {name}"))
}

/// Rules as (apiGroup, resource, verb) triples.
fn rule_set(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut set = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    set.insert((text(group), text(resource), text(verb)));
                }
            }
        }
    }
    set
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn default_values_render_every_object_in_the_release_namespace() {
    let docs = render(json!({}));
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
        .map(String::from)
        .into()
    );
    for doc in &docs {
        assert!(doc["apiVersion"].as_str().is_some(), "{doc}");
        assert_eq!(doc["metadata"]["name"], "ep-eventpipe", "{doc}");
        assert_eq!(doc["metadata"]["labels"]["app.kubernetes.io/instance"], "ep", "{doc}");
        let cluster_scoped = doc["kind"].as_str().unwrap().starts_with("Cluster");
        assert_eq!(doc["metadata"]["namespace"].is_null(), cluster_scoped, "{doc}");
        if !cluster_scoped {
            assert_eq!(doc["metadata"]["namespace"], "monitoring");
        }
    }
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ep-eventpipe");
    assert_eq!(pod["terminationGracePeriodSeconds"], 40);
    assert!(pod["initContainers"].is_null());
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "eventpipe", "app.kubernetes.io/instance": "ep"})
    );
    assert_eq!(deployment["spec"]["template"]["metadata"]["labels"], deployment["spec"]["selector"]["matchLabels"]);
    assert_eq!(container(deployment)["image"], "eventpipe:0.1.0");
    let binding = find(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], "ep-eventpipe");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "ep-eventpipe", "namespace": "monitoring"}])
    );
}

#[test]
fn the_cluster_role_has_exactly_the_verbs_eventpipe_uses() {
    let docs = render(json!({}));
    let expected: BTreeSet<(String, String, String)> = [
        ("", "list"),
        ("", "watch"),
        ("", "create"),
        ("", "patch"),
        ("", "update"),
        ("events.k8s.io", "list"),
        ("events.k8s.io", "watch"),
        ("events.k8s.io", "create"),
        ("events.k8s.io", "patch"),
    ]
    .iter()
    .map(|(g, v)| (g.to_string(), "events".to_string(), v.to_string()))
    .collect();
    assert_eq!(rule_set(find(&docs, "ClusterRole")), expected);
    // The plain manifests grant the same.
    let example = std::fs::read_to_string(chart_dir().join("../../eventpipe.yaml")).unwrap();
    assert_eq!(rule_set(find(&documents(&example), "ClusterRole")), expected);
    // rbac.create: false leaves RBAC to the cluster's admin.
    let kinds = kinds(&render(json!({"rbac": {"create": false}, "serviceAccount": {"create": false}})));
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"] {
        assert!(!kinds.contains(kind), "{kind}");
    }
}

#[test]
fn probes_ask_healthz_and_readyz_on_the_metrics_port() {
    let off = json!({"leaderElection": {"enabled": false}});
    for (values, port) in
        [(off.clone(), 9090), (json!({"leaderElection": {"enabled": false}, "metrics": {"port": 9464}}), 9464)]
    {
        let docs = render(values);
        let deployment = find(&docs, "Deployment");
        let c = container(deployment);
        assert_eq!(c["ports"], json!([{"name": "metrics", "containerPort": port, "protocol": "TCP"}]));
        assert!(args(deployment).contains(&format!("--metrics=0.0.0.0:{port}")), "{:?}", args(deployment));
        for (probe, path) in
            [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]
        {
            assert_eq!(c[probe]["httpGet"], json!({"path": path, "port": "metrics"}), "{probe}");
        }
        let service = find(&docs, "Service");
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}])
        );
        assert_eq!(service["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"]);
    }
    // With leader election and at-least-once (the default), the same: a candidate is a hot
    // standby and answers them. Without at-least-once, none: a candidate serves no HTTP until
    // it leads.
    let c = container(find(&render(json!({})), "Deployment")).clone();
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "metrics"}));
    assert_eq!(c["startupProbe"]["httpGet"], json!({"path": "/healthz", "port": "metrics"}));
    let c = container(find(&render(json!({"delivery": "wait"})), "Deployment")).clone();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert!(c[probe].is_null(), "{probe}");
    }
    assert_eq!(c["ports"][0]["containerPort"], 9090);
}

/// Leader election is on by default: two pods, one leading on the Lease named after the
/// release (the flags, the downward-API variables, the Lease's Role), a PodDisruptionBudget,
/// anti-affinity on the node and a RollingUpdate; at-least-once on an emptyDir, so that a new
/// leader resumes from the recorded position. Off: one pod, Recreate, none of these.
#[test]
fn leader_election_is_on_by_default_and_off_gives_one_recreated_pod() {
    let docs = render(json!({}));
    let deployment = find(&docs, "Deployment");
    assert_elects(&docs, "monitoring", "ep-eventpipe", "ep-eventpipe");
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    let flags = args(deployment);
    for flag in
        ["--leader-elect-lease-duration=15", "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"]
    {
        assert!(flags.contains(&flag.to_string()), "{flag} in {flags:?}");
    }
    assert_eq!(
        find(&docs, "RoleBinding")["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ep-eventpipe"})
    );
    assert_eq!(find(&docs, "PodDisruptionBudget")["apiVersion"], "policy/v1");
    // An affinity of the values replaces it.
    let docs = render(json!({"affinity": {"nodeAffinity": {"x": 1}}}));
    assert_eq!(find(&docs, "Deployment")["spec"]["template"]["spec"]["affinity"], json!({"nodeAffinity": {"x": 1}}));
    // The terms and the replica count are values; a delivery value wins.
    let docs = render(json!({
        "replicaCount": 3,
        "delivery": "wait",
        "leaderElection": {"leaseDuration": 30, "renewDeadline": 20, "retryPeriod": 4},
    }));
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let flags = args(deployment);
    for flag in
        ["--leader-elect-lease-duration=30", "--leader-elect-renew-deadline=20", "--leader-elect-retry-period=4"]
    {
        assert!(flags.contains(&flag.to_string()), "{flag} in {flags:?}");
    }
    assert!(flags.contains(&"--delivery=wait".to_string()) && !flags.iter().any(|a| a.starts_with("--state-file")));
    // A StatefulSet elects too: each pod with a claim of its own for the state file.
    let docs = render(json!({"kind": "StatefulSet"}));
    let set = find(&docs, "StatefulSet");
    assert_eq!(set["spec"]["replicas"], 2);
    assert!(set["spec"]["strategy"].is_null());
    assert!(args(set).contains(&"--leader-elect".to_string()));
    assert_eq!(set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "state");

    // Off: one pod, replaced with Recreate; no Lease RBAC, no budget, no anti-affinity, wait.
    let docs = render(json!({"leaderElection": {"enabled": false}, "replicaCount": 5}));
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
    let flags = args(deployment);
    assert!(!flags.iter().any(|a| a.starts_with("--leader-elect")), "{flags:?}");
    assert!(flags.contains(&"--delivery=wait".to_string()));
    assert!(deployment["spec"]["template"]["spec"]["affinity"].is_null());
    assert!(!container(deployment)["env"].as_array().unwrap().iter().any(|e| e["name"] == "POD_NAME"));
    let kinds = kinds(&docs);
    for kind in ["Role", "RoleBinding", "PodDisruptionBudget"] {
        assert!(!kinds.contains(kind), "{kind}");
    }
}

#[test]
fn the_container_args_are_flags_eventpipe_run_has_and_the_config_loads() {
    let docs = render(json!({"extraArgs": ["--workers=2"], "sinks": ["k8s", "webhook:https://hooks.example/e"]}));
    let deployment = find(&docs, "Deployment");
    let args = args(deployment);
    assert_eq!(args[0], "run");
    assert!(
        args.contains(&"--sink=webhook:https://hooks.example/e".to_string()) && args.contains(&"--workers=2".into())
    );
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for arg in &args[1..] {
        let flag = arg.split('=').next().unwrap();
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "`eventpipe run` has no {flag}"
        );
    }
    // The ConfigMap carries values.config as eventpipe.toml, and eventpipe takes it.
    let config = find(&docs, "ConfigMap")["data"]["eventpipe.toml"].as_str().unwrap().to_string();
    assert!(config.contains("[[tenants]]"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eventpipe.toml");
    std::fs::write(&path, &config).unwrap();
    let loaded = eventpipe::Config::load(&path).unwrap();
    assert_eq!(loaded.tenants.len(), 1);
    // The `sinks` value takes effect: `config show` with the chart's flags gives every tenant
    // its sinks, from the flags (the command line wins over the config's `[defaults]`).
    let sinks: Vec<&String> = args.iter().filter(|a| a.starts_with("--sink=")).collect();
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["config", "show", "--output=json", "--no-compile-cache"])
        .arg(format!("--config={}", path.display()))
        .args(&sinks)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    for tenant in shown.as_array().unwrap() {
        let names: Vec<&str> =
            tenant["sinks"].as_array().unwrap().iter().map(|s| s["value"].as_str().unwrap()).collect();
        assert_eq!(names, ["k8s", "webhook:https://hooks.example/e"], "{tenant}");
        assert_eq!(tenant["sinks"][0]["origin"], json!({"from": "flag", "at": "--sink"}), "{tenant}");
    }
    // The config volume is that ConfigMap, mounted where --config points.
    assert_eq!(volume(deployment, "config")["configMap"]["name"], "ep-eventpipe");
    assert!(args.contains(&"--config=/etc/eventpipe/config/eventpipe.toml".to_string()));
}

#[test]
fn kind_statefulset_keeps_the_state_file_on_a_claim_of_its_own() {
    let docs = render(
        json!({"kind": "StatefulSet", "delivery": "at-least-once", "persistence": {"storageClassName": "fast"}}),
    );
    assert!(!kinds(&docs).contains("Deployment"));
    let set = find(&docs, "StatefulSet");
    assert_eq!(set["spec"]["replicas"], 2);
    assert_eq!(set["spec"]["serviceName"], "ep-eventpipe-headless");
    assert!(set["spec"]["strategy"].is_null());
    let args = args(set);
    assert!(args.contains(&"--delivery=at-least-once".to_string()));
    assert!(args.contains(&"--state-file=/var/lib/eventpipe/state.json".to_string()));
    let claim = &set["spec"]["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"], "state");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "64Mi");
    let mounts = container(set)["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["name"] == "state" && m["mountPath"] == "/var/lib/eventpipe"));
    // A Deployment keeps it on an emptyDir (or the claim given).
    let docs = render(json!({"delivery": "at-least-once"}));
    assert_eq!(volume(find(&docs, "Deployment"), "state")["emptyDir"], json!({}));
    let docs = render(json!({"delivery": "at-least-once", "persistence": {"existingClaim": "ep-state"}}));
    assert_eq!(volume(find(&docs, "Deployment"), "state")["persistentVolumeClaim"]["claimName"], "ep-state");
    // Without at-least-once, no state volume.
    let docs = render(json!({"kind": "StatefulSet", "delivery": "wait"}));
    assert!(find(&docs, "StatefulSet")["spec"]["volumeClaimTemplates"].is_null());
    let docs = render(json!({"leaderElection": {"enabled": false}}));
    assert!(
        find(&docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["name"] != "state")
    );
}

#[test]
fn plugins_come_from_an_image_a_claim_or_any_volume() {
    // Default: an empty directory (the embedded plugins only).
    let docs = render(json!({}));
    let deployment = find(&docs, "Deployment");
    assert_eq!(volume(deployment, "plugins"), &json!({"name": "plugins", "emptyDir": {}}));
    let mounts = container(deployment)["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["name"] == "plugins" && m["mountPath"] == "/etc/eventpipe/plugins"));
    assert!(args(deployment).contains(&"--plugins=/etc/eventpipe/plugins".to_string()));

    // An image: an init container copies its .wasm files into the emptyDir.
    let docs = render(json!({"plugins": {"image": "registry.example/my-plugins:1"}}));
    let deployment = find(&docs, "Deployment");
    assert_eq!(volume(deployment, "plugins")["emptyDir"], json!({}));
    let init = &deployment["spec"]["template"]["spec"]["initContainers"];
    assert_eq!(init.as_array().unwrap().len(), 1);
    assert_eq!(init[0]["image"], "registry.example/my-plugins:1");
    assert_eq!(init[0]["command"], json!(["sh", "-c", "cp /plugins/*.wasm /out/"]));
    assert_eq!(init[0]["volumeMounts"], json!([{"name": "plugins", "mountPath": "/out"}]));
    assert_eq!(init[0]["securityContext"]["readOnlyRootFilesystem"], true);

    // A claim, read-only.
    let docs = render(json!({"plugins": {"existingClaim": "wasm"}}));
    assert_eq!(
        volume(find(&docs, "Deployment"), "plugins"),
        &json!({"name": "plugins", "persistentVolumeClaim": {"claimName": "wasm", "readOnly": true}})
    );

    // Any volume source.
    let docs = render(json!({"plugins": {"volume": {"configMap": {"name": "small-plugins"}}}}));
    assert_eq!(
        volume(find(&docs, "Deployment"), "plugins"),
        &json!({"name": "plugins", "configMap": {"name": "small-plugins"}})
    );
}

#[test]
fn the_service_monitor_is_off_by_default_and_sends_the_token_when_one_is_set() {
    assert!(!kinds(&render(json!({}))).contains("ServiceMonitor"));
    let docs = render(json!({"metrics": {"serviceMonitor": {"enabled": true, "labels": {"release": "kps"}}}}));
    let monitor = find(&docs, "ServiceMonitor");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    assert_eq!(monitor["spec"]["endpoints"], json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}]));
    // It selects the Service (by labels the Service has).
    let service_labels = find(&docs, "Service")["metadata"]["labels"].as_object().unwrap().clone();
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(service_labels.get(k), Some(v), "{k}");
    }
    assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"], json!(["monitoring"]));

    let docs = render(json!({
        "metrics": {"serviceMonitor": {"enabled": true}},
        "ingestToken": {"existingSecret": "ep-token"},
    }));
    let endpoint = &find(&docs, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "ep-token", "key": "token"}})
    );
    let env = container(find(&docs, "Deployment"))["env"].as_array().unwrap().clone();
    let token = env.iter().find(|e| e["name"] == "EVENTPIPE_INGEST_TOKEN").expect("the token's variable");
    assert_eq!(token["valueFrom"]["secretKeyRef"], json!({"name": "ep-token", "key": "token"}));
}

/// The PrometheusRule carries the shipped rules file (examples/monitoring/eventpipe-alerts.yaml,
/// which promtool checks in tests/it/monitoring.rs) as its spec.
#[test]
fn the_prometheus_rule_is_off_by_default_and_carries_the_shipped_alerts() {
    assert!(!kinds(&render(json!({}))).contains("PrometheusRule"));
    let docs = render(json!({"metrics": {"prometheusRule": {"enabled": true, "labels": {"release": "kps"}}}}));
    let rule = find(&docs, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    let shipped: Value = serde_norway::from_str(
        &std::fs::read_to_string(chart_dir().join("../../../monitoring/eventpipe-alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(rule["spec"], shipped);
    assert!(shipped["groups"][0]["rules"].as_array().unwrap().len() >= 5);
}

#[test]
fn the_values_schema_is_json_and_names_the_toggles() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json")).unwrap()).unwrap();
    assert_eq!(schema["properties"]["kind"]["enum"], json!(["Deployment", "StatefulSet"]));
    assert_eq!(schema["properties"]["delivery"]["enum"], json!(["", "wait", "at-most-once", "at-least-once"]));
    assert_eq!(schema["properties"]["leaderElection"]["properties"]["enabled"]["type"], "boolean");
}

/// Every leaf of `v` (a scalar, a list, or an empty map), as its path of keys.
fn leaves(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                path.push(k.clone());
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

/// `v` changed, keeping its type: a string gets a suffix, a number grows, a boolean flips, a
/// list and a map get one more entry.
fn changed(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(format!("{s}x")),
        Value::Number(n) => json!(n.as_i64().unwrap_or(0) + 1),
        Value::Bool(b) => Value::Bool(!b),
        Value::Array(items) => {
            let mut items = items.clone();
            items.push(json!("x"));
            Value::Array(items)
        }
        Value::Object(map) => {
            let mut map = map.clone();
            map.insert("x".into(), json!("y"));
            Value::Object(map)
        }
        Value::Null => json!("x"),
    }
}

#[test]
fn every_value_takes_effect() {
    let defaults: Value =
        serde_norway::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap()).unwrap();
    let mut paths = Vec::new();
    leaves(&defaults, &mut Vec::new(), &mut paths);
    assert!(paths.len() > 30, "{paths:?}");
    // Some values matter only with others set: try each in these contexts.
    let contexts = [
        json!({}),
        json!({"kind": "StatefulSet", "delivery": "at-least-once"}),
        json!({
            "delivery": "at-least-once",
            "plugins": {"image": "registry.example/plugins:1"},
            "metrics": {"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true}},
            "ingestToken": {"existingSecret": "ep-token"},
        }),
    ];
    let mut dead = Vec::new();
    for path in &paths {
        let takes_effect = contexts.iter().any(|context| {
            let mut values = defaults.clone();
            merge(&mut values, context);
            let current = path.iter().fold(&values, |v, k| &v[k.as_str()]);
            let mut over = changed(current);
            for k in path.iter().rev() {
                over = json!({ k.as_str(): over });
            }
            let mut changed_context = context.clone();
            merge(&mut changed_context, &over);
            render(context.clone()) != render(changed_context)
        });
        if !takes_effect {
            dead.push(path.join("."));
        }
    }
    assert!(dead.is_empty(), "values that change nothing the chart renders: {dead:?}");
}

#[test]
fn a_stateful_set_names_a_service_that_selects_its_pods() {
    let docs = render(json!({"kind": "StatefulSet"}));
    let set = find(&docs, "StatefulSet");
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == set["spec"]["serviceName"])
        .expect("the StatefulSet's serviceName is a Service of the chart");
    assert_eq!(service["spec"]["clusterIP"], "None", "the governing Service is headless");
    assert_eq!(service["spec"]["selector"], set["spec"]["selector"]["matchLabels"]);
    // Without ports, so that the ServiceMonitor scrapes the pod once, through the metrics Service.
    assert!(service["spec"]["ports"].is_null());
    let metrics = docs.iter().find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "ep-eventpipe").unwrap();
    assert_eq!(metrics["spec"]["ports"][0]["name"], "metrics");
    // A Deployment has no governing Service.
    assert_eq!(render(json!({})).iter().filter(|d| d["kind"] == "Service").count(), 1);
}

/// The plain manifests of `examples/kubernetes/`: one writer per rollout (a single pod replaced
/// with Recreate, or pods electing a leader), every StatefulSet governed by a headless Service
/// that selects its pods, and only flags `eventpipe run` has.
#[test]
fn the_plain_manifests_roll_out_one_writer_and_govern_their_stateful_sets() {
    let dir = chart_dir().join("../..");
    let mut docs = Vec::new();
    for file in ["eventpipe.yaml", "scale-out.yaml"] {
        docs.extend(documents(&std::fs::read_to_string(dir.join(file)).unwrap()));
    }
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let (mut deployments, mut sets) = (0, 0);
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap();
        if kind != "Deployment" && kind != "StatefulSet" {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap();
        if kind == "Deployment" {
            deployments += 1;
            if args(doc).contains(&"--leader-elect".to_string()) {
                assert_eq!(doc["spec"]["strategy"]["type"], "RollingUpdate", "Deployment {name}");
            } else {
                assert_eq!(doc["spec"]["strategy"]["type"], "Recreate", "Deployment {name}: two writers in a rollout");
                assert_eq!(doc["spec"]["replicas"], 1, "Deployment {name}: two writers");
            }
        } else {
            sets += 1;
            let service_name = &doc["spec"]["serviceName"];
            let service = docs
                .iter()
                .find(|d| d["kind"] == "Service" && &d["metadata"]["name"] == service_name)
                .unwrap_or_else(|| panic!("StatefulSet {name}: no Service {service_name}"));
            assert_eq!(service["spec"]["clusterIP"], "None", "Service {service_name} is headless");
            assert_eq!(service["metadata"]["namespace"], doc["metadata"]["namespace"]);
            let labels = &doc["spec"]["template"]["metadata"]["labels"];
            for (k, v) in service["spec"]["selector"].as_object().unwrap() {
                assert_eq!(&labels[k.as_str()], v, "Service {service_name} selects the pods of {name}");
            }
        }
        assert!(doc["spec"]["replicas"].as_i64().is_some(), "{name}: replicas");
        let c = container(doc);
        assert_eq!(c["image"], "eventpipe:0.1.0", "{name}: the image examples/kubernetes/Dockerfile builds");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{name}: a loaded image is used as it is");
        let args = args(doc);
        assert_eq!(args[0], "run");
        for arg in &args[1..] {
            let flag = arg.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "`eventpipe run` has no {flag}"
            );
        }
    }
    assert_eq!((deployments, sets), (2, 1));
}

/// `examples/kubernetes/eventpipe.yaml` elects a leader as the chart does by default: two pods,
/// the flags, the downward-API variables, the Lease's Role in its namespace, a
/// PodDisruptionBudget, anti-affinity on the node, RollingUpdate and an at-least-once state file
/// on an emptyDir.
#[test]
fn the_plain_manifest_elects_a_leader() {
    let docs = documents(&std::fs::read_to_string(chart_dir().join("../../eventpipe.yaml")).unwrap());
    assert_elects(&docs, "eventpipe", "eventpipe", "eventpipe");
    let deployment = find(&docs, "Deployment");
    let mounts = container(deployment)["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["name"] == "state" && m["mountPath"] == "/var/lib/eventpipe"));
    // The candidate is a hot standby that answers the probes.
    assert_eq!(container(deployment)["readinessProbe"]["httpGet"]["path"], "/readyz");
}

/// What electing a leader takes, in rendered `docs` (the chart's or the plain manifest's): a
/// Deployment of two pods rolled one at a time, with the election and at-least-once flags on
/// the Lease `$(POD_NAMESPACE)/lease`, the state file on an emptyDir and `POD_NAME` /
/// `POD_NAMESPACE` from the downward API; the Lease's Role in `namespace` (`get` and `update`
/// on that Lease only) bound to `service_account`; a PodDisruptionBudget of one pod; and
/// preferred anti-affinity of the pods on the node.
fn assert_elects(docs: &[Value], namespace: &str, lease: &str, service_account: &str) {
    let deployment = find(docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let flags = args(deployment);
    for flag in [
        "--leader-elect".to_string(),
        format!("--leader-elect-lease=$(POD_NAMESPACE)/{lease}"),
        "--delivery=at-least-once".into(),
        "--state-file=/var/lib/eventpipe/state.json".into(),
    ] {
        assert!(flags.contains(&flag), "{flag} in {flags:?}");
    }
    assert_eq!(volume(deployment, "state")["emptyDir"], json!({}));
    let env = container(deployment)["env"].as_array().unwrap();
    for (name, path) in [("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")] {
        let var = env.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], path, "{name}");
    }
    let role = find(docs, "Role");
    assert_eq!(role["metadata"]["namespace"], namespace);
    let expected: BTreeSet<(String, String, String)> = ["get", "create", "update", "list", "watch"]
        .iter()
        .map(|v| ("coordination.k8s.io".to_string(), "leases".to_string(), v.to_string()))
        .collect();
    assert_eq!(rule_set(role), expected);
    for rule in role["rules"].as_array().unwrap() {
        // A candidate's watch of the Lease lists by a field selector, which a rule's
        // resourceNames do not cover on older API servers.
        if rule["verbs"] != json!(["create", "list", "watch"]) {
            assert_eq!(rule["resourceNames"], json!([lease]), "get and update only on the Lease: {rule}");
        }
    }
    let binding = find(docs, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], namespace);
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}])
    );
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    let budget = find(docs, "PodDisruptionBudget");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], selector);
    let term = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&term["labelSelector"]["matchLabels"], selector);
}
