//! The controller end to end on the memory store (no processes): placement, idempotency, status.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::api::{ApiConfig, Registry};
use crate::storage::memory::MemoryStorage;
use crate::storage::Storage;

struct Env {
    api: Arc<ApiServer>,
    ctrl: Arc<Controller>,
    ctx: Ctx,
}

fn rr_for(api: &ApiServer, obj: &Value, sub: Option<&str>) -> ResourceRequest {
    let info = api.registry.by_kind(obj["apiVersion"].as_str().unwrap(), obj["kind"].as_str().unwrap()).expect("served kind");
    ResourceRequest {
        namespace: if info.namespaced { meta_str(obj, "namespace").map(str::to_string) } else { None },
        name: meta_str(obj, "name").map(str::to_string),
        subresource: sub.map(str::to_string),
        watch_path: false,
        info,
    }
}

impl Env {
    async fn new() -> Env {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let api = ApiServer::new(Registry::federation(), store, ApiConfig::default());
        let ctrl = start(api.clone(), Config { failover_window: Duration::from_secs(2), failover_limit: 1, ..Config::default() }).unwrap();
        let ctx = Ctx { caller: Caller { user: "admin".into(), groups: vec![] }, manager: "test".into(), ..Default::default() };
        Env { api, ctrl, ctx }
    }

    async fn create(&self, obj: Value) -> Value {
        let mut rr = rr_for(&self.api, &obj, None);
        rr.name = None;
        self.api.create(&rr, obj, &self.ctx).await.expect("create")
    }

    async fn update(&self, obj: &Value, f: impl Fn(&mut Value) + Send + Sync + 'static) -> Value {
        let rr = rr_for(&self.api, obj, None);
        let name = rr.name.clone().unwrap();
        self.api
            .guaranteed_update(&rr, &name, None, &self.ctx, move |cur| {
                let mut n = cur.clone();
                f(&mut n);
                Ok(n)
            })
            .await
            .expect("update")
    }

    async fn set_status(&self, obj: &Value, status: Value) {
        let rr = rr_for(&self.api, obj, Some("status"));
        let name = rr.name.clone().unwrap();
        self.api
            .guaranteed_update(&rr, &name, None, &self.ctx, move |cur| {
                let mut n = cur.clone();
                n["status"] = status.clone();
                Ok(n)
            })
            .await
            .expect("status");
    }

    async fn get(&self, obj: &Value) -> Option<Value> {
        self.api.get(&rr_for(&self.api, obj, None)).await.ok()
    }

    async fn namespace(&self, name: &str) {
        self.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
    }

    async fn cluster(&self, name: &str, labels: Value) -> Value {
        self.namespace(&format!("fed-exec-{name}")).await;
        let c = self.create(json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name, "labels": labels}, "spec": {}})).await;
        self.set_status(&c, ready_status(true)).await;
        c
    }

    /// Works of the template `kind/ns/name`: `cluster → replicas` (`-1` when not divisible).
    /// First releases the finalizer of every Work being deleted, as the members' agents do
    /// once they have removed its objects (Works are created with it).
    async fn works(&self, kind: &str, ns: &str, name: &str) -> BTreeMap<String, i64> {
        let info = self.api.registry.lookup("work.fedctl.io", "v1alpha1", "works").unwrap();
        let rr = ResourceRequest { info: info.clone(), namespace: None, name: None, subresource: None, watch_path: false };
        let list = self.api.list(&rr, &crate::api::request::Query::default()).await.unwrap().into_items();
        for w in list.iter().filter(|w| terminating(w)) {
            let name = meta_str(w, "name").unwrap().to_string();
            let one = ResourceRequest { info: info.clone(), namespace: meta_str(w, "namespace").map(str::to_string), name: Some(name.clone()), subresource: None, watch_path: false };
            let r = self
                .api
                .guaranteed_update(&one, &name, None, &self.ctx, |cur| {
                    let mut n = cur.clone();
                    let kept: Vec<String> = crate::api::object::finalizers(cur).into_iter().filter(|f| f != crate::api::federation::WORK_FINALIZER).collect();
                    meta_mut(&mut n).insert("finalizers".into(), json!(kept));
                    Ok(n)
                })
                .await;
            assert!(matches!(r, Ok(_) | Err(ApiError::NotFound { .. })), "releasing {name}: {r:?}");
        }
        list.iter()
            .filter(|w| w["metadata"]["labels"][work::LABEL_KIND] == kind && w["metadata"]["labels"][work::LABEL_NAMESPACE] == ns && w["metadata"]["labels"][work::LABEL_NAME] == name)
            .filter(|w| !terminating(w))
            .map(|w| {
                let c = crate::api::federation::cluster_of_exec_namespace(meta_str(w, "namespace").unwrap()).unwrap().to_string();
                (c, w.pointer("/spec/manifests/0").and_then(work::replicas_of).unwrap_or(-1))
            })
            .collect()
    }

    async fn wait_works(&self, kind: &str, ns: &str, name: &str, want: &[(&str, i64)]) {
        let want: BTreeMap<String, i64> = want.iter().map(|(c, n)| (c.to_string(), *n)).collect();
        let mut got = BTreeMap::new();
        for _ in 0..300 {
            got = self.works(kind, ns, name).await;
            if got == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("works of {kind} {ns}/{name}: got {got:?}, want {want:?}");
    }

    async fn settle(&self) {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.ctrl.queue_len() == 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if self.ctrl.queue_len() == 0 {
                    return;
                }
            }
        }
    }
}

