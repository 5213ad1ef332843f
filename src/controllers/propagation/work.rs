//! Works: naming, the manifest a member receives (template minus federation fields), and the desired Work object.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::api::federation::{exec_namespace, WORK_FINALIZER};
use crate::api::selector::valid_label_value;

/// Label on a Work: the member cluster it is for.
pub const LABEL_CLUSTER: &str = "fedctl.io/cluster";
/// Label on a Work: the template's kind (e.g. `Deployment`).
pub const LABEL_KIND: &str = "propagation.fedctl.io/kind";
/// Label on a Work: the template's namespace (empty for cluster-scoped templates).
pub const LABEL_NAMESPACE: &str = "propagation.fedctl.io/namespace";
/// Label on a Work: the template's name (hash-shortened when it is not a valid label value).
pub const LABEL_NAME: &str = "propagation.fedctl.io/name";
/// Annotation on a Work: the template key `<group>/<Kind>/<namespace>/<name>` (exact identity).
pub const ANNOTATION_TEMPLATE: &str = "propagation.fedctl.io/template";
/// Annotation on a template: the winning policy's name.
pub const ANNOTATION_POLICY_NAME: &str = "policy.fedctl.io/name";
/// Annotation on a template: the winning PropagationPolicy's namespace (absent for a
/// ClusterPropagationPolicy).
pub const ANNOTATION_POLICY_NAMESPACE: &str = "policy.fedctl.io/namespace";
/// Annotation on a template: per-cluster status breakdown (JSON object keyed by cluster).
pub const ANNOTATION_CLUSTER_STATUS: &str = "fedctl.io/cluster-status";
/// Annotation on a Work: the override policies applied to its manifest, as a JSON list
/// (`["ClusterOverridePolicy/mirror", "OverridePolicy/web"]`); absent when none applied.
pub const ANNOTATION_APPLIED_OVERRIDES: &str = "policy.fedctl.io/applied-overrides";
/// Annotation on a Work: the override rules that could not apply to its manifest, as a JSON
/// list of messages (`["OverridePolicy/web rule 0: plaintext[0] replace /spec/x: path /spec/x does not exist"]`).
pub const ANNOTATION_OVERRIDE_ERRORS: &str = "policy.fedctl.io/override-errors";
/// Annotation on a Work: the cluster's share of the template's replicas before overrides
/// (what replica division decided).
pub const ANNOTATION_SHARE: &str = "propagation.fedctl.io/replicas";
/// Work annotations the controller sets only sometimes: removed when the desired Work lacks them.
const OPTIONAL_ANNOTATIONS: &[&str] = &[ANNOTATION_APPLIED_OVERRIDES, ANNOTATION_OVERRIDE_ERRORS, ANNOTATION_SHARE];
/// kubectl's client-side apply record; never sent to members.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The name of a template's Work: `<kind-lower>-<namespace>-<name>` (`<kind-lower>-<name>`
/// for cluster-scoped templates). Longer than 63 characters → the first 52 characters, `-`,
/// and 10 hex digits of the SHA-256 of the full name, so distinct templates keep distinct
/// names and every name stays a DNS label length. A name with characters a Work name cannot
/// hold (RBAC names such as `system:metrics-server`, upper case) has them replaced by `-`
/// and gets the same hash suffix.
pub fn work_name(kind: &str, namespace: Option<&str>, name: &str) -> String {
    let full = match namespace {
        Some(ns) if !ns.is_empty() => format!("{}-{ns}-{name}", kind.to_ascii_lowercase()),
        _ => format!("{}-{name}", kind.to_ascii_lowercase()),
    };
    let clean: String = full.chars().map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' { c } else { '-' }).collect();
    if full.len() <= 63 && clean == full {
        return full;
    }
    let digest = hex::encode(Sha256::digest(full.as_bytes()));
    let mut head: String = clean.chars().take(52).collect();
    while head.ends_with('-') || head.ends_with('.') {
        head.pop();
    }
    format!("{head}-{}", &digest[..10])
}

/// A label value for `s`: itself when valid, else a 10-hex-digit hash prefixed `h-`.
fn label_value(s: &str) -> String {
    if valid_label_value(s) {
        s.to_string()
    } else {
        format!("h-{}", &hex::encode(Sha256::digest(s.as_bytes()))[..10])
    }
}

/// Whether an annotation is the federation's own and must not reach members.
fn federation_annotation(k: &str) -> bool {
    k == LAST_APPLIED || k.starts_with("policy.fedctl.io/") || k.starts_with("propagation.fedctl.io/") || k == ANNOTATION_CLUSTER_STATUS
}

