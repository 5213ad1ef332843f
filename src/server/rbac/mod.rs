//! Role-based access control for the federation API (mirrors kube-apiserver's RBAC authorizer, `plugin/pkg/auth/authorizer/rbac`): an in-memory index of the stored Roles, ClusterRoles and bindings, kept current by a watch of the store; uses `api`, `storage` and `pki`.
//!
//! The four kinds live under one store prefix, so one list and one watch keep the index
//! current: every change rebuilds, aside, a map from each subject (user, group) to the rule
//! sets it is granted cluster-wide and per namespace, then swaps it in. An authorization is
//! a read lock held for an `Arc` clone and a scan of the caller's rule sets: no store read,
//! no allocation. A binding to a role that does not exist (yet) grants nothing until it does.
//!
//! The submodules add what kube-apiserver builds around the authorizer: the default roles
//! ([`policy`]), ClusterRole aggregation ([`aggregation`]), escalation prevention
//! ([`escalation`]), the access reviews ([`review`]) and impersonation ([`impersonation`]).

pub mod aggregation;
pub mod escalation;
pub mod impersonation;
pub mod policy;
pub mod review;
pub mod rules;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use serde_json::Value;

pub use crate::search::access::NamespaceGrant;
pub use rules::{Attributes, Rule, Target};

use crate::storage::{Storage, StorageError, WatchEvent};

/// API group of the RBAC kinds.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// Store prefix holding every RBAC object (`/registry/rbac.authorization.k8s.io/<resource>/…`).
pub const RBAC_PREFIX: &str = "/registry/rbac.authorization.k8s.io/";
/// User-name prefix of service accounts: `system:serviceaccount:<namespace>:<name>`.
pub const SA_USER_PREFIX: &str = "system:serviceaccount:";
/// Group of every service account.
pub const SA_GROUP: &str = "system:serviceaccounts";

/// Errors of the RBAC module.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// Reading or watching the store failed (the index relists a second later).
    #[error("rbac store: {0}")]
    Store(#[from] StorageError),
}

/// The user and groups of service account `ns/name` (kube's `serviceaccount.UserInfo`):
/// `system:serviceaccount:<ns>:<name>`, groups `system:serviceaccounts` and
/// `system:serviceaccounts:<ns>`.
pub fn service_account_user(ns: &str, name: &str) -> (String, Vec<String>) {
    (format!("{SA_USER_PREFIX}{ns}:{name}"), vec![SA_GROUP.to_string(), format!("{SA_GROUP}:{ns}")])
}

/// The rule sets granted to one subject.
#[derive(Default)]
struct Grants {
    /// By ClusterRoleBindings: apply everywhere.
    cluster: Vec<Arc<[Rule]>>,
    /// By RoleBindings, by namespace.
    namespaced: HashMap<String, Vec<Arc<[Rule]>>>,
}

/// One immutable snapshot of the RBAC objects, indexed by subject.
#[derive(Default)]
struct Index {
    users: HashMap<String, Grants>,
    groups: HashMap<String, Grants>,
    cluster_roles: HashMap<String, Arc<[Rule]>>,
    roles: HashMap<(String, String), Arc<[Rule]>>,
}

/// The stored RBAC objects by resource (`roles`, …) and `namespace/name` (`/name`).
type Objects = BTreeMap<(String, String), Value>;

/// The RBAC authorizer: the rule index plus the objects it was built from.
pub struct Rbac {
    index: RwLock<Arc<Index>>,
    objects: std::sync::Mutex<Objects>,
    /// Bumped after every rebuild (and set to at least 1 once synced): the aggregation
    /// controller and tests wait on it.
    generation: tokio::sync::watch::Sender<u64>,
}

impl Default for Rbac {
    fn default() -> Self {
        Rbac { index: RwLock::default(), objects: Default::default(), generation: tokio::sync::watch::Sender::new(0) }
    }
}

fn key_parts(key: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix(RBAC_PREFIX)?;
    let (resource, id) = rest.split_once('/')?;
    Some((resource.to_string(), id.to_string()))
}

fn meta<'a>(o: &'a Value, field: &str) -> &'a str {
    o.pointer(&format!("/metadata/{field}")).and_then(Value::as_str).unwrap_or("")
}

