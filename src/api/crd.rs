//! CustomResourceDefinitions: their validation, the resources they make an API server serve,
//! and the controller that keeps the served set and each CRD's status current (mirrors
//! apiextensions-apiserver's CRD strategy, naming and establishing controllers, and its
//! finalizer); uses the rest of the API layer and the storage trait only.
//!
//! The controller ([`run`]) lists the stored CRDs and follows them: every change rebuilds the
//! served set (one [`ResourceInfo`] per served version, swapped into the server's
//! [`super::registry::LiveRegistry`]), then sets `status.acceptedNames`, `storedVersions` and
//! the conditions `NamesAccepted` and `Established`. A CRD being deleted (the handler adds the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer, as kube-apiserver's CRD storage
//! does) stops being served at once; its custom resources are deleted, then the finalizer is
//! removed. On start the served set is rebuilt from the stored CRDs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::error::{ApiError, Cause};
use super::handler::{ApiServer, Caller, Ctx};
use super::kinds::intern;
use super::object::{self, meta_str};
use super::registry::{self as reg, Cell, Column, ResourceInfo};
use super::request::ResourceRequest;
use crate::storage::WatchEvent;

/// The finalizer kube-apiserver puts on a CRD being deleted until its custom resources are.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// What a CRD says about one served version of its custom resource.
#[derive(Debug)]
pub struct CustomVersion {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    /// `spec.versions[].schema.openAPIV3Schema` (`null` when the version has none).
    pub schema: Value,
    /// The version objects are stored in (`storage: true`); objects read through another
    /// version get its `apiVersion` (conversion strategy None).
    pub storage_version: &'static str,
    /// More than one version served: reads rewrite `apiVersion`.
    pub multi_version: bool,
    /// The schema has `x-kubernetes-validations` rules somewhere (only those can leave a
    /// rule unchecked, so only then is a written object looked at again for warnings).
    pub has_rules: bool,
    /// The `scale` subresource's paths, when served.
    pub scale: Option<ScalePaths>,
}

/// `subresources.scale` of a CRD version (JSON paths like `.spec.replicas`).
#[derive(Debug, Clone)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath` (optional).
    pub label_selector: Option<String>,
}

/// Whether a schema node or any node below it carries `x-kubernetes-validations`.
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_rules),
        Value::Array(a) => a.iter().any(has_rules),
        _ => false,
    }
}

/// Interns a list of names (short names, categories): each distinct list is leaked once.
fn intern_list(items: Vec<String>) -> &'static [&'static str] {
    static LISTS: OnceLock<Mutex<BTreeMap<Vec<String>, &'static [&'static str]>>> = OnceLock::new();
    let mut lists = LISTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = lists.get(&items) {
        return l;
    }
    let l: &'static [&'static str] = Box::leak(items.iter().map(|s| intern(s)).collect::<Vec<_>>().into_boxed_slice());
    lists.insert(items, l);
    l
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
}

/// kube's version priority (`version.CompareKubeAwareVersionStrings`): GA before beta before
/// alpha, higher numbers first; other names after, alphabetically.
fn version_key(v: &str) -> (u8, i64, i64, String) {
    let parse = |s: &str| -> Option<(u8, i64, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((0, -major, 0));
        }
        for (tag, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(tag) {
                let minor: i64 = n.parse().ok()?;
                return Some((rank, -major, -minor));
            }
        }
        None
    };
    match parse(v) {
        Some((r, a, b)) => (r, a, b, String::new()),
        None => (3, 0, 0, v.to_string()),
    }
}