fn ready_status(ready: bool) -> Value {
    json!({"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": crate::api::object::now_rfc3339()}]})
}

fn quickstart() -> Vec<Value> {
    include_str!("../../../testdata/manifests/quickstart.yaml").split("\n---").filter_map(|d| serde_yaml::from_str::<Value>(d).ok()).filter(|v| v.is_object()).collect()
}

#[tokio::test]
async fn quickstart_divides_rescales_and_is_idempotent() {
    let env = Env::new().await;
    env.cluster("member-a", json!({})).await;
    env.cluster("member-b", json!({})).await;
    let docs = quickstart();
    for d in &docs {
        env.create(d.clone()).await;
    }
    env.wait_works("Deployment", "shop", "web", &[("member-a", 4), ("member-b", 2)]).await;
    env.settle().await;
    let deploy = env.get(&docs[1]).await.unwrap();
    assert_eq!(deploy["metadata"]["annotations"][work::ANNOTATION_POLICY_NAME], "web");
    assert_eq!(deploy["metadata"]["annotations"][work::ANNOTATION_POLICY_NAMESPACE], "shop");
    assert_eq!(deploy["status"]["observedGeneration"], 1);

    // a re-run writes nothing
    let rev = env.api.store.current_revision().await.unwrap();
    let key = TemplateKey::of(&docs[1]).unwrap();
    env.ctrl.reconcile(&key).await.unwrap();
    env.ctrl.reconcile(&key).await.unwrap();
    env.settle().await;
    assert_eq!(env.api.store.current_revision().await.unwrap(), rev, "idle reconciles wrote");

    env.update(&docs[1], |d| d["spec"]["replicas"] = json!(9)).await;
    env.wait_works("Deployment", "shop", "web", &[("member-a", 6), ("member-b", 3)]).await;

    // no policy selects the namespace: it goes to every member (auto-propagation)
    env.wait_works("Namespace", "", "shop", &[("member-a", -1), ("member-b", -1)]).await;

    env.api.delete(&rr_for(&env.api, &docs[1], None), &json!({}), &env.ctx).await.unwrap();
    env.wait_works("Deployment", "shop", "web", &[]).await;
}

#[tokio::test]
async fn status_is_summed_and_broken_down() {
    let env = Env::new().await;
    env.cluster("member-a", json!({})).await;
    env.cluster("member-b", json!({})).await;
    let docs = quickstart();
    for d in &docs {
        env.create(d.clone()).await;
    }
    env.wait_works("Deployment", "shop", "web", &[("member-a", 4), ("member-b", 2)]).await;
    for (c, n) in [("member-a", 4), ("member-b", 2)] {
        let w = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "deployment-shop-web", "namespace": format!("fed-exec-{c}")}});
        env.set_status(
            &w,
            json!({"manifestStatuses": [{"identifier": {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web"},
            "applied": true, "status": {"replicas": n, "readyReplicas": n, "availableReplicas": n, "updatedReplicas": n}}]}),
        )
        .await;
    }
    let mut last = Value::Null;
    for _ in 0..300 {
        last = env.get(&docs[1]).await.unwrap();
        if last["status"]["readyReplicas"] == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(last["status"], json!({"replicas": 6, "updatedReplicas": 6, "readyReplicas": 6, "availableReplicas": 6, "observedGeneration": 1}));
    env.settle().await;
    let last = env.get(&docs[1]).await.unwrap();
    let bd: Value = serde_json::from_str(last["metadata"]["annotations"][work::ANNOTATION_CLUSTER_STATUS].as_str().unwrap()).unwrap();
    assert_eq!(bd["member-a"]["readyReplicas"], 4);
    assert_eq!(bd["member-b"]["applied"], true);
    // the breakdown is not sent to members
    let w = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "deployment-shop-web", "namespace": "fed-exec-member-a"}});
    let w = env.get(&w).await.unwrap();
    assert!(w["spec"]["manifests"][0]["metadata"].get("annotations").is_none(), "{w}");
}

