//! Authorization cost per request: the federation's authorizer chain (fixed rules, then RBAC)
//! over a policy of 1,000 RoleBindings for 10,000 users, side by side with requests the fixed
//! rules decide (an admin, an agent); in process, no server, no etcd.
//!
//! The policy: the default roles (aggregated `admin`/`edit`/`view` included, settled as the
//! aggregation controller settles them) plus `--custom-roles` ClusterRoles of 12 rules each,
//! every fourth labelled `aggregate-to-view` (so `view`, `edit` and `admin` grow by them);
//! `--bindings` RoleBindings spread over `--namespaces` namespaces, each binding
//! `--users / --bindings` users and one group to `view`, `edit` or `admin` in turn; and a
//! ClusterRoleBinding per custom role for a group nobody here is in (so every subject lookup
//! meets a full index). Each request is timed alone (`Instant` around the call), users taken
//! in a scattered order so no two consecutive requests share a caller; every row checks that
//! each of its requests was decided as the row says.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use fedctl::api::request::Query;
use fedctl::api::{ApiConfig, ApiServer, Caller, Registry};
use fedctl::search::access::{self, ViewAttributes};
use fedctl::server::authz::{self as fauthz, ViewAuthz};
use fedctl::server::rbac::{policy, Attributes, Rbac, Target};
use fedctl::storage::memory::MemoryStorage;

/// Flags of `fedctl-bench authz`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Users bound by the RoleBindings (spread evenly over them).
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    /// RoleBindings.
    #[arg(long, default_value_t = 1_000)]
    pub bindings: usize,
    /// Namespaces the RoleBindings are spread over.
    #[arg(long, default_value_t = 200)]
    pub namespaces: usize,
    /// Custom ClusterRoles (12 rules each; every fourth aggregated into `view`).
    #[arg(long, default_value_t = 40)]
    pub custom_roles: usize,
    /// Timed requests per row.
    #[arg(long, default_value_t = 50_000)]
    pub requests: usize,
}

const GROUPS: [&str; 6] = ["", "apps", "batch", "networking.k8s.io", "policy", "example.com"];
const RESOURCES: [&str; 12] = ["pods", "configmaps", "services", "deployments", "jobs", "ingresses", "widgets", "gadgets", "leases", "secrets", "cronjobs", "statefulsets"];

fn custom_role(i: usize) -> Value {
    let rules: Vec<Value> = (0..12)
        .map(|r| {
            let verbs = if r % 3 == 0 { json!(["get", "list", "watch"]) } else { json!(["get", "list", "watch", "create", "update", "patch", "delete"]) };
            json!({"apiGroups": [GROUPS[(i + r) % GROUPS.len()]], "resources": [format!("{}-{i}", RESOURCES[r % RESOURCES.len()]), format!("{}-{i}/status", RESOURCES[r % RESOURCES.len()])], "verbs": verbs})
        })
        .collect();
    let mut labels = json!({"bench.fedctl.io/role": i.to_string()});
    if i % 4 == 0 {
        labels[format!("{}view", policy::AGGREGATE_TO)] = json!("true");
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("custom-{i}"), "labels": labels}, "rules": rules})
}

fn user(i: usize) -> String {
    format!("user-{i:05}")
}

/// The policy objects (resource, object) and, per user, the namespace it is bound in.
fn policy_objects(a: &Args) -> (Vec<(String, Value)>, Vec<String>) {
    let mut roles = policy::cluster_roles();
    roles.extend((0..a.custom_roles).map(custom_role));
    let roles = fedctl::server::rbac::aggregation::settled(roles);
    let mut out: Vec<(String, Value)> = roles.into_iter().map(|r| ("clusterroles".to_string(), r)).collect();
    out.extend(policy::cluster_role_bindings().into_iter().map(|b| ("clusterrolebindings".to_string(), b)));
    for i in 0..a.custom_roles {
        out.push((
            "clusterrolebindings".into(),
            json!({"metadata": {"name": format!("custom-{i}-ops")}, "roleRef": {"kind": "ClusterRole", "name": format!("custom-{i}")},
            "subjects": [{"kind": "Group", "name": format!("ops-{i}")}]}),
        ));
    }
    let per = a.users.div_ceil(a.bindings.max(1));
    let mut home = vec![String::new(); a.users];
    for b in 0..a.bindings {
        let ns = format!("ns-{:04}", b % a.namespaces.max(1));
        let role = match b % 3 {
            0 => "view".to_string(),
            1 => "edit".to_string(),
            _ => "admin".to_string(),
        };
        let mut subjects = vec![json!({"kind": "Group", "name": format!("team-{b}")})];
        for u in (b * per)..((b + 1) * per).min(a.users) {
            subjects.push(json!({"kind": "User", "name": user(u)}));
            home[u] = ns.clone();
        }
        out.push(("rolebindings".into(), json!({"metadata": {"name": format!("rb-{b}"), "namespace": ns}, "roleRef": {"kind": "ClusterRole", "name": role}, "subjects": subjects})));
    }
    (out, home)
}

/// Median and p99 in µs of `n` calls of `f(i)`, each timed alone; panics unless every call
/// returned `true` (was decided as the row expects).
async fn time<F, Fut>(n: usize, mut f: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut v = Vec::with_capacity(n);
    let mut yes = 0usize;
    for i in 0..n {
        let t = Instant::now();
        let ok = f(i).await;
        v.push(t.elapsed().as_secs_f64() * 1e6);
        yes += ok as usize;
    }
    assert_eq!(yes, n, "every request of the row decided as expected");
    crate::median_p99(v)
}

