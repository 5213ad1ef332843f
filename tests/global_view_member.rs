//! The global view's member path end to end: real etcd, a real `fedctl server`, two fedsim
//! members joined with `fedctl join` and running their `fedctl agent`s (which set up the
//! member credential that may only read and impersonate), kubectl 1.27 and 1.33.
//!
//! Writes through `--context global` (label, annotate, patch of three types, scale, edit,
//! delete) land on the member holding the object only; a user of the view the member does
//! not authorize gets the member's 403 and nothing changes, and once the member's RBAC
//! grants it the same request succeeds; a user the federation grants nothing is refused by it before any member is asked. Kinds the
//! view caches by default and others (fan-out) are listed across both members with the
//! CLUSTER column; with one member paused the fan-out answers with the other and a warning
//! naming it. `describe` shows the member's events for a pod. Logs stream through the view (`--tail`, `--timestamps`, `-c`, `--previous`,
//! `-f` ending with the pod). Custom resources of the federation's CRDs list across members and
//! are written on their owner; status writes go to the owner too.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{oldest_and_newest, Kubectl};
use common::member::{JoinOptions, Member};
use common::server::{ApiClient, FedServer};
use reqwest::Method;
use serde_json::{json, Value};

const V: &str = "/apis/search.fedctl.io/v1alpha1";
const NS: &str = "shop";
const JANE_TOKEN: &str = "jane-token-0123456789abcdef";
const BOB_TOKEN: &str = "bob-token-0123456789abcdef";

async fn wait_for(what: &str, secs: u64, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// POST through `clusters/<member>` as the admin; panics unless 201.
async fn create(api: &ApiClient, member: &str, path: &str, obj: Value) {
    let r = api.post(&format!("{V}/clusters/{member}{path}"), &obj).await;
    assert_eq!(r.status, 201, "create {path} on {member}: {}", r.text);
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "labels": labels}, "data": {"k": "v"}})
}

async fn member_obj(m: &Member, path: &str) -> (u16, Value) {
    m.get(path).await
}

fn label(obj: &Value, k: &str) -> Option<String> {
    obj.pointer(&format!("/metadata/labels/{}", k.replace('/', "~1"))).and_then(Value::as_str).map(str::to_string)
}

/// Adds static token users to the server's token file and restarts it: `jane` in the view
/// group, `bob` in none.
fn add_users(server: &mut FedServer) {
    server.stop();
    let path = server.data_path().join("tokens");
    let mut text = std::fs::read_to_string(&path).expect("token file");
    text.push_str(&format!("\n{JANE_TOKEN},jane,uid-jane,\"{}\"\n{BOB_TOKEN},bob,uid-bob\n", fedctl::search::VIEW_GROUP));
    std::fs::write(&path, text).unwrap();
    server.restart();
}

