//! Propagation end to end through real processes: etcd, `fedctl server`, three fedsim
//! members joined with `fedctl join` and their `fedctl agent`s, driven with a real kubectl.
//!
//! One environment runs every scenario in turn (to keep the run short): a ConfigMap, Service
//! and Deployment propagating together; the quick start's Deployment divided 2:1, scaled,
//! re-weighted and deleted; a Duplicated policy following a cluster label; and a member whose
//! agent stops — no new placement there, its workloads left alone, and with
//! `failover.afterSeconds` its replicas moved away, one cluster per failover window.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::member::{JoinOptions, Member};
use common::server::{ApiClient, FedServer};
use fedctl::api::policy::is_reserved_namespace;
use fedctl::controllers::propagation::work::work_name;
use serde_json::Value;

/// Server flags: NotReady 3 s after the last heartbeat; one cluster failed over per 12 s.
const GRACE: &str = "3s";
const FAILOVER_WINDOW_S: u64 = 12;

/// Polls `f` every 200 ms until it returns `Ok` or `timeout` passes; then panics with the
/// last error and the server's log tail.
async fn eventually<T, F, Fut>(fed: &FedServer, what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => panic!("{what}: not within {timeout:?}: {e}\nserver log:\n{}", fed.log_tail()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Running, not terminating pods labelled `app=<app>` in `ns` on member `m`.
async fn running_pods(m: &Member, ns: &str, app: &str) -> usize {
    let (_, list) = m.get(&format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")).await;
    list["items"].as_array().map(|items| items.iter().filter(|p| p["status"]["phase"] == "Running" && p.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null)).count()).unwrap_or(0)
}

/// Waits until Deployment `ns/name` on `m` has `replicas` in its spec and as many Running
/// pods (`None`: until the Deployment is gone and no pod of it is left).
async fn member_deployment(fed: &FedServer, m: &Member, ns: &str, name: &str, replicas: Option<i64>) {
    let what = format!("{} has Deployment {ns}/{name} with {replicas:?} replicas Running", m.name);
    eventually(fed, &what, Duration::from_secs(40), || async {
        let (code, d) = m.get(&format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}")).await;
        let pods = running_pods(m, ns, name).await;
        match replicas {
            None if code == 404 && pods == 0 => Ok(()),
            Some(n) if code == 200 && d["spec"]["replicas"] == n && pods == n as usize => Ok(()),
            _ => Err(format!("HTTP {code}, spec.replicas {}, {pods} pods Running", d["spec"]["replicas"])),
        }
    })
    .await
}

/// The Work of Deployment `ns/name` for `cluster`: `None` when absent or being deleted.
async fn work_for(admin: &ApiClient, cluster: &str, ns: &str, name: &str) -> Option<Value> {
    let r = admin.get(&format!("/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-{cluster}/works/{}", work_name("Deployment", Some(ns), name))).await;
    (r.status == 200 && r.json.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null)).then(|| r.json.clone())
}

/// `spec.replicas` of the Deployment in a Work.
fn work_replicas(w: &Option<Value>) -> Option<i64> {
    w.as_ref()?.pointer("/spec/manifests/0/spec/replicas")?.as_i64()
}

/// The Cluster's `Ready` condition status (`"True"`, `"False"`, …).
async fn ready(admin: &ApiClient, cluster: &str) -> String {
    let c = admin.get(&format!("/apis/cluster.fedctl.io/v1alpha1/clusters/{cluster}")).await.json;
    c.pointer("/status/conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")).and_then(|c| c["status"].as_str()).unwrap_or("").to_string()
}

/// Waits until every member's Cluster is `Ready` (40 s each; the failure shows the agent's log).
async fn wait_ready(fed: &FedServer, admin: &ApiClient, members: &[&Member]) {
    for m in members {
        eventually(fed, &format!("{} Ready", m.name), Duration::from_secs(40), || async {
            match ready(admin, &m.name).await.as_str() {
                "True" => Ok(()),
                s => Err(format!("Ready={s:?}; agent log:\n{}", m.agent.log_tail(20))),
            }
        })
        .await;
    }
}

/// READY column of `kubectl get deploy NAME -n NS` on the federation.
fn kubectl_ready(k: &Kubectl, ns: &str, name: &str) -> String {
    let r = k.run(&["get", "deploy", name, "-n", ns, "--no-headers"]);
    if r.code != Some(0) {
        return format!("kubectl failed: {}", r.stderr);
    }
    r.stdout.split_whitespace().nth(1).unwrap_or("").to_string()
}

fn apply(k: &Kubectl, yaml: &str) {
    k.run_with_stdin(&["apply", "-f", "-"], Some(yaml)).ok();
}

const BUNDLE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: bundle}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: bundle}
data: {greeting: hello}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: bundle}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: bundle, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        envFrom: [{configMapRef: {name: web-config}}]
---
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {name: bundle, namespace: bundle}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap}
  - {apiVersion: v1, kind: Service}
  - {apiVersion: apps/v1, kind: Deployment}
  placement:
    clusterAffinity: {clusterNames: [member-a, member-c]}
    replicaScheduling: {type: Duplicated}
"#;

fn deployment_yaml(ns: &str, name: &str, replicas: i64) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: main, image: nginx:1.27}}]
"#
    )
}

const PROD_POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: prod}
---
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {name: prod, namespace: prod}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  placement:
    clusterAffinity:
      labelSelector: {matchLabels: {env: prod}}
    replicaScheduling: {type: Duplicated}
