//! Typed OpenAPI v3 schemas of the built-in kinds, generated from k8s-openapi's `JsonSchema` implementations, with the extensions kubectl reads (GVK, patch merge keys, list types).
//!
//! kube-apiserver publishes, for every group-version, an OpenAPI 3.0 document whose
//! `components.schemas` hold each kind's definition (named as Go's package path:
//! `io.k8s.api.apps.v1.Deployment`) and every definition it refers to. kubectl reads it for
//! `kubectl explain` (the definition carrying `x-kubernetes-group-version-kind`) and, where
//! it computes a strategic merge patch from OpenAPI, for the patch metadata
//! (`x-kubernetes-patch-merge-key`, `x-kubernetes-patch-strategy`).
//!
//! The federation's own kinds (Cluster, Work, the policies) are described by
//! `schemas/federation.json`, written for this server; they take no strategic merge patch,
//! so they carry no patch extensions.
//!
//! The definitions of built-in kinds come from k8s-openapi (generated from Kubernetes 1.33's own OpenAPI
//! document: types, formats, descriptions, required fields). k8s-openapi does not carry the
//! patch extensions, so they are added from the strategic-merge table the server patches
//! with ([`super::patch`]'s `Ty::child`): the published merge keys are exactly the ones the
//! server merges by, so a patch kubectl computes from this document means to the server what
//! kubectl meant. Lists the table does not key stay `replace`, as on the server.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::patch::{Shape, Ty};
use super::registry::ResourceInfo;

/// Where v3 documents keep their definitions (`#/components/schemas/<name>`).
const COMPONENTS: &str = "#/components/schemas/";

/// Fields whose strategic merge patch also takes `$retainKeys` (Go's
/// `patchStrategy:"…retainKeys"`): switching a union's member clears the others. The server
/// honours the directive wherever a patch carries it; publishing it here lets kubectl send
/// it where kube-apiserver's types declare it.
const RETAIN_KEYS: &[(&str, &str)] = &[("io.k8s.api.apps.v1.DeploymentSpec", "strategy"), ("io.k8s.api.core.v1.PodSpec", "volumes")];

/// The typed definitions of one group-version's built-in and federation kinds.
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    /// `components.schemas` entries: every kind's definition and all they refer to.
    pub schemas: Map<String, Value>,
    /// Definition name of each kind, by kind (`Deployment` → `io.k8s.api.apps.v1.Deployment`).
    pub by_kind: HashMap<String, String>,
    /// Hex digest of `schemas` (16 characters; empty when there are none): part of the
    /// document's `hash` in `/openapi/v3`, by which clients cache it.
    pub digest: String,
}

/// The typed definitions of the built-in kinds among `resources` of `group`/`version`,
/// computed once per group-version (and set of kinds) and process: the built-in kinds do
/// not change while the server runs. Kinds without a schema ([`ResourceInfo::schema`]
/// `None`: custom resources, described by their CRDs) are not in the result.
pub fn definitions(group: &str, version: &str, resources: &[Arc<ResourceInfo>]) -> Arc<Definitions> {
    static CACHE: Memo<Definitions> = OnceLock::new();
    let typed = || resources.iter().filter(|r| r.group == group && r.version == version && r.schema.is_some());
    // keyed by the kinds too: registries of one process (the federation's, a member's)
    // may serve different kinds of one group-version
    let key = typed().fold(format!("{group}/{version}"), |k, r| k + " " + r.kind);
    memo(&CACHE, key, || build(typed()))
}

/// The typed definitions of every group-version among `resources`, in Swagger 2.0 form
/// for `/openapi/v2` (mirrors kube-apiserver's v2 document; [`super::discovery::v2_schema`]
/// of each): references point under `#/definitions/`, and a reference with a description
/// (`allOf: [{$ref}]` in v3) is a `$ref` with the description beside it. Computed once per
/// set of kinds.
pub fn v2_definitions(resources: &[Arc<ResourceInfo>]) -> Arc<Map<String, Value>> {
    static CACHE: Memo<Map<String, Value>> = OnceLock::new();
    memo(&CACHE, kinds_key(resources), || {
        let mut gvs: Vec<(&str, &str)> = resources.iter().filter(|r| r.schema.is_some()).map(|r| (r.group, r.version)).collect();
        gvs.sort_unstable();
        gvs.dedup();
        let mut out = Map::new();
        for (g, v) in gvs {
            // definitions shared by group-versions (ObjectMeta, …) are the same in each
            for (name, def) in &definitions(g, v, resources).schemas {
                out.entry(name.clone()).or_insert_with(|| super::discovery::v2_schema(def));
            }
        }
        out
    })
}