/// A copy of the admin kubeconfig whose contexts act as `user` with `token`.
fn user_kubeconfig(admin: &Kubectl, src: &Path, dir: &Path, user: &str, token: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::copy(src, &path).unwrap();
    let k = Kubectl::new(admin.bin.clone(), &admin.version, &path, dir);
    k.run(&["config", "set-credentials", user, &format!("--token={token}")]).ok();
    for ctx in ["global", "cluster-member-a", "cluster-member-b"] {
        k.run(&["config", "set-context", ctx, &format!("--user={user}")]).ok();
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_rbac_fan_out_and_logs_through_the_global_view() {
    let etcd = EtcdServer::start_new();
    // (one open stream per user: a followed log holds it like a watch)
    let mut server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--max-watches-per-user", "1"]);
    add_users(&mut server);
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let sim = |seed: &'static str| vec!["--nodes", "2", "--pods-per-node", "2", "--namespaces", "2", "--seed", seed];
    let a = Member::start(&server, "member-a", &sim("1"), &opts);
    let b = Member::start(&server, "member-b", &sim("2"), &opts);
    let api = server.client();
    let kubeconfig = server.kubeconfig();

    // both members' credentials synced by their agents and their contexts written
    common::member::wait_in_view(&server, &["member-a", "member-b"]).await;
    // the member credential may only read and impersonate
    let (code, role) = member_obj(&a, "/apis/rbac.authorization.k8s.io/v1/clusterroles/fedctl-cache").await;
    assert_eq!(code, 200);
    for rule in role["rules"].as_array().unwrap() {
        let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(verbs == ["impersonate"] || verbs == ["get", "list", "watch"], "{rule}");
    }

    for (m, suffix) in [(&a, "a"), (&b, "b")] {
        create(&api, &m.name, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        create(&api, &m.name, &format!("/apis/apps/v1/namespaces/{NS}/deployments"), deployment(&format!("web-{suffix}"))).await;
        create(&api, &m.name, &format!("/api/v1/namespaces/{NS}/configmaps"), configmap(&format!("cfg-{suffix}"), json!({}))).await;
        create(&api, &m.name, &format!("/api/v1/namespaces/{NS}/configmaps"), configmap("shared", json!({}))).await;
        create(&api, &m.name, &format!("/api/v1/namespaces/{NS}/configmaps"), configmap(&format!("sweep-{suffix}"), json!({"sweep": "yes"}))).await;
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("logger-{suffix}"), "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "busybox"}]}});
        create(&api, &m.name, &format!("/api/v1/namespaces/{NS}/pods"), pod).await;
    }
    let evictee = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "evictee", "namespace": NS}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    create(&api, "member-b", &format!("/api/v1/namespaces/{NS}/pods"), evictee).await;
    wait_for("the deployments in the view", 30, async || {
        let r = api.get(&format!("{V}/global/apis/apps/v1/namespaces/{NS}/deployments")).await;
        r.json["items"].as_array().is_some_and(|i| i.len() == 2)
    })
    .await;

    let scratch = server.scratch_dir();
    let ks = oldest_and_newest(&kubeconfig, &scratch);
    let deploy = |s: &str| format!("/apis/apps/v1/namespaces/{NS}/deployments/web-{s}");

    // --- writes through --context global land on the owning member only
    for k in &ks {
        let v = k.version.replace('.', "-");
        let g = |args: &[&str]| {
            let mut all = vec!["--context", "global", "-n", NS];
            all.extend_from_slice(args);
            k.run(&all)
        };
        g(&["label", "deploy", "web-a", &format!("tier=gold-{v}"), "--overwrite"]).ok();
        g(&["annotate", "deploy", "web-b", &format!("note=seen-{v}"), "--overwrite"]).ok();
        g(&["patch", "deploy", "web-a", "--type", "merge", "-p", &format!(r#"{{"metadata":{{"labels":{{"merge":"{v}"}}}}}}"#)]).ok();
        g(&["patch", "deploy", "web-b", "--type", "json", "-p", &format!(r#"[{{"op":"add","path":"/metadata/labels/json","value":"{v}"}}]"#)]).ok();
        g(&["patch", "deploy", "web-a", "--type", "strategic", "-p", &format!(r#"{{"spec":{{"template":{{"metadata":{{"labels":{{"sm":"{v}"}}}}}}}}}}"#)]).ok();
        g(&["scale", "deploy", "web-b", "--replicas", "3"]).ok();
        // an editor that adds the label `edited` under metadata.labels
        let editor = scratch.join(format!("editor-{v}.sh"));
        std::fs::write(&editor, format!("#!/bin/sh\nsed -i -e '/^    edited:/d' -e 's/^  labels:$/  labels:\\n    edited: \"{v}\"/' \"$1\"\n")).unwrap();
        std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        k.run_env(&["--context", "global", "-n", NS, "edit", "deploy", "web-a"], None, &[("KUBE_EDITOR", editor.to_str().unwrap())]).ok();

        let (_, wa) = member_obj(&a, &deploy("a")).await;
        let (_, wb) = member_obj(&b, &deploy("b")).await;
        assert_eq!(label(&wa, "tier"), Some(format!("gold-{v}")), "kubectl {}: label on member-a", k.version);
        assert_eq!(label(&wa, "merge"), Some(v.clone()));
        assert_eq!(wa.pointer("/spec/template/metadata/labels/sm").and_then(Value::as_str), Some(v.as_str()));
        assert_eq!(label(&wa, "edited"), Some(v.clone()), "kubectl {} edit: {wa}", k.version);
        assert_eq!(wb.pointer("/metadata/annotations/note").and_then(Value::as_str), Some(format!("seen-{v}").as_str()));
        assert_eq!(label(&wb, "json"), Some(v.clone()));
        assert_eq!(wb["spec"]["replicas"], 3);
        // nothing of it on the other member
        assert_eq!(member_obj(&b, &deploy("a")).await.0, 404);
        assert_eq!(member_obj(&a, &deploy("b")).await.0, 404);
        assert_eq!(label(&wb, "tier"), None);
        assert!(wa.pointer("/metadata/annotations/note").is_none());
        // the view shows it
        let want = format!("gold-{v}");
        wait_for("the label in the view", 20, async || {
            let r = api.get(&format!("{V}/global{}", deploy("a"))).await;
            label(&r.json, "tier").as_deref() == Some(want.as_str())
        })
        .await;
        g(&["scale", "deploy", "web-b", "--replicas", "1"]).ok();
    }
    // a name in both members: a write through the global view is a 409 naming both; the
    // member's context acts on that member only
    let k = &ks[0];
    let out = k.run(&["--context", "global", "-n", NS, "label", "cm", "shared", "x=y"]);
    let err = out.failed().to_string();
    assert!(err.contains("member-a") && err.contains("member-b"), "{err}");
    k.run(&["--context", "cluster-member-b", "-n", NS, "label", "cm", "shared", "x=y"]).ok();
    assert_eq!(label(&member_obj(&b, &format!("/api/v1/namespaces/{NS}/configmaps/shared")).await.1, "x").as_deref(), Some("y"));
    assert_eq!(label(&member_obj(&a, &format!("/api/v1/namespaces/{NS}/configmaps/shared")).await.1, "x"), None);
    // a non-cached kind's owner is found by asking the members; delete lands there only
    k.run(&["--context", "global", "-n", NS, "delete", "cm", "cfg-a"]).ok();
    assert_eq!(member_obj(&a, &format!("/api/v1/namespaces/{NS}/configmaps/cfg-a")).await.0, 404);
    assert_eq!(member_obj(&b, &format!("/api/v1/namespaces/{NS}/configmaps/cfg-b")).await.0, 200);
    // delete of a collection with a selector runs on every member
    let r = api.delete(&format!("{V}/global/api/v1/namespaces/{NS}/configmaps?labelSelector=sweep%3Dyes")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for (m, s) in [(&a, "a"), (&b, "b")] {
        assert_eq!(member_obj(m, &format!("/api/v1/namespaces/{NS}/configmaps/sweep-{s}")).await.0, 404);
    }
    assert_eq!(member_obj(&b, &format!("/api/v1/namespaces/{NS}/configmaps/cfg-b")).await.0, 200);
    // a create names no member: a clear 400
    let r = api.post(&format!("{V}/global/api/v1/namespaces/{NS}/configmaps"), &configmap("nowhere", json!({}))).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("clusters/<name>"), "{}", r.text);
    // proxied bodies are bounded like the federation API's
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg-b", "namespace": NS}, "data": {"k": "x".repeat(4 << 20)}});
    let r = api.put(&format!("{V}/global/api/v1/namespaces/{NS}/configmaps/cfg-b"), &big).await;
    assert_eq!(r.status, 413, "{}", r.text);
    // delete of a pod through the view
    k.run(&["--context", "global", "-n", NS, "delete", "pod", "logger-b", "--wait=false"]).ok();
    wait_for("logger-b gone from member-b", 20, async || member_obj(&b, &format!("/api/v1/namespaces/{NS}/pods/logger-b")).await.0 == 404).await;
    assert_eq!(member_obj(&a, &format!("/api/v1/namespaces/{NS}/pods/logger-a")).await.0, 200);

    // an eviction (what `kubectl drain` sends) goes to the pod's member
    wait_for("evictee in the view", 20, async || api.get(&format!("{V}/global/api/v1/namespaces/{NS}/pods/evictee")).await.status == 200).await;
    let r =
        api.post(&format!("{V}/global/api/v1/namespaces/{NS}/pods/evictee/eviction"), &json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evictee", "namespace": NS}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    wait_for("evictee gone from member-b", 20, async || member_obj(&b, &format!("/api/v1/namespaces/{NS}/pods/evictee")).await.0 == 404).await;

    // --- the member's RBAC decides for the caller; the federation decides who uses the view
    // (both decide: the federation lets jane edit, so what she may do is the member's call)
    common::bind_cluster_role(&server, "jane", "edit", "delete", "configmaps").await;
    let jane = oldest_and_newest(&user_kubeconfig(k, &kubeconfig, &scratch, "jane", JANE_TOKEN), &scratch).remove(1);
    let out = jane.run(&["--context", "global", "-n", NS, "delete", "cm", "cfg-b"]);
    let err = out.failed().to_string();
    assert!(err.contains("Forbidden") && err.contains("User \"jane\" cannot") && err.contains("configmaps"), "member's 403 passed through: {err}");
    assert_eq!(member_obj(&b, &format!("/api/v1/namespaces/{NS}/configmaps/cfg-b")).await.0, 200, "nothing changed");
    let out = jane.run(&["--context", "global", "-n", NS, "label", "deploy", "web-b", "jane=was-here"]);
    assert!(out.failed().contains("User \"jane\" cannot patch resource \"deployments\""), "{}", out.stderr);
    assert_eq!(label(&member_obj(&b, &deploy("b")).await.1, "jane"), None);
    // the member grants jane configmaps in the namespace: now the same request succeeds
    let grant = |kind: &str, body: Value| {
        let api = &api;
        let kind = kind.to_string();
        async move {
            let r = api.post(&format!("{V}/clusters/member-b/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{kind}"), &body).await;
            assert_eq!(r.status, 201, "{}", r.text);
        }
    };
    grant(
        "roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "cm-admin", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "delete"]}]}),
    )
    .await;
    grant(
        "rolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "jane-cm", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-admin"}, "subjects": [{"kind": "User", "name": "jane"}]}),
    )
    .await;
    jane.run(&["--context", "global", "-n", NS, "delete", "cm", "cfg-b"]).ok();
    assert_eq!(member_obj(&b, &format!("/api/v1/namespaces/{NS}/configmaps/cfg-b")).await.0, 404);
    // bob holds no grant in the federation: it refuses, before any member is asked
    let bob = oldest_and_newest(&user_kubeconfig(k, &kubeconfig, &scratch, "bob", BOB_TOKEN), &scratch).remove(1);
    let out = bob.run(&["--context", "global", "-n", NS, "delete", "deploy", "web-b"]);
    assert!(out.failed().contains("Error from server (Forbidden)"), "{}", out.stderr);
    let r = server.token_client(BOB_TOKEN).delete(&format!("{V}/global{}", deploy("b"))).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        r.json["message"].as_str().unwrap_or(""),
        format!("deployments.apps \"web-b\" is forbidden: User \"bob\" cannot delete resource \"deployments\" in API group \"apps\" in the namespace \"{NS}\""),
        "{}",
        r.text
    );
    assert_eq!(member_obj(&b, &deploy("b")).await.0, 200);

    // --- every kind across all members, with the CLUSTER column
    for k in &ks {
        let text = k.run(&["--context", "global", "get", "deploy,ns", "-A"]).ok().to_string();
        assert!(text.lines().next().unwrap_or("").contains("CLUSTER"), "kubectl {}: {text}", k.version);
        for want in ["web-a", "web-b"] {
            assert!(text.contains(want), "kubectl {}: {want} in {text}", k.version);
        }
        let shops = text.lines().filter(|l| l.split_whitespace().any(|w| w == "namespace/shop" || w == "shop")).count();
        assert!(shops >= 4, "kubectl {}: shop namespace and deployments of both members: {text}", k.version);
        let ev = k.run(&["--context", "global", "get", "events", "-A"]);
        assert_eq!(ev.code, Some(0), "kubectl {} get events: {}", k.version, ev.stderr);
        // a kind the view does not cache: fan-out LIST, one table with the CLUSTER column
        let text = k.run(&["--context", "global", "get", "cm", "-n", NS]).ok().to_string();
        assert!(text.lines().next().unwrap_or("").contains("CLUSTER"), "kubectl {}: {text}", k.version);
        assert!(text.lines().any(|l| l.starts_with("shared") && l.contains("member-a")) && text.lines().any(|l| l.starts_with("shared") && l.contains("member-b")), "{text}");
        // paged by kubectl's --chunk-size across the members
        let text = k.run(&["--context", "global", "get", "cm", "-n", NS, "--chunk-size", "1", "-o", "name"]).ok().to_string();
        assert_eq!(text.lines().filter(|l| *l == "configmap/shared").count(), 2, "kubectl {}: {text}", k.version);
    }
    // fan-out with one member paused: the other answers, with a warning naming the paused one
    b.sim.admin(Method::POST, "/fedsim/faults/pause?seconds=15").await.expect("pause member-b");
    let started = Instant::now();
    let out = ks[1].run(&["--context", "global", "get", "cm", "-n", NS, "--request-timeout", "30s"]);
    let text = out.ok().to_string();
    assert!(started.elapsed() < Duration::from_secs(14), "answered within the request timeout, before the pause ended");
    assert!(text.contains("member-a") && !text.contains("member-b"), "{text}");
    assert!(out.stderr.contains("Warning: member-b: did not answer"), "{}", out.stderr);
    wait_for("member-b back", 30, async || member_obj(&b, "/api/v1/namespaces").await.0 == 200).await;

    // --- describe through the view shows the member's events for the pod (events are cached)
    let (_, pod) = member_obj(&a, &format!("/api/v1/namespaces/{NS}/pods/logger-a")).await;
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "logger-a.probe", "namespace": NS},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": "logger-a", "uid": pod["metadata"]["uid"], "apiVersion": "v1"},
        "reason": "ProbeWarning", "message": "readiness probe answered slowly", "type": "Warning", "count": 1,
        "source": {"component": "kubelet"}, "firstTimestamp": pod["metadata"]["creationTimestamp"], "lastTimestamp": pod["metadata"]["creationTimestamp"]});
    create(&api, "member-a", &format!("/api/v1/namespaces/{NS}/events"), ev).await;
    for k in &ks {
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !text.contains("readiness probe answered slowly") {
            assert!(Instant::now() < deadline, "kubectl {} describe shows the member's event: {text}", k.version);
            text = k.run(&["--context", "global", "-n", NS, "describe", "pod", "logger-a"]).ok().to_string();
        }
        assert!(text.contains("ProbeWarning"), "{text}");
    }

    // --- logs through the view (and through clusters/<name>)
    for k in &ks {
        let text = k.run(&["--context", "global", "-n", NS, "logs", "logger-a", "-c", "side", "--tail", "2"]).ok().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "kubectl {}: {text}", k.version);
        assert!(lines.iter().all(|l| l.starts_with("logger-a side line ")), "{text}");
        let text = k.run(&["--context", "cluster-member-a", "-n", NS, "logs", "logger-a", "-c", "main", "--tail", "1", "--timestamps"]).ok().to_string();
        assert!(text.contains("Z logger-a main line "), "{text}");
        let out = k.run(&["--context", "global", "-n", NS, "logs", "logger-a", "-c", "main", "--previous"]);
        assert!(out.failed().contains("previous terminated container \"main\" in pod \"logger-a\" not found"), "{}", out.stderr);
        let text = k.run(&["--context", "global", "-n", NS, "logs", "logger-a", "-c", "main", "--since", "2s"]).ok().to_string();
        assert!(!text.is_empty() && text.lines().count() <= 3, "{text}");
    }
    let mut f = ks[1].spawn(&["--context", "global", "-n", NS, "logs", "-f", "logger-a", "-c", "main", "--tail", "1"]);
    assert!(f.wait_for(Duration::from_secs(10), |s| s.lines().count() >= 3), "follow streams new lines: {}", f.stdout());
    // a second stream of the same user is refused while the first is open
    let out = ks[0].run(&["--context", "global", "-n", NS, "logs", "-f", "logger-a", "-c", "side", "--request-timeout", "10s"]);
    assert!(out.failed().contains("Error from server (TooManyRequests)"), "{}", out.stderr);
    api.delete(&format!("{V}/clusters/member-a/api/v1/namespaces/{NS}/pods/logger-a?gracePeriodSeconds=0")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.exited() {
        assert!(Instant::now() < deadline, "logs -f ends with its pod; stderr: {}", f.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Custom resources of the federation's CRDs through the view (discovery, fan-out LIST with
/// the CLUSTER column and the CRD's printer columns, a write routed to the owner) and status
/// writes (`--subresource=status`) through `--context global`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn custom_resources_and_status_writes_through_the_global_view() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let sim = |seed: &'static str| vec!["--nodes", "1", "--pods-per-node", "1", "--namespaces", "1", "--seed", seed];
    let a = Member::start(&server, "member-a", &sim("3"), &opts);
    let b = Member::start(&server, "member-b", &sim("4"), &opts);
    let api = server.client();
    let kubeconfig = server.kubeconfig();
    common::member::wait_in_view(&server, &["member-a", "member-b"]).await;
    let scratch = server.scratch_dir();
    let ks = oldest_and_newest(&kubeconfig, &scratch);
    let crd = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/corpus/website-shirt-resource-definition.yaml");
    let shirts = format!("/apis/stable.example.com/v1/namespaces/{NS}/shirts");

    // the CRD on both members, a shirt and a Service on each
    for (m, color) in [(&a, "red"), (&b, "green")] {
        ks[1].run(&["--context", &format!("cluster-{}", m.name), "apply", "-f", crd]).ok();
        let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/shirts.stable.example.com";
        wait_for("the CRD established on the member", 20, async || {
            let (_, c) = member_obj(m, path).await;
            c.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
        })
        .await;
        create(&api, &m.name, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        let shirt = json!({"apiVersion": "stable.example.com/v1", "kind": "Shirt", "metadata": {"name": format!("tee-{color}"), "namespace": NS}, "spec": {"color": color, "size": "M"}});
        // a kind the view does not know yet: clusters/<name> passes it to the member
        create(&api, &m.name, &shirts, shirt).await;
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("lb-{color}"), "namespace": NS},
            "spec": {"type": "LoadBalancer", "selector": {"app": "x"}, "ports": [{"port": 80}]}});
        create(&api, &m.name, &format!("/api/v1/namespaces/{NS}/services"), svc).await;
    }
    // the federation does not serve the CRD yet: neither does the view
    let r = api.get(&format!("{V}/global{shirts}")).await;
    assert_eq!(r.status, 404, "{}", r.text);
    // once the federation serves it (it is what the federation places on members), the view
    // lists its custom resources across both members
    let fed = ks[1].run(&["config", "current-context"]).ok().trim().to_string();
    ks[1].run(&["--context", &fed, "apply", "-f", crd]).ok();
    wait_for("shirts in the view", 20, async || api.get(&format!("{V}/global{shirts}")).await.status == 200).await;
    let r = api.get(&format!("{V}/global{shirts}")).await;
    let names: std::collections::BTreeSet<String> = r.json["items"].as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["tee-green", "tee-red"].iter().map(|s| s.to_string()).collect(), "{}", r.text);
    for k in &ks {
        let text = k.run(&["--context", "global", "get", "shirts", "-A"]).ok().to_string();
        let head = text.lines().next().unwrap_or("");
        assert!(head.contains("CLUSTER") && head.contains("COLOR") && head.contains("SIZE"), "kubectl {}: {text}", k.version);
        assert!(text.lines().any(|l| l.contains("tee-red") && l.contains("member-a") && l.contains("red")), "kubectl {}: {text}", k.version);
        assert!(text.lines().any(|l| l.contains("tee-green") && l.contains("member-b") && l.contains("green")), "kubectl {}: {text}", k.version);
        let v = k.version.replace('.', "-");
        // a write through the global view finds the owner by asking the members
        k.run(&["--context", "global", "-n", NS, "label", "shirt", "tee-green", &format!("seen={v}"), "--overwrite"]).ok();
        let (_, tee) = member_obj(&b, &format!("{shirts}/tee-green")).await;
        assert_eq!(label(&tee, "seen"), Some(v.clone()), "kubectl {}: {tee}", k.version);
        assert_eq!(member_obj(&a, &format!("{shirts}/tee-green")).await.0, 404);
        // a status write (the cached Service kind: the owner comes from the cache)
        wait_for("the services in the view", 20, async || api.get(&format!("{V}/global/api/v1/namespaces/{NS}/services/lb-red")).await.status == 200).await;
        let ip = if k.version == "1.27" { "192.0.2.27" } else { "192.0.2.33" };
        let patch = format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{ip}"}}]}}}}}}"#);
        k.run(&["--context", "global", "-n", NS, "patch", "svc", "lb-red", "--subresource=status", "--type=merge", "-p", &patch]).ok();
        let (_, svc) = member_obj(&a, &format!("/api/v1/namespaces/{NS}/services/lb-red")).await;
        assert_eq!(svc.pointer("/status/loadBalancer/ingress/0/ip").and_then(Value::as_str), Some(ip), "kubectl {}: {svc}", k.version);
        assert!(svc.pointer("/metadata/labels/seen").is_none());
        let (_, other) = member_obj(&b, &format!("/api/v1/namespaces/{NS}/services/lb-green")).await;
        assert!(other.pointer("/status/loadBalancer/ingress").is_none(), "{other}");
    }
    // the CRD gone from the federation: the view no longer serves the kind
    ks[1].run(&["--context", &fed, "delete", "-f", crd]).ok();
    wait_for("shirts gone from the view", 20, async || api.get(&format!("{V}/global{shirts}")).await.status == 404).await;
}