/// Runs the benchmark and prints one table (Markdown).
pub async fn run(a: Args) -> Result<(), String> {
    let (objects, home) = policy_objects(&a);
    let counts = |res: &str| objects.iter().filter(|(r, _)| r == res).count();
    let rules: usize = objects.iter().filter(|(r, _)| r == "clusterroles").map(|(_, o)| o["rules"].as_array().map_or(0, Vec::len)).sum();
    let (n_cr, n_crb, n_rb) = (counts("clusterroles"), counts("clusterrolebindings"), counts("rolebindings"));
    let rbac = Rbac::new();
    let built = Instant::now();
    rbac.load(objects);
    let build_ms = built.elapsed().as_secs_f64() * 1e3;
    let store: Arc<dyn fedctl::storage::Storage> = Arc::new(MemoryStorage::new());
    let api = ApiServer::new(Registry::federation(), store, ApiConfig::default());
    let view = ViewAuthz { api: api.clone(), rbac: rbac.clone() };
    let caller = |i: usize| {
        let u = i % a.users;
        Caller { user: user(u), groups: vec![format!("team-{}", u / a.users.div_ceil(a.bindings.max(1))), "system:authenticated".into()] }
    };
    let callers: Vec<Caller> = (0..a.users).map(caller).collect();
    let paths_allowed: Vec<String> = home.iter().map(|ns| format!("/api/v1/namespaces/{ns}/pods")).collect();
    let other = |ns: &str| if ns == "ns-0000" { "ns-0001".to_string() } else { "ns-0000".to_string() };
    let paths_denied: Vec<String> = home.iter().map(|ns| format!("/apis/apps/v1/namespaces/{}/deployments/web", other(ns))).collect();
    let q = Query::default();
    let n = a.requests;
    let (get, delete) = (http::Method::GET, http::Method::DELETE);
    // sanity: what each row measures is what it says
    assert!(fauthz::authorize(&api, &rbac, &callers[0], &get, &paths_allowed[0], &q).await.is_ok(), "an allowed request");
    assert!(fauthz::authorize(&api, &rbac, &callers[0], &delete, &paths_denied[0], &q).await.is_err(), "a denied request");

    let mut rows: Vec<(String, (f64, f64))> = Vec::new();
    let admin = Caller { user: "admin".into(), groups: vec!["system:masters".into(), "system:authenticated".into()] };
    let agent = Caller { user: "system:fedctl:agent:c1".into(), groups: vec!["system:fedctl:agents".into(), "system:authenticated".into()] };
    let list_pods = Attributes { verb: "list", target: Target::Resource { group: "", resource: "pods", subresource: "", namespace: "", name: "" } };
    let view_list = ViewAttributes { verb: "list".into(), group: String::new(), resource: "pods".into(), subresource: String::new(), namespace: String::new(), name: String::new(), namespaced: true };
    // (shared references, copied into each request's future)
    let (apir, rbacr, qr, adminr, agentr, viewr) = (&api, &rbac, &q, &admin, &agent, &view);
    let (allowedr, deniedr, callersr, list_podsr, view_listr) = (&paths_allowed, &paths_denied, &callers, &list_pods, &view_list);
    let users = a.users;
    // users in a scattered order, so consecutive requests share no caller
    let pick = move |i: usize| (i * 7919) % users;
    rows.push((
        "fixed: admin (`system:masters`) GET pods in a namespace".into(),
        time(n, move |i| async move { fauthz::authorize(apir, rbacr, adminr, &http::Method::GET, &allowedr[pick(i)], qr).await.is_ok() }).await,
    ));
    rows.push((
        "fixed: agent lists the Works of its exec namespace".into(),
        time(n, move |_| async move { fauthz::authorize(apir, rbacr, agentr, &http::Method::GET, "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-c1/works", qr).await.is_ok() }).await,
    ));
    rows.push((
        "RBAC: allowed (GET pods in the user's namespace)".into(),
        time(n, move |i| async move { fauthz::authorize(apir, rbacr, &callersr[pick(i)], &http::Method::GET, &allowedr[pick(i)], qr).await.is_ok() }).await,
    ));
    rows.push((
        "RBAC: denied (DELETE a deployment in another namespace)".into(),
        time(n, move |i| async move { fauthz::authorize(apir, rbacr, &callersr[pick(i)], &http::Method::DELETE, &deniedr[pick(i)], qr).await.is_err() }).await,
    ));
    rows.push((
        "RBAC: namespace grant of `list pods` (`Rbac::namespaces`)".into(),
        time(n, move |i| async move {
            let c = &callersr[pick(i)];
            rbacr.namespaces(&c.user, &c.groups, list_podsr).limited().is_some_and(|s| s.len() == 1)
        })
        .await,
    ));
    rows.push(("global view: `kubectl get pods -A` decided (namespace grant)".into(), time(n, move |i| async move { access::decide(viewr, &callersr[pick(i)], view_listr).await.is_ok() }).await));
    rows.push(("global view: the same for an admin".into(), time(n, move |_| async move { access::decide(viewr, adminr, view_listr).await.is_ok() }).await));

    let sample: BTreeSet<String> = match rbac.namespaces(&callers[0].user, &callers[0].groups, &list_pods) {
        fedctl::server::rbac::NamespaceGrant::Some(s) => (*s).clone(),
        _ => BTreeSet::new(),
    };
    println!(
        "policy: {n_cr} ClusterRoles ({rules} rules, aggregates settled), {n_crb} ClusterRoleBindings, {n_rb} RoleBindings over {} namespaces, {} users; index built in {build_ms:.1} ms; user-00000's `list pods` grant: {sample:?}",
        a.namespaces, a.users
    );
    println!("{n} requests per row, each timed alone\n");
    println!("| request | p50 µs | p99 µs |");
    println!("|---|---:|---:|");
    for (name, (p50, p99)) in rows {
        println!("| {name} | {p50:.2} | {p99:.2} |");
    }
    Ok(())
}
