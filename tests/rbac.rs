//! RBAC on the federation API: a team user's bindings decide what it may do (and a denial writes nothing), `kubectl auth can-i [--list]` and `whoami` answer truthfully, aggregated ClusterRoles follow their labelled roles, escalation is refused without `bind`/`escalate`, impersonation needs `impersonate` — real etcd, real `fedctl server`, real kubectl.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::server::{assert_same_dump, etcd_dump, ApiClient, Auth, FedServer};
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";
const CPPS: &str = "/apis/policy.fedctl.io/v1alpha1/clusterpropagationpolicies";

fn deployments(ns: &str) -> String {
    format!("/apis/apps/v1/namespaces/{ns}/deployments")
}

fn pps(ns: &str) -> String {
    format!("/apis/policy.fedctl.io/v1alpha1/namespaces/{ns}/propagationpolicies")
}

async fn wait_for<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A user with a client certificate signed by the federation's CA: its kubeconfig path and
/// an API client.
fn team_user(server: &FedServer, dir: &Path, name: &str, groups: &[&str]) -> (PathBuf, ApiClient) {
    let tls = server.data_path().join("tls");
    let ca = fedctl::pki::Ca::from_pem(&std::fs::read_to_string(tls.join("server-ca.crt")).unwrap(), &std::fs::read_to_string(tls.join("server-ca.key")).unwrap()).unwrap();
    let (cert, key) = ca.issue_client(name, groups, Duration::from_secs(3600)).unwrap();
    let ca_pem = Kubeconfig::load(&server.kubeconfig()).unwrap().current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let kc = Kubeconfig::single("fed", &server.url(), &ca_pem, AuthInfo::client_cert(&cert, &key));
    let path = dir.join(format!("{name}.kubeconfig"));
    kc.write(&path).unwrap();
    let client = ApiClient::new(&path, &server.url(), Auth::ClientCert);
    (path, client)
}

/// A dump of etcd once the controllers have stopped writing (two dumps 300 ms apart agree).
async fn settled_dump(etcd: &EtcdServer) -> std::collections::BTreeMap<String, common::server::DumpedKey> {
    let mut before = etcd_dump(&etcd.endpoint()).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = etcd_dump(&etcd.endpoint()).await;
        if again == before {
            break;
        }
        before = again;
    }
    before
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn role_binding(ns: &str, name: &str, kind: &str, role: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

fn cluster_role_binding(name: &str, role: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

fn cluster_role(name: &str, labels: Value, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": rules})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn propagation_policy(name: &str) -> Value {
    json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": name},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "placement": {"clusterAffinity": {"clusterNames": ["member-a"]}}}})
}

fn rules_of(v: &Value) -> Vec<Value> {
    v["rules"].as_array().cloned().unwrap_or_default()
}

fn grants(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    rules_of(role).iter().any(|r| {
        let has = |k: &str, x: &str| r[k].as_array().is_some_and(|a| a.iter().any(|v| v == x || v == "*"));
        has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
    })
}

/// The line of `kubectl auth can-i --list` for `resource` (first column), if any.
fn list_line<'a>(out: &'a str, resource: &str) -> Option<&'a str> {
    out.lines().find(|l| l.split_whitespace().next() == Some(resource))
}