/// The manifest a member applies: the template without server-set and federation fields —
/// `metadata.{uid, resourceVersion, creationTimestamp, generation, managedFields,
/// ownerReferences, finalizers, selfLink, deletionTimestamp, deletionGracePeriodSeconds,
/// generateName}`, `status`, kubectl's last-applied annotation and the `policy.fedctl.io/*`,
/// `propagation.fedctl.io/*` and `fedctl.io/cluster-status` annotations. A Service keeps
/// its `clusterIP` only when it is `None` (headless); members allocate their own. A
/// Namespace loses `spec` (its finalizers are the member's). The namespace is kept.
pub fn strip_manifest(template: &Value) -> Value {
    let mut m = template.clone();
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(o) = m.as_object_mut() {
        o.remove("status");
        if kind == "Namespace" {
            o.remove("spec");
        }
    }
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "ownerReferences",
            "finalizers",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generateName",
        ] {
            meta.remove(k);
        }
        let mut drop_ann = false;
        if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            ann.retain(|k, _| !federation_annotation(k));
            drop_ann = ann.is_empty();
        }
        if drop_ann {
            meta.remove("annotations");
        }
    }
    if kind == "Service" {
        if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
            if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
        }
    }
    m
}

/// The replica count of a template that can be divided: `spec.replicas` of a Deployment or
/// StatefulSet (default 1), `spec.parallelism` of a Job (default 1); `None` for other kinds,
/// which are always duplicated.
pub fn replicas_of(template: &Value) -> Option<i64> {
    match template.get("kind").and_then(Value::as_str)? {
        "Deployment" | "StatefulSet" => Some(template.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)),
        "Job" => Some(template.pointer("/spec/parallelism").and_then(Value::as_i64).unwrap_or(1)),
        _ => None,
    }
}

/// A Job's `spec.completions`, when set.
pub fn completions_of(template: &Value) -> Option<i64> {
    (template.get("kind").and_then(Value::as_str) == Some("Job")).then(|| template.pointer("/spec/completions").and_then(Value::as_i64)).flatten()
}

/// One cluster's share of a divisible template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// `spec.replicas` (Deployment, StatefulSet) or `spec.parallelism` (Job).
    pub replicas: i64,
    /// A Job's share of `spec.completions` (divided like the replicas), when it sets them.
    pub completions: Option<i64>,
}

/// Sets a manifest's share: `spec.replicas` (Deployment, StatefulSet) or
/// `spec.parallelism` and `spec.completions` (Job).
pub fn set_share(manifest: &mut Value, share: Share) {
    let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else { return };
    match kind.as_str() {
        "Deployment" | "StatefulSet" => {
            spec.insert("replicas".into(), json!(share.replicas));
        }
        "Job" => {
            spec.insert("parallelism".into(), json!(share.replicas));
            if let Some(c) = share.completions {
                spec.insert("completions".into(), json!(c));
            }
        }
        _ => {}
    }
}

/// Identity of a template as the controller keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TemplateKey {
    /// API group (`""` for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl TemplateKey {
    /// The key of a template object (`None` when it lacks kind or name).
    pub fn of(obj: &Value) -> Option<Self> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        Some(TemplateKey {
            group: group.into(),
            kind: obj.get("kind").and_then(Value::as_str)?.into(),
            namespace: obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("").into(),
            name: obj.pointer("/metadata/name").and_then(Value::as_str)?.into(),
        })
    }

    /// Parses `<group>/<Kind>/<namespace>/<name>`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.splitn(4, '/');
        let (g, k, ns, n) = (it.next()?, it.next()?, it.next()?, it.next()?);
        (!k.is_empty() && !n.is_empty()).then(|| TemplateKey { group: g.into(), kind: k.into(), namespace: ns.into(), name: n.into() })
    }

    /// The namespace, `None` for cluster-scoped templates.
    pub fn ns(&self) -> Option<&str> {
        (!self.namespace.is_empty()).then_some(self.namespace.as_str())
    }
}

impl std::fmt::Display for TemplateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}/{}", self.group, self.kind, self.namespace, self.name)
    }
}

