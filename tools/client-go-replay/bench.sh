#!/usr/bin/env bash
# eventpipe against client-go v0.26.15's EventCorrelator on the same input, in alternating pairs.
#
#   tools/client-go-replay/bench.sh EVENTPIPE CLIENT_GO_REPLAY [PAIRS]
#
# EVENTPIPE is a release `eventpipe` binary, CLIENT_GO_REPLAY one built by build.sh; PAIRS
# defaults to 7. Inputs: the real stream of the shared conformance material
# ($SHARED/conformance/replay-real/real-expanded.in.jsonl.gz, decompressed into a scratch
# directory; SHARED defaults to ../shared beside the repository root) and a synthetic stream of
# 1,000,000 recorder-style events generated here, the same every time (SYNTH_EVENTS changes the
# count). Per input:
#   end to end:  taskset -c 0 eventpipe replay < in > /dev/null
#                against taskset -c 0 client-go-replay < in > /dev/null              (wall time)
#   in process:  taskset -c 0 eventpipe bench --input in --reps 5 [--builtin]
#                against taskset -c 0 client-go-replay -bench 5 < in       (median ns/event)
# Both sides are held to one core (CORES, default 0) in both measures: Go's collector would
# otherwise run on the other core. The order within a pair alternates. Printed: each pair's
# ratio eventpipe / client-go, then the median and min–max of the ratios. INPUTS ("real
# synthetic"), MEASURES ("end-to-end in-process") and REPS (passes per in-process run, 5) narrow
# a run: client-go takes minutes per in-process run on the synthetic stream.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 EVENTPIPE CLIENT_GO_REPLAY [PAIRS]" >&2
  exit 2
fi
eventpipe=$(realpath "$1")
client_go=$(realpath "$2")
pairs=${3:-7}
shared=${SHARED:-$root/../shared}
cores=${CORES:-0}
synth_events=${SYNTH_EVENTS:-1000000}
wanted_inputs=${INPUTS:-real synthetic}
measures=${MEASURES:-end-to-end in-process}
reps=${REPS:-5}
for tool in "$eventpipe" "$client_go"; do
  [ -x "$tool" ] || { echo "not an executable: $tool" >&2; exit 2; }