fn kubectls() -> Vec<(String, PathBuf)> {
    let found: Vec<(String, PathBuf)> = ["1.27", "1.33"].iter().filter_map(|v| find_kubectl(v).map(|b| (v.to_string(), b))).collect();
    assert!(!found.is_empty(), "no kubectl.1.27 or kubectl.1.33 on PATH");
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_user_rbac_end_to_end() {
    let etcd = EtcdServer::start_new();
    let tmp = tempfile::tempdir().unwrap();
    // a team user without a certificate: a static token (kube-apiserver's token file format)
    let token_file = tmp.path().join("team-tokens.csv");
    std::fs::write(&token_file, "# team users\nsam-token-0123456789,sam,uid-sam,\"team-a-devs,qa\"\n").unwrap();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--token-auth-file", token_file.to_str().unwrap()]);
    let admin = server.client();

    // the default policy: marked, and the aggregates filled from their aggregate-to-* roles
    let crb = admin.get(&format!("{RBAC}/clusterrolebindings/cluster-admin")).await.ok().clone();
    assert_eq!(crb["subjects"][0]["name"], "system:masters", "{crb}");
    assert_eq!(crb["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"], "true");
    assert_eq!(crb["metadata"]["labels"]["kubernetes.io/bootstrapping"], "rbac-defaults");
    for (role, group, resource, verb) in [
        ("edit", "apps", "deployments", "create"),
        ("edit", "policy.fedctl.io", "propagationpolicies", "create"),
        ("view", "apps", "deployments", "list"),
        ("admin", "rbac.authorization.k8s.io", "rolebindings", "create"),
        ("admin", "apps", "deployments", "create"),
        ("admin", "", "pods", "get"),
    ] {
        wait_for(&format!("{role} aggregated with {verb} {resource}"), Duration::from_secs(20), async || {
            let r = admin.get(&format!("{RBAC}/clusterroles/{role}")).await;
            (r.status == 200 && grants(&r.json, group, resource, verb)).then_some(())
        })
        .await;
    }
    let view = admin.get(&format!("{RBAC}/clusterroles/view")).await.ok().clone();
    assert!(!grants(&view, "", "secrets", "get"), "view reads no secrets: {view}");

    for ns in ["team-a", "team-b"] {
        admin.post("/api/v1/namespaces", &namespace(ns)).await.ok();
    }
    let (jane_kc, jane) = team_user(&server, tmp.path(), "jane", &["team-a-devs"]);
    // no binding yet: RBAC denies with kube-apiserver's message
    let denied = jane.get(&deployments("team-a")).await;
    let st = denied.assert_status(403, "Forbidden");
    assert_eq!(st["message"], "deployments.apps is forbidden: User \"jane\" cannot list resource \"deployments\" in API group \"apps\" in the namespace \"team-a\"");

    // the token user authenticates (401 without the token) and is only who the file says
    let sam = server.token_client("sam-token-0123456789");
    let st = sam.get(&deployments("team-a")).await.assert_status(403, "Forbidden").clone();
    assert!(st["message"].as_str().unwrap().contains("User \"sam\" cannot list"), "{st}");
    server.token_client("sam-token-wrong").get(&deployments("team-a")).await.assert_status(401, "Unauthorized");
    let me = sam.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})).await.ok().clone();
    assert_eq!(me["status"]["userInfo"]["username"], "sam", "{me}");
    assert_eq!(me["status"]["userInfo"]["groups"], json!(["team-a-devs", "qa", "system:authenticated"]), "{me}");
    // a TokenReview needs `create tokenreviews` (system:auth-delegator); it names sam's user
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "sam-token-0123456789"}});
    sam.post("/apis/authentication.k8s.io/v1/tokenreviews", &review).await.assert_status(403, "Forbidden");
    let tr = admin.post("/apis/authentication.k8s.io/v1/tokenreviews", &review).await.ok().clone();
    assert_eq!((tr["status"]["authenticated"].clone(), tr["status"]["user"]["username"].clone()), (json!(true), json!("sam")), "{tr}");
    assert!(tr["spec"].get("token").is_none(), "{tr}");
    let tr = admin.post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "nope"}})).await.ok().clone();
    assert_eq!(tr["status"]["authenticated"], false, "{tr}");
    // a group binding reaches sam through team-a-devs
    admin
        .post(
            &format!("{RBAC}/namespaces/team-a/rolebindings"),
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "devs-view", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a-devs"}]}),
        )
        .await
        .ok();
    wait_for("sam may list deployments in team-a", Duration::from_secs(3), async || (sam.get(&deployments("team-a")).await.status == 200).then_some(())).await;
    sam.post(&deployments("team-a"), &deployment("sams")).await.assert_status(403, "Forbidden");

    // edit in team-a, view in team-b; the binding applies within about a second
    admin.post(&format!("{RBAC}/namespaces/team-a/rolebindings"), &role_binding("team-a", "jane-edit", "ClusterRole", "edit", "jane")).await.ok();
    admin.post(&format!("{RBAC}/namespaces/team-b/rolebindings"), &role_binding("team-b", "jane-view", "ClusterRole", "view", "jane")).await.ok();
    let bound = Instant::now();
    wait_for("jane may list deployments in team-a", Duration::from_secs(3), async || (jane.get(&deployments("team-a")).await.status == 200).then_some(())).await;
    assert!(bound.elapsed() < Duration::from_secs(2), "the binding took {:?} to apply", bound.elapsed());
    jane.post(&deployments("team-a"), &deployment("web")).await.ok();
    jane.post(&pps("team-a"), &propagation_policy("web")).await.ok();
    jane.get("/api/v1/namespaces/team-a/secrets").await.ok();
    jane.get(&deployments("team-b")).await.ok();

    // what jane may not do, and that none of it writes anything
    let before = settled_dump(&etcd).await;
    let st = jane.post(&deployments("team-b"), &deployment("web")).await.assert_status(403, "Forbidden").clone();
    assert_eq!(st["message"], "deployments.apps is forbidden: User \"jane\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"team-b\"");
    jane.post(&pps("team-b"), &propagation_policy("web")).await.assert_status(403, "Forbidden");
    jane.post(CLUSTERS, &json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "rogue"}, "spec": {"id": "x"}})).await.assert_status(403, "Forbidden");
    jane.post(CPPS, &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterPropagationPolicy", "metadata": {"name": "all"}, "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}})).await.assert_status(403, "Forbidden");
    jane.get("/api/v1/namespaces/team-b/secrets").await.assert_status(403, "Forbidden");
    jane.post("/api/v1/namespaces/team-b/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})).await.assert_status(403, "Forbidden");
    let st = jane.get("/api/v1/nodes").await.assert_status(403, "Forbidden").clone();
    assert!(st["message"].as_str().unwrap().contains("at the cluster scope"), "{st}");
    // the fixed rules still hold for others
    server.anonymous_client().get(&deployments("team-a")).await.assert_status(401, "Unauthorized");
    for p in [format!("{}/web", deployments("team-b")), format!("{}/web", pps("team-b")), format!("{CLUSTERS}/rogue"), format!("{CPPS}/all"), "/api/v1/namespaces/team-b/secrets/s".to_string()] {
        admin.get(&p).await.assert_status(404, "NotFound");
    }
    assert_same_dump(&before, &etcd_dump(&etcd.endpoint()).await, "denied requests");

    // kubectl auth can-i / --list / whoami as jane
    for (version, bin) in kubectls() {
        let k = Kubectl::new(bin.clone(), &version, &jane_kc, &tmp.path().join(format!("cache-{version}")));
        assert_eq!(k.run(&["auth", "can-i", "create", "deployments", "-n", "team-a"]).ok().trim(), "yes", "kubectl {version}");
        let no = k.run(&["auth", "can-i", "create", "deployments", "-n", "team-b"]);
        assert_eq!((no.code, no.stdout.trim()), (Some(1), "no"), "kubectl {version}: {no:?}");
        assert_eq!(k.run(&["auth", "can-i", "create", "propagationpolicies.policy.fedctl.io", "-n", "team-a"]).ok().trim(), "yes");
        let no = k.run(&["auth", "can-i", "get", "secrets", "-n", "team-b"]);
        assert_eq!(no.stdout.trim(), "no", "kubectl {version}: {no:?}");
        let no = k.run(&["auth", "can-i", "list", "clusters.cluster.fedctl.io"]);
        assert_eq!(no.stdout.trim(), "no", "kubectl {version}: {no:?}");
        let a = k.run(&["auth", "can-i", "--list", "-n", "team-a"]).ok().to_string();
        let line = list_line(&a, "deployments.apps").unwrap_or_else(|| panic!("kubectl {version}: no deployments.apps in\n{a}"));
        assert!(line.contains("create") && line.contains("get"), "kubectl {version}: {line}");
        assert!(list_line(&a, "secrets").is_some_and(|l| l.contains("create")), "kubectl {version}:\n{a}");
        assert!(list_line(&a, "propagationpolicies.policy.fedctl.io").is_some_and(|l| l.contains("create")), "kubectl {version}:\n{a}");
        assert!(list_line(&a, "selfsubjectaccessreviews.authorization.k8s.io").is_some(), "system:basic-user: {a}");
        assert!(a.lines().any(|l| l.contains("[/apis/*]") && l.contains("[get]")), "system:discovery's URLs: {a}");
        let b = k.run(&["auth", "can-i", "--list", "-n", "team-b"]).ok().to_string();
        let line = list_line(&b, "deployments.apps").unwrap_or_else(|| panic!("kubectl {version}: no deployments.apps in\n{b}"));
        assert!(line.contains("list") && !line.contains("create"), "kubectl {version}: view only: {line}");
        assert!(list_line(&b, "secrets").is_none(), "kubectl {version}: view grants no secrets:\n{b}");
        assert!(list_line(&b, "clusters.cluster.fedctl.io").is_none(), "{b}");
        // 1.27 asks authentication.k8s.io/v1beta1, 1.33 v1
        let w = k.run(&["auth", "whoami", "-o", "json"]).json();
        assert_eq!(w["status"]["userInfo"]["username"], "jane", "kubectl {version}: {w}");
        let groups = w["status"]["userInfo"]["groups"].as_array().unwrap().clone();
        assert!(groups.contains(&json!("team-a-devs")) && groups.contains(&json!("system:authenticated")), "{w}");
        let table = k.run(&["auth", "whoami"]).ok().to_string();
        assert!(table.lines().any(|l| l.starts_with("Username") && l.contains("jane")), "kubectl {version}: {table}");
    }

    // discovery lists the reviews as kube-apiserver does: create only
    let list = admin.get("/apis/authorization.k8s.io/v1").await.ok().clone();
    let names: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    for n in ["localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews"] {
        let r = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == n).unwrap_or_else(|| panic!("{n} not in {names:?}"));
        assert_eq!(r["verbs"], json!(["create"]), "{r}");
    }
    let authn = admin.get("/apis/authentication.k8s.io/v1").await.ok().clone();
    for n in ["selfsubjectreviews", "tokenreviews"] {
        assert!(authn["resources"].as_array().unwrap().iter().any(|r| r["name"] == n && r["verbs"] == json!(["create"])), "{n}: {authn}");
    }
    // reviews are not stored: no GET, no LIST
    admin.get("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").await.assert_status(405, "MethodNotAllowed");
    // a SubjectAccessReview needs its own permission; the admin may ask about jane
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "jane", "resourceAttributes": {"namespace": "team-a", "verb": "create", "group": "apps", "resource": "deployments"}}});
    assert_eq!(admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar).await.ok()["status"]["allowed"], true);
    let mut sar_b = sar.clone();
    sar_b["spec"]["resourceAttributes"]["namespace"] = json!("team-b");
    assert_eq!(admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar_b).await.ok()["status"]["allowed"], false);
    jane.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar).await.assert_status(403, "Forbidden");

    // an aggregated ClusterRole picks up a newly labelled role within seconds
    admin
        .post(
            &format!("{RBAC}/clusterroles"),
            &cluster_role("widgets-view", json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}), json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}])),
        )
        .await
        .ok();
    let labelled = Instant::now();
    for role in ["view", "edit", "admin"] {
        wait_for(&format!("{role} picks up widgets"), Duration::from_secs(5), async || {
            grants(admin.get(&format!("{RBAC}/clusterroles/{role}")).await.ok(), "example.com", "widgets", "list").then_some(())
        })
        .await;
    }
    assert!(labelled.elapsed() < Duration::from_secs(5));
    if let Some((version, bin)) = kubectls().pop() {
        let k = Kubectl::new(bin, &version, &jane_kc, &tmp.path().join("cache-agg"));
        let b = k.run(&["auth", "can-i", "--list", "-n", "team-b"]).ok().to_string();
        assert!(list_line(&b, "widgets.example.com").is_some(), "kubectl {version}:\n{b}");
    }
    // ... and drops it when the label goes
    admin.merge_patch(&format!("{RBAC}/clusterroles/widgets-view"), &json!({"metadata": {"labels": {"rbac.authorization.k8s.io/aggregate-to-view": null}}})).await.ok();
    wait_for("view drops widgets", Duration::from_secs(5), async || (!grants(admin.get(&format!("{RBAC}/clusterroles/view")).await.ok(), "example.com", "widgets", "list")).then_some(())).await;

    // escalation: jane may write bindings and roles, but not grant what she does not hold
    admin
        .post(
            &format!("{RBAC}/clusterroles"),
            &cluster_role("rbac-writer", json!({}), json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings", "rolebindings", "roles"], "verbs": ["create", "get"]}])),
        )
        .await
        .ok();
    admin.post(&format!("{RBAC}/clusterrolebindings"), &cluster_role_binding("jane-rbac-writer", "rbac-writer", "jane")).await.ok();
    wait_for("jane may create clusterrolebindings", Duration::from_secs(3), async || {
        let r = jane.post(&format!("{RBAC}/clusterrolebindings?dryRun=All"), &cluster_role_binding("probe", "system:basic-user", "jane")).await;
        (r.status == 201).then_some(())
    })
    .await;
    let before = settled_dump(&etcd).await;
    let st = jane.post(&format!("{RBAC}/clusterrolebindings"), &cluster_role_binding("jane-admin", "cluster-admin", "jane")).await.assert_status(403, "Forbidden").clone();
    let msg = st["message"].as_str().unwrap();
    assert!(msg.starts_with("clusterrolebindings.rbac.authorization.k8s.io \"jane-admin\" is forbidden: user \"jane\" (groups=[\"team-a-devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"), "{msg}");
    // a RoleBinding to admin in team-a: admin holds rolebinding writes jane lacks
    jane.post(&format!("{RBAC}/namespaces/team-a/rolebindings"), &role_binding("team-a", "bob-admin", "ClusterRole", "admin", "bob")).await.assert_status(403, "Forbidden");
    // a Role with rules jane does not hold there
    let nodes_role =
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}]});
    jane.post(&format!("{RBAC}/namespaces/team-b/roles"), &nodes_role).await.assert_status(403, "Forbidden");
    assert_same_dump(&before, &etcd_dump(&etcd.endpoint()).await, "refused escalations");
    // what jane holds she may pass on
    jane.post(&format!("{RBAC}/namespaces/team-a/roles"), &nodes_role).await.ok();
    jane.post(&format!("{RBAC}/namespaces/team-a/rolebindings"), &role_binding("team-a", "bob-edit", "ClusterRole", "edit", "bob")).await.ok();
    // with `escalate` on roles in team-b she may write a Role there with rules she lacks
    admin
        .post(&format!("{RBAC}/clusterroles"), &cluster_role("role-escalator", json!({}), json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}])))
        .await
        .ok();
    admin.post(&format!("{RBAC}/namespaces/team-b/rolebindings"), &role_binding("team-b", "jane-escalate", "ClusterRole", "role-escalator", "jane")).await.ok();
    wait_for("jane may escalate roles in team-b", Duration::from_secs(3), async || (jane.post(&format!("{RBAC}/namespaces/team-b/roles"), &nodes_role).await.status == 201).then_some(())).await;
    // ... which does not let her bind it: binding needs `bind` or the rules
    jane.post(&format!("{RBAC}/namespaces/team-b/rolebindings"), &role_binding("team-b", "jane-r", "Role", "r", "jane")).await.assert_status(403, "Forbidden");
    // with `bind` on cluster-admin she may bind it, and then holds it
    admin
        .post(
            &format!("{RBAC}/clusterroles"),
            &cluster_role("bind-cluster-admin", json!({}), json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["cluster-admin"], "verbs": ["bind"]}])),
        )
        .await
        .ok();
    admin.post(&format!("{RBAC}/clusterrolebindings"), &cluster_role_binding("jane-bind", "bind-cluster-admin", "jane")).await.ok();
    wait_for("jane may bind cluster-admin", Duration::from_secs(3), async || {
        let r = jane.post(&format!("{RBAC}/clusterrolebindings"), &cluster_role_binding("jane-admin", "cluster-admin", "jane")).await;
        (r.status == 201).then_some(())
    })
    .await;
    wait_for("jane is cluster-admin", Duration::from_secs(3), async || (jane.get("/api/v1/nodes").await.status == 200).then_some(())).await;
    admin.delete(&format!("{RBAC}/clusterrolebindings/jane-admin")).await.ok();
    wait_for("jane is no longer cluster-admin", Duration::from_secs(3), async || (jane.get("/api/v1/nodes").await.status == 403).then_some(())).await;

    // impersonation: the admin may act as jane; jane may not act as anyone
    if let Some((version, bin)) = kubectls().pop() {
        let k = Kubectl::new(bin.clone(), &version, &server.kubeconfig(), &tmp.path().join("cache-admin"));
        assert_eq!(k.run(&["--as", "jane", "auth", "can-i", "create", "deployments", "-n", "team-a"]).ok().trim(), "yes");
        assert_eq!(k.run(&["--as", "jane", "auth", "can-i", "create", "deployments", "-n", "team-b"]).stdout.trim(), "no");
        let err = k.run(&["--as", "jane", "get", "secrets", "-n", "team-b"]).failed().to_string();
        assert!(err.contains("User \"jane\" cannot list resource \"secrets\""), "{err}");
        // a group brings its bindings along
        admin
            .post(
                &format!("{RBAC}/namespaces/team-b/rolebindings"),
                &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "ops-edit", "namespace": "team-b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}]}),
            )
            .await
            .ok();
        wait_for("ops may create in team-b", Duration::from_secs(3), async || {
            (k.run(&["--as", "jane", "--as-group", "ops", "auth", "can-i", "create", "deployments", "-n", "team-b"]).stdout.trim() == "yes").then_some(())
        })
        .await;
        if version == "1.33" {
            let w = k.run(&["--as", "jane", "--as-group", "ops", "auth", "whoami", "-o", "json"]).json();
            assert_eq!(w["status"]["userInfo"]["username"], "jane");
            assert_eq!(w["status"]["userInfo"]["groups"], json!(["ops", "system:authenticated"]), "{w}");
        }
        let kj = Kubectl::new(bin, &version, &jane_kc, &tmp.path().join("cache-jane-as"));
        let err = kj.run(&["--as", "bob", "get", "deployments", "-n", "team-a"]).failed().to_string();
        assert!(err.contains("Forbidden"), "{err}");
    }
    let r = jane.request_builder(reqwest::Method::GET, &deployments("team-a")).header("Impersonate-User", "bob").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let st: Value = r.json().await.unwrap();
    assert_eq!(st["message"], "users \"bob\" is forbidden: User \"jane\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope", "{st}");
    // with `impersonate` on users/bob, jane may act as bob (and gets bob's edit in team-a)
    admin
        .post(&format!("{RBAC}/clusterroles"), &cluster_role("as-bob", json!({}), json!([{"apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"], "verbs": ["impersonate"]}])))
        .await
        .ok();
    admin.post(&format!("{RBAC}/clusterrolebindings"), &cluster_role_binding("jane-as-bob", "as-bob", "jane")).await.ok();
    let as_bob = async |path: &str| jane.request_builder(reqwest::Method::GET, path).header("Impersonate-User", "bob").send().await.unwrap().status().as_u16();
    let mut code = 0;
    for _ in 0..30 {
        code = as_bob(&deployments("team-a")).await;
        if code == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(code, 200, "jane as bob lists deployments in team-a");
    assert_eq!(as_bob("/api/v1/namespaces/team-b/secrets").await, 403, "bob has nothing in team-b");
    let as_carol = jane.request_builder(reqwest::Method::GET, &deployments("team-a")).header("Impersonate-User", "carol").send().await.unwrap().status().as_u16();
    assert_eq!(as_carol, 403, "jane may impersonate bob only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_roles_are_reconciled_at_start() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start(&etcd.endpoint());
    let admin = server.client();
    let role = |n: &str| format!("{RBAC}/clusterroles/{n}");
    // an operator strips a default role, opts another out of updates, deletes a binding, and
    // adds a rule of their own to one
    admin.merge_patch(&role("system:discovery"), &json!({"rules": []})).await.ok();
    admin.merge_patch(&role("system:public-info-viewer"), &json!({"metadata": {"annotations": {"rbac.authorization.kubernetes.io/autoupdate": "false"}}, "rules": []})).await.ok();
    admin.delete(&format!("{RBAC}/clusterrolebindings/system:basic-user")).await.ok();
    let extra = json!({"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]});
    let mut basic = admin.get(&role("system:basic-user")).await.ok().clone();
    basic["rules"].as_array_mut().unwrap().push(extra.clone());
    admin.put(&role("system:basic-user"), &basic).await.ok();
    admin.delete(&role("view")).await.ok();

    server.stop();
    server.restart();
    let admin = server.client();
    let discovery = admin.get(&role("system:discovery")).await.ok().clone();
    assert!(grants_url(&discovery, "/apis/*"), "restored: {discovery}");
    let public = admin.get(&role("system:public-info-viewer")).await.ok().clone();
    assert_eq!(public["rules"], json!([]), "autoupdate false is left alone: {public}");
    let binding = admin.get(&format!("{RBAC}/clusterrolebindings/system:basic-user")).await.ok().clone();
    assert_eq!(binding["subjects"][0]["name"], "system:authenticated", "{binding}");
    let basic = admin.get(&role("system:basic-user")).await.ok().clone();
    assert!(basic["rules"].as_array().unwrap().contains(&extra), "an added rule is kept: {basic}");
    // a deleted aggregate comes back filled, before the server reports ready
    let view = admin.get(&role("view")).await.ok().clone();
    assert!(grants(&view, "apps", "deployments", "list"), "{view}");
}

fn grants_url(role: &Value, url: &str) -> bool {
    rules_of(role).iter().any(|r| r["nonResourceURLs"].as_array().is_some_and(|a| a.iter().any(|u| u == url)))
}
