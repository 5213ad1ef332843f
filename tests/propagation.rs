//! Placing workloads: real etcd + real `fedctl server`; members simulated by Cluster objects (status written as admin) and agents by Work status writes.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::server::{ApiClient, FedServer};

const WORKS: &str = "/apis/work.fedctl.io/v1alpha1";
const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";
const POLICY: &str = "/apis/policy.fedctl.io/v1alpha1";
/// Bound on every wait for the controller.
const WAIT: Duration = Duration::from_secs(15);

struct Env {
    c: ApiClient,
    server: FedServer,
    _etcd: EtcdServer,
}

fn env_with(args: &[&str]) -> Env {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), args);
    Env { c: server.client(), server, _etcd: etcd }
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn ready(status: bool) -> Value {
    json!({"conditions": [{"type": "Ready", "status": if status { "True" } else { "False" }, "reason": "Test", "lastTransitionTime": now(), "lastHeartbeatTime": now()}],
        "resourceSummary": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}, "allocated": {"cpu": "2", "memory": "8Gi", "pods": "10"}}})
}

impl Env {
    async fn namespace(&self, name: &str) {
        let r = self.c.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
        assert!(r.status == 201 || r.status == 409, "namespace {name}: {}", r.text);
    }

    /// A simulated member: its exec namespace (as the cluster-controller would create it)
    /// and a Ready Cluster with capacity in its status (as its agent would report).
    async fn member(&self, name: &str, labels: Value) {
        self.member_with(name, labels, true).await
    }