#[tokio::test]
async fn labels_readiness_and_policy_removal() {
    let env = Env::new().await;
    env.namespace("app").await;
    let a = env.cluster("a", json!({"env": "prod"})).await;
    env.cluster("b", json!({"env": "prod"})).await;
    let c = env.cluster("c", json!({})).await;
    let pol = env
        .create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterPropagationPolicy", "metadata": {"name": "prod"},
            "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "app"}],
                "placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}}}}))
        .await;
    env.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "app"}, "data": {"k": "v"}})).await;
    env.wait_works("ConfigMap", "app", "cfg", &[("a", -1), ("b", -1)]).await;
    env.update(&c, |c| c["metadata"]["labels"] = json!({"env": "prod"})).await;
    env.wait_works("ConfigMap", "app", "cfg", &[("a", -1), ("b", -1), ("c", -1)]).await;
    // NotReady: kept; a new template does not go there
    env.set_status(&a, ready_status(false)).await;
    env.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg2", "namespace": "app"}})).await;
    env.wait_works("ConfigMap", "app", "cfg2", &[("b", -1), ("c", -1)]).await;
    env.settle().await;
    assert_eq!(env.works("ConfigMap", "app", "cfg").await.len(), 3);
    env.update(&c, |c| c["metadata"]["labels"] = json!({})).await;
    env.wait_works("ConfigMap", "app", "cfg", &[("a", -1), ("b", -1)]).await;
    // the policy goes: so do the Works and the annotations
    env.api.delete(&rr_for(&env.api, &pol, None), &json!({}), &env.ctx).await.unwrap();
    env.wait_works("ConfigMap", "app", "cfg", &[]).await;
    env.settle().await;
    let cm = env.get(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "app"}})).await.unwrap();
    assert!(cm["metadata"].get("annotations").is_none(), "{cm}");
}

#[test]
fn event_filters_ignore_only_controller_written_fields() {
    let t = json!({"kind": "Deployment", "metadata": {"name": "w", "resourceVersion": "1", "annotations": {"a": "1"}}, "spec": {"replicas": 1}});
    let mut t2 = t.clone();
    t2["metadata"]["resourceVersion"] = json!("2");
    t2["metadata"]["managedFields"] = json!([{"manager": "x"}]);
    t2["metadata"]["annotations"][work::ANNOTATION_CLUSTER_STATUS] = json!("{}");
    t2["status"] = json!({"readyReplicas": 1});
    assert!(template_unchanged(&t, &t2));
    assert!(!work_unchanged(&t, &t2));
    let mut t3 = t2.clone();
    t3["metadata"]["annotations"][work::ANNOTATION_POLICY_NAME] = json!("p");
    assert!(!template_unchanged(&t2, &t3));
    let mut t4 = t2.clone();
    t4["spec"]["replicas"] = json!(2);
    assert!(!template_unchanged(&t2, &t4));
    let mut t5 = t2.clone();
    t5["metadata"]["labels"] = json!({"x": "y"});
    assert!(!template_unchanged(&t2, &t5));
    let mut w = t.clone();
    w["metadata"]["resourceVersion"] = json!("9");
    assert!(work_unchanged(&t, &w));
}

async fn zoned_cluster(env: &Env, name: &str, zone: &str) {
    env.namespace(&format!("fed-exec-{name}")).await;
    let c = env.create(json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"zone": zone}})).await;
    env.set_status(&c, ready_status(true)).await;
}