/// The resources a CRD makes served (one per served version, the preferred version first),
/// or none when it is not established or is being deleted.
pub fn served_resources(crd: &Value) -> Vec<ResourceInfo> {
    if object::meta(crd).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        return Vec::new();
    }
    let spec = &crd["spec"];
    let (Some(group), Some(plural), Some(kind)) = (spec["group"].as_str(), spec.pointer("/names/plural").and_then(Value::as_str), spec.pointer("/names/kind").and_then(Value::as_str)) else {
        return Vec::new();
    };
    let singular = spec.pointer("/names/singular").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let Some(storage) = versions.iter().find(|v| v["storage"].as_bool() == Some(true)).and_then(|v| v["name"].as_str()) else {
        return Vec::new();
    };
    let mut served: Vec<&Value> = versions.iter().filter(|v| v["served"].as_bool() == Some(true)).collect();
    served.sort_by_key(|v| version_key(v["name"].as_str().unwrap_or("")));
    let multi = served.len() > 1;
    let short_names = intern_list(strings(spec.pointer("/names/shortNames")));
    let categories = intern_list(strings(spec.pointer("/names/categories")));
    let crd_name = meta_str(crd, "name").unwrap_or("").to_string();
    served
        .into_iter()
        .filter_map(|v| {
            let version = intern(v["name"].as_str()?);
            let scale = v.pointer("/subresources/scale").filter(|s| s.is_object()).map(|s| ScalePaths {
                spec_replicas: s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_string(),
                status_replicas: s["statusReplicasPath"].as_str().unwrap_or(".status.replicas").to_string(),
                label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
            });
            let columns = printer_columns(v.get("additionalPrinterColumns"));
            // selectableFields (`.spec.color`) become field selectors (`spec.color`)
            let selectable: Vec<String> = v["selectableFields"].as_array().into_iter().flatten().filter_map(|f| f["jsonPath"].as_str()).map(|p| p.trim_start_matches('.').to_string()).collect();
            let schema = v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null);
            let custom = CustomVersion { crd: crd_name.clone(), has_rules: has_rules(&schema), schema, storage_version: intern(storage), multi_version: multi, scale: scale.clone() };
            Some(ResourceInfo {
                short_names,
                categories,
                has_status: v.pointer("/subresources/status").is_some_and(Value::is_object),
                has_scale: scale.is_some(),
                has_generation: true,
                builtin: false,
                columns,
                field_selectors: intern_list(selectable),
                custom: Some(Arc::new(custom)),
                ..reg::base(intern(group), version, intern(plural), intern(&singular), intern(kind), namespaced)
            })
        })
        .collect()
}

/// Table columns of `additionalPrinterColumns` (mirrors the CRD table convertor: none given
/// → `Age` from `.metadata.creationTimestamp`, type `date`).
fn printer_columns(cols: Option<&Value>) -> Vec<Column> {
    let Some(cols) = cols.and_then(Value::as_array).filter(|c| !c.is_empty()) else {
        return vec![Column { name: "Age", type_: "date", format: "", priority: 0, description: "", cell: Cell::JsonPath(".metadata.creationTimestamp") }];
    };
    cols.iter()
        .filter_map(|c| {
            Some(Column {
                name: intern(c["name"].as_str()?),
                type_: intern(c["type"].as_str().unwrap_or("string")),
                format: intern(c["format"].as_str().unwrap_or("")),
                priority: c["priority"].as_i64().unwrap_or(0) as i32,
                description: intern(c["description"].as_str().unwrap_or("")),
                cell: Cell::JsonPath(intern(c["jsonPath"].as_str()?)),
            })
        })
        .collect()
}

/// One step of the JSONPath subset printer columns and scale paths use.
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(String, Value),
}

fn parse_path(p: &str) -> Option<Vec<Step>> {
    let p = p.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut steps = Vec::new();
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                    j += 1;
                }
                if j > start {
                    steps.push(Step::Field(p[start..j].to_string()));
                }
                i = j;
            }
            b'[' => {
                let end = i + p[i..].find(']')?;
                let inner = p[i + 1..end].trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                    let (k, v) = f.split_once("==")?;
                    let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                    steps.push(Step::Filter(k.trim().to_string(), json!(v)));
                } else {
                    steps.push(Step::Field(inner.trim_matches(|c| c == '"' || c == '\'').to_string()));
                }
                i = end + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// Evaluates a JSONPath of the subset CRDs use (`.a.b`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.k=="v")].b`, `.a['x.y']`) on `obj`: every match, in order.