    async fn member_with(&self, name: &str, labels: Value, is_ready: bool) {
        self.namespace(&format!("fed-exec-{name}")).await;
        self.c
            .post(
                CLUSTERS,
                &json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name, "labels": labels},
                "spec": {"apiEndpoint": "https://127.0.0.1:1", "syncMode": "Pull", "zone": "zone-1"}}),
            )
            .await
            .ok();
        self.set_ready(name, is_ready).await;
    }

    /// Writes the Ready condition as an agent's heartbeat would make the cluster-controller
    /// do; retries when the cluster-controller updated the Cluster in between (409).
    async fn set_ready(&self, name: &str, is_ready: bool) {
        for _ in 0..20 {
            let mut c = self.c.get(&format!("{CLUSTERS}/{name}")).await.ok().clone();
            c["status"] = ready(is_ready);
            let r = self.c.put(&format!("{CLUSTERS}/{name}/status"), &c).await;
            if r.status != 409 {
                r.ok();
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("status of cluster {name} kept conflicting");
    }

    async fn label(&self, cluster: &str, labels: Value) {
        self.c.merge_patch(&format!("{CLUSTERS}/{cluster}"), &json!({"metadata": {"labels": labels}})).await.ok();
    }

    /// `cluster → (replicas in the manifest or -1, resourceVersion)` of one template's Works.
    async fn works(&self, kind: &str, name: &str) -> BTreeMap<String, (i64, String)> {
        let r = self.c.get(&format!("{WORKS}/works?labelSelector=propagation.fedctl.io/kind={kind},propagation.fedctl.io/name={name}")).await;
        let items = r.ok()["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .filter(|w| w["metadata"].get("deletionTimestamp").is_none())
            .map(|w| {
                let ns = w["metadata"]["namespace"].as_str().unwrap();
                let m = &w["spec"]["manifests"][0];
                let n = m["spec"]["replicas"].as_i64().unwrap_or(-1);
                (ns.strip_prefix("fed-exec-").unwrap().to_string(), (n, w["metadata"]["resourceVersion"].as_str().unwrap().to_string()))
            })
            .collect()
    }

    async fn replicas(&self, kind: &str, name: &str) -> BTreeMap<String, i64> {
        self.works(kind, name).await.into_iter().map(|(c, (n, _))| (c, n)).collect()
    }

    /// Waits until the template's Works are exactly `want` (`cluster → replicas`, -1 for
    /// kinds without replicas).
    async fn wait_works(&self, kind: &str, name: &str, want: &[(&str, i64)]) {
        let want: BTreeMap<String, i64> = want.iter().map(|(c, n)| (c.to_string(), *n)).collect();
        let t0 = Instant::now();
        let mut got = BTreeMap::new();
        while t0.elapsed() < WAIT {
            got = self.replicas(kind, name).await;
            if got == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{kind} {name}: Works {got:?}, want {want:?}\nserver log:\n{}", self.server.log_tail());
    }

    /// Writes a Work's status as the member's agent would.
    async fn report(&self, cluster: &str, work: &str, identifier: Value, status: Value) {
        let path = format!("{WORKS}/namespaces/fed-exec-{cluster}/works/{work}");
        let mut w = self.c.get(&path).await.ok().clone();
        w["status"] = json!({"conditions": [{"type": "Applied", "status": "True", "lastTransitionTime": now(), "reason": "Applied", "message": ""}],
            "manifestStatuses": [{"identifier": identifier, "applied": true, "status": status}]});
        self.c.put(&format!("{path}/status"), &w).await.ok();
    }
}

fn manifest_path(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/manifests").join(name).display().to_string()
}

fn kubectl_for(server: &FedServer) -> Option<Kubectl> {
    for v in ["1.33", "1.27"] {
        if let Some(bin) = find_kubectl(v) {
            return Some(Kubectl::new(bin, v, &server.kubeconfig(), &server.scratch_dir()));
        }
    }
    eprintln!("SKIPPED: no kubectl.1.33 or kubectl.1.27 found");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_divides_scales_rebalances_aggregates_and_cleans_up() {
    let env = env_with(&[]);
    let Some(k) = kubectl_for(&env.server) else { return };
    env.member("member-a", json!({"env": "prod"})).await;
    env.member("member-b", json!({"env": "prod"})).await;
    k.run(&["apply", "-f", &manifest_path("quickstart.yaml")]).ok();
    env.wait_works("Deployment", "web", &[("member-a", 4), ("member-b", 2)]).await;

    // the Work: named after the template, labelled, manifest stripped of federation fields
    let w = env.c.get(&format!("{WORKS}/namespaces/fed-exec-member-a/works/deployment-shop-web")).await.ok().clone();
    assert_eq!(w["metadata"]["labels"]["fedctl.io/cluster"], "member-a");
    assert_eq!(w["metadata"]["annotations"]["propagation.fedctl.io/template"], "apps/Deployment/shop/web");
    let m = &w["spec"]["manifests"][0];
    assert_eq!(m["kind"], "Deployment");
    assert_eq!(m["metadata"]["namespace"], "shop");
    for gone in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "annotations"] {
        assert!(m["metadata"].get(gone).is_none(), "manifest keeps metadata.{gone}: {m}");
    }
    assert!(m.get("status").is_none());
    assert_eq!(m["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27");
    // the template's annotations are written after its Works (and its Events): wait for them
    let mut d = Value::Null;
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        d = env.c.get("/apis/apps/v1/namespaces/shop/deployments/web").await.ok().clone();
        if d["metadata"]["annotations"]["policy.fedctl.io/namespace"] == "shop" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(d["metadata"]["annotations"]["policy.fedctl.io/name"], "web");
    assert_eq!(d["metadata"]["annotations"]["policy.fedctl.io/namespace"], "shop");

    // agents report: the federation's Deployment shows the sum
    let id = json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web"});
    for (c, n) in [("member-a", 4), ("member-b", 2)] {
        env.report(c, "deployment-shop-web", id.clone(), json!({"observedGeneration": 1, "replicas": n, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n})).await;
    }
    let t0 = Instant::now();
    let mut d = Value::Null;
    while t0.elapsed() < WAIT {
        d = env.c.get("/apis/apps/v1/namespaces/shop/deployments/web").await.ok().clone();
        if d["status"]["readyReplicas"] == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(d["status"]["readyReplicas"], 6, "{d}");
    assert_eq!(d["status"]["availableReplicas"], 6);
    assert_eq!(d["status"]["observedGeneration"], d["metadata"]["generation"]);
    let per: Value = serde_json::from_str(d["metadata"]["annotations"]["fedctl.io/cluster-status"].as_str().unwrap_or("{}")).unwrap();
    assert_eq!(per["member-a"]["readyReplicas"], 4, "{per}");
    assert_eq!(per["member-b"]["readyReplicas"], 2, "{per}");
    let out = k.run(&["get", "deploy", "-n", "shop"]).ok().to_string();
    let row: Vec<&str> = out.lines().find(|l| l.starts_with("web")).unwrap_or("").split_whitespace().collect();
    assert_eq!(row.get(1), Some(&"6/6"), "kubectl get deploy:\n{out}");

    // a re-run writes nothing: Works keep their resourceVersions
    let before = env.works("Deployment", "web").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(env.works("Deployment", "web").await, before, "idle controller rewrote Works");

    // scale the template: 9 over 2:1
    k.run(&["scale", "deploy", "web", "-n", "shop", "--replicas=9"]).ok();
    env.wait_works("Deployment", "web", &[("member-a", 6), ("member-b", 3)]).await;

    // new weights: rebalanced
    let r = env
        .c
        .merge_patch(
            &format!("{POLICY}/namespaces/shop/propagationpolicies/web"),
            &json!({"spec": {"placement": {"replicaScheduling": {"weights": [{"cluster": "member-a", "weight": 1}, {"cluster": "member-b", "weight": 2}]}}}}),
        )
        .await;
    r.ok();
    env.wait_works("Deployment", "web", &[("member-a", 3), ("member-b", 6)]).await;

    // delete the template: its Works go
    k.run(&["delete", "deploy", "web", "-n", "shop"]).ok();
    env.wait_works("Deployment", "web", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_by_label_follows_labels_and_readiness() {
    let env = env_with(&[]);
    env.namespace("web").await;
    env.member("c1", json!({"env": "prod"})).await;
    env.member("c2", json!({"env": "prod"})).await;
    env.member("c3", json!({"env": "dev"})).await;
    env.c
        .post(
            &format!("{POLICY}/namespaces/web/propagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "prod", "namespace": "web"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                "placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}, "replicaScheduling": {"type": "Duplicated"}}}}),
        )
        .await
        .ok();
    let deploy = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    };
    env.c.post("/apis/apps/v1/namespaces/web/deployments", &deploy("front")).await.ok();
    env.wait_works("Deployment", "front", &[("c1", 3), ("c2", 3)]).await;

    env.label("c3", json!({"env": "prod"})).await;
    env.wait_works("Deployment", "front", &[("c1", 3), ("c2", 3), ("c3", 3)]).await;
    env.label("c3", json!({"env": null})).await;
    env.wait_works("Deployment", "front", &[("c1", 3), ("c2", 3)]).await;

    // c2 NotReady: its Work stays untouched, new placements avoid it
    let before = env.works("Deployment", "front").await;
    env.set_ready("c2", false).await;
    env.member_with("c4", json!({"env": "prod"}), false).await;
    env.c.post("/apis/apps/v1/namespaces/web/deployments", &deploy("back")).await.ok();
    env.wait_works("Deployment", "back", &[("c1", 3)]).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(env.works("Deployment", "front").await, before, "Works changed when c2 went NotReady");
    env.c.merge_patch("/apis/apps/v1/namespaces/web/deployments/front", &json!({"spec": {"template": {"metadata": {"labels": {"app": "front", "rev": "2"}}}}})).await.ok();
    // the spec change reaches both hosts, the NotReady one included (applied when it returns)
    let t0 = Instant::now();
    loop {
        let now = env.works("Deployment", "front").await;
        if now.len() == 2 && now.values().zip(before.values()).all(|(a, b)| a.1 != b.1) {
            break;
        }
        assert!(t0.elapsed() < WAIT, "front Works not updated: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled = env.works("Deployment", "front").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(env.works("Deployment", "front").await, settled, "Works on a NotReady cluster were moved or rewritten");
    assert_eq!(env.replicas("Deployment", "back").await.keys().collect::<Vec<_>>(), vec!["c1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_moves_workloads_at_the_rate_limit() {
    // one cluster's workloads per 6 s window
    let env = env_with(&["--failover-eviction-limit", "1", "--failover-eviction-window-seconds", "6"]);
    env.namespace("pay").await;
    for c in ["a", "b", "c"] {
        env.member(c, json!({})).await;
    }
    env.c
        .post(
            &format!("{POLICY}/namespaces/pay/propagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "pay", "namespace": "pay"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}],
                "placement": {"clusterAffinity": {"clusterNames": ["a", "b", "c"]},
                    "replicaScheduling": {"type": "Divided", "weights": [{"cluster": "a", "weight": 1}, {"cluster": "b", "weight": 1}, {"cluster": "c", "weight": 1}]}},
                "failover": {"afterSeconds": 2}}}),
        )
        .await
        .ok();
    env.c
        .post(
            "/apis/apps/v1/namespaces/pay/deployments",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "pay"},
            "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "api"}}, "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await
        .ok();
    env.wait_works("Deployment", "api", &[("a", 2), ("b", 2), ("c", 2)]).await;

    let down = Instant::now();
    env.set_ready("a", false).await;
    env.set_ready("b", false).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(env.replicas("Deployment", "api").await.len(), 3, "moved before failover.afterSeconds");

    // after ~2 s one NotReady cluster's Work moves (its replicas go to the others)…
    let t0 = Instant::now();
    let mut first_at = None;
    let first = loop {
        let w = env.replicas("Deployment", "api").await;
        if w.len() == 2 && first_at.is_none() {
            first_at = Some(down.elapsed());
        }
        if w.len() == 2 && w.values().sum::<i64>() == 6 {
            break w;
        }
        assert!(t0.elapsed() < WAIT, "no failover: {w:?}\n{}", env.server.log_tail());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let first_at = first_at.unwrap_or_default();
    // (lastTransitionTime has whole seconds: up to 1 s early)
    assert!(first_at >= Duration::from_millis(1000), "failover after {first_at:?}");
    assert_eq!(first.values().sum::<i64>(), 6);
    assert_eq!(first.get("c"), Some(&3), "{first:?}");
    // …and the other only when the rate limit allows (window 6 s)
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.replicas("Deployment", "api").await, first, "second cluster evicted inside the rate-limit window");
    let t1 = Instant::now();
    let mut second_at = None;
    loop {
        let w = env.replicas("Deployment", "api").await;
        if w.len() == 1 && second_at.is_none() {
            second_at = Some(down.elapsed());
        }
        if w.len() == 1 && w.get("c") == Some(&6) {
            break;
        }
        assert!(t1.elapsed() < WAIT, "second failover never completed: {w:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let gap = second_at.unwrap_or_default() - first_at;
    assert!(gap >= Duration::from_millis(5000), "second eviction {gap:?} after the first (window 6 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_service_and_deployment_propagate_together() {
    let env = env_with(&[]);
    env.namespace("store").await;
    env.member("a", json!({})).await;
    env.member("b", json!({})).await;
    let pp = |name: &str, priority: i64, selectors: Value, scheduling: Value| {
        json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": name, "namespace": "store"},
            "spec": {"resourceSelectors": selectors, "priority": priority, "placement": {"replicaScheduling": scheduling}}})
    };
    // the Deployment by name (Divided) beats a higher-priority kind-wide policy (Duplicated)
    for p in [
        pp("api", 0, json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}, {"apiVersion": "v1", "kind": "ConfigMap"}]), json!({"type": "Divided"})),
        pp("catch-all", 100, json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]), json!({"type": "Duplicated"})),
    ] {
        env.c.post(&format!("{POLICY}/namespaces/store/propagationpolicies"), &p).await.ok();
    }
    env.c
        .post(
            &format!("{POLICY}/clusterpropagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterPropagationPolicy",
            "metadata": {"name": "services"}, "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Service", "namespace": "store"}]}}),
        )
        .await
        .ok();
    env.c.post("/api/v1/namespaces/store/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "store"}, "data": {"k": "v"}})).await.ok();
    env.c
        .post(
            "/api/v1/namespaces/store/services",
            &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "store"},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}}),
        )
        .await
        .ok();
    env.wait_works("ConfigMap", "cfg", &[("a", -1), ("b", -1)]).await;
    env.wait_works("Service", "api", &[("a", -1), ("b", -1)]).await;
    // the controller has seen both clusters ready (a Divided template is not spread again over
    // a cluster that becomes ready after it was scheduled, as in Karmada)
    env.c
        .post(
            "/apis/apps/v1/namespaces/store/deployments",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "store"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "api"}}, "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await
        .ok();
    // divided by capacity: equal capacity → 2/2
    env.wait_works("Deployment", "api", &[("a", 2), ("b", 2)]).await;
    for c in ["a", "b"] {
        let list = env.c.get(&format!("{WORKS}/namespaces/fed-exec-{c}/works")).await.ok().clone();
        let mut names: Vec<String> = list["items"].as_array().unwrap().iter().map(|w| w["metadata"]["name"].as_str().unwrap().to_string()).collect();
        names.sort();
        // the namespace itself goes to every member (auto-propagation)
        assert_eq!(names, vec!["configmap-store-cfg", "deployment-store-api", "namespace-store", "service-store-api"]);
    }
    let cm = env.c.get(&format!("{WORKS}/namespaces/fed-exec-a/works/configmap-store-cfg")).await.ok().clone();
    assert_eq!(cm["spec"]["manifests"][0]["data"], json!({"k": "v"}));
    let d = env.c.get("/apis/apps/v1/namespaces/store/deployments/api").await.ok().clone();
    assert_eq!(d["metadata"]["annotations"]["policy.fedctl.io/name"], "api");
    let s = env.c.get("/api/v1/namespaces/store/services/api").await.ok().clone();
    assert_eq!(s["metadata"]["annotations"]["policy.fedctl.io/name"], "services");
    assert!(s["metadata"]["annotations"].get("policy.fedctl.io/namespace").is_none());

    // the specific policy goes: the kind-wide one takes over (Duplicated)
    env.c.delete(&format!("{POLICY}/namespaces/store/propagationpolicies/api")).await.ok();
    env.wait_works("Deployment", "api", &[("a", 4), ("b", 4)]).await;
    env.wait_works("ConfigMap", "cfg", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_policies_are_422_with_causes() {
    let env = env_with(&[]);
    env.namespace("bad").await;
    let post = |spec: Value| {
        let c = env.c.clone();
        async move {
            c.post(
                &format!("{POLICY}/namespaces/bad/propagationpolicies"),
                &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
                "metadata": {"name": "p", "namespace": "bad"}, "spec": spec}),
            )
            .await
        }
    };
    let fields = |r: &common::server::Reply| -> Vec<String> {
        let st = r.assert_status(422, "Invalid");
        assert_eq!(st["details"]["kind"], "PropagationPolicy");
        st["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap().to_string()).collect()
    };
    // a cluster's own records (Events, Leases, Nodes …) are not templates
    let r = post(json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "Event"}]})).await;
    assert_eq!(fields(&r), vec!["spec.resourceSelectors[0].kind"]);
    assert!(r.text.contains("Unsupported value"), "{}", r.text);
    // a PropagationPolicy cannot select a cluster-scoped kind
    let r = post(json!({"resourceSelectors": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}]})).await;
    assert_eq!(fields(&r), vec!["spec.resourceSelectors[0].kind"]);
    assert!(r.text.contains("cluster-scoped"), "{}", r.text);
    let r = post(json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
        "placement": {"replicaScheduling": {"type": "Divided", "weights": [{"cluster": "a", "weight": -2}]}}}))
    .await;
    assert_eq!(fields(&r), vec!["spec.placement.replicaScheduling.weights[0].weight"]);
    let r = post(json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Sometimes", "values": ["x"]}]}}],
        "placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"bad key!": "x"}}}, "clusterTolerations": [{"key": "k", "operator": "Maybe"}]}}))
    .await;
    assert_eq!(
        fields(&r),
        vec!["spec.resourceSelectors[0].labelSelector.matchExpressions[0].operator", "spec.placement.clusterAffinity.labelSelector.matchLabels", "spec.placement.clusterTolerations[0].operator"]
    );
    let r = post(json!({"resourceSelectors": [{"kind": "Deployment"}], "failover": {"afterSeconds": -1}})).await;
    assert_eq!(fields(&r), vec!["spec.resourceSelectors[0].apiVersion", "spec.failover.afterSeconds"]);
    let r = env
        .c
        .post(
            &format!("{POLICY}/clusterpropagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterPropagationPolicy",
            "metadata": {"name": "c"}, "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Secret"}], "placement": {"replicaScheduling": {"type": "Spread"}}}}),
        )
        .await;
    let st = r.assert_status(422, "Invalid");
    assert_eq!(st["details"]["causes"][0]["field"], "spec.placement.replicaScheduling.type");
    // an update that breaks a valid policy is refused too
    post(json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]})).await.ok();
    let r = env.c.merge_patch(&format!("{POLICY}/namespaces/bad/propagationpolicies/p"), &json!({"spec": {"priority": "high"}})).await;
    r.assert_status(422, "Invalid");
}