async fn work_of(env: &Env, cluster: &str, name: &str) -> Option<Value> {
    let info = env.api.registry.lookup("work.fedctl.io", "v1alpha1", "works").unwrap();
    let rr = ResourceRequest { info, namespace: Some(format!("fed-exec-{cluster}")), name: Some(name.into()), subresource: None, watch_path: false };
    env.api.get(&rr).await.ok().filter(|w| !terminating(w))
}

/// Polls `f` over the store until it holds (3 s at most).
async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut last = String::new();
    for _ in 0..300 {
        match f().await {
            Ok(()) => return,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: {last}");
}

fn web(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "docker.io/library/nginx:1.25"}]}}}})
}

#[tokio::test]
async fn overrides_render_per_member_follow_edits_and_report_failures() {
    let env = Env::new().await;
    for (c, z) in [("a", "zone-1"), ("b", "zone-2"), ("c", "zone-2")] {
        zoned_cluster(&env, c, z).await;
    }
    env.namespace("shop").await;
    env.create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "placement": {"replicaScheduling": {"type": "Divided"}}}}))
        .await;
    let op = env
        .create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "OverridePolicy", "metadata": {"name": "mirror", "namespace": "shop"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "overrideRules": [
            {"targetCluster": {"zones": ["zone-2"]}, "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "mirror.example.com"}]}},
            {"targetCluster": {"clusterNames": ["c"]}, "overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 5}]}}]}}))
        .await;
    let d = env.create(web(6)).await;
    let image = |w: &Value| w.pointer("/spec/manifests/0/spec/template/spec/containers/0/image").and_then(Value::as_str).unwrap_or("").to_string();
    until("zone-2 images from the mirror, c's replicas replaced after division", || async {
        let (a, b, c) = (work_of(&env, "a", "deployment-shop-web").await, work_of(&env, "b", "deployment-shop-web").await, work_of(&env, "c", "deployment-shop-web").await);
        let (Some(a), Some(b), Some(c)) = (a, b, c) else { return Err("Works missing".into()) };
        let got = (image(&a), image(&b), image(&c), c["spec"]["manifests"][0]["spec"]["replicas"].clone(), c["metadata"]["annotations"][work::ANNOTATION_SHARE].clone());
        let want = ("docker.io/library/nginx:1.25".to_string(), "mirror.example.com/library/nginx:1.25".to_string(), "mirror.example.com/library/nginx:1.25".to_string(), json!(5), json!("2"));
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    env.settle().await;
    let t = env.get(&d).await.unwrap();
    let bd: Value = serde_json::from_str(t["metadata"]["annotations"][work::ANNOTATION_CLUSTER_STATUS].as_str().unwrap()).unwrap();
    assert!(bd["a"].get("overrides").is_none(), "{bd}");
    assert_eq!(bd["b"]["overrides"], json!(["OverridePolicy/mirror"]));
    assert_eq!(bd["c"]["share"], 2);
    let wa = work_of(&env, "a", "deployment-shop-web").await.unwrap();
    assert!(wa["metadata"]["annotations"].get(work::ANNOTATION_APPLIED_OVERRIDES).is_none());
    assert_eq!(work_of(&env, "b", "deployment-shop-web").await.unwrap()["metadata"]["annotations"][work::ANNOTATION_APPLIED_OVERRIDES], "[\"OverridePolicy/mirror\"]");

    // edit the rule: the members' Works change; a rule that cannot apply is reported, not applied
    env.update(&op, |p| {
        p["spec"]["overrideRules"][0]["overriders"]["imageOverrider"][0]["value"] = json!("eu.mirror.example.com");
        p["spec"]["overrideRules"][1]["overriders"]["plaintext"][0]["path"] = json!("/spec/paused");
    })
    .await;
    until("edited rule re-rendered, the failing one reported", || async {
        let b = work_of(&env, "b", "deployment-shop-web").await.ok_or("no Work")?;
        let c = work_of(&env, "c", "deployment-shop-web").await.ok_or("no Work")?;
        let errs = c["metadata"]["annotations"][work::ANNOTATION_OVERRIDE_ERRORS].as_str().unwrap_or("").to_string();
        let ok = image(&b) == "eu.mirror.example.com/library/nginx:1.25" && c["spec"]["manifests"][0]["spec"]["replicas"] == 2 && errs.contains("path /spec/paused does not exist");
        if ok {
            Ok(())
        } else {
            Err(format!("{} / {} / {errs}", image(&b), c["spec"]["manifests"][0]["spec"]["replicas"]))
        }
    })
    .await;
    until("failure on the template's placement status", || async {
        let t = env.get(&d).await.unwrap();
        let bd: Value = serde_json::from_str(t["metadata"]["annotations"][work::ANNOTATION_CLUSTER_STATUS].as_str().unwrap_or("{}")).unwrap();
        let e = bd["c"]["overrideErrors"][0].as_str().unwrap_or("");
        if e.starts_with("OverridePolicy/mirror rule 1: plaintext[0] replace /spec/paused") {
            Ok(())
        } else {
            Err(bd.to_string())
        }
    })
    .await;

    // delete it: back to the template as it is
    env.api.delete(&rr_for(&env.api, &op, None), &json!({}), &env.ctx).await.unwrap();
    until("overrides gone", || async {
        for c in ["a", "b", "c"] {
            let w = work_of(&env, c, "deployment-shop-web").await.ok_or("no Work")?;
            let ann = &w["metadata"]["annotations"];
            if image(&w) != "docker.io/library/nginx:1.25" || ann.get(work::ANNOTATION_OVERRIDE_ERRORS).is_some() || ann.get(work::ANNOTATION_APPLIED_OVERRIDES).is_some() {
                return Err(format!("{c}: {w}"));
            }
        }
        Ok(())
    })
    .await;
}

#[tokio::test]
async fn dependencies_follow_their_workload() {
    let env = Env::new().await;
    for c in ["a", "b"] {
        zoned_cluster(&env, c, "z").await;
    }
    env.namespace("shop").await;
    for obj in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "shop"}, "stringData": {"p": "x"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "web-sa", "namespace": "shop"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated", "namespace": "shop"}}),
    ] {
        env.create(obj).await;
    }
    let pp = env
        .create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"propagateDeps": true, "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}], "placement": {"clusterAffinity": {"clusterNames": ["a"]}}}}))
        .await;
    let mut d = web(1);
    d["spec"]["template"]["spec"]["serviceAccountName"] = json!("web-sa");
    d["spec"]["template"]["spec"]["volumes"] = json!([{"name": "c", "configMap": {"name": "cfg"}}]);
    d["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}]);
    let d = env.create(d).await;
    env.wait_works("Deployment", "shop", "web", &[("a", 1)]).await;
    env.wait_works("ConfigMap", "shop", "cfg", &[("a", -1)]).await;
    env.wait_works("Secret", "shop", "db", &[("a", -1)]).await;
    env.wait_works("ServiceAccount", "shop", "web-sa", &[("a", -1)]).await;
    env.settle().await;
    assert!(env.works("ConfigMap", "shop", "unrelated").await.is_empty());
    // the workload moves: they move with it
    env.update(&pp, |p| p["spec"]["placement"]["clusterAffinity"]["clusterNames"] = json!(["b"])).await;
    env.wait_works("Deployment", "shop", "web", &[("b", 1)]).await;
    env.wait_works("ConfigMap", "shop", "cfg", &[("b", -1)]).await;
    env.wait_works("Secret", "shop", "db", &[("b", -1)]).await;
    // no longer referenced: removed
    env.update(&d, |d| d["spec"]["template"]["spec"]["volumes"] = json!([])).await;
    env.wait_works("ConfigMap", "shop", "cfg", &[]).await;
    // a policy of its own places a dependency regardless
    env.create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "sa", "namespace": "shop"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ServiceAccount", "name": "web-sa"}], "placement": {}}}))
        .await;
    env.wait_works("ServiceAccount", "shop", "web-sa", &[("a", -1), ("b", -1)]).await;
    // the workload goes: its dependencies go, the one with its own policy stays
    env.api.delete(&rr_for(&env.api, &d, None), &json!({}), &env.ctx).await.unwrap();
    env.wait_works("Secret", "shop", "db", &[]).await;
    env.settle().await;
    assert_eq!(env.works("ServiceAccount", "shop", "web-sa").await.len(), 2);
}

#[tokio::test]
async fn namespaces_go_everywhere_unless_opted_out() {
    let env = Env::new().await;
    for c in ["a", "b"] {
        zoned_cluster(&env, c, "z").await;
    }
    let team = env.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})).await;
    env.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "private", "labels": {namespaces::LABEL_SKIP_AUTO_PROPAGATION: "true"}}})).await;
    env.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-extra"}})).await;
    env.wait_works("Namespace", "", "team", &[("a", -1), ("b", -1)]).await;
    // a member that joins later gets it
    zoned_cluster(&env, "c", "z").await;
    env.wait_works("Namespace", "", "team", &[("a", -1), ("b", -1), ("c", -1)]).await;
    env.settle().await;
    assert!(env.works("Namespace", "", "private").await.is_empty());
    assert!(env.works("Namespace", "", "kube-extra").await.is_empty());
    assert!(env.works("Namespace", "", "default").await.is_empty());
    // a ClusterPropagationPolicy selecting it takes precedence
    let cpp = env
        .create(json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterPropagationPolicy", "metadata": {"name": "team"},
            "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace", "name": "team"}], "placement": {"clusterAffinity": {"clusterNames": ["a"]}}}}))
        .await;
    env.wait_works("Namespace", "", "team", &[("a", -1)]).await;
    env.api.delete(&rr_for(&env.api, &cpp, None), &json!({}), &env.ctx).await.unwrap();
    env.wait_works("Namespace", "", "team", &[("a", -1), ("b", -1), ("c", -1)]).await;
    // opting out later leaves the member namespaces in place (orphaned Works)
    env.update(&team, |n| n["metadata"]["labels"] = json!({namespaces::LABEL_SKIP_AUTO_PROPAGATION: "true"})).await;
    until("Works of an opted-out namespace orphaned", || async {
        let w = work_of(&env, "b", "namespace-team").await;
        match w {
            None => Ok(()),
            Some(w) => Err(w.to_string()),
        }
    })
    .await;
}