"#;

const FAILOVER_POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: fo}
---
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {name: spread, namespace: fo}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: spread}
  placement:
    clusterAffinity: {clusterNames: [member-a, member-b, member-c]}
    replicaScheduling:
      type: Divided
      weights:
      - {cluster: member-a, weight: 1}
      - {cluster: member-b, weight: 1}
      - {cluster: member-c, weight: 1}
  failover: {afterSeconds: 4}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_through_agents_to_three_fedsims() {
    let bin = find_kubectl("1.33").or_else(|| find_kubectl("1.27")).unwrap_or_else(|| "kubectl".into());
    let etcd = EtcdServer::start_new();
    let window = FAILOVER_WINDOW_S.to_string();
    let fed = FedServer::start_with_args(&etcd.endpoint(), &["--cluster-grace-period", GRACE, "--failover-eviction-limit", "1", "--failover-eviction-window-seconds", &window]);
    let admin = fed.client();
    let k = Kubectl::new(bin, "1.33", &fed.kubeconfig(), &fed.scratch_dir());
    let sim = |seed: &'static str| ["--nodes", "2", "--pods-per-node", "2", "--namespaces", "2", "--seed", seed];
    let opts = |labels: &'static str, zone: &'static str| JoinOptions { labels, zone, region: "region-1", heartbeat: 1 };
    let mut a = Member::start(&fed, "member-a", &sim("1"), &opts("env=prod", "zone-a"));
    let mut b = Member::start(&fed, "member-b", &sim("2"), &opts("env=prod", "zone-b"));
    let mut c = Member::start(&fed, "member-c", &sim("3"), &opts("tier=bronze", "zone-c"));
    wait_ready(&fed, &admin, &[&a, &b, &c]).await;

    // --- a ConfigMap, a Service and a Deployment of one namespace propagate together
    apply(&k, BUNDLE);
    member_deployment(&fed, &a, "bundle", "web", Some(2)).await;
    member_deployment(&fed, &c, "bundle", "web", Some(2)).await;
    for m in [&a, &c] {
        eventually(&fed, &format!("{} has the ConfigMap and the Service", m.name), Duration::from_secs(30), || async {
            let (code, cm) = m.get("/api/v1/namespaces/bundle/configmaps/web-config").await;
            let (code2, svc) = m.get("/api/v1/namespaces/bundle/services/web").await;
            match (code, &cm["data"]["greeting"], code2, &svc["spec"]["ports"][0]["port"]) {
                (200, g, 200, p) if g == "hello" && p == 80 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    for p in ["/api/v1/namespaces/bundle/configmaps/web-config", "/api/v1/namespaces/bundle/services/web", "/apis/apps/v1/namespaces/bundle/deployments/web"] {
        assert_eq!(b.get(p).await.0, 404, "member-b is not selected: {p}");
    }

    // --- the quick start: 6 replicas divided 2:1 → 4 + 2 Running, 6/6 READY on the federation
    let quickstart = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/manifests/quickstart.yaml")).expect("quickstart.yaml");
    apply(&k, &quickstart);
    member_deployment(&fed, &a, "shop", "web", Some(4)).await;
    member_deployment(&fed, &b, "shop", "web", Some(2)).await;
    assert_eq!(c.get("/apis/apps/v1/namespaces/shop/deployments/web").await.0, 404);
    eventually(&fed, "federation READY 6/6", Duration::from_secs(30), || async {
        match kubectl_ready(&k, "shop", "web") {
            s if s == "6/6" => Ok(()),
            s => Err(s),
        }
    })
    .await;
    let t = admin.get("/apis/apps/v1/namespaces/shop/deployments/web").await.json;
    assert_eq!(t["metadata"]["annotations"]["policy.fedctl.io/name"], "web", "{t}");
    assert_eq!(t["status"]["availableReplicas"], 6, "{t}");
    let per_cluster: Value = serde_json::from_str(t["metadata"]["annotations"]["fedctl.io/cluster-status"].as_str().expect("breakdown")).unwrap();
    assert_eq!((&per_cluster["member-a"]["readyReplicas"], &per_cluster["member-b"]["readyReplicas"]), (&Value::from(4), &Value::from(2)), "{per_cluster}");
    // scale to 9 → 6 + 3
    k.run(&["scale", "deploy", "web", "-n", "shop", "--replicas", "9"]).ok();
    member_deployment(&fed, &a, "shop", "web", Some(6)).await;
    member_deployment(&fed, &b, "shop", "web", Some(3)).await;
    eventually(&fed, "federation READY 9/9", Duration::from_secs(30), || async {
        match kubectl_ready(&k, "shop", "web") {
            s if s == "9/9" => Ok(()),
            s => Err(s),
        }
    })
    .await;
    // weights 1:2 → 3 + 6 (the template keeps its 9 replicas: apply the policy alone)
    let policy = &quickstart[quickstart.find("apiVersion: policy.fedctl.io").expect("policy in quickstart")..];
    let reweighted = policy.replace("{cluster: member-a, weight: 2}", "{cluster: member-a, weight: 1}").replace("{cluster: member-b, weight: 1}", "{cluster: member-b, weight: 2}");
    assert_ne!(reweighted, policy);
    // kubectl computes the patch of an existing policy from its OpenAPI schema: metadata is an
    // ObjectMeta there, so it finds metadata.annotations (else it warns "unable to find api field")
    // (and sends a JSON merge patch, as for a custom resource: the federation's kinds take no
    // strategic merge patch, and their OpenAPI says so)
    let run = k.run_with_stdin(&["apply", "-f", "-"], Some(&reweighted));
    run.ok();
    assert!(!run.stderr.contains("unable to find api field"), "{}", run.stderr);
    member_deployment(&fed, &a, "shop", "web", Some(3)).await;
    member_deployment(&fed, &b, "shop", "web", Some(6)).await;
    // kubectl 1.27 (OpenAPI v2) re-applies the first weights: 6 + 3 again
    let oldest = common::kubectl::oldest_and_newest(&fed.kubeconfig(), &fed.scratch_dir()).remove(0);
    let run = oldest.run_with_stdin(&["apply", "-f", "-"], Some(policy));
    run.ok();
    assert!(!run.stderr.contains("unable to find api field"), "{}", run.stderr);
    member_deployment(&fed, &a, "shop", "web", Some(6)).await;
    member_deployment(&fed, &b, "shop", "web", Some(3)).await;
    // delete → gone from both members
    k.run(&["delete", "deploy", "web", "-n", "shop"]).ok();
    member_deployment(&fed, &a, "shop", "web", None).await;
    member_deployment(&fed, &b, "shop", "web", None).await;
    eventually(&fed, "Works of shop/web deleted", Duration::from_secs(20), || async {
        match (work_for(&admin, "member-a", "shop", "web").await, work_for(&admin, "member-b", "shop", "web").await) {
            (None, None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // --- Duplicated to the clusters labelled env=prod; label member-c → it gets the
    // workload; unlabel → removed
    apply(&k, PROD_POLICY);
    apply(&k, &deployment_yaml("prod", "api", 2));
    member_deployment(&fed, &a, "prod", "api", Some(2)).await;
    member_deployment(&fed, &b, "prod", "api", Some(2)).await;
    assert_eq!(c.get("/apis/apps/v1/namespaces/prod/deployments/api").await.0, 404, "member-c is not env=prod");
    k.run(&["label", "clusters.cluster.fedctl.io", "member-c", "env=prod"]).ok();
    member_deployment(&fed, &c, "prod", "api", Some(2)).await;
    k.run(&["label", "clusters.cluster.fedctl.io", "member-c", "env-"]).ok();
    member_deployment(&fed, &c, "prod", "api", None).await;
    member_deployment(&fed, &a, "prod", "api", Some(2)).await;

    // --- failover: spread 6 replicas 1:1:1 with failover after 4 s
    apply(&k, FAILOVER_POLICY);
    apply(&k, &deployment_yaml("fo", "spread", 6));
    for m in [&a, &b, &c] {
        member_deployment(&fed, m, "fo", "spread", Some(2)).await;
    }

    // member-b's and member-c's agents stop → both NotReady
    b.agent.kill();
    c.agent.kill();
    for m in ["member-b", "member-c"] {
        eventually(&fed, &format!("{m} NotReady"), Duration::from_secs(30), || async {
            match ready(&admin, m).await.as_str() {
                "False" | "Unknown" => Ok(()),
                s => Err(format!("Ready={s:?}")),
            }
        })
        .await;
    }
    // a new Deployment for env=prod goes to member-a only, not to NotReady member-b
    apply(&k, &deployment_yaml("prod", "late", 1));
    member_deployment(&fed, &a, "prod", "late", Some(1)).await;
    assert!(work_for(&admin, "member-b", "prod", "late").await.is_none(), "no new placement on a NotReady cluster");
    // without failover, member-b keeps its Work and its pods
    assert_eq!(work_replicas(&work_for(&admin, "member-b", "prod", "api").await), Some(2), "prod/api stays on member-b");
    assert_eq!(running_pods(&b, "prod", "api").await, 2, "member-b's pods untouched");

    // with failover: 4 s after it went NotReady one cluster is evicted (whichever was
    // marked first; by name on a tie) and member-a takes half; the other waits for the next
    // failover window
    let spread = |cluster: &'static str| {
        let admin = admin.clone();
        async move { work_replicas(&work_for(&admin, cluster, "fo", "spread").await) }
    };
    let t_first = eventually(&fed, "first failover", Duration::from_secs(40), || async {
        match (spread("member-a").await, spread("member-b").await, spread("member-c").await) {
            (Some(3), None, Some(3)) | (Some(3), Some(3), None) => Ok(Instant::now()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let t_second = eventually(&fed, "second failover, one window later", Duration::from_secs(FAILOVER_WINDOW_S + 30), || async {
        match (spread("member-a").await, spread("member-b").await, spread("member-c").await) {
            (Some(6), None, None) => Ok(Instant::now()),
            (Some(3), None, Some(3)) | (Some(3), Some(3), None) => Err("second cluster not evicted yet".to_string()),
            s => Err(format!("unexpected Works {s:?}")),
        }
    })
    .await;
    let gap = t_second - t_first;
    assert!(gap >= Duration::from_secs(FAILOVER_WINDOW_S - 3), "failover rate-limited to one cluster per {FAILOVER_WINDOW_S} s, second came after {gap:?}");
    member_deployment(&fed, &a, "fo", "spread", Some(6)).await;
    // the stopped members' objects are left as they were (nobody there to delete them)
    assert_eq!(running_pods(&b, "fo", "spread").await, 2);
    assert_eq!(running_pods(&c, "fo", "spread").await, 2);
    assert_eq!(running_pods(&b, "prod", "api").await, 2);
    a.agent.assert_alive();
}

/// Kinds beyond the workloads: cluster-scoped (ClusterRole, StorageClass, a
/// CustomResourceDefinition) and namespaced (Role, NetworkPolicy, PodDisruptionBudget,
/// HorizontalPodAutoscaler, Ingress) templates, placed by one ClusterPropagationPolicy,
/// are duplicated unchanged to both members; deleting a template removes it there.
const ANY_KINDS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "team:reader", labels: {fed: "yes"}}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast, labels: {fed: "yes"}}
provisioner: example.com/ssd
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, labels: {fed: "yes"}}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: team, labels: {fed: "yes"}}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: team, labels: {fed: "yes"}}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: team, labels: {fed: "yes"}}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: team, labels: {fed: "yes"}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: team, labels: {fed: "yes"}}
spec:
  rules: [{host: web.example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]
---
apiVersion: policy.fedctl.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: any-kind}
spec:
  resourceSelectors:
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, labelSelector: {matchLabels: {fed: "yes"}}}
  - {apiVersion: storage.k8s.io/v1, kind: StorageClass, labelSelector: {matchLabels: {fed: "yes"}}}
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, labelSelector: {matchLabels: {fed: "yes"}}}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: Role, namespace: team}
  - {apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, namespace: team}
  - {apiVersion: policy/v1, kind: PodDisruptionBudget, namespace: team}
  - {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, namespace: team}
  - {apiVersion: networking.k8s.io/v1, kind: Ingress, namespace: team}
  placement:
    replicaScheduling: {type: Duplicated}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_kind_propagates_to_two_fedsims() {
    let bin = find_kubectl("1.33").or_else(|| find_kubectl("1.27")).unwrap_or_else(|| "kubectl".into());
    let etcd = EtcdServer::start_new();
    let fed = FedServer::start(&etcd.endpoint());
    let admin = fed.client();
    let k = Kubectl::new(bin, "1.33", &fed.kubeconfig(), &fed.scratch_dir());
    let sim = |seed: &'static str| ["--nodes", "1", "--pods-per-node", "1", "--namespaces", "1", "--seed", seed];
    let opts = |zone: &'static str| JoinOptions { labels: "env=prod", zone, region: "region-1", heartbeat: 1 };
    let a = Member::start(&fed, "member-a", &sim("1"), &opts("zone-a"));
    let b = Member::start(&fed, "member-b", &sim("2"), &opts("zone-b"));
    wait_ready(&fed, &admin, &[&a, &b]).await;
    apply(&k, ANY_KINDS);
    let paths = [
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/team:reader",
        "/apis/storage.k8s.io/v1/storageclasses/fast",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles/reader",
        "/apis/networking.k8s.io/v1/namespaces/team/networkpolicies/deny",
        "/apis/policy/v1/namespaces/team/poddisruptionbudgets/web",
        "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers/web",
        "/apis/networking.k8s.io/v1/namespaces/team/ingresses/web",
    ];
    for m in [&a, &b] {
        eventually(&fed, &format!("{} has every kind", m.name), Duration::from_secs(40), || async {
            let mut missing = Vec::new();
            for p in paths {
                let (code, _) = m.get(p).await;
                if code != 200 {
                    missing.push(format!("{p}: {code}"));
                }
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("{missing:?}; agent log:\n{}", m.agent.log_tail(10)))
            }
        })
        .await;
        let (_, sc) = m.get("/apis/storage.k8s.io/v1/storageclasses/fast").await;
        assert_eq!(sc["provisioner"], "example.com/ssd", "duplicated unchanged");
        let (_, pdb) = m.get("/apis/policy/v1/namespaces/team/poddisruptionbudgets/web").await;
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    }
    k.run(&["delete", "storageclass", "fast"]).ok();
    for m in [&a, &b] {
        eventually(&fed, &format!("{} loses the StorageClass", m.name), Duration::from_secs(40), || async {
            match m.get("/apis/storage.k8s.io/v1/storageclasses/fast").await.0 {
                404 => Ok(()),
                c => Err(format!("HTTP {c}")),
            }
        })
        .await;
    }
}