pub fn json_path(obj: &Value, p: &str) -> Vec<Value> {
    let Some(steps) = parse_path(p) else { return Vec::new() };
    let mut cur = vec![obj];
    for s in &steps {
        let mut next = Vec::new();
        for v in cur {
            match s {
                Step::Field(f) => next.extend(v.get(f.as_str())),
                Step::Index(n) => next.extend(v.get(*n)),
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(k, want) => {
                    for item in v.as_array().into_iter().flatten() {
                        let got = item.get(k.as_str());
                        if got == Some(want) || got.map(|g| g.to_string()) == Some(want.as_str().unwrap_or("").to_string()) {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur.into_iter().cloned().collect()
}

/// One printer-column cell (mirrors the CRD table convertor): the first match of `p` when it
/// is of the column's type (integers and numbers, booleans, strings; `date` a timestamp,
/// rendered as its age), else `null`, which kubectl prints as an empty cell. Several matches
/// of a string column are joined with `,`.
pub fn printer_cell(obj: &Value, p: &str, ty: &str) -> Value {
    let vals = json_path(obj, p);
    let Some(first) = vals.first() else { return Value::Null };
    match ty {
        "integer" if first.is_i64() || first.is_u64() => first.clone(),
        "number" if first.is_number() => first.clone(),
        "boolean" if first.is_boolean() => first.clone(),
        // a date is shown as its age (`5m`), as the CRD table convertor renders it
        "date" => first.as_str().map(|s| json!(reg::human_age(s))).unwrap_or(Value::Null),
        "string" => {
            let render = |v: &Value| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            json!(vals.iter().map(render).collect::<Vec<_>>().join(","))
        }
        _ => Value::Null,
    }
}

/// Sets `.spec.replicas`-style path `p` in `obj` to `v`, creating objects on the way.
pub fn set_path(obj: &mut Value, p: &str, v: Value) {
    let parts: Vec<&str> = p.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let m = cur.as_object_mut().expect("object");
        if i == parts.len() - 1 {
            m.insert(part.to_string(), v);
            return;
        }
        cur = m.entry(part.to_string()).or_insert_with(|| json!({}));
    }
}

/// The `autoscaling/v1 Scale` of a custom resource (mirrors the CRD scale subresource):
/// `spec.replicas` and `status.replicas` from the CRD's paths, `status.selector` from
/// `labelSelectorPath`.
pub fn to_scale(obj: &Value, s: &ScalePaths) -> Value {
    let m = object::meta(obj).cloned().unwrap_or_default();
    let mut smeta = serde_json::Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(k) {
            smeta.insert(k.into(), v.clone());
        }
    }
    let first = |p: &str| json_path(obj, p).into_iter().next();
    let mut status = json!({"replicas": first(&s.status_replicas).unwrap_or(json!(0))});
    if let Some(sel) = s.label_selector.as_deref().and_then(first) {
        status["selector"] = sel;
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": smeta, "spec": {"replicas": first(&s.spec_replicas).unwrap_or(json!(0))}, "status": status})
}

// ---------------------------------------------------------------------------------------
// Validation of CRDs

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.into(), message, field: field.into() }
}

fn is_dns_label(s: &str) -> bool {
    object::is_dns1123_label(s)
}

/// Validates a CustomResourceDefinition on every write (mirrors
/// `apiextensions/validation.ValidateCustomResourceDefinition` for what fedctl serves):
/// `metadata.name` is `<plural>.<group>`; the group is a DNS subdomain with a dot; plural,
/// singular and kind are set and well-formed; scope is Namespaced or Cluster; versions are
/// unique DNS-1035 labels with exactly one storage version; every version has a structural
/// schema whose CEL rules compile; a webhook conversion is refused (fedctl serves every
/// version with strategy None).
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec.pointer("/names/plural").and_then(Value::as_str).unwrap_or("");
    let kind = spec.pointer("/names/kind").and_then(Value::as_str).unwrap_or("");
    let name = meta_str(crd, "name").unwrap_or("");
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        out.push(cause("FieldValueInvalid", "metadata.name", format!("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group", name)));
    }
    if group.is_empty() {
        out.push(cause("FieldValueRequired", "spec.group", "Required value".into()));
    } else if !object::is_dns1123_subdomain(group) {
        out.push(cause(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: {group:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    } else if !group.contains('.') {
        out.push(cause("FieldValueInvalid", "spec.group", format!("Invalid value: {group:?}: should be a domain with at least one dot")));
    }
    if plural.is_empty() {
        out.push(cause("FieldValueRequired", "spec.names.plural", "Required value".into()));
    } else if !is_dns_label(plural) {
        out.push(cause(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: {plural:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"),
        ));
    }
    if let Some(s) = spec.pointer("/names/singular").and_then(Value::as_str) {
        if !s.is_empty() && !is_dns_label(s) {
            out.push(cause(
                "FieldValueInvalid",
                "spec.names.singular",
                format!("Invalid value: {s:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"),
            ));
        }
    }
    if kind.is_empty() {
        out.push(cause("FieldValueRequired", "spec.names.kind", "Required value".into()));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        None => out.push(cause("FieldValueRequired", "spec.scope", "Required value".into())),
        Some(s) => out.push(cause("FieldValueNotSupported", "spec.scope", format!("Unsupported value: {s:?}: supported values: \"Cluster\", \"Namespaced\""))),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        out.push(cause("FieldValueInvalid", "spec.versions", "Invalid value: null: must have exactly one version marked as storage version".into()));
    } else {
        let storage = versions.iter().filter(|v| v["storage"].as_bool() == Some(true)).count();
        if storage != 1 {
            out.push(cause("FieldValueInvalid", "spec.versions", format!("Invalid value: {storage}: must have exactly one version marked as storage version")));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, v) in versions.iter().enumerate() {
            let f = format!("spec.versions[{i}]");
            match v["name"].as_str() {
                None | Some("") => out.push(cause("FieldValueRequired", &format!("{f}.name"), "Required value".into())),
                Some(n) => {
                    if !object::is_dns1035_label(n) {
                        out.push(cause("FieldValueInvalid", &format!("{f}.name"), format!("Invalid value: {n:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character")));
                    }
                    if !seen.insert(n.to_string()) {
                        out.push(cause("FieldValueDuplicate", &format!("{f}.name"), format!("Duplicate value: {n:?}")));
                    }
                }
            }
            match v.pointer("/schema/openAPIV3Schema") {
                None => out.push(cause("FieldValueRequired", &format!("{f}.schema.openAPIV3Schema"), "Required value: schemas are required".into())),
                Some(s) => out.extend(super::schema::structural_problems(s, &format!("{f}.schema.openAPIV3Schema"))),
            }
            if let Some(sel) = v.pointer("/subresources/scale") {
                for p in ["specReplicasPath", "statusReplicasPath"] {
                    if sel[p].as_str().is_none_or(|s| !s.starts_with('.')) {
                        out.push(cause("FieldValueInvalid", &format!("{f}.subresources.scale.{p}"), "Invalid value: \"\": should be a json path under .spec or .status".into()));
                    }
                }
            }
        }
    }
    if spec.pointer("/conversion/strategy").and_then(Value::as_str) == Some("Webhook") {
        out.push(cause(
            "FieldValueForbidden",
            "spec.conversion.strategy",
            "Forbidden: webhook conversion is not supported by this server: every version is served with conversion strategy \"None\" (apiVersion rewritten)".into(),
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The controller

fn crd_request(api: &ApiServer, name: &str, subresource: Option<&str>) -> Option<ResourceRequest> {
    Some(ResourceRequest {
        info: api.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")?,
        namespace: None,
        name: Some(name.to_string()),
        subresource: subresource.map(str::to_string),
        watch_path: false,
    })
}

fn controller_ctx() -> Ctx {
    Ctx { caller: Caller { user: "system:apiextensions-controller".into(), groups: vec!["system:masters".into()] }, dry_run: false, manager: "kube-apiserver".into(), apply: false }
}

/// The naming controller's verdict on one CRD's names (mirrors apiextensions-apiserver's
/// `NamingConditionController.calculateNamesAndConditions`).
#[derive(Clone, Debug, PartialEq)]
pub struct Naming {
    /// `status.acceptedNames`: the requested names where they are free, the previously
    /// accepted ones where they are not.
    pub accepted_names: Value,
    /// A conflict: the `NamesAccepted=False` reason (`PluralConflict`, `SingularConflict`,
    /// `ShortNamesConflict`, `KindConflict`, `ListKindConflict`) and message
    /// (`"foos" is already in use`). `None` when every name is accepted.
    pub conflict: Option<(&'static str, String)>,
}

/// A CRD's requested names with the defaults kube-apiserver gives them (`singular` the kind
/// in lower case, `listKind` `<Kind>List`).
fn requested_names(crd: &Value) -> Value {
    let mut names = crd["spec"]["names"].clone();
    if let Some(m) = names.as_object_mut() {
        let kind = m.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        if m.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if m.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    names
}

/// The names a CRD has claimed, from its `acceptedNames`: (plural, singular and short
/// names; kind and list kind).
fn claimed_names(names: &Value) -> (Vec<String>, Vec<String>) {
    let text = |k: &str| names[k].as_str().filter(|n| !n.is_empty()).map(str::to_string);
    let mut resources: Vec<String> = ["plural", "singular"].into_iter().filter_map(text).collect();
    resources.extend(strings(names.get("shortNames")));
    (resources, ["kind", "listKind"].into_iter().filter_map(text).collect())
}

/// The naming controller over every stored CRD: the names a CRD may take are those no other
/// CRD of its group has accepted (plural, singular and short names share one set, kind and
/// list kind another). A name a CRD accepted before stays its own; among new claims the
/// older CRD (by creation time, then name) wins, as the controller, which accepts one CRD at
/// a time, lets the first one processed win. Built-in resources are not part of it, as in
/// kube-apiserver (a CRD never shadows a built-in resource: see
/// [`super::registry::LiveRegistry::set_custom`]). Keyed by CRD name.
pub fn naming(crds: &BTreeMap<String, Value>) -> HashMap<String, Naming> {
    let name_of = |c: &Value| meta_str(c, "name").unwrap_or("").to_string();
    let mut order: Vec<&Value> = crds.values().collect();
    order.sort_by_key(|c| (meta_str(c, "creationTimestamp").unwrap_or("").to_string(), name_of(c)));
    // what each CRD holds: its stored acceptedNames, then what this pass accepts
    let mut claimed: HashMap<String, (String, Value)> = order.iter().map(|c| (name_of(c), (c["spec"]["group"].as_str().unwrap_or("").to_string(), c["status"]["acceptedNames"].clone()))).collect();
    let mut out = HashMap::new();
    for crd in order {
        let me = name_of(crd);
        let group = crd["spec"]["group"].as_str().unwrap_or("");
        let (mut resources, mut kinds) = (HashSet::new(), HashSet::new());
        for (other, (g, names)) in &claimed {
            if *other != me && g == group {
                let (r, k) = claimed_names(names);
                resources.extend(r);
                kinds.extend(k);
            }
        }
        let requested = requested_names(crd);
        let accepted = &crd["status"]["acceptedNames"];
        let mut new_names = if accepted.is_object() { accepted.clone() } else { json!({}) };
        let mut conflict: Option<(&'static str, String)> = None;
        // equalToAcceptedOrFresh: unchanged, or taken by no other CRD
        let free = |want: &str, had: &str, used: &HashSet<String>| want == had || !used.contains(want);
        for (field, reason) in [("plural", "PluralConflict"), ("singular", "SingularConflict")] {
            let want = requested[field].as_str().unwrap_or("");
            if free(want, accepted[field].as_str().unwrap_or(""), &resources) {
                new_names[field] = json!(want);
            } else {
                conflict = Some((reason, format!("{want:?} is already in use")));
            }
        }
        let want_short = strings(requested.get("shortNames"));
        let had_short = strings(accepted.get("shortNames"));
        if want_short != had_short {
            let errs: Vec<String> = want_short.iter().filter(|n| !had_short.contains(n) && resources.contains(*n)).map(|n| format!("{n:?} is already in use")).collect();
            match errs.len() {
                0 => new_names["shortNames"] = json!(want_short),
                1 => conflict = Some(("ShortNamesConflict", errs[0].clone())),
                _ => conflict = Some(("ShortNamesConflict", format!("[{}]", errs.join(", ")))),
            }
        }
        for (field, reason) in [("kind", "KindConflict"), ("listKind", "ListKindConflict")] {
            let want = requested[field].as_str().unwrap_or("");
            if free(want, accepted[field].as_str().unwrap_or(""), &kinds) {
                new_names[field] = json!(want);
            } else {
                conflict = Some((reason, format!("{want:?} is already in use")));
            }
        }
        if let Some(m) = new_names.as_object_mut() {
            match requested.get("categories") {
                Some(c) => {
                    m.insert("categories".into(), c.clone());
                }
                None => {
                    m.remove("categories");
                }
            }
            m.retain(|_, v| !v.is_null() && v.as_str() != Some("") && v.as_array().is_none_or(|a| !a.is_empty()));
        }
        claimed.insert(me.clone(), (group.to_string(), new_names.clone()));
        out.insert(me, Naming { accepted_names: new_names, conflict });
    }
    out
}

/// The status a CRD gets (mirrors the naming and establishing controllers): with its names
/// accepted, `acceptedNames` = its names, `NamesAccepted` and `Established` True; with a
/// conflict, `NamesAccepted` False with the naming controller's reason and message,
/// `Established` False (`NotAccepted`), and the CRD is not served. `storedVersions` gets the
/// storage version added. Conditions keep their `lastTransitionTime` while unchanged.
fn desired_status(crd: &Value, naming: &Naming) -> Value {
    let spec = &crd["spec"];
    let now = object::now_rfc3339();
    let old = &crd["status"];
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        let prev = old["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == ty && c["status"] == status));
        let at = prev.and_then(|p| p["lastTransitionTime"].as_str()).map(str::to_string).unwrap_or_else(|| now.clone());
        json!({"type": ty, "status": status, "lastTransitionTime": at, "reason": reason, "message": message})
    };
    let mut stored = strings(old.get("storedVersions"));
    if let Some(sv) = spec["versions"].as_array().and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true))).and_then(|v| v["name"].as_str()) {
        if !stored.iter().any(|s| s == sv) {
            stored.push(sv.to_string());
        }
    }
    let conditions = match &naming.conflict {
        None => vec![cond("NamesAccepted", "True", "NoConflicts", "no conflicts found"), cond("Established", "True", "InitialNamesAccepted", "the initial names have been accepted")],
        Some((reason, message)) => vec![cond("NamesAccepted", "False", reason, message), cond("Established", "False", "NotAccepted", "not all names are accepted")],
    };
    json!({
        "conditions": conditions,
        "acceptedNames": naming.accepted_names,
        "storedVersions": stored,
    })
}

/// Keeps `api`'s served custom resources and its CRDs' status in step with the stored CRDs,
/// forever (spawn it). After a failed or ended watch it lists again a second later.
pub async fn run(api: Arc<ApiServer>) {
    let Some(prefix) = api.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").map(|i| i.prefix()) else { return };
    loop {
        if let Err(e) = follow(&api, &prefix).await {
            tracing::debug!(error = %e, "crd controller: relisting");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the served set depends on: each CRD's spec and deletion, and whether its names are
/// accepted (status writes otherwise do not rebuild it).
fn served_fingerprint(crds: &BTreeMap<String, Value>, names: &HashMap<String, Naming>) -> Value {
    Value::Array(
        crds.values()
            .map(|c| {
                let accepted = names.get(meta_str(c, "name").unwrap_or("")).is_some_and(|n| n.conflict.is_none());
                json!([c["spec"], object::meta(c).is_some_and(|m| m.contains_key("deletionTimestamp")), accepted])
            })
            .collect(),
    )
}

/// Serves the custom resources of the CRDs whose names are accepted.
fn rebuild(api: &ApiServer, crds: &BTreeMap<String, Value>, names: &HashMap<String, Naming>) {
    let custom: Vec<ResourceInfo> = crds.values().filter(|c| names.get(meta_str(c, "name").unwrap_or("")).is_some_and(|n| n.conflict.is_none())).flat_map(served_resources).collect();
    api.registry.set_custom(custom);
}

async fn follow(api: &Arc<ApiServer>, prefix: &str) -> Result<(), ApiError> {
    let list = api.store.list(prefix, "", 0, 0).await?;
    let mut crds = BTreeMap::new();
    for kv in &list.kvs {
        if let Ok(v) = object::from_stored(&kv.value, kv.mod_revision) {
            crds.insert(kv.key.clone(), v);
        }
    }
    let mut names = naming(&crds);
    let mut served = served_fingerprint(&crds, &names);
    rebuild(api, &crds, &names);
    let mut watch = api.store.watch(prefix, list.revision, None).await?;
    api.set_crds_synced();
    for crd in crds.values() {
        reconcile(api, crd, &names).await;
    }
    while let Some(ev) = watch.next().await {
        match ev? {
            WatchEvent::Put { kv, .. } => {
                let Ok(v) = object::from_stored(&kv.value, kv.mod_revision) else { continue };
                crds.insert(kv.key.clone(), v);
            }
            WatchEvent::Delete { prev, .. } => {
                crds.remove(&prev.key);
            }
            WatchEvent::Progress(_) => continue,
        }
        // one CRD's names (or their release) decide the others' of its group: every CRD is
        // looked at again, and only a changed status is written
        names = naming(&crds);
        let now = served_fingerprint(&crds, &names);
        if now != served {
            rebuild(api, &crds, &names);
            served = now;
        }
        for crd in crds.values() {
            reconcile(api, crd, &names).await;
        }
    }
    Ok(())
}

async fn reconcile(api: &Arc<ApiServer>, crd: &Value, names: &std::collections::HashMap<String, Naming>) {
    let Some(name) = meta_str(crd, "name").map(str::to_string) else { return };
    let ctx = controller_ctx();
    if object::meta(crd).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        if !object::finalizers(crd).iter().any(|f| f == CLEANUP_FINALIZER) {
            return;
        }
        if let Err(e) = delete_custom_resources(api, crd).await {
            tracing::warn!(crd = %name, error = %e, "deleting custom resources");
            return;
        }
        let Some(r) = crd_request(api, &name, None) else { return };
        let res = api
            .guaranteed_update(&r, &name, None, &ctx, |cur| {
                let mut n = cur.clone();
                let fs: Vec<Value> = object::finalizers(cur).into_iter().filter(|f| f != CLEANUP_FINALIZER).map(Value::String).collect();
                object::meta_mut(&mut n).insert("finalizers".into(), Value::Array(fs));
                Ok(n)
            })
            .await;
        if let Err(e) = res {
            if !matches!(e, ApiError::NotFound { .. }) {
                tracing::warn!(crd = %name, error = %e, "removing the cleanup finalizer");
            }
        }
        return;
    }
    if served_resources(crd).is_empty() {
        return;
    }
    let Some(verdict) = names.get(&name).cloned() else { return };
    let want = desired_status(crd, &verdict);
    if same_status(&crd["status"], &want) {
        return;
    }
    let Some(r) = crd_request(api, &name, Some("status")) else { return };
    let res = api
        .guaranteed_update(&r, &name, None, &ctx, move |cur| {
            let mut n = cur.clone();
            n["status"] = desired_status(cur, &verdict);
            Ok(n)
        })
        .await;
    if let Err(e) = res {
        if !matches!(e, ApiError::NotFound { .. } | ApiError::Conflict { .. }) {
            tracing::warn!(crd = %name, error = %e, "setting the status of a CustomResourceDefinition");
        }
    }
}

fn same_status(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        for c in v["conditions"].as_array_mut().into_iter().flatten() {
            if let Some(m) = c.as_object_mut() {
                m.remove("lastTransitionTime");
            }
        }
        v
    };
    a.is_object() && strip(a) == strip(b)
}

/// Deletes every stored custom resource of `crd` (under `/registry/<group>/<plural>/`).
async fn delete_custom_resources(api: &ApiServer, crd: &Value) -> Result<(), ApiError> {
    let (Some(group), Some(plural)) = (crd.pointer("/spec/group").and_then(Value::as_str), crd.pointer("/spec/names/plural").and_then(Value::as_str)) else {
        return Ok(());
    };
    let prefix = format!("/registry/{group}/{plural}/");
    let list = api.store.list(&prefix, "", 0, 0).await?;
    for kv in list.kvs {
        match api.store.delete(&kv.key, 0).await {
            Ok(_) | Err(crate::storage::StorageError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shirt() -> Value {
        let y = include_str!("../../testdata/corpus/website-shirt-resource-definition.yaml");
        let mut v: Value = serde_yaml::from_str(y).unwrap();
        super::super::defaults::apply("apiextensions.k8s.io", "v1", "CustomResourceDefinition", &mut v);
        v
    }

    #[test]
    fn rules_are_found_at_any_depth() {
        assert!(!has_rules(&json!({"type": "object", "properties": {"spec": {"type": "object"}}})));
        assert!(has_rules(&json!({"properties": {"spec": {"properties": {"n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}}}}})));
        assert!(has_rules(&json!({"properties": {"l": {"items": {"anyOf": [{"x-kubernetes-validations": []}]}}}})));
    }

    #[test]
    fn the_corpus_crd_is_valid_and_served() {
        let crd = shirt();
        assert_eq!(validate_crd(&crd), vec![]);
        let rs = served_resources(&crd);
        assert_eq!(rs.len(), 1);
        assert_eq!(rs[0].resource, "shirts");
        assert_eq!(rs[0].prefix(), "/registry/stable.example.com/shirts/");
        assert!(rs[0].namespaced);
        assert_eq!(rs[0].field_selectors, ["spec.color", "spec.size"]);
    }

    #[test]
    fn bad_crds_are_refused_with_causes() {
        let mut crd = shirt();
        crd["spec"]["versions"][0]["storage"] = json!(false);
        crd["spec"]["conversion"] = json!({"strategy": "Webhook"});
        crd["metadata"]["name"] = json!("wrong");
        let fields: Vec<String> = validate_crd(&crd).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, vec!["metadata.name", "spec.versions", "spec.conversion.strategy"]);
    }

    #[test]
    fn json_paths_of_printer_columns() {
        let o = json!({"spec": {"a": [{"b": 1}, {"b": 2}]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}, "metadata": {"annotations": {"x.y/z": "v"}}});
        assert_eq!(printer_cell(&o, ".spec.a[1].b", "integer"), json!(2));
        assert_eq!(printer_cell(&o, ".status.conditions[?(@.type==\"Ready\")].status", "string"), json!("True"));
        assert_eq!(printer_cell(&o, ".spec.a[*].b", "string"), json!("1,2"));
        assert_eq!(printer_cell(&o, ".metadata.annotations['x.y/z']", "string"), json!("v"));
        assert_eq!(printer_cell(&o, ".spec.missing", "string"), Value::Null);
    }

    #[test]
    fn names_taken_by_another_crd_of_the_group_are_refused() {
        let crd = |name: &str, plural: &str, kind: &str, short: &[&str], created: &str, accepted: bool| {
            let names = json!({"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind, "listKind": format!("{kind}List"), "shortNames": short});
            let mut v = json!({"metadata": {"name": name, "creationTimestamp": created}, "spec": {"group": "g.example.com", "names": names}});
            if accepted {
                v["status"] = json!({"acceptedNames": names});
            }
            (name.to_string(), v)
        };
        let crds: BTreeMap<String, Value> = [
            crd("foos.g.example.com", "foos", "Foo", &["fo"], "2026-01-01T00:00:00Z", true),
            // the same kind, newer: refused
            crd("bars.g.example.com", "bars", "Foo", &[], "2026-01-02T00:00:00Z", false),
            // a short name taken as another's plural
            crd("bazs.g.example.com", "bazs", "Baz", &["foos"], "2026-01-03T00:00:00Z", false),
            // a name another CRD accepted before stays its own, even against an older CRD
            crd("quxs.g.example.com", "fo", "Qux", &[], "2025-12-01T00:00:00Z", false),
        ]
        .into_iter()
        .collect();
        let n = naming(&crds);
        assert_eq!(n["foos.g.example.com"].conflict, None);
        // (the last failing check names the conflict, as in the naming controller)
        assert_eq!(n["bars.g.example.com"].conflict, Some(("ListKindConflict", "\"FooList\" is already in use".to_string())));
        // the free names are accepted, the taken one is not
        assert_eq!(n["bars.g.example.com"].accepted_names["plural"], "bars");
        assert!(n["bars.g.example.com"].accepted_names.get("kind").is_none());
        assert_eq!(n["bazs.g.example.com"].conflict, Some(("ShortNamesConflict", "\"foos\" is already in use".to_string())));
        assert_eq!(n["quxs.g.example.com"].conflict, Some(("SingularConflict", "\"fo\" is already in use".to_string())));
        assert!(n["quxs.g.example.com"].accepted_names.get("plural").is_none());
        // another group is no conflict
        let mut other = crds.clone();
        other.get_mut("bars.g.example.com").unwrap()["spec"]["group"] = json!("h.example.com");
        assert_eq!(naming(&other)["bars.g.example.com"].conflict, None);
    }

    #[test]
    fn versions_sort_as_kube_does() {
        let mut v = vec!["v1alpha1", "foo", "v2", "v1beta2", "v1", "v1beta1"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
