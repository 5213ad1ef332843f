//! Acceptance: unmodified kubectl 1.27 and 1.33 binaries against a real `fedctl server` over a real etcd.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl, Run};
use common::server::FedServer;

/// kubectl versions the acceptance list covers.
const VERSIONS: [&str; 2] = ["1.27", "1.33"];

fn manifest(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/manifests").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn manifest_path(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/manifests").join(name).display().to_string()
}

/// A running etcd + server and the kubectl of `version`; `None` (with a message) when that
/// kubectl is not installed.
struct Env {
    k: Kubectl,
    server: FedServer,
    _etcd: EtcdServer,
}

fn env_for(version: &str) -> Option<Env> {
    let Some(bin) = find_kubectl(version) else {
        eprintln!("SKIPPED: kubectl.{version} not found (set FEDCTL_KUBECTL_DIR or put kubectl.{version} next to kubectl on PATH)");
        return None;
    };
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let k = Kubectl::new(bin, version, &server.kubeconfig(), &server.scratch_dir());
    Some(Env { k, server, _etcd: etcd })
}

/// Lines of stdout, trimmed, without empty ones.
fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

fn sorted_lines(s: &str) -> Vec<String> {
    let mut l = lines(s);
    l.sort();
    l
}

/// Creates a namespace the way this kubectl can: `create ns` with 1.27; `apply -f` of a
/// `kubectl create ns` (1.27 sends JSON, 1.33 sends protobuf).
fn create_namespace(k: &Kubectl, name: &str) {
    let run = k.run(&["create", "ns", name]);
    assert_eq!(lines(run.ok()), vec![format!("namespace/{name} created")]);
}

fn get_json(k: &Kubectl, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    k.run(&a).json()
}

#[test]
fn kubectl_binaries_present() {
    let found: Vec<&str> = VERSIONS.iter().copied().filter(|v| find_kubectl(v).is_some()).collect();
    assert!(!found.is_empty(), "none of kubectl {VERSIONS:?} found: set FEDCTL_KUBECTL_DIR to the folder holding kubectl.1.NN, or put them next to kubectl on PATH");
}

#[test]
fn kubectl_1_27_acceptance() {
    if let Some(env) = env_for("1.27") {
        acceptance(&env);
    }
}

#[test]
fn kubectl_1_33_acceptance() {
    if let Some(env) = env_for("1.33") {
        acceptance(&env);
    }
}

