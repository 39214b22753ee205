//! A real Kubernetes control plane for the tests: kube-apiserver v1.19.0 and Debian's etcd, from
//! `../shared/kube-apiserver` (`start.sh` / `stop.sh`, see its README), one per test binary,
//! started on first use on free loopback ports in `target/apiserver/<pid>`.
//!
//! Lifetime: `start.sh` and, later, `stop.sh` run under a supervising process in its own process
//! group (a Ctrl-C of the tests does not reach it) that waits for its standard input to close.
//! The test process holds the write end in a static and never closes it, so the kernel closes
//! it when the process ends, however it ends (tests done, a panic that aborts, a signal); the
//! supervisor then runs `stop.sh` (SIGTERM, then SIGKILL after 15 s) and deletes etcd's data
//! and the unpacked binary (the logs stay). The test binary cannot wait for that itself (the
//! tests forbid `unsafe`, so no `atexit`): etcd and kube-apiserver end about a second after it.
//! Directories of test processes that are gone are deleted at the next start; every start has
//! its own directory and ports, so a run never waits for the previous one's stop.
//!
//! Tests call [`control_plane_or_skip`]: without `../shared/kube-apiserver` or one of the
//! tools `start.sh` needs (etcd: `apt-get install etcd-server`), the test prints why and
//! passes, except under `CI`, where `.ci/run` installs them and the test fails instead.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// A running control plane: what `start.sh` wrote to its `env` file.
#[derive(Debug)]
pub struct ControlPlane {
    /// Its directory (`target/apiserver/<pid>`): `logs/`, `pki/`, `kubeconfig`, `env`.
    pub dir: PathBuf,
    /// `KUBECONFIG`: the server, its CA and a bearer token of `system:masters`.
    pub kubeconfig: PathBuf,
    /// `APISERVER_URL`, e.g. `https://127.0.0.1:40123`.
    pub url: String,
    /// `APISERVER_TOKEN`.
    pub token: String,
    /// `APISERVER_CA`: the serving certificate (PEM).
    pub ca: PathBuf,
}

/// Why there is no control plane.
enum Unavailable {
    /// Something it needs is not installed: skipped, or failed under `CI`.
    Missing(String),
    /// It is installed but did not start: always a failure.
    Failed(String),
}