/// A process-wide cache of values derived from a registry's kinds, by [`kinds_key`]-like key.
pub(super) type Memo<T> = OnceLock<Mutex<HashMap<String, Arc<T>>>>;

/// The value of `cache` under `key`, built by `build` the first time.
pub(super) fn memo<T>(cache: &'static Memo<T>, key: String, build: impl FnOnce() -> T) -> Arc<T> {
    let cache = cache.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return v.clone();
    }
    let built = Arc::new(build());
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, built.clone());
    built
}

/// A cache key naming the typed kinds of `resources` (group/version/kind of each).
pub fn kinds_key(resources: &[Arc<ResourceInfo>]) -> String {
    resources.iter().filter(|r| r.schema.is_some()).map(|r| format!("{}/{}/{} ", r.group, r.version, r.kind)).collect()
}

fn build<'a>(resources: impl Iterator<Item = &'a Arc<ResourceInfo>>) -> Definitions {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut roots = Vec::new();
    let mut inline = Vec::new();
    for r in resources {
        let Some(schema_of) = r.schema else { continue };
        let root = schema_of(&mut generator);
        match root.get("$ref").and_then(Value::as_str).and_then(|s| s.strip_prefix(COMPONENTS)) {
            Some(name) => roots.push((name.to_string(), r.clone())),
            // a whole schema (the federation's kinds): named as a custom resource's, its
            // `metadata` an ObjectMeta as kube-apiserver publishes a custom resource's (kubectl
            // looks up `metadata.annotations` there when it computes an apply patch)
            None => {
                let name = super::discovery::definition_name(r);
                let meta = generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>().to_value();
                let mut v = root.to_value();
                if let Some(p) = v.get_mut("properties").and_then(Value::as_object_mut) {
                    let description = p.get("metadata").and_then(|m| m.get("description")).cloned().unwrap_or_else(|| json!("Standard object's metadata."));
                    p.insert("metadata".into(), json!({"allOf": [meta], "description": description}));
                }
                inline.push((name.clone(), v));
                roots.push((name, r.clone()));
            }
        }
    }
    let mut schemas = generator.take_definitions(true);
    schemas.extend(inline);
    let mut out = Definitions::default();
    let mut seen = HashSet::new();
    for (name, r) in &roots {
        if let Some(def) = schemas.get_mut(name).and_then(Value::as_object_mut) {
            let gvks = def.entry("x-kubernetes-group-version-kind").or_insert_with(|| json!([]));
            if let Some(list) = gvks.as_array_mut() {
                list.push(json!({"group": r.group, "kind": r.kind, "version": r.version}));
            }
            // kube's documents do not list `metadata` as required (k8s-openapi's types hold
            // it as a plain field, so its schemas do)
            if let Some(req) = def.get_mut("required").and_then(Value::as_array_mut) {
                req.retain(|f| f != "metadata");
                if req.is_empty() {
                    def.remove("required");
                }
            }
        }
        // strategic merge patch applies to kubectl's built-in kinds only
        if r.builtin {
            annotate(&mut schemas, name, Ty::root(&r.api_version(), r.kind), &mut seen);
        }
        out.by_kind.insert(r.kind.to_string(), name.clone());
    }
    for (name, field) in RETAIN_KEYS {
        if let Some(p) = schemas.get_mut(*name).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(*field)) {
            let strategy = match p.get("x-kubernetes-patch-strategy").and_then(Value::as_str) {
                Some(s) => format!("{s},retainKeys"),
                None => "retainKeys".to_string(),
            };
            p["x-kubernetes-patch-strategy"] = Value::String(strategy);
        }
    }
    // kube-apiserver publishes these two as strings with a format; k8s-openapi only marks
    // them `x-kubernetes-int-or-string`
    if let Some(d) = schemas.get_mut("io.k8s.apimachinery.pkg.util.intstr.IntOrString") {
        d["type"] = json!("string");
        d["format"] = json!("int-or-string");
    }
    if let Some(d) = schemas.get_mut("io.k8s.apimachinery.pkg.api.resource.Quantity") {
        d["type"] = json!("string");
    }
    if !schemas.is_empty() {
        use sha2::Digest;
        let sum = sha2::Sha256::digest(serde_json::to_vec(&schemas).unwrap_or_default());
        out.digest = hex::encode(&sum[..8]);
    }
    out.schemas = schemas;
    out
}