/// Two joined fedsims (`member-a`, `member-b`, labelled `env=prod`) with their agents, both
/// waited for until Ready.
async fn two_members(fed: &FedServer) -> (Member, Member) {
    let admin = fed.client();
    let sim = |seed: &'static str| ["--nodes", "1", "--pods-per-node", "1", "--namespaces", "1", "--seed", seed];
    let opts = |zone: &'static str| JoinOptions { labels: "env=prod", zone, region: "region-1", heartbeat: 1 };
    let a = Member::start(fed, "member-a", &sim("1"), &opts("zone-a"));
    let b = Member::start(fed, "member-b", &sim("2"), &opts("zone-b"));
    wait_ready(fed, &admin, &[&a, &b]).await;
    (a, b)
}

/// `(apiVersion, kind, namespace, name)` of every object `kubectl get -f FILE -o json`
/// shows (`--ignore-not-found`: the missing ones are left out).
fn objects_of(k: &Kubectl, file: &str) -> Result<BTreeSet<(String, String, String, String)>, String> {
    let run = k.run(&["get", "-f", file, "-o", "json", "--ignore-not-found"]);
    if run.code != Some(0) {
        return Err(format!("kubectl get -f {file}: {}", run.stderr));
    }
    if run.stdout.trim().is_empty() {
        return Ok(BTreeSet::new());
    }
    let v: Value = serde_json::from_str(&run.stdout).map_err(|e| format!("{e}: {}", run.stdout))?;
    let items = match v.get("items") {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![v],
    };
    let s = |o: &Value, p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(items.iter().map(|o| (s(o, "/apiVersion"), s(o, "/kind"), s(o, "/metadata/namespace"), s(o, "/metadata/name"))).collect())
}