/// kubectl ≥ 1.32 sends typed `create` bodies as Kubernetes protobuf; the server decodes them.
#[test]
fn kubectl_1_33_typed_creates_send_protobuf() {
    let Some(env) = env_for("1.33") else { return };
    let run = env.k.run(&["create", "ns", "proto"]);
    assert_eq!(lines(run.ok()), vec!["namespace/proto created".to_string()]);
    let ns = get_json(&env.k, &["ns", "proto"]);
    assert_eq!(ns["status"]["phase"], "Active");
    let run = env.k.run(&["create", "configmap", "c1", "-n", "proto", "--from-literal=a=b"]);
    assert_eq!(lines(run.ok()), vec!["configmap/c1 created".to_string()]);
    let run = env.k.run(&["create", "deployment", "d1", "-n", "proto", "--image=nginx:1.27", "--replicas=2"]);
    assert_eq!(lines(run.ok()), vec!["deployment.apps/d1 created".to_string()]);
    let run = env.k.run(&["create", "secret", "generic", "s1", "-n", "proto", "--from-literal=x=y"]);
    assert_eq!(lines(run.ok()), vec!["secret/s1 created".to_string()]);
    let cm = get_json(&env.k, &["configmap", "c1", "-n", "proto"]);
    assert_eq!(cm["data"]["a"], "b");
    let d = get_json(&env.k, &["deployment", "d1", "-n", "proto"]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27");
    let s = get_json(&env.k, &["secret", "s1", "-n", "proto"]);
    assert_eq!(s["type"], "Opaque");
    assert_eq!(s["data"]["x"], "eQ==");
}

fn acceptance(env: &Env) {
    let k = &env.k;
    let ns = "accept";

    // --- namespaces
    create_namespace(k, ns);
    let out = k.run(&["get", "ns"]);
    let table = lines(out.ok());
    assert!(table[0].starts_with("NAME") && table[0].contains("STATUS") && table[0].contains("AGE"), "header: {table:?}");
    for want in ["accept", "default", "kube-system", "kube-public"] {
        assert!(table.iter().any(|l| l.split_whitespace().next() == Some(want) && l.contains("Active")), "namespace {want} missing from `get ns`: {table:?}");
    }
    assert_eq!(get_json(k, &["ns", ns])["status"]["phase"], "Active");

    // --- apply (client-side) twice: created, then configured with the change visible
    let files = ["deployment.yaml", "service.yaml", "configmap.yaml"].map(manifest_path);
    let out = k.run(&["apply", "-n", ns, "-f", &files[0], "-f", &files[1], "-f", &files[2]]);
    assert_eq!(lines(out.ok()), vec!["deployment.apps/port-agent created", "service/echo-dualstack created", "configmap/blee created"]);
    let scratch = env.server.scratch_dir();
    let dep2 = scratch.join("deployment-v2.yaml");
    let cm2 = scratch.join("configmap-v2.yaml");
    std::fs::write(&dep2, manifest("deployment.yaml").replace("replicas: 1", "replicas: 3")).unwrap();
    std::fs::write(&cm2, manifest("configmap.yaml").replace("key2: charm", "key2: strange")).unwrap();
    let out = k.run(&["apply", "-n", ns, "-f", dep2.to_str().unwrap(), "-f", &files[1], "-f", cm2.to_str().unwrap()]);
    assert_eq!(lines(out.ok()), vec!["deployment.apps/port-agent configured", "service/echo-dualstack unchanged", "configmap/blee configured"]);
    let dep = get_json(k, &["-n", ns, "deployment", "port-agent"]);
    assert_eq!(dep["spec"]["replicas"], 3);
    assert_eq!(dep["metadata"]["generation"], 2, "a spec change bumps generation");
    assert!(
        dep["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().is_some_and(|a| a.contains("\"replicas\":3")),
        "last-applied-configuration tracks the second apply"
    );
    let cm = get_json(k, &["-n", ns, "configmap", "blee"]);
    assert_eq!(cm["data"]["key2"], "strange");
    assert_eq!(cm["data"]["key1"], "very");

    // --- server-side apply: adds a key, same values elsewhere → no conflict. (kubectl hands
    // the client-side-apply fields over to its SSA manager first, so the manifest keeps them.)
    let ssa = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: blee\n  labels:\n    app: echo\ndata:\n  key1: very\n  key2: strange\n  key5: ssa\n";
    let out = k.run_with_stdin(&["apply", "--server-side", "-n", ns, "-f", "-"], Some(ssa));
    assert_eq!(lines(out.ok()), vec!["configmap/blee serverside-applied"]);
    let cm = get_json(k, &["-n", ns, "configmap", "blee", "--show-managed-fields"]);
    assert_eq!(cm["data"]["key5"], "ssa");
    let managers: Vec<(String, String)> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| (m["manager"].as_str().unwrap_or("").to_string(), m["operation"].as_str().unwrap_or("").to_string()))
        .collect();
    assert!(managers.contains(&("kubectl".into(), "Apply".into())), "SSA manager recorded: {managers:?}");

    // --- -o json (a list) and -o yaml parse and carry the fields
    let list = get_json(k, &["-n", ns, "deployments,services,configmaps"]);
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"].as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds, vec!["Deployment", "Service", "ConfigMap"]);
    let svc = &list["items"][1];
    assert_eq!(svc["metadata"]["name"], "echo-dualstack");
    assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
    assert!(svc["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36), "uid set");
    assert!(svc["metadata"]["resourceVersion"].as_str().is_some_and(|rv| rv.parse::<i64>().is_ok()), "resourceVersion set");
    let yaml = k.run(&["get", "-n", ns, "deployment", "port-agent", "-o", "yaml"]);
    let dep: Value = serde_yaml::from_str(yaml.ok()).expect("`-o yaml` parses");
    assert_eq!(dep["kind"], "Deployment");
    assert_eq!(dep["apiVersion"], "apps/v1");
    assert_eq!(dep["metadata"]["namespace"], ns);
    assert_eq!(dep["spec"]["template"]["spec"]["containers"][0]["image"], "ghcr.io/acme-labs/port-agent:v0.7.8");
    assert!(dep["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')));

    // --- label, annotate
    let out = k.run(&["label", "-n", ns, "configmap", "blee", "tier=backend"]);
    assert_eq!(lines(out.ok()), vec!["configmap/blee labeled"]);
    let out = k.run(&["annotate", "-n", ns, "configmap", "blee", "fedctl.io/note=hello"]);
    // kubectl 1.27 prints "annotate", later versions "annotated"
    assert!(out.ok().starts_with("configmap/blee annotate"), "annotate output: {}", out.stdout);
    let cm = get_json(k, &["-n", ns, "configmap", "blee"]);
    assert_eq!(cm["metadata"]["labels"]["tier"], "backend");
    assert_eq!(cm["metadata"]["labels"]["app"], "echo");
    assert_eq!(cm["metadata"]["annotations"]["fedctl.io/note"], "hello");

    // --- patch: merge, json, strategic (default)
    let out = k.run(&["patch", "-n", ns, "configmap", "blee", "--type", "merge", "-p", r#"{"data":{"merged":"yes","key1":null}}"#]);
    assert_eq!(lines(out.ok()), vec!["configmap/blee patched"]);
    let out = k.run(&["patch", "-n", ns, "configmap", "blee", "--type", "json", "-p", r#"[{"op":"add","path":"/data/jsonpatched","value":"yes"},{"op":"remove","path":"/data/key5"}]"#]);
    assert_eq!(lines(out.ok()), vec!["configmap/blee patched"]);
    let cm = get_json(k, &["-n", ns, "configmap", "blee"]);
    let data = cm["data"].as_object().unwrap();
    let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, vec!["jsonpatched", "key2", "merged"], "data after merge+json patches: {data:?}");
    // strategic merge: containers merge by name, so env survives an image change
    let out = k.run(&["patch", "-n", ns, "deployment", "port-agent", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"port-agent","image":"ghcr.io/acme-labs/port-agent:v0.8.0"}]}}}}"#]);
    assert_eq!(lines(out.ok()), vec!["deployment.apps/port-agent patched"]);
    let dep = get_json(k, &["-n", ns, "deployment", "port-agent"]);
    let c0 = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c0["image"], "ghcr.io/acme-labs/port-agent:v0.8.0");
    assert_eq!(c0["env"].as_array().map(Vec::len), Some(3), "strategic merge keeps the container's env: {c0}");
    assert_eq!(dep["spec"]["template"]["spec"]["containers"].as_array().map(Vec::len), Some(1));

    // --- scale
    let out = k.run(&["scale", "-n", ns, "deployment", "port-agent", "--replicas=5"]);
    assert_eq!(lines(out.ok()), vec!["deployment.apps/port-agent scaled"]);
    let out = k.run(&["get", "-n", ns, "deployment", "port-agent", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(out.ok().trim(), "5");

    // --- get -w sees ADDED / MODIFIED / DELETED of changes made meanwhile
    watch_events(k, ns);

    // --- delete, then NotFound
    let out = k.run(&["delete", "-n", ns, "configmap", "blee"]);
    assert_eq!(lines(out.ok()), vec![r#"configmap "blee" deleted"#]);
    let out = k.run(&["get", "-n", ns, "configmap", "blee"]);
    assert_eq!(out.code, Some(1), "get of a deleted object fails: {out:?}");
    assert_eq!(lines(&out.stderr), vec![r#"Error from server (NotFound): configmaps "blee" not found"#]);
    assert_eq!(out.stdout, "");

    // --- selectors and chunking over 5 configmaps
    selectors_and_chunks(k);

    // --- explain of built-in kinds, and client-side apply removing list elements
    explain_builtins(k);
    apply_removes_list_elements(k, &env.server.scratch_dir(), ns);

    // --- federation kinds
    let out = k.run(&["apply", "-f", &manifest_path("cluster.yaml")]);
    assert_eq!(lines(out.ok()), vec!["cluster.cluster.fedctl.io/member-east-1 created"]);
    let out = k.run(&["apply", "-n", ns, "-f", &manifest_path("work.yaml"), "-f", &manifest_path("propagationpolicy.yaml")]);
    assert_eq!(lines(out.ok()), vec!["work.work.fedctl.io/port-agent-member-east-1 created", "propagationpolicy.policy.fedctl.io/port-agent created"]);
    let out = k.run(&["get", "clusters,works,propagationpolicies", "-n", ns, "-o", "name"]);
    assert_eq!(lines(out.ok()), vec!["cluster.cluster.fedctl.io/member-east-1", "work.work.fedctl.io/port-agent-member-east-1", "propagationpolicy.policy.fedctl.io/port-agent"]);
    let out = k.run(&["get", "clusters,works,propagationpolicies", "-n", ns]);
    let text = out.ok();
    assert!(text.contains("cluster.cluster.fedctl.io/member-east-1"), "{text}");
    assert!(text.contains("us-east-1a"), "Cluster table shows the zone column: {text}");
    assert!(text.contains("work.work.fedctl.io/port-agent-member-east-1"), "{text}");
    assert!(text.contains("propagationpolicy.policy.fedctl.io/port-agent") && text.contains("Divided"), "{text}");
    let out = k.run(&["get", "clusters", "member-east-1", "-o", "jsonpath={.spec.zone}"]);
    assert_eq!(out.ok(), "us-east-1a");
    // with nothing of a kind, kubectl says so on stderr and succeeds
    let out = k.run(&["get", "works", "-n", "default"]);
    assert_eq!(out.ok(), "");
    assert!(out.stderr.contains("No resources found in default namespace."), "{}", out.stderr);
}

/// `kubectl explain` of built-in kinds reads their typed schemas from the OpenAPI v3
/// documents: field types, descriptions, nested paths, across groups.
fn explain_builtins(k: &Kubectl) {
    let out = k.run(&["explain", "deployment.spec.replicas"]).ok().to_string();
    assert!(out.contains("GROUP:") && out.contains("apps") && out.contains("Deployment"), "{out}");
    assert!(out.contains("<integer>") && out.contains("Number of desired pods"), "{out}");
    let out = k.run(&["explain", "pods.spec.containers"]).ok().to_string();
    assert!(out.contains("<[]Container>") && out.contains("imagePullPolicy") && out.contains("-required-"), "{out}");
    let out = k.run(&["explain", "cronjob.spec.jobTemplate.spec.template.spec.restartPolicy"]).ok().to_string();
    assert!(out.contains("<string>"), "{out}");
    let out = k.run(&["explain", "clusterrole.rules.verbs"]).ok().to_string();
    assert!(out.contains("rbac.authorization.k8s.io") && out.contains("<[]string>"), "{out}");
    let out = k.run(&["explain", "hpa.spec.metrics", "--api-version=autoscaling/v2"]).ok().to_string();
    assert!(out.contains("<[]MetricSpec>"), "{out}");
    // the federation's own kinds are described too
    let out = k.run(&["explain", "propagationpolicy.spec.placement.replicaScheduling.type"]).ok().to_string();
    assert!(out.contains("policy.fedctl.io") && out.contains("<string>") && out.contains("Divided"), "{out}");
    let out = k.run(&["explain", "clusters.status.nodeSummary"]).ok().to_string();
    assert!(out.contains("readyNum"), "{out}");
    let out = k.run(&["explain", "deployment.spec.nosuchfield"]);
    assert_ne!(out.code, Some(0), "an unknown field is an error: {out:?}");
}

/// Client-side apply computes its three-way strategic merge patch from the published merge
/// keys (kubectl's compiled-in types or the OpenAPI documents, whichever it uses): dropping a
/// container, an env var and a port from the manifest drops them from the object, and adding
/// one keeps the others; a second apply changes nothing.
fn apply_removes_list_elements(k: &Kubectl, scratch: &std::path::Path, ns: &str) {
    let manifest = |containers: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: lists\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: lists}}\n  template:\n    metadata:\n      labels: {{app: lists}}\n    spec:\n      containers:\n{containers}"
        )
    };
    let c = |name: &str, env: &[&str], ports: &[u16]| {
        let mut s = format!("      - name: {name}\n        image: nginx:1.27\n");
        if !env.is_empty() {
            s.push_str("        env:\n");
            for e in env {
                s.push_str(&format!("        - {{name: {e}, value: x}}\n"));
            }
        }
        if !ports.is_empty() {
            s.push_str("        ports:\n");
            for p in ports {
                s.push_str(&format!("        - containerPort: {p}\n"));
            }
        }
        s
    };
    let file = scratch.join("lists.yaml");
    let apply = |body: String| {
        std::fs::write(&file, body).unwrap();
        k.run(&["apply", "-f", file.to_str().unwrap()]).ok().to_string()
    };
    apply(manifest(&(c("a", &["A1", "A2"], &[80, 81]) + &c("b", &[], &[]))));
    let out = apply(manifest(&c("a", &["A2", "A3"], &[81])));
    assert!(out.contains("configured"), "{out}");
    let obj = get_json(k, &["-n", ns, "deployment", "lists"]);
    let containers = obj["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["a"], "container b is gone: {obj}");
    let env: Vec<&str> = containers[0]["env"].as_array().map(|e| e.iter().filter_map(|v| v["name"].as_str()).collect()).unwrap_or_default();
    assert_eq!(env, ["A2", "A3"], "{obj}");
    let ports: Vec<i64> = containers[0]["ports"].as_array().map(|p| p.iter().filter_map(|v| v["containerPort"].as_i64()).collect()).unwrap_or_default();
    assert_eq!(ports, [81], "{obj}");
    let rv = obj["metadata"]["resourceVersion"].clone();
    let out = apply(manifest(&c("a", &["A2", "A3"], &[81])));
    assert!(out.contains("unchanged"), "{out}");
    assert_eq!(get_json(k, &["-n", ns, "deployment", "lists"])["metadata"]["resourceVersion"], rv, "a second apply changes nothing");
}

fn watch_events(k: &Kubectl, ns: &str) {
    let mut w = k.spawn(&["get", "configmaps", "-n", ns, "-w", "--output-watch-events"]);
    let started = w.wait_for(Duration::from_secs(20), |s| {
        s.lines().any(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.first() == Some(&"ADDED") && t.get(1) == Some(&"blee")
        })
    });
    assert!(started, "`get -w` did not list the existing configmap; stdout: {} stderr: {}", w.stdout(), w.stderr());
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\ndata:\n  a: b\n";
    k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(cm)).ok();
    k.run(&["label", "-n", ns, "configmap", "watched", "stage=one"]).ok();
    k.run(&["delete", "-n", ns, "configmap", "watched"]).ok();
    let want = [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")];
    let events = |s: &str| -> Vec<(String, String)> {
        s.lines()
            .filter_map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                (t.len() >= 2 && t[1] == "watched").then(|| (t[0].to_string(), t[1].to_string()))
            })
            .collect()
    };
    let complete = w.wait_for(Duration::from_secs(15), |s| events(s).len() >= want.len());
    let out = w.stop();
    assert!(complete, "`get -w` missed events; stdout:\n{out}\nstderr: {}", w.stderr());
    let got = events(&out);
    let want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(got, want, "watch events in order; stdout:\n{out}");
    assert!(out.lines().next().is_some_and(|h| h.starts_with("EVENT") && h.contains("NAME") && h.contains("DATA")), "{out}");
}

fn selectors_and_chunks(k: &Kubectl) {
    let ns = "paging";
    create_namespace(k, ns);
    let docs: Vec<String> = (0..5)
        .map(|i| {
            let parity = if i % 2 == 0 { "even" } else { "odd" };
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: page-{i}\n  labels:\n    parity: {parity}\n    set: paging\ndata:\n  n: \"{i}\"\n")
        })
        .collect();
    let out = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(&docs.join("---\n")));
    assert_eq!(lines(out.ok()).len(), 5, "{}", out.stdout);
    let all: Vec<String> = (0..5).map(|i| format!("configmap/page-{i}")).collect();

    let out = k.run(&["get", "-n", ns, "configmaps", "-l", "parity=even", "-o", "name"]);
    assert_eq!(sorted_lines(out.ok()), vec!["configmap/page-0", "configmap/page-2", "configmap/page-4"]);
    let out = k.run(&["get", "-n", ns, "configmaps", "-l", "parity!=even,set=paging", "-o", "name"]);
    assert_eq!(sorted_lines(out.ok()), vec!["configmap/page-1", "configmap/page-3"]);
    let out = k.run(&["get", "-n", ns, "configmaps", "--field-selector", "metadata.name=page-3", "-o", "name"]);
    assert_eq!(lines(out.ok()), vec!["configmap/page-3"]);
    let out = k.run(&["get", "-n", ns, "configmaps", "-l", "parity=odd", "--field-selector", "metadata.name!=page-3", "-o", "name"]);
    assert_eq!(lines(out.ok()), vec!["configmap/page-1"]);
    let out = k.run(&["get", "-n", ns, "configmaps", "-l", "parity=none"]);
    assert_eq!(out.ok(), "");
    assert!(out.stderr.contains("No resources found in paging namespace."), "{}", out.stderr);

    // chunked: three pages of ≤ 2, every object exactly once, in name order
    let out: Run = k.run(&["get", "-n", ns, "configmaps", "--chunk-size=2", "-o", "name", "-v=6"]);
    assert_eq!(lines(out.ok()), all);
    let pages = out.stderr.lines().filter(|l| l.contains("/namespaces/paging/configmaps?") && l.contains("limit=2") && l.contains("200 OK")).count();
    assert_eq!(pages, 3, "expected 3 list pages of 2; kubectl log:\n{}", out.stderr);
    let out = k.run(&["get", "-n", ns, "configmaps", "--chunk-size=2"]);
    let table = lines(out.ok());
    assert_eq!(table.len(), 6, "one header and five rows: {table:?}");
}