/// The definition a property schema refers to: `$ref`, `allOf: [{$ref}]` (a reference with a
/// description), or the same inside `items` or `additionalProperties` (lists and maps of a
/// type).
fn target(prop: &Value) -> Option<String> {
    let direct =
        |v: &Value| v.get("$ref").or_else(|| v.get("allOf").and_then(|a| a.get(0)).and_then(|a| a.get("$ref"))).and_then(Value::as_str).and_then(|s| s.strip_prefix(COMPONENTS)).map(str::to_string);
    direct(prop).or_else(|| prop.get("items").and_then(direct)).or_else(|| prop.get("additionalProperties").and_then(direct))
}

/// Adds the patch extensions of `ty`'s fields to definition `name` and, following references,
/// to the definitions below it. A definition reached as two types (it never is with today's
/// table) gets the extensions of both.
fn annotate(schemas: &mut Map<String, Value>, name: &str, ty: Ty, seen: &mut HashSet<(String, Ty)>) {
    if ty == Ty::Any || !seen.insert((name.to_string(), ty)) {
        return;
    }
    let fields: Vec<String> = match schemas.get(name).and_then(|d| d.get("properties")).and_then(Value::as_object) {
        Some(p) => p.keys().cloned().collect(),
        None => return,
    };
    let mut below = Vec::new();
    for field in fields {
        let (child, shape) = ty.child(&field);
        let Some(prop) = schemas.get_mut(name).and_then(|d| d.get_mut("properties")).and_then(|p| p.get_mut(&field)) else {
            continue;
        };
        match shape {
            Shape::Plain => {}
            Shape::AtomicMap => prop["x-kubernetes-map-type"] = json!("atomic"),
            Shape::Set => {
                prop["x-kubernetes-patch-strategy"] = json!("merge");
                prop["x-kubernetes-list-type"] = json!("set");
            }
            Shape::Keyed { merge_key, keys } => {
                prop["x-kubernetes-patch-merge-key"] = json!(merge_key);
                prop["x-kubernetes-patch-strategy"] = json!("merge");
                prop["x-kubernetes-list-type"] = json!("map");
                prop["x-kubernetes-list-map-keys"] = json!(keys.iter().map(|k| k.name).collect::<Vec<_>>());
            }
        }
        if child != Ty::Any {
            if let Some(t) = target(prop) {
                below.push((t, child));
            }
        }
    }
    for (t, child) in below {
        annotate(schemas, &t, child, seen);
    }
}