/// The names of the Works of `cluster`, and those that are not `Applied=True` with their
/// condition and manifest statuses; `Err` when the list fails.
async fn unapplied_works(admin: &ApiClient, cluster: &str) -> Result<(BTreeSet<String>, Vec<String>), String> {
    let r = admin.get(&format!("/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-{cluster}/works")).await;
    let items = r.json["items"].as_array().ok_or_else(|| format!("HTTP {}: {}", r.status, r.json))?;
    let pending = items
        .iter()
        .filter(|w| !w.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True")))
        .map(|w| format!("{}: {} {}", w["metadata"]["name"], w.pointer("/status/conditions").unwrap_or(&Value::Null), w.pointer("/status/manifestStatuses").unwrap_or(&Value::Null)))
        .collect();
    Ok((items.iter().filter_map(|w| w["metadata"]["name"].as_str().map(str::to_string)).collect(), pending))
}

/// The whole corpus (`testdata/corpus/`, real manifests of public projects) applied to the
/// federation unchanged, then one ClusterPropagationPolicy selecting every kind in it
/// places every object on both fedsims, where `kubectl get -f` with the member's
/// kubeconfig shows each of them. Objects in `kube-system` (kube-state-metrics' and
/// metrics-server's) are the exception the federation documents: templates in reserved
/// namespaces are never propagated, and they are checked to be absent. The corpus's CRDs and
/// the custom resources of one of them (the shirts) are placed like the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_placed_by_one_cluster_propagation_policy() {
    let bin = find_kubectl("1.33").or_else(|| find_kubectl("1.27")).unwrap_or_else(|| "kubectl".into());
    let etcd = EtcdServer::start_new();
    let fed = FedServer::start(&etcd.endpoint());
    let admin = fed.client();
    let k = Kubectl::new(bin.clone(), "1.33", &fed.kubeconfig(), &fed.scratch_dir());
    let (mut a, mut b) = two_members(&fed).await;

    for ns in ["kube-system", "default"] {
        let run = k.run(&["create", "ns", ns]);
        assert!(run.code == Some(0) || run.stderr.contains("AlreadyExists"), "create ns {ns}: {}", run.stderr);
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("testdata/corpus")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "corpus has {} files", files.len());
    // every file applied unchanged; what the federation holds afterwards, per file
    let mut on_federation = BTreeMap::new();
    let mut kinds = BTreeSet::new();
    for f in &files {
        let run = k.run(&["apply", "-f", f]);
        assert_eq!(run.code, Some(0), "apply {f}: {}{}", run.stdout, run.stderr);
        let objs = objects_of(&k, f).unwrap();
        assert!(!objs.is_empty(), "{f}: nothing on the federation");
        for (av, kind, _, _) in &objs {
            kinds.insert((av.clone(), kind.clone()));
        }
        on_federation.insert(f.clone(), objs);
    }
    assert!(kinds.len() >= 20, "the corpus has {} kinds: {kinds:?}", kinds.len());
    assert!(kinds.contains(&("apiextensions.k8s.io/v1".to_string(), "CustomResourceDefinition".to_string())));
    // custom resources of a corpus CRD are placed too (the CRD first, on each member)
    assert!(kinds.contains(&("stable.example.com/v1".to_string(), "Shirt".to_string())), "{kinds:?}");

    // one ClusterPropagationPolicy selecting every kind of the corpus
    let mut policy = String::from("apiVersion: policy.fedctl.io/v1alpha1\nkind: ClusterPropagationPolicy\nmetadata: {name: corpus}\nspec:\n  resourceSelectors:\n");
    for (av, kind) in &kinds {
        policy.push_str(&format!("  - {{apiVersion: {av}, kind: {kind}}}\n"));
    }
    policy.push_str("  placement:\n    clusterAffinity: {clusterNames: [member-a, member-b]}\n    replicaScheduling: {type: Duplicated}\n");
    let run = k.run_with_stdin(&["apply", "-f", "-"], Some(&policy));
    assert_eq!(run.code, Some(0), "{policy}\n{}", run.stderr);

    let reserved = |ns: &str, kind: &str, name: &str| is_reserved_namespace(ns) || (kind == "Namespace" && is_reserved_namespace(name));
    let expected: BTreeMap<&String, BTreeSet<_>> = on_federation.iter().map(|(f, objs)| (f, objs.iter().filter(|(_, kind, ns, name)| !reserved(ns, kind, name)).cloned().collect())).collect();
    let total: usize = expected.values().map(BTreeSet::len).sum();
    let left_out: usize = on_federation.values().map(BTreeSet::len).sum::<usize>() - total;
    assert!(total >= 50 && left_out > 0, "{total} objects to place, {left_out} in kube-system");

    // one Work per object (and one for the `default` Namespace, a template too)
    let want_works: BTreeSet<String> = expected.values().flatten().map(|(_, kind, ns, name)| work_name(kind, Some(ns.as_str()), name)).collect();
    assert_eq!(want_works.len(), total);
    for m in [&a, &b] {
        // every Work of the member applied
        eventually(&fed, &format!("{} applied all {total} Works", m.name), Duration::from_secs(120), || async {
            let (names, pending) = unapplied_works(&admin, &m.name).await?;
            let missing: Vec<&String> = want_works.iter().filter(|w| !names.contains(*w)).collect();
            if missing.is_empty() && pending.is_empty() {
                Ok(())
            } else {
                Err(format!("{} Works, missing {missing:?}, not applied: {pending:#?}\nagent log:\n{}", names.len(), m.agent.log_tail(10)))
            }
        })
        .await;
        // and kubectl on the member shows every object of every file
        let km = Kubectl::new(bin.clone(), "1.33", &m.sim.kubeconfig, &fed.scratch_dir().join(&m.name));
        for (f, want) in &expected {
            let got = objects_of(&km, f).unwrap();
            assert_eq!(&got, want, "{}: kubectl get -f {f}", m.name);
        }
    }
    a.agent.assert_alive();
    b.agent.assert_alive();
}