/// A member joining (its Cluster and exec namespace created) requeues the placed templates
/// and the Namespaces that go to every member, not every Namespace: with N members the
/// exec namespaces are N templates that never propagate, and requeueing each on every join
/// made a join cost O(N) reconciles (O(N²) for N joins).
#[tokio::test]
async fn a_join_does_not_requeue_namespaces_that_never_propagate() {
    let env = Env::new().await;
    for i in 0..30 {
        env.cluster(&format!("m{i:02}"), json!({})).await;
    }
    env.namespace("team").await;
    env.settle().await;
    let before = env.ctrl.reconcile_count();
    env.cluster("late", json!({})).await;
    let members: Vec<String> = (0..30).map(|i| format!("m{i:02}")).chain(["late".to_string()]).collect();
    env.wait_works("Namespace", "", "team", &members.iter().map(|c| (c.as_str(), -1)).collect::<Vec<_>>()).await;
    env.settle().await;
    let reconciles = env.ctrl.reconcile_count() - before;
    // the new exec namespace and `team`, each a few times (namespace added, cluster added,
    // cluster Ready); not the 30 exec namespaces already there
    assert!(reconciles < 15, "{reconciles} reconciles for one join of 31 members");
}

/// A Cluster status report that changes nothing placement reads (here the version) keeps the
/// placement views; a label change makes them be built again.
#[tokio::test]
async fn status_reports_placement_does_not_read_keep_the_cluster_views() {
    let env = Env::new().await;
    let c = env.cluster("m1", json!({"tier": "a"})).await;
    let seen = |f: &dyn Fn(&Value) -> bool| env.ctrl.clusters.get(None, "m1").is_some_and(|v| f(&v));
    for _ in 0..300 {
        if seen(&|v| v["status"]["conditions"][0]["status"] == "True") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = env.ctrl.clusters_changed.load(Ordering::SeqCst);
    let mut st = ready_status(true);
    st["kubernetesVersion"] = json!("v1.30.1");
    st["conditions"][0]["lastHeartbeatTime"] = json!(crate::api::object::now_rfc3339());
    env.set_status(&c, st).await;
    for _ in 0..300 {
        if seen(&|v| v["status"]["kubernetesVersion"] == "v1.30.1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen(&|v| v["status"]["kubernetesVersion"] == "v1.30.1"), "the informer never saw the report");
    // the handler runs right after the informer stores the change
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(env.ctrl.clusters_changed.load(Ordering::SeqCst), before, "a status report without placement changes rebuilt the views");
    env.update(&c, |n| n["metadata"]["labels"]["tier"] = json!("b")).await;
    for _ in 0..300 {
        if env.ctrl.clusters_changed.load(Ordering::SeqCst) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("a label change did not mark the views stale");
}