/// The Work the controller wants for `template` on `cluster`: in `fed-exec-<cluster>`,
/// named by [`work_name`], labelled with the cluster and the template's kind, namespace and
/// name, annotated with the exact template key, `spec.manifests: [manifest]` with the
/// manifest's share set when `share` is given, and the agent's finalizer
/// ([`WORK_FINALIZER`]) set from the start (an update keeps the stored finalizers).
pub fn desired_work(template: &Value, key: &TemplateKey, cluster: &str, share: Option<Share>) -> Value {
    let mut manifest = strip_manifest(template);
    let mut annotations = Map::new();
    annotations.insert(ANNOTATION_TEMPLATE.into(), json!(key.to_string()));
    if let Some(s) = share {
        set_share(&mut manifest, s);
        annotations.insert(ANNOTATION_SHARE.into(), json!(s.replicas.to_string()));
    }
    let mut labels = Map::new();
    labels.insert(LABEL_CLUSTER.into(), json!(label_value(cluster)));
    labels.insert(LABEL_KIND.into(), json!(key.kind));
    labels.insert(LABEL_NAMESPACE.into(), json!(label_value(&key.namespace)));
    labels.insert(LABEL_NAME.into(), json!(label_value(&key.name)));
    json!({
        "apiVersion": "work.fedctl.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": work_name(&key.kind, key.ns(), &key.name),
            "namespace": exec_namespace(cluster),
            "labels": labels,
            "annotations": annotations,
            "finalizers": [WORK_FINALIZER],
        },
        "spec": {"manifests": [manifest]},
    })
}

/// Records what overrides did on a desired Work ([`ANNOTATION_APPLIED_OVERRIDES`],
/// [`ANNOTATION_OVERRIDE_ERRORS`]; nothing when the lists are empty).
pub fn set_override_annotations(work: &mut Value, outcome: &super::overrides::Outcome) {
    let Some(ann) = work.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) else { return };
    if !outcome.applied.is_empty() {
        ann.insert(ANNOTATION_APPLIED_OVERRIDES.into(), json!(json!(outcome.applied).to_string()));
    }
    if !outcome.failed.is_empty() {
        ann.insert(ANNOTATION_OVERRIDE_ERRORS.into(), json!(json!(outcome.failed).to_string()));
    }
}

/// The replica share a Work holds: [`ANNOTATION_SHARE`], else its manifest's replicas.
pub fn share_of(work: &Value) -> Option<i64> {
    match work.pointer("/metadata/annotations").and_then(|a| a.get(ANNOTATION_SHARE)).and_then(Value::as_str) {
        Some(s) => s.parse().ok(),
        None => work.pointer("/spec/manifests/0").and_then(replicas_of),
    }
}

/// Whether `existing` differs from `desired` in anything the controller owns: `spec`, the
/// labels and annotations `desired` sets, and the optional annotations it does not set.
pub fn work_differs(existing: &Value, desired: &Value) -> bool {
    if existing.get("spec") != desired.get("spec") {
        return true;
    }
    let has = |o: &Value, k: &str| o.pointer("/metadata/annotations").and_then(|a| a.get(k)).is_some();
    if OPTIONAL_ANNOTATIONS.iter().any(|k| has(existing, k) && !has(desired, k)) {
        return true;
    }
    for field in ["labels", "annotations"] {
        let want = desired.pointer(&format!("/metadata/{field}")).and_then(Value::as_object);
        let have = existing.pointer(&format!("/metadata/{field}")).and_then(Value::as_object);
        if let Some(want) = want {
            if want.iter().any(|(k, v)| have.and_then(|h| h.get(k)) != Some(v)) {
                return true;
            }
        }
    }
    false
}