/// A Work holding a manifest of a kind the member does not serve (a custom resource of a
/// group the member lacks) next to a ConfigMap: the ConfigMap is applied, the Work reports
/// the unknown kind in its status (`Applied=False`, reason `KindNotServed`) and is retried
/// with backoff — a few attempts, not a hot loop, no status rewritten, the agent alive and
/// its cluster Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_of_a_kind_the_member_lacks_is_retried_with_backoff() {
    let etcd = EtcdServer::start_new();
    let fed = FedServer::start(&etcd.endpoint());
    let admin = fed.client();
    let (mut a, _b) = two_members(&fed).await;
    let work = serde_json::json!({
        "apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "gadget-team-g1", "namespace": "fed-exec-member-a"},
        "spec": {"manifests": [
            {"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "team"}, "spec": {"size": 3}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "beside", "namespace": "team"}, "data": {"k": "v"}}
        ]}
    });
    let r = admin.post("/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-a/works", &work).await;
    assert!(r.status == 201 || r.status == 200, "create Work: {} {}", r.status, r.json);
    let path = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-a/works/gadget-team-g1";
    let w = eventually(&fed, "the Work reports the unknown kind", Duration::from_secs(30), || async {
        let w = admin.get(path).await.json;
        let cond = w.pointer("/status/conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == "Applied")).cloned();
        match cond {
            Some(c) if c["status"] == "False" && c["reason"] == "KindNotServed" => Ok(w),
            other => Err(format!("Applied condition {other:?}; agent log:\n{}", a.agent.log_tail(10))),
        }
    })
    .await;
    let started = Instant::now();
    let (status, rv) = (w["status"].clone(), w["metadata"]["resourceVersion"].clone());
    let cond = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Applied").unwrap().clone();
    assert!(cond["message"].as_str().unwrap().contains("example.org/v1 Gadget"), "{cond}");
    let ms = status["manifestStatuses"].as_array().expect("manifestStatuses");
    let gadget = ms.iter().find(|s| s["identifier"]["kind"] == "Gadget").expect("Gadget status");
    assert_eq!(gadget["applied"], false, "{gadget}");
    assert!(gadget["message"].as_str().unwrap().contains("does not serve example.org/v1 Gadget"), "{gadget}");
    let cm = ms.iter().find(|s| s["identifier"]["kind"] == "ConfigMap").expect("ConfigMap status");
    assert_eq!(cm["applied"], true, "{cm}");
    assert_eq!(a.get("/api/v1/namespaces/team/configmaps/beside").await.0, 200, "the other manifest is applied");

    // retried with backoff: after ~10 s, a handful of attempts (250 ms doubling), not a
    // hot loop; the agent is alive and the cluster Ready
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(started.elapsed())).await;
    let attempts = a.agent.log().lines().filter(|l| l.contains("reconcile failed") && l.contains("gadget-team-g1")).count();
    assert!((2..=12).contains(&attempts), "{attempts} failed reconciles in ~10 s:\n{}", a.agent.log_tail(30));
    a.agent.assert_alive();
    assert_eq!(ready(&admin, "member-a").await, "True");

    // the retries write nothing new: the Work's status (and resourceVersion) stays as it was
    let w = admin.get(path).await.json;
    assert_eq!(w["status"], status, "status unchanged by the retries");
    assert_eq!(w["metadata"]["resourceVersion"], rv, "no write of the Work during the retries");
    a.agent.assert_alive();
}