/// Adds `rules` to the subjects of `binding` (namespace `ns`, `""` for a ClusterRoleBinding).
fn grant(idx: &mut Index, binding: &Value, ns: &str, rules: Arc<[Rule]>) {
    let Some(subjects) = binding.get("subjects").and_then(Value::as_array) else { return };
    for s in subjects {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        let (map, key) = match kind {
            "User" => (&mut idx.users, name.to_string()),
            "Group" => (&mut idx.groups, name.to_string()),
            "ServiceAccount" => {
                let sa_ns = s.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or(ns);
                (&mut idx.users, service_account_user(sa_ns, name).0)
            }
            _ => continue,
        };
        let g = map.entry(key).or_default();
        if ns.is_empty() {
            g.cluster.push(rules.clone());
        } else {
            g.namespaced.entry(ns.to_string()).or_default().push(rules.clone());
        }
    }
}

fn build(objects: &Objects) -> Index {
    let mut idx = Index::default();
    for ((res, _), o) in objects {
        let rules: Arc<[Rule]> = Rule::list_of(o).into();
        match res.as_str() {
            "clusterroles" => {
                idx.cluster_roles.insert(meta(o, "name").to_string(), rules);
            }
            "roles" => {
                idx.roles.insert((meta(o, "namespace").to_string(), meta(o, "name").to_string()), rules);
            }
            _ => {}
        }
    }
    for ((res, _), o) in objects {
        let cluster_binding = match res.as_str() {
            "clusterrolebindings" => true,
            "rolebindings" => false,
            _ => continue,
        };
        let ns = if cluster_binding { "" } else { meta(o, "namespace") };
        let kind = o.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
        let name = o.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("").to_string();
        let rules = match kind {
            "ClusterRole" => idx.cluster_roles.get(&name).cloned(),
            "Role" if !cluster_binding => idx.roles.get(&(ns.to_string(), name)).cloned(),
            _ => None,
        };
        if let Some(rules) = rules {
            grant(&mut idx, o, ns, rules);
        }
    }
    idx
}

impl Rbac {
    /// An empty authorizer (grants nothing until [`Rbac::run`] has listed the store).
    pub fn new() -> Arc<Rbac> {
        Arc::new(Rbac::default())
    }