done
command -v taskset >/dev/null || { echo "taskset (util-linux) is needed" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed (the synthetic stream, the statistics)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/client-go-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

inputs=()
real=$shared/conformance/replay-real/real-expanded.in.jsonl.gz
if [[ " $wanted_inputs " != *" real "* ]]; then
  :
elif [ -f "$real" ]; then
  gzip -dc "$real" > "$work/real.jsonl"
  inputs+=("$work/real.jsonl")
else
  echo "no real stream at $real: the synthetic stream only" >&2
fi

# The synthetic stream: objects of several kinds (hot ones far more often than the rest, Zipf),
# each with the reasons and messages its controller writes; some messages carry a number or an
# address that changes (aggregation by reason), some repeat; events come in bursts. A fixed
# xorshift generator: the same file on every machine.
if [[ " $wanted_inputs " == *" synthetic "* ]]; then python3 - "$synth_events" > "$work/synthetic.jsonl"; fi <<'PY'
import bisect, json, sys
from datetime import datetime, timedelta, timezone

n = int(sys.argv[1])
state = 0x9E3779B97F4A7C15
def rnd():  # xorshift64*, in [0, 1)
    global state
    state ^= (state >> 12) & 0xFFFFFFFFFFFFFFFF
    state ^= (state << 25) & 0xFFFFFFFFFFFFFFFF
    state ^= (state >> 27) & 0xFFFFFFFFFFFFFFFF
    return ((state * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF) / 2.0**64
def pick(seq):
    return seq[int(rnd() * len(seq))]
def zipf_cdf(count, s):
    acc, cdf = 0.0, []
    for k in range(1, count + 1):
        acc += 1.0 / k**s
        cdf.append(acc)
    return [c / acc for c in cdf]
def zipf(cdf):
    return min(bisect.bisect_left(cdf, rnd()), len(cdf) - 1)

nodes = [f"node-{i:02d}" for i in range(40)]
namespaces = [f"team-{i:02d}" for i in range(30)] + ["default", "kube-system", "monitoring", "ingress"]
# (kind, apiVersion, component, host?, field path, [(type, reason, message template)])
pod = [
    ("Normal", "Scheduled", "Successfully assigned {ns}/{name} to {node}"),
    ("Normal", "Pulling", "Pulling image \"registry.example.com/{app}:v{n}\""),
    ("Normal", "Pulled", "Successfully pulled image \"registry.example.com/{app}:v{n}\" in {ms}ms (including waiting)"),
    ("Normal", "Created", "Created container {app}"),
    ("Normal", "Started", "Started container {app}"),
    ("Normal", "Killing", "Stopping container {app}"),
    ("Warning", "BackOff", "Back-off restarting failed container {app} in pod {name}_{ns}({uid})"),
    ("Warning", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: {code}"),
    ("Warning", "Unhealthy", "Readiness probe failed: Get \"http://10.{a}.{b}.{c}:8080/healthz\": dial tcp 10.{a}.{b}.{c}:8080: connect: connection refused"),
    ("Warning", "FailedMount", "MountVolume.SetUp failed for volume \"{app}-config\" : configmap \"{app}-config\" not found"),
    ("Warning", "FailedScheduling", "0/40 nodes are available: {k} Insufficient cpu, {m} node(s) had untolerated taint {{node.kubernetes.io/unreachable: }}. preemption: 0/40 nodes are available: 40 No preemption victims found for incoming pod."),
]
kinds = [
    ("Pod", "v1", "kubelet", True, "spec.containers{{{app}}}", pod, 0.70),
    ("ReplicaSet", "apps/v1", "replicaset-controller", False, "", [
        ("Normal", "SuccessfulCreate", "Created pod: {name}-{suffix}"),
        ("Normal", "SuccessfulDelete", "Deleted pod: {name}-{suffix}"),
        ("Warning", "FailedCreate", "Error creating: pods \"{name}-{suffix}\" is forbidden: exceeded quota: compute, requested: cpu={k}00m, used: cpu={m}00m, limited: cpu=8"),
    ], 0.10),
    ("Deployment", "apps/v1", "deployment-controller", False, "", [
        ("Normal", "ScalingReplicaSet", "Scaled up replica set {name}-{suffix} to {k}"),
        ("Normal", "ScalingReplicaSet", "Scaled down replica set {name}-{suffix} to {k} from {m}"),
    ], 0.06),
    ("Node", "v1", "kubelet", True, "", [
        ("Normal", "NodeHasSufficientMemory", "Node {name} status is now: NodeHasSufficientMemory"),
        ("Normal", "NodeReady", "Node {name} status is now: NodeReady"),
        ("Warning", "ImageGCFailed", "failed to garbage collect required amount of images. Wanted to free {k}{m}0000 bytes, but freed 0 bytes"),
        ("Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage"),
    ], 0.05),
    ("Service", "v1", "service-controller", False, "", [
        ("Normal", "EnsuringLoadBalancer", "Ensuring load balancer"),
        ("Normal", "UpdatedLoadBalancer", "Updated LoadBalancer with new IPs: [] -> [192.0.2.{c}]"),
        ("Warning", "SyncLoadBalancerFailed", "Error syncing load balancer: failed to ensure load balancer: quota exceeded for <forwarding-rules> & <addresses>"),
    ], 0.04),
    ("Job", "batch/v1", "job-controller", False, "", [
        ("Normal", "SuccessfulCreate", "Created pod: {name}-{suffix}"),
        ("Normal", "Completed", "Job completed"),
        ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    ], 0.05),
]
kind_cdf, acc = [], 0.0
for k in kinds:
    acc += k[6]
    kind_cdf.append(acc)
objects = []  # per kind: its objects
for ki, (kind, _, _, _, _, _, _) in enumerate(kinds):
    count = {"Pod": 3000, "Node": 40}.get(kind, 400)
    objs = []
    for i in range(count):
        ns = "" if kind == "Node" else namespaces[int(rnd() * len(namespaces))]
        app = f"app{int(rnd() * 200):03d}"
        name = nodes[i] if kind == "Node" else f"{app}-{i:05x}"
        uid = f"{ki:02x}{i:06x}-7c1e-4d2a-9b1f-{(i * 2654435761) & 0xFFFFFFFFFFFF:012x}"
        objs.append((ns, name, uid, app, nodes[i % len(nodes)], str(1000 + i)))
    objects.append((objs, zipf_cdf(count, 1.05)))
number_cdf = zipf_cdf(500, 1.6)

t = datetime(2025, 3, 1, tzinfo=timezone.utc)
out = sys.stdout
for i in range(n):
    # Bursts: mostly a few ms apart, now and then a pause of up to 6 s (50 ms apart on average).
    u = rnd()
    t += timedelta(microseconds=int(2_000 + 30_000 * rnd()) if u < 0.99 else int(500_000 + 5_500_000 * rnd()))
    ki = bisect.bisect_left(kind_cdf, rnd() * kind_cdf[-1])
    kind, api, component, on_node, field, reasons, _ = kinds[ki]
    objs, cdf = objects[ki]
    ns, name, uid, app, node, rv = objs[zipf(cdf)]
    typ, reason, template = pick(reasons)
    num = zipf(number_cdf)
    message = template.format(ns=ns, name=name, node=node, app=app, uid=uid, n=num % 40, ms=200 + num * 7,
                              code=pick((500, 503, 404)), a=num % 8, b=num % 13, c=num % 250, k=1 + num % 9,
                              m=num % 40, suffix=f"{(num * 40503) & 0xFFFFF:05x}")
    stamp = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    clock = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}{i % 1000:03d}Z"
    involved = {"kind": kind, "name": name, "uid": uid, "apiVersion": api, "resourceVersion": rv}
    if ns:
        involved["namespace"] = ns
    if field:
        involved["fieldPath"] = field.format(app=app)
    host = node if on_node else ""
    event = {
        "metadata": {"name": f"{name}.{(int(t.timestamp() * 1e9) + i):x}", "namespace": ns or "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "type": typ,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    out.write(json.dumps({"clock": clock, "event": event}, separators=(",", ":")) + "\n")
PY
if [ -f "$work/synthetic.jsonl" ]; then inputs+=("$work/synthetic.jsonl"); fi

# ratio NAME VALUES...: "eventpipe / client-go" per pair, then median and min–max.
summary() {
  python3 - "$@" <<'PY'
import statistics, sys
name, values = sys.argv[1], [float(v) for v in sys.argv[2:]]
print(f"  {name}: median {statistics.median(values):.3f} (min {min(values):.3f}, max {max(values):.3f}; {len(values)} pairs)")
PY
}
now() { echo "${EPOCHREALTIME/./}"; }  # µs
wall() {  # wall µs of "$@" < $in > /dev/null on $cores
  local start end
  start=$(now)
  taskset -c "$cores" "$@" < "$in" > /dev/null
  end=$(now)
  echo $((end - start))
}
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.3f}')" "$1" "$2"; }
eventpipe_ns() {  # median ns/event of `eventpipe bench` on $in, with extra flags
  taskset -c "$cores" "$eventpipe" bench --input "$in" --reps "$reps" --json "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["stage_ns_per_event"]["median"])'
}
client_go_ns() {  # median ns/event of `client-go-replay -bench 5` on $in
  taskset -c "$cores" "$client_go" -bench "$reps" < "$in" | sed -n 's/.*EventCorrelator \([0-9.]*\) ns\/event median.*/\1/p'
}

echo "eventpipe: $("$eventpipe" --version 2>/dev/null || echo "$eventpipe"); client-go-replay: client-go v0.26.15"
echo "$(nproc) cores, held to core(s) $cores; $pairs pairs per measure; $(date -u +%Y-%m-%dT%H:%MZ)"
for in in "${inputs[@]}"; do
  echo
  echo "== $(basename "$in"): $(wc -l < "$in") lines"
  e2e=()
  end_to_end_pairs=0 in_process_pairs=0
  [[ " $measures " == *" end-to-end "* ]] && end_to_end_pairs=$pairs
  [[ " $measures " == *" in-process "* ]] && in_process_pairs=$pairs
  for p in $(seq 1 "$end_to_end_pairs"); do
    if [ $((p % 2)) -eq 1 ]; then
      ep=$(wall "$eventpipe" replay); cg=$(wall "$client_go")
    else
      cg=$(wall "$client_go"); ep=$(wall "$eventpipe" replay)
    fi
    r=$(ratio "$ep" "$cg")
    e2e+=("$r")
    printf '  end to end, pair %d: eventpipe replay %.3f s, client-go-replay %.3f s, ratio %s\n' \
      "$p" "$(ratio "$ep" 1000000)" "$(ratio "$cg" 1000000)" "$r"
  done
  wasm=()
  builtin=()
  for p in $(seq 1 "$in_process_pairs"); do
    if [ $((p % 2)) -eq 1 ]; then
      ep=$(eventpipe_ns); eb=$(eventpipe_ns --builtin); cg=$(client_go_ns)
    else
      cg=$(client_go_ns); eb=$(eventpipe_ns --builtin); ep=$(eventpipe_ns)
    fi
    wasm+=("$(ratio "$ep" "$cg")")
    builtin+=("$(ratio "$eb" "$cg")")
    printf '  in process, pair %d: eventpipe bench %.0f ns/event (--builtin %.0f), client-go %.0f ns/event, ratios %s, %s\n' \
      "$p" "$ep" "$eb" "$cg" "${wasm[-1]}" "${builtin[-1]}"
  done
  echo "$(basename "$in"), eventpipe / client-go:"
  if [ ${#e2e[@]} -gt 0 ]; then summary "end to end (replay, one core)" "${e2e[@]}"; fi
  if [ ${#wasm[@]} -gt 0 ]; then
    summary "in process (bench, default Wasm plugins, $reps passes)" "${wasm[@]}"
    summary "in process (bench --builtin, $reps passes)" "${builtin[@]}"
  fi
done