/// The images of the Running pods labelled `app=<app>` in `ns` on `m`, sorted and deduplicated.
async fn pod_images(m: &Member, ns: &str, app: &str) -> Vec<String> {
    let (_, list) = m.get(&format!("/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{app}")).await;
    let mut out: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"]["phase"] == "Running" && p.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null))
        .flat_map(|p| p["spec"]["containers"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

const OVERRIDE_WEB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: edge}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: edge}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "docker.io/library/nginx:1.27"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: edge, annotations: {legacy: "yes"}}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: "registry.k8s.io/api:2", command: ["/api"], args: ["--debug", "--port=8080"]}]
---
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: edge}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement: {replicaScheduling: {type: Duplicated}}
---
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: edge}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  placement:
    replicaScheduling:
      type: Divided
      weights: [{cluster: member-a, weight: 1}, {cluster: member-b, weight: 1}, {cluster: member-c, weight: 1}]
---
apiVersion: policy.fedctl.io/v1alpha1
kind: OverridePolicy
metadata: {name: api-on-c, namespace: edge}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  overrideRules:
  - targetCluster: {clusterNames: [member-c]}
    overriders:
      plaintext: [{path: /spec/replicas, operator: replace, value: 3}]
      labelsOverrider: [{operator: add, value: {tier: edge}}]
      annotationsOverrider: [{operator: remove, value: {legacy: ""}}]
      commandOverrider: [{containerName: api, operator: add, value: ["--region=eu"]}]
      argsOverrider: [{containerName: api, operator: remove, value: ["--debug"]}]