static PLANE: OnceLock<Result<ControlPlane, Unavailable>> = OnceLock::new();
/// The supervisor and the write end of its standard input, never dropped (see the module docs).
static SUPERVISOR: Mutex<Option<(Child, ChildStdin)>> = Mutex::new(None);
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// The control plane of this test binary (started on the first call), or `None` with a printed
/// line when what it needs is missing; under `CI` a missing piece fails the test. A control
/// plane that does not start fails the test.
pub fn control_plane_or_skip() -> Option<&'static ControlPlane> {
    match PLANE.get_or_init(start) {
        Ok(plane) => Some(plane),
        Err(Unavailable::Missing(reason)) if std::env::var_os("CI").is_some() => {
            panic!("the real kube-apiserver is needed under CI: {reason}")
        }
        Err(Unavailable::Missing(reason)) => {
            println!("skipped: {reason}");
            None
        }
        Err(Unavailable::Failed(reason)) => panic!("the real kube-apiserver did not start: {reason}"),
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/kube-apiserver`, if it is there with both scripts and the binary.
fn shared_dir() -> Result<PathBuf, String> {
    let dir = repo_root().join("../shared/kube-apiserver");
    for file in ["start.sh", "stop.sh", "kube-apiserver-v1.19.0-linux-amd64.xz"] {
        if !dir.join(file).is_file() {
            return Err(format!("{} not found", dir.join(file).display()));
        }
    }
    Ok(dir)
}

/// The tools `start.sh` runs, each found on `PATH` (etcd also as `/usr/bin/etcd`).
fn missing_tools() -> Option<String> {
    let on_path = |tool: &str| {
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
    };
    if !on_path("etcd") && !Path::new("/usr/bin/etcd").is_file() {
        return Some("etcd not found (apt-get install etcd-server)".into());
    }
    let missing: Vec<&str> =
        ["openssl", "curl", "xz", "python3", "ss", "sha256sum"].into_iter().filter(|t| !on_path(t)).collect();
    (!missing.is_empty()).then(|| format!("{} not found (needed by start.sh)", missing.join(", ")))
}

/// The supervisor (Python: `start.sh` already needs it): a child subreaper, so that etcd and
/// kube-apiserver, orphaned when `start.sh` exits, become its children and are reaped as soon as
/// they end (whatever the machine's init does with orphans); it runs `start.sh DIR`, prints one
/// line with its exit code, waits (if it started) for standard input to close, runs `stop.sh
/// DIR` while reaping, and deletes etcd's data and the unpacked binary.
const SUPERVISE: &str = r#"
import ctypes, os, shutil, subprocess, sys
shared, d = sys.argv[1], sys.argv[2]
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
log = open(os.path.join(d, "start.log"), "ab")
rc = subprocess.call([os.path.join(shared, "start.sh"), d], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
print("start.sh:", rc, flush=True)
if rc == 0:
    while sys.stdin.buffer.read(65536):
        pass
stop = subprocess.Popen([os.path.join(shared, "stop.sh"), d], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
while True:
    try:
        pid, _ = os.wait()
    except ChildProcessError:
        break
for name in ("etcd-data", "bin"):
    shutil.rmtree(os.path.join(d, name), ignore_errors=True)
"#;

fn start() -> Result<ControlPlane, Unavailable> {
    let shared = shared_dir().map_err(Unavailable::Missing)?;
    if let Some(reason) = missing_tools() {
        return Err(Unavailable::Missing(reason));
    }
    let parent = repo_root().join("target/apiserver");
    remove_dirs_of_ended_processes(&parent);
    let dir = parent.join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).map_err(|e| Unavailable::Failed(format!("{}: {e}", dir.display())))?;
    let dir = dir.canonicalize().map_err(|e| Unavailable::Failed(e.to_string()))?;

    use std::os::unix::process::CommandExt;
    let mut supervisor = Command::new("python3")
        .args(["-c", SUPERVISE])
        .arg(&shared)
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| Unavailable::Failed(format!("python3: {e}")))?;
    let stdin = supervisor.stdin.take().unwrap();
    let mut line = String::new();
    let _ = std::io::BufReader::new(supervisor.stdout.take().unwrap()).read_line(&mut line);
    let log = std::fs::read_to_string(dir.join("start.log")).unwrap_or_default();
    if line.trim() != "start.sh: 0" {
        drop(stdin);
        let _ = supervisor.wait();
        return Err(Unavailable::Failed(format!("{} {log}", line.trim())));
    }
    *SUPERVISOR.lock().unwrap() = Some((supervisor, stdin));
    println!("{}", log.trim());

    let env = std::fs::read_to_string(dir.join("env")).map_err(|e| Unavailable::Failed(format!("env: {e}")))?;
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
            .map(str::to_string)
            .ok_or_else(|| Unavailable::Failed(format!("{name} missing from {}", dir.join("env").display())))
    };
    Ok(ControlPlane {
        kubeconfig: var("KUBECONFIG")?.into(),
        url: var("APISERVER_URL")?,
        token: var("APISERVER_TOKEN")?,
        ca: var("APISERVER_CA")?.into(),
        dir,
    })
}

/// Deletes `parent/<pid>` directories whose test process has ended.
fn remove_dirs_of_ended_processes(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl ControlPlane {
    /// A new namespace `<prefix>-<n>` (created through the API), so that tests sharing the
    /// control plane do not see each other's events.
    pub fn namespace(&self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", NAMESPACES.fetch_add(1, Ordering::Relaxed));
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let (code, answer) = self.request("POST", "/api/v1/namespaces", Some(&body));
        assert_eq!(code, 201, "creating namespace {name}: {answer}");
        name
    }

    /// `METHOD path` with `body` as JSON (`PATCH`: a strategic-merge patch), through a kube
    /// client of [`Self::kubeconfig`] (its bearer token; its CA, which is also the serving
    /// certificate: eventpipe's client accepts that as kubectl does, where kube's own refuses a
    /// CA certificate as the server's): the status code and the answer (`null` when not JSON).
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let options =
                eventpipe::k8s::KubeOptions { kubeconfig: Some(self.kubeconfig.clone()), ..Default::default() };
            let client = eventpipe::k8s::connect(&options).await.unwrap();
            let content_type =
                if method == "PATCH" { "application/strategic-merge-patch+json" } else { "application/json" };
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::ACCEPT, "application/json")
                .header(http::header::CONTENT_TYPE, content_type)
                .body(kube::client::Body::from(body.map(|b| b.to_string().into_bytes()).unwrap_or_default()))
                .unwrap();
            let response = client.send(request).await.unwrap();
            let code = response.status().as_u16();
            let bytes = response.into_body().collect_bytes().await.unwrap();
            (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        })
    }

    /// `GET path`, which must succeed: the answer.
    pub fn get(&self, path: &str) -> Value {
        let (code, answer) = self.request("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {answer}");
        answer
    }
}