const HPA_V2: &str = "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: web
  minReplicas: 2
  maxReplicas: 10
  metrics:
  - type: Resource
    resource:
      name: cpu
      target:
        type: Utilization
        averageUtilization: 60
  - type: Resource
    resource:
      name: memory
      target:
        type: AverageValue
        averageValue: 500Mi
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 120
";

const HPA_V1: &str = "apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata:
  name: old
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: old
  maxReplicas: 4
";

/// autoscaling/v1 HorizontalPodAutoscalers are served next to v2 and stored as v2: each
/// version reads what the other wrote, converted as kube-apiserver converts it (the v2
/// metrics v1 cannot express travel in `autoscaling.alpha.kubernetes.io/*` annotations).
fn hpa_versions(k: &Kubectl, ns: &str) {
    // by full resource name: kubectl 1.33 drops the version of a short name's `hpa.v1.autoscaling`
    const V1: &str = "horizontalpodautoscalers.v1.autoscaling";
    const V2: &str = "horizontalpodautoscalers.v2.autoscaling";
    create_namespace(k, ns);
    let run = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(HPA_V2));
    assert_eq!(lines(run.ok()), vec!["horizontalpodautoscaler.autoscaling/web created".to_string()]);
    // read through v1: the CPU target is the v1 field, the rest is in annotations
    let v1 = get_json(k, &["-n", ns, V1, "web"]);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60, "{v1}");
    assert_eq!(v1["spec"]["minReplicas"], 2);
    assert!(v1["spec"].get("metrics").is_none(), "{v1}");
    let ann = &v1["metadata"]["annotations"];
    let other: Value = serde_json::from_str(ann["autoscaling.alpha.kubernetes.io/metrics"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(other, serde_json::json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "500Mi"}}]), "{v1}");
    let behavior: Value = serde_json::from_str(ann["autoscaling.alpha.kubernetes.io/behavior"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 120, "{v1}");
    // a write through v1 keeps what only v2 expresses
    let run = k.run(&["patch", "-n", ns, V1, "web", "--type=merge", "-p", r#"{"spec":{"maxReplicas":7,"targetCPUUtilizationPercentage":70}}"#]);
    run.ok();
    let v2 = get_json(k, &["-n", ns, V2, "web"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["maxReplicas"], 7);
    let metrics = v2["spec"]["metrics"].as_array().cloned().unwrap_or_default();
    assert_eq!(metrics.len(), 2, "{v2}");
    assert!(metrics.iter().any(|m| m["resource"]["name"] == "memory" && m["resource"]["target"]["averageValue"] == "500Mi"), "{v2}");
    assert!(metrics.iter().any(|m| m["resource"]["name"] == "cpu" && m["resource"]["target"]["averageUtilization"] == 70), "{v2}");
    assert_eq!(v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"], 120, "{v2}");
    assert!(v2["metadata"].get("annotations").and_then(|a| a.get("autoscaling.alpha.kubernetes.io/metrics")).is_none(), "{v2}");

    // created through v1: v1's defaults (minReplicas 1, CPU 80%), read as v2
    let run = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(HPA_V1));
    assert_eq!(lines(run.ok()), vec!["horizontalpodautoscaler.autoscaling/old created".to_string()]);
    let v1 = get_json(k, &["-n", ns, V1, "old"]);
    assert_eq!((v1["spec"]["minReplicas"].clone(), v1["spec"]["targetCPUUtilizationPercentage"].clone()), (serde_json::json!(1), serde_json::json!(80)), "{v1}");
    let v2 = get_json(k, &["-n", ns, V2, "old"]);
    assert_eq!(v2["spec"]["metrics"], serde_json::json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]), "{v2}");
    let run = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(HPA_V1));
    assert_eq!(lines(run.ok()), vec!["horizontalpodautoscaler.autoscaling/old unchanged".to_string()]);
    let again = get_json(k, &["-n", ns, V1, "old"]);
    assert_eq!(again["metadata"]["resourceVersion"], v1["metadata"]["resourceVersion"], "a second apply wrote");
    // the table of either version
    let table = k.run(&["get", "-n", ns, "hpa.v1.autoscaling"]);
    let out = lines(table.ok());
    assert!(out[0].starts_with("NAME") && out[0].contains("TARGETS"), "{out:?}");
    assert!(out.iter().any(|l| l.starts_with("old ") && l.contains("Deployment/old") && l.contains("80%")), "{out:?}");
    // discovery: both versions, v2 preferred
    let group: Value = serde_json::from_str(k.run(&["get", "--raw", "/apis/autoscaling"]).ok()).unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
    let versions: Vec<&str> = group["versions"].as_array().unwrap().iter().filter_map(|v| v["version"].as_str()).collect();
    assert_eq!(versions, ["v2", "v1"]);
    let run = k.run(&["api-versions"]);
    let av = lines(run.ok());
    assert!(av.contains(&"autoscaling/v1".to_string()) && av.contains(&"autoscaling/v2".to_string()), "{av:?}");
}

#[test]
fn hpa_served_in_v1_and_v2_kubectl_1_33() {
    if let Some(env) = env_for("1.33") {
        hpa_versions(&env.k, "hpa");
    }
}

#[test]
fn hpa_served_in_v1_and_v2_kubectl_1_27() {
    if let Some(env) = env_for("1.27") {
        hpa_versions(&env.k, "hpa");
    }
}