/// `existing` with the controller-owned parts of `desired` applied (other labels,
/// annotations, finalizers and status untouched).
pub fn merge_work(existing: &Value, desired: &Value) -> Value {
    let mut out = existing.clone();
    out["spec"] = desired.get("spec").cloned().unwrap_or(json!({}));
    for field in ["labels", "annotations"] {
        if let Some(want) = desired.pointer(&format!("/metadata/{field}")).and_then(Value::as_object) {
            let meta = crate::api::object::meta_mut(&mut out);
            let entry = meta.entry(field).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            let m = entry.as_object_mut().expect("object");
            for (k, v) in want {
                m.insert(k.clone(), v.clone());
            }
            if field == "annotations" {
                for k in OPTIONAL_ANNOTATIONS {
                    if !want.contains_key(*k) {
                        m.remove(*k);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(work_name("Deployment", Some("shop"), "web"), "deployment-shop-web");
        assert_eq!(work_name("Namespace", None, "shop"), "namespace-shop");
        let long = work_name("ConfigMap", Some("a-rather-long-namespace-name"), "and-an-even-longer-config-map-name");
        assert_eq!(long.len(), 63);
        assert!(long.starts_with("configmap-a-rather-long-namespace-name-and-an-even-l"), "{long}");
        let other = work_name("ConfigMap", Some("a-rather-long-namespace-name"), "and-an-even-longer-config-map-name2");
        assert_ne!(long, other);
        assert!(crate::api::object::is_dns1123_label(&long));
        // truncation never leaves a dash before the hash separator
        let dashy = work_name("Secret", Some("n"), &format!("{}-{}", "x".repeat(42), "y".repeat(30)));
        assert!(!dashy.contains("--"), "{dashy}");
        // RBAC names take characters a Work name cannot: replaced, and kept distinct by the hash
        let colon = work_name("ClusterRole", None, "system:metrics-server");
        assert!(colon.starts_with("clusterrole-system-metrics-server-") && colon.len() == "clusterrole-system-metrics-server-".len() + 10, "{colon}");
        assert_ne!(colon, work_name("ClusterRole", None, "system-metrics-server"));
        assert_eq!(work_name("ClusterRole", None, "system-metrics-server"), "clusterrole-system-metrics-server");
    }

    #[test]
    fn keys_round_trip() {
        let k = TemplateKey { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() };
        assert_eq!(k.to_string(), "apps/Deployment/shop/web");
        assert_eq!(TemplateKey::parse("apps/Deployment/shop/web"), Some(k));
        let ns = TemplateKey::parse("/Namespace//shop").unwrap();
        assert_eq!(ns.ns(), None);
        assert_eq!(ns.group, "");
        let of = TemplateKey::of(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})).unwrap();
        assert_eq!(of.to_string(), "/ConfigMap/n/c");
    }

    #[test]
    fn stripping() {
        let t = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "9", "creationTimestamp": "t",
                "generation": 3, "managedFields": [{}], "ownerReferences": [{}], "finalizers": ["x"], "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "policy.fedctl.io/name": "p",
                    "fedctl.io/cluster-status": "{}", "team": "blue"}},
            "spec": {"replicas": 6, "template": {}},
            "status": {"readyReplicas": 6}
        });
        let m = strip_manifest(&t);
        assert_eq!(
            m,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}, "annotations": {"team": "blue"}},
                "spec": {"replicas": 6, "template": {}}
            })
        );
        let svc = strip_manifest(&json!({"kind": "Service", "metadata": {"name": "s", "annotations": {"policy.fedctl.io/name": "p"}}, "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}}));
        assert_eq!(svc, json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {}}));
        let headless = strip_manifest(&json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"clusterIP": "None"}}));
        assert_eq!(headless["spec"]["clusterIP"], "None");
        let ns = strip_manifest(&json!({"kind": "Namespace", "metadata": {"name": "shop"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}));
        assert_eq!(ns, json!({"kind": "Namespace", "metadata": {"name": "shop"}}));
    }

    #[test]
    fn desired_work_and_diff() {
        let t = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "uid": "u"}, "spec": {"replicas": 6}});
        let k = TemplateKey::of(&t).unwrap();
        let w = desired_work(&t, &k, "member-a", Some(Share { replicas: 4, completions: None }));
        assert_eq!(w["metadata"]["name"], "deployment-shop-web");
        assert_eq!(w["metadata"]["namespace"], "fed-exec-member-a");
        assert_eq!(w["metadata"]["labels"][LABEL_CLUSTER], "member-a");
        assert_eq!(w["metadata"]["annotations"][ANNOTATION_TEMPLATE], "apps/Deployment/shop/web");
        assert_eq!(w["spec"]["manifests"][0]["spec"]["replicas"], 4);
        assert!(w["spec"]["manifests"][0]["metadata"].get("uid").is_none());
        // a stored Work with extra metadata and status is not different
        let mut stored = w.clone();
        stored["metadata"]["uid"] = json!("x");
        stored["metadata"]["labels"]["extra"] = json!("y");
        stored["metadata"]["finalizers"] = json!(["agent"]);
        stored["status"] = json!({"manifestStatuses": []});
        assert!(!work_differs(&stored, &w));
        let w2 = desired_work(&t, &k, "member-a", Some(Share { replicas: 3, completions: None }));
        assert!(work_differs(&stored, &w2));
        let merged = merge_work(&stored, &w2);
        assert_eq!(merged["spec"]["manifests"][0]["spec"]["replicas"], 3);
        assert_eq!(merged["metadata"]["labels"]["extra"], "y");
        assert_eq!(merged["status"], json!({"manifestStatuses": []}));
        assert!(!work_differs(&merged, &w2));
    }

    #[test]
    fn job_share_splits_completions() {
        let mut j = json!({"kind": "Job", "spec": {"parallelism": 4, "completions": 8}});
        assert_eq!(completions_of(&j), Some(8));
        set_share(&mut j, Share { replicas: 1, completions: Some(2) });
        assert_eq!(j["spec"], json!({"parallelism": 1, "completions": 2}));
        assert_eq!(replicas_of(&json!({"kind": "Job", "spec": {}})), Some(1));
        assert_eq!(replicas_of(&json!({"kind": "ConfigMap"})), None);
    }
}