/// The schema of federation kind `kind` (`Cluster`, `Work`, `PropagationPolicy`, …) from
/// `schemas/federation.json`, as a whole schema for [`ResourceInfo::schema`]; an empty
/// object schema for a kind the file does not describe.
pub fn federation_schema(kind: &str) -> schemars::Schema {
    static DOC: OnceLock<Map<String, Value>> = OnceLock::new();
    let doc = DOC.get_or_init(|| serde_json::from_str(include_str!("schemas/federation.json")).unwrap_or_default());
    let v = doc.get(kind).cloned().unwrap_or_else(|| json!({"type": "object"}));
    schemars::Schema::try_from(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apps_v1() -> Arc<Definitions> {
        let reg = crate::api::registry::Registry::federation();
        definitions("apps", "v1", reg.all())
    }

    #[test]
    fn kinds_carry_their_gvk_and_typed_fields() {
        let d = apps_v1();
        let name = &d.by_kind["Deployment"];
        assert_eq!(name, "io.k8s.api.apps.v1.Deployment");
        let dep = &d.schemas[name];
        assert_eq!(dep["x-kubernetes-group-version-kind"], json!([{"group": "apps", "kind": "Deployment", "version": "v1"}]));
        assert!(dep.get("required").is_none(), "{dep}");
        let spec = &d.schemas["io.k8s.api.apps.v1.DeploymentSpec"];
        assert_eq!(spec["properties"]["replicas"]["type"], "integer");
        assert!(d.schemas.contains_key("io.k8s.api.core.v1.PodSpec"), "referenced definitions are included");
        assert_eq!(d.schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"], "int-or-string");
    }

    #[test]
    fn federation_kinds_are_described() {
        let reg = crate::api::registry::Registry::federation();
        let d = definitions("policy.fedctl.io", "v1alpha1", reg.all());
        let name = &d.by_kind["PropagationPolicy"];
        assert_eq!(name, "io.fedctl.policy.v1alpha1.PropagationPolicy");
        let pp = &d.schemas[name];
        assert_eq!(pp["x-kubernetes-group-version-kind"][0]["kind"], "PropagationPolicy");
        let rs = &pp["properties"]["spec"]["properties"]["placement"]["properties"]["replicaScheduling"];
        assert_eq!(rs["properties"]["type"]["enum"], json!(["Duplicated", "Divided"]));
        assert!(pp["properties"]["spec"]["properties"]["resourceSelectors"].get("x-kubernetes-patch-merge-key").is_none());
        // metadata is an ObjectMeta, whose definition the document carries
        let meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
        assert_eq!(pp["properties"]["metadata"]["allOf"][0]["$ref"], format!("{COMPONENTS}{meta}"));
        assert!(d.schemas[meta]["properties"]["annotations"].is_object());
        for (g, kinds) in [("cluster.fedctl.io", &["Cluster"][..]), ("work.fedctl.io", &["Work"]), ("policy.fedctl.io", &["ClusterPropagationPolicy", "OverridePolicy", "ClusterOverridePolicy"])] {
            let d = definitions(g, "v1alpha1", reg.all());
            for k in kinds {
                let def = &d.schemas[&d.by_kind[*k]];
                assert!(def["properties"]["spec"]["properties"].is_object(), "{k}: {def}");
            }
        }
    }

    #[test]
    fn v2_definitions_use_swagger_references() {
        let reg = crate::api::registry::Registry::federation();
        let d = v2_definitions(reg.all());
        let dep = &d["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(dep["x-kubernetes-group-version-kind"], json!([{"group": "apps", "kind": "Deployment", "version": "v1"}]));
        let spec = &dep["properties"]["spec"];
        assert_eq!(spec["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentSpec", "{spec}");
        assert!(spec.get("allOf").is_none() && spec["description"].is_string(), "{spec}");
        let containers = &d["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["items"]["$ref"], "#/definitions/io.k8s.api.core.v1.Container", "{containers}");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert!(d.contains_key("io.k8s.api.core.v1.ConfigMap") && d.contains_key("io.k8s.api.rbac.v1.ClusterRole"));
    }

    #[test]
    fn patch_extensions_follow_the_servers_merge_table() {
        let d = apps_v1();
        let pod_spec = &d.schemas["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert_eq!(pod_spec["containers"]["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(pod_spec["containers"]["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(pod_spec["volumes"]["x-kubernetes-patch-strategy"], "merge,retainKeys");
        // tolerations have no patch strategy in kube's types: replaced whole
        assert!(pod_spec["tolerations"].get("x-kubernetes-patch-strategy").is_none());
        let container = &d.schemas["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(container["ports"]["x-kubernetes-list-map-keys"], json!(["containerPort", "protocol"]));
        assert_eq!(container["env"]["x-kubernetes-patch-merge-key"], "name");
        let meta = &d.schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"];
        assert_eq!(meta["finalizers"]["x-kubernetes-list-type"], "set");
        assert_eq!(meta["ownerReferences"]["x-kubernetes-patch-merge-key"], "uid");
        let status = &d.schemas["io.k8s.api.apps.v1.DeploymentStatus"]["properties"];
        assert_eq!(status["conditions"]["x-kubernetes-patch-merge-key"], "type");
        let spec = &d.schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"];
        assert_eq!(spec["strategy"]["x-kubernetes-patch-strategy"], "retainKeys");
        assert_eq!(spec["selector"]["x-kubernetes-map-type"], "atomic");
    }
}