    fn snapshot(&self) -> Arc<Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `user` (with `groups`) is allowed `a` by some binding (kube's RBAC
    /// `Authorize` returning Allow). Reads only memory.
    pub fn allows(&self, user: &str, groups: &[String], a: &Attributes<'_>) -> bool {
        let idx = self.snapshot();
        let ns = a.namespace();
        let check =
            |g: &Grants| g.cluster.iter().any(|rs| rs.iter().any(|r| r.allows(a))) || (!ns.is_empty() && g.namespaced.get(ns).is_some_and(|sets| sets.iter().any(|rs| rs.iter().any(|r| r.allows(a)))));
        idx.users.get(user).is_some_and(check) || groups.iter().any(|g| idx.groups.get(g).is_some_and(check))
    }

    /// Where `user` (with `groups`) is allowed `a` (its namespace ignored): [`NamespaceGrant::All`]
    /// when a ClusterRoleBinding grants it, else the namespaces whose RoleBindings grant it
    /// (kube-apiserver has no such call; the global view filters reads across namespaces
    /// by it). Reads only memory; one pass over the caller's bindings.
    pub fn namespaces(&self, user: &str, groups: &[String], a: &Attributes<'_>) -> NamespaceGrant {
        let idx = self.snapshot();
        let grants = idx.users.get(user).into_iter().chain(groups.iter().filter_map(|g| idx.groups.get(g)));
        let mut found = std::collections::BTreeSet::new();
        for g in grants {
            if g.cluster.iter().any(|rs| rs.iter().any(|r| r.allows(a))) {
                return NamespaceGrant::All;
            }
            for (ns, sets) in &g.namespaced {
                if !found.contains(ns) && sets.iter().any(|rs| rs.iter().any(|r| r.allows(a))) {
                    found.insert(ns.clone());
                }
            }
        }
        NamespaceGrant::of(found)
    }

    /// Replaces the index with one built from `objects` (each the plural resource —
    /// `roles`, `clusterroles`, `rolebindings`, `clusterrolebindings` — and the object), as
    /// if the store held exactly these: for benchmarks and tests that have no store.
    pub fn load(&self, objects: impl IntoIterator<Item = (String, Value)>) {
        {
            let mut objs = self.objects.lock().unwrap_or_else(|e| e.into_inner());
            objs.clear();
            for (res, o) in objects {
                let id = format!("{}/{}", meta(&o, "namespace"), meta(&o, "name"));
                objs.insert((res, id), o);
            }
        }
        self.rebuild();
    }

    /// Every rule `user` holds in namespace `ns` (`""`: only the cluster-wide ones), without
    /// duplicates (kube's `RulesFor`, for SelfSubjectRulesReview and escalation checks).
    pub fn rules_for(&self, user: &str, groups: &[String], ns: &str) -> Vec<Rule> {
        let idx = self.snapshot();
        let mut out: Vec<Rule> = Vec::new();
        let mut add = |g: &Grants| {
            let local = if ns.is_empty() { None } else { g.namespaced.get(ns) };
            for set in g.cluster.iter().chain(local.into_iter().flatten()) {
                for r in set.iter() {
                    if !out.contains(r) {
                        out.push(r.clone());
                    }
                }
            }
        };
        if let Some(g) = idx.users.get(user) {
            add(g);
        }
        for g in groups {
            if let Some(g) = idx.groups.get(g) {
                add(g);
            }
        }
        out
    }

    /// The rules of ClusterRole `name` (`None` when it does not exist).
    pub fn cluster_role_rules(&self, name: &str) -> Option<Vec<Rule>> {
        self.snapshot().cluster_roles.get(name).map(|r| r.to_vec())
    }

    /// The rules of Role `ns/name`.
    pub fn role_rules(&self, ns: &str, name: &str) -> Option<Vec<Rule>> {
        self.snapshot().roles.get(&(ns.to_string(), name.to_string())).map(|r| r.to_vec())
    }

    /// The stored ClusterRoles (for the aggregation controller).
    pub fn cluster_roles(&self) -> Vec<Value> {
        let objs = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        objs.iter().filter(|((res, _), _)| res == "clusterroles").map(|(_, v)| v.clone()).collect()
    }

    /// A receiver of the rebuild generation: changes after every rebuild; at least 1 once
    /// the store was listed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Whether the index was built from a listing of the store.
    pub fn synced(&self) -> bool {
        *self.generation.borrow() > 0
    }

    fn rebuild(&self) {
        let idx = {
            let objs = self.objects.lock().unwrap_or_else(|e| e.into_inner());
            build(&objs)
        };
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(idx);
        self.generation.send_modify(|g| *g += 1);
    }

    fn apply(&self, ev: WatchEvent) {
        let mut objs = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        match ev {
            WatchEvent::Put { kv, .. } => {
                if let (Some(k), Ok(v)) = (key_parts(&kv.key), serde_json::from_slice::<Value>(&kv.value)) {
                    objs.insert(k, v);
                }
            }
            WatchEvent::Delete { prev, .. } => {
                if let Some(k) = key_parts(&prev.key) {
                    objs.remove(&k);
                }
            }
            WatchEvent::Progress(_) => {}
        }
    }

    /// Lists the RBAC objects of `store` and follows their changes, forever (spawn it). After
    /// an error it keeps its last index and relists a second later.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Storage>) {
        loop {
            if let Err(e) = self.sync_and_follow(&*store).await {
                tracing::debug!(error = %e, "rbac: relisting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn sync_and_follow(&self, store: &dyn Storage) -> Result<(), RbacError> {
        let list = store.list(RBAC_PREFIX, "", 0, 0).await?;
        let mut watch = store.watch(RBAC_PREFIX, list.revision, None).await?;
        {
            let mut objs = self.objects.lock().unwrap_or_else(|e| e.into_inner());
            objs.clear();
            for kv in &list.kvs {
                if let (Some(k), Ok(v)) = (key_parts(&kv.key), serde_json::from_slice::<Value>(&kv.value)) {
                    objs.insert(k, v);
                }
            }
        }
        self.rebuild();
        while let Some(ev) = watch.next().await {
            self.apply(ev?);
            // a burst of changes (the default policy at first start) rebuilds once
            while let Some(Some(ev)) = watch.next().now_or_never() {
                self.apply(ev?);
            }
            self.rebuild();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(rbac: &Rbac, objs: Vec<(&str, Value)>) {
        {
            let mut m = rbac.objects.lock().unwrap();
            for (res, o) in objs {
                let id = format!("{}/{}", meta(&o, "namespace"), meta(&o, "name"));
                m.insert((res.to_string(), id), o);
            }
        }
        rbac.rebuild();
    }

    fn get<'a>(resource: &'a str, ns: &'a str) -> Attributes<'a> {
        Attributes { verb: "get", target: Target::Resource { group: "", resource, subresource: "", namespace: ns, name: "x" } }
    }

    #[test]
    fn bindings_grant_by_scope_and_subject() {
        let rbac = Rbac::default();
        load(
            &rbac,
            vec![
                ("clusterroles", json!({"metadata": {"name": "reader"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]})),
                ("roles", json!({"metadata": {"name": "cm", "namespace": "a"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]})),
                (
                    "rolebindings",
                    json!({"metadata": {"name": "b1", "namespace": "a"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "bot"}]}),
                ),
                ("rolebindings", json!({"metadata": {"name": "b2", "namespace": "a"}, "roleRef": {"kind": "Role", "name": "cm"}, "subjects": [{"kind": "Group", "name": "devs"}]})),
                ("clusterrolebindings", json!({"metadata": {"name": "c1"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "Group", "name": "ops"}]})),
                ("rolebindings", json!({"metadata": {"name": "dangling", "namespace": "a"}, "roleRef": {"kind": "Role", "name": "missing"}, "subjects": [{"kind": "User", "name": "jane"}]})),
            ],
        );
        let none: Vec<String> = vec![];
        assert!(rbac.allows("jane", &none, &get("pods", "a")));
        assert!(!rbac.allows("jane", &none, &get("pods", "b")), "a RoleBinding grants in its namespace only");
        assert!(!rbac.allows("jane", &none, &get("pods", "")), "… and not at the cluster scope");
        assert!(!rbac.allows("jane", &none, &get("configmaps", "a")));
        assert!(rbac.allows("x", &["devs".to_string()], &get("configmaps", "a")));
        assert!(rbac.allows("system:serviceaccount:a:bot", &none, &get("pods", "a")), "a ServiceAccount subject defaults to the binding's namespace");
        assert!(rbac.allows("y", &["ops".to_string()], &get("pods", "")));
        assert!(rbac.allows("y", &["ops".to_string()], &get("pods", "b")), "a ClusterRoleBinding grants everywhere");
        assert_eq!(rbac.rules_for("jane", &none, "a").len(), 1);
        let across = |verb, resource| Attributes { verb, target: Target::Resource { group: "", resource, subresource: "", namespace: "", name: "" } };
        assert_eq!(rbac.namespaces("jane", &none, &across("get", "pods")), NamespaceGrant::of(["a".to_string()].into()));
        assert_eq!(rbac.namespaces("jane", &none, &across("list", "pods")), NamespaceGrant::None, "get only, not list");
        assert_eq!(rbac.namespaces("jane", &none, &across("get", "configmaps")), NamespaceGrant::None);
        assert_eq!(rbac.namespaces("y", &["ops".to_string()], &across("list", "pods")), NamespaceGrant::None);
        assert_eq!(rbac.namespaces("y", &["ops".to_string()], &across("get", "pods")), NamespaceGrant::All, "a ClusterRoleBinding grants everywhere");
        assert_eq!(rbac.namespaces("jane", &["ops".to_string()], &across("get", "pods")), NamespaceGrant::All, "a group's cluster grant wins over a user's namespaces");
        assert_eq!(rbac.namespaces("x", &["devs".to_string(), "ops".to_string()], &get("configmaps", "")), NamespaceGrant::of(["a".to_string()].into()));
        assert!(rbac.rules_for("jane", &none, "").is_empty());
    }
}
