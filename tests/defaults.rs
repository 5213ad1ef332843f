//! kube-apiserver's defaulting through real servers: kubectl applies minimal manifests to a
//! `fedctl server` over etcd and to a fedsim; the stored objects carry the defaults derived
//! from Kubernetes 1.33's `SetDefaults_*` functions, and a second apply writes nothing.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::procs::FedsimProcess;
use common::server::FedServer;

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
";

const SSA_DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  selector:
    matchLabels:
      app: api
  template:
    metadata:
      labels:
        app: api
    spec:
      containers:
      - name: api
        image: example.com/api
";

/// The spec kube-apiserver 1.33 stores for [`DEPLOYMENT`]: apps/v1 SetDefaults_Deployment,
/// core/v1 SetDefaults_PodSpec and SetDefaults_Container, the declarative port protocol.
fn web_spec() -> Value {
    json!({
        "replicas": 1,
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 600,
        "selector": {"matchLabels": {"app": "web"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [{
                    "name": "web",
                    "image": "nginx:1.27",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }],
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30,
            },
        },
    })
}

fn get(k: &Kubectl, ns: &str, what: &str) -> Value {
    k.run(&["get", "-n", ns, what, "-o", "json"]).json()
}

fn rv_gen(o: &Value) -> (String, i64) {
    (o["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string(), o["metadata"]["generation"].as_i64().unwrap_or(0))
}

/// Waits until the object's resourceVersion stays the same for a second (a member's
/// controllers write the status of a new Deployment a few times).
fn settled(k: &Kubectl, ns: &str, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = get(k, ns, what);
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = get(k, ns, what);
        if rv_gen(&now) == rv_gen(&last) {
            return now;
        }
        assert!(Instant::now() < deadline, "{what} keeps changing: {now}");
        last = now;
    }
}

/// The whole check against one server (`ready` is what READY's numerator becomes: 0 on the
/// federation, which runs no pods itself, 1 on a member).
fn check_defaults(k: &Kubectl, ns: &str, ready: &str) {
    let out = k.run(&["create", "ns", ns]);
    out.ok();

    // client-side apply of a minimal Deployment: stored with every default
    let out = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(DEPLOYMENT));
    assert_eq!(out.ok().trim(), "deployment.apps/web created");
    let d = settled(k, ns, "deployment/web");
    assert_eq!(d["spec"], web_spec(), "stored spec: {}", serde_json::to_string_pretty(&d["spec"]).unwrap());
    assert_eq!(d["metadata"]["generation"], 1);

    // a second apply changes nothing: same resourceVersion, same generation
    let out = k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(DEPLOYMENT));
    assert_eq!(out.ok().trim(), "deployment.apps/web unchanged");
    let again = get(k, ns, "deployment/web");
    assert_eq!(rv_gen(&again), rv_gen(&d), "a second apply wrote");

    // `kubectl get deploy` counts the defaulted replica
    let table = k.run(&["get", "-n", ns, "deploy", "web"]);
    let row: Vec<&str> = table.ok().lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(row.get(1).copied(), Some(format!("{ready}/1").as_str()), "READY column: {table:?}");

    // server-side apply: created with defaults (an untagged image is pulled Always), a second
    // apply writes nothing
    let out = k.run_with_stdin(&["apply", "--server-side", "-n", ns, "-f", "-"], Some(SSA_DEPLOYMENT));
    assert_eq!(out.ok().trim(), "deployment.apps/api serverside-applied");
    settled(k, ns, "deployment/api");
    let with_fields = |k: &Kubectl| k.run(&["get", "-n", ns, "deployment/api", "-o", "json", "--show-managed-fields"]).json();
    let a = with_fields(k);
    assert_eq!(a["spec"]["replicas"], 1);
    assert_eq!(a["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(a["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    let out = k.run_with_stdin(&["apply", "--server-side", "-n", ns, "-f", "-"], Some(SSA_DEPLOYMENT));
    assert_eq!(out.ok().trim(), "deployment.apps/api serverside-applied");
    let again = with_fields(k);
    assert_eq!(rv_gen(&again), rv_gen(&a), "a second server-side apply wrote: before {a}\nafter {again}");

    // a merge patch that removes replicas gets the default back (defaulting on every write),
    // and so leaves the object as it was
    let out = k.run(&["patch", "-n", ns, "deployment/web", "--type=merge", "-p", r#"{"spec":{"replicas":null,"revisionHistoryLimit":null}}"#]);
    out.ok();
    let p = get(k, ns, "deployment/web");
    assert_eq!(p["spec"], web_spec());
    assert_eq!(p["metadata"]["generation"], 1, "re-defaulted fields are no spec change");

    // an update (PUT) without the defaulted fields stores them again; a spec change bumps
    // the generation once
    let mut body: Value = serde_json::from_value(get(k, ns, "deployment/web")).unwrap();
    for f in ["replicas", "strategy", "progressDeadlineSeconds"] {
        body["spec"].as_object_mut().unwrap().remove(f);
    }
    body["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("imagePullPolicy");
    body["spec"]["minReadySeconds"] = json!(5);
    let out = k.run_with_stdin(&["replace", "-f", "-"], Some(&body.to_string()));
    out.ok();
    let r = get(k, ns, "deployment/web");
    let mut want = web_spec();
    want["minReadySeconds"] = json!(5);
    assert_eq!(r["spec"], want);
    assert_eq!(r["metadata"]["generation"], 2);

    // other kinds: a Service and a CronJob with their defaults; Secret type
    let svc = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 80\n";
    k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(svc)).ok();
    let s = get(k, ns, "service/web");
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "None");
    assert_eq!(s["spec"]["internalTrafficPolicy"], "Cluster");
    assert_eq!(s["spec"]["ports"], json!([{"port": 80, "protocol": "TCP", "targetPort": 80}]));
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: pi\nspec:\n  template:\n    metadata:\n      labels:\n        app: pi\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: pi\n        image: perl:5.34\n";
    k.run_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(job)).ok();
    let j = get(k, ns, "job/pi");
    for (field, want) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("manualSelector", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        assert_eq!(j["spec"][field], want, "Job spec.{field}: {j}");
    }
    assert_eq!(j["metadata"]["labels"], json!({"app": "pi"}), "a Job without labels takes its template's");
    assert_eq!(j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
}

fn kubectl(version: &str) -> Option<std::path::PathBuf> {
    let bin = find_kubectl(version);
    if bin.is_none() {
        eprintln!("SKIPPED: kubectl.{version} not found");
    }
    bin
}

fn on_federation(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let k = Kubectl::new(bin, version, &server.kubeconfig(), &server.scratch_dir());
    check_defaults(&k, "defaults", "0");
}

#[test]
fn federation_stores_kube_apiserver_defaults_kubectl_1_33() {
    on_federation("1.33");
}

#[test]
fn federation_stores_kube_apiserver_defaults_kubectl_1_27() {
    on_federation("1.27");
}

#[test]
fn fedsim_stores_kube_apiserver_defaults() {
    let Some(bin) = kubectl("1.33") else { return };
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-d", &["--nodes", "2", "--pods-per-node", "1", "--namespaces", "1"], Duration::from_secs(60)).expect("start fedsim");
    let cache = tempfile::Builder::new().prefix("fedctl-kubectl-").tempdir().expect("temp dir");
    let k = Kubectl::new(bin, "1.33", &sim.kubeconfig, cache.path());
    check_defaults(&k, "defaults", "1");
}