"#;

fn zone2_mirror(registry: &str) -> String {
    format!(
        r#"
apiVersion: policy.fedctl.io/v1alpha1
kind: ClusterOverridePolicy
metadata: {{name: zone-2-mirror}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, namespace: edge, name: web}}]
  overrideRules:
  - targetCluster: {{zones: [zone-2]}}
    overriders:
      imageOverrider: [{{component: Registry, operator: replace, value: {registry}}}]
"#
    )
}

const DEPS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: deps}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: deps}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: deps}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Secret
metadata: {name: pull, namespace: deps}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths":{}}'}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web-sa, namespace: deps}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: deps}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      serviceAccountName: web-sa
      imagePullSecrets: [{name: pull}]
      volumes: [{name: config, configMap: {name: web-config}}]
      containers:
      - name: web
        image: nginx:1.27
        env: [{name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: db, key: password}}}]
        volumeMounts: [{name: config, mountPath: /etc/web}]
"#;

fn deps_policy(cluster: &str) -> String {
    format!(
        r#"
apiVersion: policy.fedctl.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: deps}}
spec:
  propagateDeps: true
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement: {{clusterAffinity: {{clusterNames: [{cluster}]}}}}
"#
    )
}

/// Which of the four dependencies of `deps/web` are on `m`.
async fn deps_on(m: &Member) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (what, path) in [
        ("configmap", "/api/v1/namespaces/deps/configmaps/web-config"),
        ("secret", "/api/v1/namespaces/deps/secrets/db"),
        ("pull-secret", "/api/v1/namespaces/deps/secrets/pull"),
        ("serviceaccount", "/api/v1/namespaces/deps/serviceaccounts/web-sa"),
    ] {
        if m.get(path).await.0 == 200 {
            out.push(what);
        }
    }
    out
}