/// A Deployment without `spec.replicas` is stored with kube-apiserver's default of 1: each
/// Duplicated member gets 1 and `kubectl get deploy` counts against 1 (it showed `N/0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_deployment_without_replicas_gets_the_default_one() {
    let env = env_with(&[]);
    let Some(k) = kubectl_for(&env.server) else { return };
    env.namespace("dup").await;
    env.member("c1", json!({"env": "prod"})).await;
    env.member("c2", json!({"env": "prod"})).await;
    env.c
        .post(
            &format!("{POLICY}/namespaces/dup/propagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "all", "namespace": "dup"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                "placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}, "replicaScheduling": {"type": "Duplicated"}}}}),
        )
        .await
        .ok();
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "solo", "namespace": "dup"},
        "spec": {"selector": {"matchLabels": {"app": "solo"}}, "template": {"metadata": {"labels": {"app": "solo"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
    let created = env.c.post("/apis/apps/v1/namespaces/dup/deployments", &d).await.ok().clone();
    assert_eq!(created["spec"]["replicas"], 1, "{created}");
    env.wait_works("Deployment", "solo", &[("c1", 1), ("c2", 1)]).await;
    let w = env.c.get(&format!("{WORKS}/namespaces/fed-exec-c1/works/deployment-dup-solo")).await.ok().clone();
    let m = &w["spec"]["manifests"][0];
    assert_eq!(m["spec"]["strategy"]["type"], "RollingUpdate", "the Work carries the defaulted template: {m}");
    assert_eq!(m["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");

    let id = json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "dup", "name": "solo"});
    for c in ["c1", "c2"] {
        env.report(c, "deployment-dup-solo", id.clone(), json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1})).await;
    }
    let t0 = Instant::now();
    loop {
        let out = k.run(&["get", "deploy", "solo", "-n", "dup"]).ok().to_string();
        let row: Vec<String> = out.lines().find(|l| l.starts_with("solo")).unwrap_or("").split_whitespace().map(str::to_string).collect();
        if row.get(1).map(String::as_str) == Some("2/1") {
            break;
        }
        assert!(t0.elapsed() < WAIT, "kubectl get deploy:\n{out}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Bad OverridePolicies and ClusterOverridePolicies (paths, operators, components,
/// selectors) are refused with 422 causes naming each field, through the API and through
/// `kubectl apply`, and nothing is written; a bad `propagateDeps` likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_override_policies_are_422_and_write_nothing() {
    let env = env_with(&[]);
    env.namespace("bad").await;
    let rev = |c: ApiClient| async move { c.get("/api/v1/namespaces/bad").await.ok()["metadata"]["resourceVersion"].as_str().unwrap().parse::<i64>().unwrap() };
    let op = json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "OverridePolicy", "metadata": {"name": "o", "namespace": "bad"}, "spec": {
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"app": "a b"}}}],
        "overrideRules": [{"targetCluster": {"labelSelector": {"matchExpressions": [{"key": "zone", "operator": "Near"}]}},
            "overriders": {
                "plaintext": [{"path": "spec/replicas", "operator": "replace", "value": 1}, {"path": "/spec/replicas", "operator": "move", "value": 1}],
                "imageOverrider": [{"component": "Host", "operator": "replace", "value": "m"}],
                "argsOverrider": [{"containerName": "web", "operator": "replace", "value": ["x"]}]}}]}});
    let r = env.c.post(&format!("{POLICY}/namespaces/bad/overridepolicies"), &op).await;
    let st = r.assert_status(422, "Invalid");
    assert_eq!(st["details"]["kind"], "OverridePolicy");
    let fields: Vec<&str> = st["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    let o = "spec.overrideRules[0].overriders";
    assert_eq!(
        fields,
        vec![
            "spec.resourceSelectors[0].labelSelector.matchLabels".to_string(),
            "spec.overrideRules[0].targetCluster.labelSelector.matchExpressions[0].operator".into(),
            format!("{o}.plaintext[0].path"),
            format!("{o}.plaintext[1].operator"),
            format!("{o}.imageOverrider[0].component"),
            format!("{o}.argsOverrider[0].operator"),
        ]
    );
    assert_eq!(env.c.get(&format!("{POLICY}/namespaces/bad/overridepolicies/o")).await.status, 404, "nothing written");
    let cop = json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterOverridePolicy", "metadata": {"name": "c"},
        "spec": {"overrideRules": [{"overriders": {"plaintext": [{"path": "/metadata/name", "operator": "replace", "value": "x"}],
            "labelsOverrider": [{"operator": "add", "value": {"tier": "not valid!"}}]}}]}});
    let r = env.c.post(&format!("{POLICY}/clusteroverridepolicies"), &cop).await;
    let st = r.assert_status(422, "Invalid");
    let fields: Vec<&str> = st["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["spec.overrideRules[0].overriders.plaintext[0].path", "spec.overrideRules[0].overriders.labelsOverrider[0].value[tier]"]);
    assert_eq!(env.c.get(&format!("{POLICY}/clusteroverridepolicies/c")).await.status, 404, "nothing written");
    let r = env
        .c
        .post(
            &format!("{POLICY}/namespaces/bad/propagationpolicies"),
            &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "p", "namespace": "bad"}, "spec": {"propagateDeps": "yes", "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}}),
        )
        .await;
    assert_eq!(r.assert_status(422, "Invalid")["details"]["causes"][0]["field"], "spec.propagateDeps");

    // kubectl says the same; a valid one then applies and a breaking edit is refused
    let bin = find_kubectl("1.33").unwrap_or_else(|| "kubectl".into());
    let k = Kubectl::new(bin, "1.33", &env.server.kubeconfig(), &env.server.scratch_dir());
    let before = rev(env.c.clone()).await;
    let file = env.server.scratch_dir().join("bad-op.json");
    std::fs::write(&file, op.to_string()).unwrap();
    let run = k.run(&["apply", "-f", file.to_str().unwrap()]);
    assert_ne!(run.code, Some(0));
    assert!(run.stderr.contains("is invalid") && run.stderr.contains("spec.overrideRules[0].overriders.plaintext[0].path"), "{}", run.stderr);
    let good = json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "OverridePolicy", "metadata": {"name": "o", "namespace": "bad"},
        "spec": {"overrideRules": [{"overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 1}]}}]}});
    std::fs::write(&file, good.to_string()).unwrap();
    let run = k.run(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run = k.run(&["get", "overridepolicies", "-n", "bad"]);
    assert!(run.stdout.contains("RULES") && run.stdout.contains('o'), "{}", run.stdout);
    let r = env.c.merge_patch(&format!("{POLICY}/namespaces/bad/overridepolicies/o"), &json!({"spec": {"overrideRules": [{"overriders": {"plaintext": [{"path": "", "operator": "add"}]}}]}})).await;
    r.assert_status(422, "Invalid");
    let stored = env.c.get(&format!("{POLICY}/namespaces/bad/overridepolicies/o")).await.ok().clone();
    assert_eq!(stored["spec"], good["spec"], "the refused edit wrote nothing");
    assert_eq!(rev(env.c.clone()).await, before, "the namespace was not touched");
}
