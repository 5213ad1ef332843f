//! Helpers shared by the integration tests (`mod common;` in a test file).
#![allow(dead_code)]

pub mod agent;
pub mod cli;
pub mod etcd;
pub mod kubectl;
pub mod member;
/// The process handles of `fedctl-bench` (fedsim, server, etcd, agent), shared with the tests.
#[path = "../../cmd/fedctl-bench/procs.rs"]
pub mod procs;
pub mod server;

/// Binds ClusterRole `role` to user `user` in the federation, cluster-wide (ClusterRoleBinding
/// `<user>-<role>`, written as the admin), and waits until a SubjectAccessReview of
/// `verb resource` (core group) for the user says allowed (aggregated roles are filled a
/// moment after start).
pub async fn bind_cluster_role(server: &server::FedServer, user: &str, role: &str, verb: &str, resource: &str) {
    use serde_json::json;
    let api = server.client();
    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("{user}-{role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    let r = api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &crb).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"verb": verb, "resource": resource, "namespace": "x"}}});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = api.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar).await;
        if r.json["status"]["allowed"] == true {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{user} not allowed {verb} {resource} within 30 s: {}", r.text);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