/// Issue 20's checks through three fedsims in three zones with their agents: an image
/// registry per zone (set, edited, removed); replicas, labels, annotations, command and args
/// overridden on one member after Divided scheduling; a Deployment's ConfigMap, Secrets and
/// ServiceAccount following it (`propagateDeps`) when placed, moved and deleted; a Namespace
/// on every member and on one that joins later, an opted-out one nowhere, deletion
/// propagated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_dependencies_and_namespaces_on_fedsims() {
    let bin = find_kubectl("1.33").or_else(|| find_kubectl("1.27")).unwrap_or_else(|| "kubectl".into());
    let etcd = EtcdServer::start_new();
    let fed = FedServer::start(&etcd.endpoint());
    let admin = fed.client();
    let k = Kubectl::new(bin, "1.33", &fed.kubeconfig(), &fed.scratch_dir());
    let sim = |seed: &'static str| ["--nodes", "2", "--pods-per-node", "4", "--namespaces", "1", "--seed", seed];
    let opts = |zone: &'static str| JoinOptions { labels: "env=prod", zone, region: "region-1", heartbeat: 1 };
    let a = Member::start(&fed, "member-a", &sim("1"), &opts("zone-1"));
    let b = Member::start(&fed, "member-b", &sim("2"), &opts("zone-2"));
    let c = Member::start(&fed, "member-c", &sim("3"), &opts("zone-3"));
    wait_ready(&fed, &admin, &[&a, &b, &c]).await;

    // --- an image registry per zone: member-b (zone-2) pulls from the mirror
    apply(&k, OVERRIDE_WEB);
    apply(&k, &zone2_mirror("mirror.example.com"));
    let images = |want: [&'static str; 3]| {
        let (a, b, c) = (&a, &b, &c);
        async move {
            let got = [pod_images(a, "edge", "web").await, pod_images(b, "edge", "web").await, pod_images(c, "edge", "web").await];
            let want = want.map(|w| vec![w.to_string()]);
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        }
    };
    let plain = "docker.io/library/nginx:1.27";
    eventually(&fed, "zone-2's pods from the mirror", Duration::from_secs(40), || images([plain, "mirror.example.com/library/nginx:1.27", plain])).await;
    apply(&k, &zone2_mirror("eu.mirror.example.com"));
    eventually(&fed, "the edited rule on member-b", Duration::from_secs(40), || images([plain, "eu.mirror.example.com/library/nginx:1.27", plain])).await;
    // the template shows which member got which override
    let t = admin.get("/apis/apps/v1/namespaces/edge/deployments/web").await.ok().clone();
    let bd: Value = serde_json::from_str(t["metadata"]["annotations"]["fedctl.io/cluster-status"].as_str().unwrap()).unwrap();
    assert_eq!(bd["member-b"]["overrides"], serde_json::json!(["ClusterOverridePolicy/zone-2-mirror"]), "{bd}");
    assert!(bd["member-a"].get("overrides").is_none() && bd["member-c"].get("overrides").is_none(), "{bd}");
    // and `kubectl describe` on the federation tells the story in Events
    eventually(&fed, "describe shows the placement and the overrides", Duration::from_secs(20), || async {
        let run = k.run(&["describe", "deploy", "web", "-n", "edge"]);
        let out = run.stdout;
        let want = ["Scheduled", "placed on member-a (1), member-b (1), member-c (1) (PropagationPolicy edge/web)", "Overridden", "member-b: ClusterOverridePolicy/zone-2-mirror"];
        // members applied in one reconcile share one `Applied` event: `applied on member-a, member-b, …`
        let applied_b = out.lines().any(|l| l.contains("Applied") && l.split_once("applied on ").is_some_and(|(_, who)| who.split(", ").any(|m| m.trim() == "member-b")));
        match want.iter().find(|w| !out.contains(**w)) {
            None if applied_b => Ok(()),
            None => Err(format!("no Applied event names member-b in:\n{out}{}", run.stderr)),
            Some(missing) => Err(format!("{missing:?} missing from:\n{out}{}", run.stderr)),
        }
    })
    .await;
    let run = k.run(&["delete", "clusteroverridepolicy", "zone-2-mirror"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    eventually(&fed, "back to the template's image", Duration::from_secs(40), || images([plain, plain, plain])).await;

    // --- replicas, labels, annotations, command and args on member-c only, after division
    member_deployment(&fed, &a, "edge", "api", Some(2)).await;
    member_deployment(&fed, &b, "edge", "api", Some(2)).await;
    member_deployment(&fed, &c, "edge", "api", Some(3)).await;
    for m in [&a, &b, &c] {
        let (_, d) = m.get("/apis/apps/v1/namespaces/edge/deployments/api").await;
        let container = &d["spec"]["template"]["spec"]["containers"][0];
        let on_c = m.name == "member-c";
        assert_eq!(d["metadata"]["labels"]["tier"] == "edge", on_c, "{}: labels {}", m.name, d["metadata"]["labels"]);
        assert_eq!(d.pointer("/metadata/annotations/legacy").is_none(), on_c, "{}: annotations {}", m.name, d["metadata"]["annotations"]);
        let (command, args) =
            if on_c { (serde_json::json!(["/api", "--region=eu"]), serde_json::json!(["--port=8080"])) } else { (serde_json::json!(["/api"]), serde_json::json!(["--debug", "--port=8080"])) };
        assert_eq!((&container["command"], &container["args"]), (&command, &args), "{}", m.name);
    }
    let t = admin.get("/apis/apps/v1/namespaces/edge/deployments/api").await.ok().clone();
    let bd: Value = serde_json::from_str(t["metadata"]["annotations"]["fedctl.io/cluster-status"].as_str().unwrap()).unwrap();
    assert_eq!((&bd["member-c"]["share"], &bd["member-c"]["overrides"]), (&serde_json::json!(2), &serde_json::json!(["OverridePolicy/api-on-c"])), "{bd}");

    // --- propagateDeps: the four dependencies go exactly where the workload goes
    apply(&k, DEPS);
    apply(&k, &deps_policy("member-a"));
    member_deployment(&fed, &a, "deps", "web", Some(1)).await;
    let all = vec!["configmap", "secret", "pull-secret", "serviceaccount"];
    eventually(&fed, "dependencies on member-a only", Duration::from_secs(30), || async {
        let got = (deps_on(&a).await, deps_on(&b).await, deps_on(&c).await);
        if got == (all.clone(), vec![], vec![]) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    apply(&k, &deps_policy("member-b"));
    member_deployment(&fed, &b, "deps", "web", Some(1)).await;
    eventually(&fed, "dependencies moved to member-b", Duration::from_secs(30), || async {
        let got = (deps_on(&a).await, deps_on(&b).await, deps_on(&c).await);
        if got == (vec![], all.clone(), vec![]) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    let run = k.run(&["delete", "deploy", "web", "-n", "deps"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    eventually(&fed, "dependencies removed with the workload", Duration::from_secs(30), || async {
        let got = (deps_on(&a).await, deps_on(&b).await, deps_on(&c).await);
        if got == (vec![], vec![], vec![]) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;

    // --- Namespaces everywhere, also on a member that joins afterwards; opted out: nowhere
    apply(&k, "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: private, labels: {fedctl.io/skip-auto-propagation: \"true\"}}\n");
    for m in [&a, &b, &c] {
        eventually(&fed, &format!("namespace team on {}", m.name), Duration::from_secs(30), || async {
            match m.get("/api/v1/namespaces/team").await.0 {
                200 => Ok(()),
                code => Err(format!("HTTP {code}")),
            }
        })
        .await;
        assert_eq!(m.get("/api/v1/namespaces/private").await.0, 404, "{}: opted-out namespace propagated", m.name);
    }
    let d = Member::start(&fed, "member-d", &sim("4"), &opts("zone-1"));
    eventually(&fed, "member-d Ready with namespace team", Duration::from_secs(60), || async {
        match (ready(&admin, "member-d").await.as_str(), d.get("/api/v1/namespaces/team").await.0) {
            ("True", 200) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(d.get("/api/v1/namespaces/private").await.0, 404);
    let run = k.run(&["delete", "ns", "team", "--wait=false"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for m in [&a, &b, &c, &d] {
        eventually(&fed, &format!("namespace team deleted on {}", m.name), Duration::from_secs(40), || async {
            match m.get("/api/v1/namespaces/team").await {
                (404, _) => Ok(()),
                (code, ns) => Err(format!("HTTP {code} {}", ns["status"])),
            }
        })
        .await;
    }
}
