//! OverridePolicy / ClusterOverridePolicy: parsed form, validation (422 causes) and application to one member's manifest; uses only `api::policy` and `api::selector`.
//!
//! The shape mirrors Karmada's `policy.karmada.io/v1alpha1` OverridePolicy:
//!
//! ```yaml
//! spec:
//!   resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]  # optional: empty selects every template
//!   overrideRules:
//!   - targetCluster: {clusterNames: [a], exclude: [b], labelSelector: {…}, zones: [zone-1]}  # optional: every member
//!     overriders:
//!       imageOverrider:       [{component: Registry|Repository|Tag, operator: add|remove|replace, value: "…", predicate: {path: /spec/…/image}}]
//!       commandOverrider:     [{containerName: web, operator: add|remove, value: ["…"]}]
//!       argsOverrider:        [{containerName: web, operator: add|remove, value: ["…"]}]
//!       labelsOverrider:      [{operator: add|remove|replace, value: {k: v}}]
//!       annotationsOverrider: [{operator: add|remove|replace, value: {k: v}}]
//!       plaintext:            [{path: /spec/replicas, operator: add|remove|replace, value: 2}]  # RFC 6902 on a JSON pointer
//! ```
//!
//! # Order
//! For one template on one member, ClusterOverridePolicies apply first, then
//! OverridePolicies (of the template's namespace), each group by policy name ascending (as
//! Karmada does); within a policy the rules apply in order, and within a rule the overriders
//! in the order image, command, args, labels, annotations, plaintext (Karmada's order),
//! each list in order. Overrides apply after replica division, to the member's share.
//!
//! # Failure
//! A rule applies as a whole or not at all: when one of its operations cannot apply to the
//! object (a `replace` or `remove` of a path that does not exist, an `add` under a missing
//! parent, a container name the pod template lacks, an image that does not parse), the
//! object is left as it was before the rule and the failure is reported (on the Work and in
//! the template's placement status); later rules still apply. As in Karmada, `remove` and
//! `replace` of a label or annotation the object lacks do nothing, and an image overrider
//! without `predicate` on a kind without a pod template does nothing.

use serde_json::{Map, Value};

use super::policy::{policy_head, resource_selectors, Causes, ResourceSelector, TemplateRef};
use crate::api::selector::{valid_label_key, valid_label_value, LabelSelector};
use crate::api::Cause;

/// An overrider operator (`add`, `remove`, `replace`, as Karmada spells them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `add`.
    Add,
    /// `remove`.
    Remove,
    /// `replace`.
    Replace,
}

/// One `plaintext` entry: an RFC 6902 operation on a JSON pointer.
#[derive(Clone, Debug, PartialEq)]
pub struct Plaintext {
    /// JSON pointer (`/spec/replicas`).
    pub path: String,
    /// Operator.
    pub op: Op,
    /// Value for `add` and `replace`.
    pub value: Value,
}

/// The part of an image reference an image overrider changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The registry host (`docker.io`, `mirror.example.com:5000`).
    Registry,
    /// The repository path (`library/nginx`).
    Repository,
    /// The tag or digest (`1.25`, `sha256:…`).
    Tag,
}

/// One `imageOverrider` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageOverrider {
    /// Which component changes.
    pub component: Component,
    /// Operator: `add` appends `value` to the component, `replace` sets it, `remove` drops it.
    pub op: Op,
    /// The value (may be empty for `remove`).
    pub value: String,
    /// `predicate.path`: the one image field to change; `None`: every container (and init
    /// container) of the pod template.
    pub predicate_path: Option<String>,
}

/// One `labelsOverrider` / `annotationsOverrider` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct MapOverrider {
    /// `add` sets the keys, `replace` sets those present, `remove` deletes them.
    pub op: Op,
    /// Keys and values.
    pub value: Map<String, Value>,
}

/// One `commandOverrider` / `argsOverrider` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandArgsOverrider {
    /// The container whose `command`/`args` change.
    pub container_name: String,
    /// `add` appends the values, `remove` deletes every occurrence of them.
    pub op: Op,
    /// The values.
    pub value: Vec<String>,
}

/// `overriders` of one rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overriders {
    /// `imageOverrider`.
    pub image: Vec<ImageOverrider>,
    /// `commandOverrider`.
    pub command: Vec<CommandArgsOverrider>,
    /// `argsOverrider`.
    pub args: Vec<CommandArgsOverrider>,
    /// `labelsOverrider`.
    pub labels: Vec<MapOverrider>,
    /// `annotationsOverrider`.
    pub annotations: Vec<MapOverrider>,
    /// `plaintext`.
    pub plaintext: Vec<Plaintext>,
}

/// What a rule's `targetCluster` is matched against: a member's name, labels and zone.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// The Cluster's `metadata.labels`.
    pub labels: &'a Map<String, Value>,
    /// The Cluster's `spec.zone`.
    pub zone: Option<&'a str>,
}

/// `targetCluster` of one rule: every given constraint must hold (none: every member).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetCluster {
    /// Only these clusters.
    pub cluster_names: Vec<String>,
    /// Never these clusters.
    pub exclude: Vec<String>,
    /// Cluster labels must match.
    pub label_selector: Option<LabelSelector>,
    /// `spec.zone` must be one of these.
    pub zones: Vec<String>,
}

impl TargetCluster {
    /// Whether the rule applies to `c`.
    pub fn matches(&self, c: &Member) -> bool {
        (self.cluster_names.is_empty() || self.cluster_names.iter().any(|n| n == c.name))
            && !self.exclude.iter().any(|n| n == c.name)
            && self.label_selector.as_ref().is_none_or(|ls| ls.matches(Some(c.labels)))
            && (self.zones.is_empty() || c.zone.is_some_and(|z| self.zones.iter().any(|x| x == z)))
    }
}

/// One `overrideRules` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Which members it applies to.
    pub target: TargetCluster,
    /// What it changes.
    pub overriders: Overriders,
}

/// A parsed, valid OverridePolicy (`namespace: Some`) or ClusterOverridePolicy (`None`).
#[derive(Clone, Debug, PartialEq)]
pub struct OverridePolicy {
    /// Namespace; `None` for a ClusterOverridePolicy.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// `spec.resourceSelectors` (empty: every template the policy can see).
    pub selectors: Vec<ResourceSelector>,
    /// `spec.overrideRules`.
    pub rules: Vec<Rule>,
}

impl OverridePolicy {
    /// Whether the policy selects template `t`: an OverridePolicy only templates of its own
    /// namespace.
    pub fn selects(&self, t: &TemplateRef) -> bool {
        if let Some(ns) = &self.namespace {
            if t.namespace != Some(ns.as_str()) {
                return false;
            }
        }
        self.selectors.is_empty() || self.selectors.iter().any(|s| s.matches(t).is_some())
    }

    /// How the policy is named in statuses: `ClusterOverridePolicy/<name>` or
    /// `OverridePolicy/<name>` (its namespace is the template's).
    pub fn display(&self) -> String {
        match self.namespace {
            Some(_) => format!("OverridePolicy/{}", self.name),
            None => format!("ClusterOverridePolicy/{}", self.name),
        }
    }
}

/// The policies of `all` that select `t`, in application order: ClusterOverridePolicies
/// first, then OverridePolicies, each by name. `all` may hold the policies or shared pointers
/// to them (`P`: [`OverridePolicy`] or `Arc<OverridePolicy>`).
pub fn applicable<'p, P: std::borrow::Borrow<OverridePolicy>>(all: &'p [P], t: &TemplateRef) -> Vec<&'p OverridePolicy> {
    let mut v: Vec<&OverridePolicy> = all.iter().map(|p| p.borrow()).filter(|p| p.selects(t)).collect();
    v.sort_by(|a, b| a.namespace.is_some().cmp(&b.namespace.is_some()).then(a.name.cmp(&b.name)));
    v
}

/// What applying overrides to one member's manifest did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The policies with at least one rule applied ([`OverridePolicy::display`]), in order.
    pub applied: Vec<String>,
    /// Rules that could not apply: `<policy> rule <i>: <why>`.
    pub failed: Vec<String>,
}

/// Applies `policies` (already in order, see [`applicable`]) to `manifest` for member `c`.
pub fn apply(policies: &[&OverridePolicy], manifest: &mut Value, c: &Member) -> Outcome {
    let mut out = Outcome::default();
    for p in policies {
        let mut any = false;
        for (i, rule) in p.rules.iter().enumerate() {
            if !rule.target.matches(c) {
                continue;
            }
            let before = manifest.clone();
            match apply_overriders(&rule.overriders, manifest) {
                Ok(()) => any = true,
                Err(e) => {
                    *manifest = before;
                    out.failed.push(format!("{} rule {i}: {e}", p.display()));
                }
            }
        }
        if any {
            out.applied.push(p.display());
        }
    }
    out
}

fn apply_overriders(o: &Overriders, m: &mut Value) -> Result<(), String> {
    for (i, io) in o.image.iter().enumerate() {
        apply_image(io, m).map_err(|e| format!("imageOverrider[{i}]: {e}"))?;
    }
    for (i, co) in o.command.iter().enumerate() {
        apply_command_args(co, "command", m).map_err(|e| format!("commandOverrider[{i}]: {e}"))?;
    }
    for (i, ao) in o.args.iter().enumerate() {
        apply_command_args(ao, "args", m).map_err(|e| format!("argsOverrider[{i}]: {e}"))?;
    }
    for lo in &o.labels {
        apply_map(lo, "labels", m);
    }
    for ao in &o.annotations {
        apply_map(ao, "annotations", m);
    }
    for (i, p) in o.plaintext.iter().enumerate() {
        apply_plaintext(p, m).map_err(|e| format!("plaintext[{i}] {} {}: {e}", op_name(p.op), p.path))?;
    }
    Ok(())
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Add => "add",
        Op::Remove => "remove",
        Op::Replace => "replace",
    }
}

/// The JSON pointer of the pod spec inside an object of `kind`, for the kinds with a pod
/// template (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob).
pub fn pod_spec_pointer(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("/spec"),
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicationController" => Some("/spec/template/spec"),
        "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The parent container and last token of `path` (RFC 6901), or why it cannot be reached.
fn parent<'v>(m: &'v mut Value, path: &str) -> Result<(&'v mut Value, String), String> {
    let (head, last) = path.rsplit_once('/').ok_or_else(|| "not a JSON pointer".to_string())?;
    let p = if head.is_empty() { Some(m) } else { m.pointer_mut(head) };
    let p = p.ok_or_else(|| format!("path {head} does not exist"))?;
    Ok((p, unescape(last)))
}

fn apply_plaintext(p: &Plaintext, m: &mut Value) -> Result<(), String> {
    let (parent, key) = parent(m, &p.path)?;
    match parent {
        Value::Object(o) => match p.op {
            Op::Add => {
                o.insert(key, p.value.clone());
            }
            Op::Replace => match o.get_mut(&key) {
                Some(v) => *v = p.value.clone(),
                None => return Err(format!("path {} does not exist", p.path)),
            },
            Op::Remove => {
                if o.remove(&key).is_none() {
                    return Err(format!("path {} does not exist", p.path));
                }
            }
        },
        Value::Array(a) => {
            let idx = if key == "-" && p.op == Op::Add { Some(a.len()) } else { key.parse::<usize>().ok().filter(|_| !key.starts_with('+')) };
            let Some(i) = idx else { return Err(format!("{key:?} is not an array index")) };
            match p.op {
                Op::Add if i <= a.len() => a.insert(i, p.value.clone()),
                Op::Replace if i < a.len() => a[i] = p.value.clone(),
                Op::Remove if i < a.len() => {
                    a.remove(i);
                }
                _ => return Err(format!("index {i} is out of range (length {})", a.len())),
            }
        }
        _ => return Err("the parent is neither an object nor an array".to_string()),
    }
    Ok(())
}

fn apply_map(o: &MapOverrider, field: &str, m: &mut Value) {
    let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let entry = meta.entry(field).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    let map = entry.as_object_mut().expect("object");
    for (k, v) in &o.value {
        match o.op {
            Op::Add => {
                map.insert(k.clone(), v.clone());
            }
            Op::Replace => {
                if let Some(cur) = map.get_mut(k) {
                    *cur = v.clone();
                }
            }
            Op::Remove => {
                map.remove(k);
            }
        }
    }
    if map.is_empty() {
        meta.remove(field);
    }
}

fn apply_command_args(o: &CommandArgsOverrider, field: &str, m: &mut Value) -> Result<(), String> {
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let Some(ps) = pod_spec_pointer(&kind) else { return Err(format!("{kind} has no pod template")) };
    let containers = m.pointer_mut(&format!("{ps}/containers")).and_then(Value::as_array_mut);
    let c = containers
        .and_then(|cs| cs.iter_mut().find(|c| c.get("name").and_then(Value::as_str) == Some(o.container_name.as_str())))
        .ok_or_else(|| format!("no container named {:?}", o.container_name))?;
    let cur: Vec<Value> = c.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
    let next: Vec<Value> = match o.op {
        Op::Add => cur.into_iter().chain(o.value.iter().map(|s| Value::String(s.clone()))).collect(),
        _ => cur.into_iter().filter(|v| !v.as_str().is_some_and(|s| o.value.iter().any(|r| r == s))).collect(),
    };
    c[field] = Value::Array(next);
    Ok(())
}

/// An image reference split as the container runtimes read it: the first path component
/// is a registry host when it holds `.` or `:` or is `localhost`; the tag follows the last
/// `:` of the last component, a digest follows `@`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, if written.
    pub registry: Option<String>,
    /// Repository path.
    pub repository: String,
    /// `:tag` or `@digest` including its separator, if written.
    pub tag: Option<String>,
}

impl ImageRef {
    /// Splits `image`; `Err` when the repository is empty.
    pub fn parse(image: &str) -> Result<Self, String> {
        let (rest, digest) = match image.split_once('@') {
            Some((r, d)) => (r, Some(format!("@{d}"))),
            None => (image, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((h, p)) if h.contains('.') || h.contains(':') || h == "localhost" => (Some(h.to_string()), p),
            _ => (None, rest),
        };
        let (repository, tag) = match (digest, path.rsplit_once(':')) {
            (Some(d), _) => (path.to_string(), Some(d)),
            (None, Some((r, t))) if !t.contains('/') => (r.to_string(), Some(format!(":{t}"))),
            (None, _) => (path.to_string(), None),
        };
        if repository.is_empty() {
            return Err(format!("image {image:?} has no repository"));
        }
        Ok(ImageRef { registry, repository, tag })
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(r) = self.registry.as_deref().filter(|r| !r.is_empty()) {
            write!(f, "{r}/")?;
        }
        write!(f, "{}{}", self.repository, self.tag.as_deref().unwrap_or(""))
    }
}

/// `image` changed as `o` says (mirrors Karmada's image overrider).
pub fn override_image(image: &str, o: &ImageOverrider) -> Result<String, String> {
    let mut r = ImageRef::parse(image)?;
    match (o.component, o.op) {
        (Component::Registry, Op::Add) => r.registry = Some(format!("{}{}", r.registry.unwrap_or_default(), o.value)),
        (Component::Registry, Op::Replace) => r.registry = Some(o.value.clone()),
        (Component::Registry, Op::Remove) => r.registry = None,
        (Component::Repository, Op::Add) => r.repository = format!("{}{}", r.repository, o.value),
        (Component::Repository, Op::Replace) => r.repository = o.value.clone(),
        (Component::Repository, Op::Remove) => return Err("the repository cannot be removed".into()),
        (Component::Tag, Op::Add) => {
            let cur = r.tag.unwrap_or_default();
            r.tag = Some(if cur.is_empty() { format!(":{}", o.value) } else { format!("{cur}{}", o.value) });
        }
        (Component::Tag, Op::Replace) => r.tag = Some(if o.value.starts_with("sha256:") { format!("@{}", o.value) } else { format!(":{}", o.value) }),
        (Component::Tag, Op::Remove) => r.tag = None,
    }
    Ok(r.to_string())
}

fn apply_image(o: &ImageOverrider, m: &mut Value) -> Result<(), String> {
    let mut paths = Vec::new();
    match &o.predicate_path {
        Some(p) => paths.push(p.clone()),
        None => {
            let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
            let Some(ps) = pod_spec_pointer(kind) else { return Ok(()) };
            for list in ["initContainers", "containers"] {
                let n = m.pointer(&format!("{ps}/{list}")).and_then(Value::as_array).map_or(0, Vec::len);
                paths.extend((0..n).map(|i| format!("{ps}/{list}/{i}/image")));
            }
        }
    }
    for p in paths {
        let slot = m.pointer_mut(&p).ok_or_else(|| format!("path {p} does not exist"))?;
        let cur = slot.as_str().ok_or_else(|| format!("{p} is not a string"))?;
        *slot = Value::String(override_image(cur, o)?);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Parsing and validation

/// Validation hook for OverridePolicy objects (the registry's `validate`): 422 causes.
pub fn validate_override_policy(obj: &Value) -> Vec<Cause> {
    parse(obj, false).err().unwrap_or_default()
}

/// Validation hook for ClusterOverridePolicy objects (the registry's `validate`).
pub fn validate_cluster_override_policy(obj: &Value) -> Vec<Cause> {
    parse(obj, true).err().unwrap_or_default()
}

/// Whether `p` is a JSON pointer (RFC 6901) naming something below the root: starts with
/// `/`, and every `~` is followed by `0` or `1`.
pub fn valid_pointer(p: &str) -> bool {
    p.starts_with('/') && p.len() > 1 && p.split('~').skip(1).all(|s| s.starts_with('0') || s.starts_with('1'))
}

fn list<'v>(c: &mut Causes, obj: &'v Value, key: &str, field: &str) -> &'v [Value] {
    match obj.get(key) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a,
        Some(v) => {
            c.wrong_type(&format!("{field}.{key}"), v, "a list");
            &[]
        }
    }
}

fn operator(c: &mut Causes, obj: &Value, field: &str, allowed: &[(&str, Op)]) -> Option<Op> {
    let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
    match obj.get("operator") {
        None | Some(Value::Null) => {
            c.required(&format!("{field}.operator"));
            None
        }
        Some(Value::String(s)) => match allowed.iter().find(|(n, _)| n == s) {
            Some((_, op)) => Some(*op),
            None => {
                c.unsupported(&format!("{field}.operator"), &Value::String(s.clone()), &names);
                None
            }
        },
        Some(v) => {
            c.unsupported(&format!("{field}.operator"), v, &names);
            None
        }
    }
}

const ALL_OPS: &[(&str, Op)] = &[("add", Op::Add), ("remove", Op::Remove), ("replace", Op::Replace)];
const ADD_REMOVE: &[(&str, Op)] = &[("add", Op::Add), ("remove", Op::Remove)];

/// Paths an override may not touch: they name the object, so changing them would make the
/// member object another one.
fn identity_path(p: &str) -> bool {
    matches!(p, "/apiVersion" | "/kind" | "/metadata" | "/metadata/name" | "/metadata/namespace")
}

fn parse_overriders(c: &mut Causes, o: &Value, f: &str) -> Overriders {
    let mut out = Overriders::default();
    for (i, e) in list(c, o, "plaintext", f).iter().enumerate() {
        let ef = format!("{f}.plaintext[{i}]");
        let op = operator(c, e, &ef, ALL_OPS);
        let path = match e.get("path").and_then(Value::as_str) {
            None | Some("") => {
                c.required(&format!("{ef}.path"));
                None
            }
            Some(p) if !valid_pointer(p) => {
                c.invalid(&format!("{ef}.path"), &Value::String(p.into()), "must be a JSON pointer below the root, starting with '/' (RFC 6901: '~' only as '~0' or '~1')");
                None
            }
            Some(p) if identity_path(p) => {
                c.invalid(&format!("{ef}.path"), &Value::String(p.into()), "may not change the object's apiVersion, kind, name or namespace");
                None
            }
            Some(p) => Some(p.to_string()),
        };
        let value = e.get("value").cloned();
        if matches!(op, Some(Op::Add | Op::Replace)) && value.is_none() {
            c.required(&format!("{ef}.value"));
        }
        if let (Some(op), Some(path)) = (op, path) {
            out.plaintext.push(Plaintext { path, op, value: value.unwrap_or(Value::Null) });
        }
    }
    for (i, e) in list(c, o, "imageOverrider", f).iter().enumerate() {
        let ef = format!("{f}.imageOverrider[{i}]");
        let component = match e.get("component").and_then(Value::as_str) {
            Some("Registry") => Some(Component::Registry),
            Some("Repository") => Some(Component::Repository),
            Some("Tag") => Some(Component::Tag),
            None => {
                c.required(&format!("{ef}.component"));
                None
            }
            Some(other) => {
                c.unsupported(&format!("{ef}.component"), &Value::String(other.into()), &["Registry", "Repository", "Tag"]);
                None
            }
        };
        let op = operator(c, e, &ef, ALL_OPS);
        let value = c.opt_str(e, "value", &ef).unwrap_or_default();
        if matches!(op, Some(Op::Add | Op::Replace)) && value.is_empty() {
            c.required(&format!("{ef}.value"));
        }
        if component == Some(Component::Repository) && op == Some(Op::Remove) {
            c.invalid(&format!("{ef}.operator"), &Value::String("remove".into()), "the Repository component cannot be removed");
        }
        if value.contains('/') && component == Some(Component::Tag) || value.contains(['@', ' ']) {
            c.invalid(&format!("{ef}.value"), &Value::String(value.clone()), "not a valid image component");
        }
        let predicate_path = match c.object(e, "predicate", &ef) {
            None => None,
            Some(p) => match p.get("path").and_then(Value::as_str) {
                None | Some("") => {
                    c.required(&format!("{ef}.predicate.path"));
                    None
                }
                Some(s) if !valid_pointer(s) => {
                    c.invalid(&format!("{ef}.predicate.path"), &Value::String(s.into()), "must be a JSON pointer starting with '/'");
                    None
                }
                Some(s) => Some(s.to_string()),
            },
        };
        if let (Some(component), Some(op)) = (component, op) {
            out.image.push(ImageOverrider { component, op, value, predicate_path });
        }
    }
    for (key, dst) in [("commandOverrider", &mut out.command), ("argsOverrider", &mut out.args)] {
        for (i, e) in list(c, o, key, f).iter().enumerate() {
            let ef = format!("{f}.{key}[{i}]");
            let name = c.opt_str(e, "containerName", &ef);
            if name.is_none() {
                c.required(&format!("{ef}.containerName"));
            }
            let op = operator(c, e, &ef, ADD_REMOVE);
            let value = c.str_list(e, "value", &ef);
            if let (Some(container_name), Some(op)) = (name, op) {
                dst.push(CommandArgsOverrider { container_name, op, value });
            }
        }
    }
    for (key, dst, labels) in [("labelsOverrider", &mut out.labels, true), ("annotationsOverrider", &mut out.annotations, false)] {
        for (i, e) in list(c, o, key, f).iter().enumerate() {
            let ef = format!("{f}.{key}[{i}]");
            let op = operator(c, e, &ef, ALL_OPS);
            let value = match e.get("value") {
                None | Some(Value::Null) => {
                    c.required(&format!("{ef}.value"));
                    Map::new()
                }
                Some(Value::Object(m)) => m.clone(),
                Some(v) => {
                    c.wrong_type(&format!("{ef}.value"), v, "a map of strings");
                    Map::new()
                }
            };
            for (k, v) in &value {
                if !valid_label_key(k) {
                    c.invalid(
                        &format!("{ef}.value"),
                        &Value::String(k.clone()),
                        "a key must be a qualified name (an optional DNS subdomain prefix and '/', and a name of alphanumeric characters, '-', '_' or '.')",
                    );
                }
                match v.as_str() {
                    None => c.wrong_type(&format!("{ef}.value[{k}]"), v, "a string"),
                    Some(s) if labels && op != Some(Op::Remove) && !valid_label_value(s) => c.invalid(
                        &format!("{ef}.value[{k}]"),
                        v,
                        "a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                    ),
                    Some(_) => {}
                }
            }
            if let Some(op) = op {
                dst.push(MapOverrider { op, value });
            }
        }
    }
    out
}

/// Parses and validates an override policy object; `cluster_scoped` for
/// ClusterOverridePolicy. Errors: every invalid field as a 422 cause (`field` is the JSON
/// path, e.g. `spec.overrideRules[0].overriders.plaintext[1].path`).
pub fn parse(obj: &Value, cluster_scoped: bool) -> Result<OverridePolicy, Vec<Cause>> {
    let mut c = Causes(Vec::new());
    let (name, own_ns, spec) = policy_head(&mut c, obj);
    let selectors = resource_selectors(&mut c, spec, own_ns.as_deref(), cluster_scoped, false);
    let mut rules = Vec::new();
    let raw_rules = list(&mut c, spec, "overrideRules", "spec");
    if raw_rules.is_empty() && spec.is_object() {
        c.required("spec.overrideRules");
    }
    for (i, r) in raw_rules.iter().enumerate() {
        let rf = format!("spec.overrideRules[{i}]");
        if !r.is_object() {
            c.wrong_type(&rf, r, "an object");
            continue;
        }
        let mut target = TargetCluster::default();
        if let Some(t) = c.object(r, "targetCluster", &rf) {
            let tf = format!("{rf}.targetCluster");
            target.cluster_names = c.str_list(t, "clusterNames", &tf);
            target.exclude = c.str_list(t, "exclude", &tf);
            target.zones = c.str_list(t, "zones", &tf);
            if let Some(v) = t.get("labelSelector").filter(|v| !v.is_null()) {
                target.label_selector = c.label_selector(v, &format!("{tf}.labelSelector"));
            }
        }
        let overriders = match c.object(r, "overriders", &rf) {
            Some(o) => parse_overriders(&mut c, o, &format!("{rf}.overriders")),
            None => {
                c.required(&format!("{rf}.overriders"));
                Overriders::default()
            }
        };
        rules.push(Rule { target, overriders });
    }
    if !c.0.is_empty() {
        return Err(c.0);
    }
    Ok(OverridePolicy { namespace: if cluster_scoped { None } else { own_ns }, name, selectors, rules })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster<'a>(name: &'a str, zone: &'a str) -> Member<'a> {
        static LABELS: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        Member { name, labels: LABELS.get_or_init(Map::new), zone: Some(zone) }
    }

    fn deploy() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}, "annotations": {"legacy": "1"}},
            "spec": {"replicas": 3, "template": {"spec": {
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [{"name": "web", "image": "docker.io/library/nginx:1.25", "args": ["--debug", "--port=80"]}, {"name": "side", "image": "localhost:5000/side@sha256:abc"}]}}}})
    }

    fn op(ns: Option<&str>, name: &str, spec: Value) -> OverridePolicy {
        let mut obj = json!({"metadata": {"name": name}, "spec": spec});
        if let Some(ns) = ns {
            obj["metadata"]["namespace"] = json!(ns);
        }
        parse(&obj, ns.is_none()).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn image_references() {
        let r = ImageRef::parse("docker.io/library/nginx:1.25").unwrap();
        assert_eq!((r.registry.as_deref(), r.repository.as_str(), r.tag.as_deref()), (Some("docker.io"), "library/nginx", Some(":1.25")));
        let r = ImageRef::parse("nginx").unwrap();
        assert_eq!((r.registry, r.repository.as_str(), r.tag), (None, "nginx", None));
        let r = ImageRef::parse("localhost:5000/a/b@sha256:00").unwrap();
        assert_eq!((r.registry.as_deref(), r.repository.as_str(), r.tag.as_deref()), (Some("localhost:5000"), "a/b", Some("@sha256:00")));
        let o = |component, op, value: &str| ImageOverrider { component, op, value: value.into(), predicate_path: None };
        assert_eq!(override_image("nginx:1", &o(Component::Registry, Op::Replace, "mirror.example.com")).unwrap(), "mirror.example.com/nginx:1");
        assert_eq!(override_image("docker.io/nginx:1", &o(Component::Registry, Op::Add, "-cn")).unwrap(), "docker.io-cn/nginx:1");
        assert_eq!(override_image("docker.io/nginx:1", &o(Component::Registry, Op::Remove, "")).unwrap(), "nginx:1");
        assert_eq!(override_image("docker.io/nginx:1", &o(Component::Repository, Op::Replace, "team/web")).unwrap(), "docker.io/team/web:1");
        assert_eq!(override_image("nginx:1", &o(Component::Tag, Op::Replace, "2")).unwrap(), "nginx:2");
        assert_eq!(override_image("nginx:1", &o(Component::Tag, Op::Add, "-alpine")).unwrap(), "nginx:1-alpine");
        assert_eq!(override_image("nginx:1", &o(Component::Tag, Op::Remove, "")).unwrap(), "nginx");
    }

    #[test]
    fn rules_apply_in_order_to_matching_clusters() {
        let p = op(
            Some("shop"),
            "web",
            json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}], "overrideRules": [
                {"targetCluster": {"zones": ["zone-2"]}, "overriders": {
                    "imageOverrider": [{"component": "Registry", "operator": "replace", "value": "mirror.example.com"}],
                    "argsOverrider": [{"containerName": "web", "operator": "remove", "value": ["--debug"]}],
                    "commandOverrider": [{"containerName": "web", "operator": "add", "value": ["--region=eu"]}],
                    "labelsOverrider": [{"operator": "add", "value": {"tier": "edge"}}],
                    "annotationsOverrider": [{"operator": "remove", "value": {"legacy": ""}}],
                    "plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 2}]}},
                {"targetCluster": {"clusterNames": ["b"]}, "overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 7}]}}
            ]}),
        );
        let mut m = deploy();
        let out = apply(&[&p], &mut m, &cluster("a", "zone-1"));
        assert_eq!(out, Outcome::default());
        assert_eq!(m, deploy());
        let out = apply(&[&p], &mut m, &cluster("b", "zone-2"));
        assert_eq!(out.applied, vec!["OverridePolicy/web"]);
        assert!(out.failed.is_empty());
        let ps = &m["spec"]["template"]["spec"];
        assert_eq!(ps["initContainers"][0]["image"], "mirror.example.com/busybox");
        assert_eq!(ps["containers"][0]["image"], "mirror.example.com/library/nginx:1.25");
        assert_eq!(ps["containers"][1]["image"], "mirror.example.com/side@sha256:abc");
        assert_eq!(ps["containers"][0]["args"], json!(["--port=80"]));
        assert_eq!(ps["containers"][0]["command"], json!(["--region=eu"]));
        assert!(ps["containers"][1].get("command").is_none());
        assert_eq!(m["metadata"]["labels"], json!({"app": "web", "tier": "edge"}));
        assert!(m["metadata"].get("annotations").is_none());
        assert_eq!(m["spec"]["replicas"], 7, "the second rule applies after the first");
    }

    #[test]
    fn failed_rule_leaves_the_object_and_is_reported() {
        let p = op(
            None,
            "c",
            json!({"overrideRules": [
                {"overriders": {"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 1}, {"path": "/spec/paused", "operator": "replace", "value": true}]}},
                {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"x": "y"}}]}}
            ]}),
        );
        let mut m = deploy();
        let out = apply(&[&p], &mut m, &cluster("a", "z"));
        assert_eq!(m["spec"]["replicas"], 3, "the failed rule is undone as a whole");
        assert_eq!(m["metadata"]["labels"]["x"], "y");
        assert_eq!(out.applied, vec!["ClusterOverridePolicy/c"]);
        assert_eq!(out.failed, vec!["ClusterOverridePolicy/c rule 0: plaintext[1] replace /spec/paused: path /spec/paused does not exist"]);
        let missing = op(None, "d", json!({"overrideRules": [{"overriders": {"commandOverrider": [{"containerName": "nope", "operator": "add", "value": ["x"]}]}}]}));
        let out = apply(&[&missing], &mut m, &cluster("a", "z"));
        assert!(out.failed[0].contains("no container named \"nope\""), "{:?}", out.failed);
        // add creates a key, and appends to arrays with '-'
        let add = op(
            None,
            "e",
            json!({"overrideRules": [{"overriders": {"plaintext": [
            {"path": "/spec/paused", "operator": "add", "value": true},
            {"path": "/spec/template/spec/containers/-", "operator": "add", "value": {"name": "x", "image": "x"}},
            {"path": "/metadata/labels/app", "operator": "remove"}]}}]}),
        );
        let out = apply(&[&add], &mut m, &cluster("a", "z"));
        assert!(out.failed.is_empty(), "{:?}", out.failed);
        assert_eq!(m["spec"]["paused"], true);
        assert_eq!(m["spec"]["template"]["spec"]["containers"][2]["name"], "x");
        assert!(m["metadata"]["labels"].get("app").is_none());
    }

    #[test]
    fn order_is_cluster_policies_first_then_by_name() {
        let sel = json!({"overrideRules": [{"overriders": {"labelsOverrider": [{"operator": "add", "value": {"k": "v"}}]}}]});
        let all = vec![op(Some("shop"), "a", sel.clone()), op(None, "z", sel.clone()), op(None, "b", sel.clone()), op(Some("other"), "a", sel.clone())];
        let labels = Map::new();
        let t = TemplateRef { api_version: "apps/v1", kind: "Deployment", namespace: Some("shop"), name: "web", labels: Some(&labels) };
        let names: Vec<String> = applicable(&all, &t).iter().map(|p| p.display()).collect();
        assert_eq!(names, vec!["ClusterOverridePolicy/b", "ClusterOverridePolicy/z", "OverridePolicy/a"]);
    }

    #[test]
    fn invalid_fields_are_named() {
        let obj = json!({"metadata": {"name": "bad", "namespace": "shop"}, "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Gadget"}],
            "overrideRules": [{
                "targetCluster": {"labelSelector": {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}},
                "overriders": {
                    "plaintext": [{"path": "spec/replicas", "operator": "replace", "value": 1}, {"path": "/spec/x", "operator": "patch", "value": 1},
                        {"path": "/a~2b", "operator": "add", "value": 1}, {"path": "/spec/replicas", "operator": "replace"}, {"path": "/metadata/name", "operator": "replace", "value": "x"}],
                    "imageOverrider": [{"component": "Host", "operator": "replace", "value": "m"}, {"component": "Tag", "operator": "replace"},
                        {"component": "Registry", "operator": "replace", "value": "m", "predicate": {"path": "image"}}],
                    "commandOverrider": [{"operator": "replace", "value": ["a"]}],
                    "labelsOverrider": [{"operator": "add", "value": {"bad key!": "v", "k": "not valid!"}}]
                }}, {}]}});
        let causes = validate_override_policy(&obj);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        let o = "spec.overrideRules[0].overriders";
        for want in [
            "spec.resourceSelectors[0].kind".to_string(),
            "spec.overrideRules[0].targetCluster.labelSelector.matchExpressions[0].operator".into(),
            format!("{o}.plaintext[0].path"),
            format!("{o}.plaintext[1].operator"),
            format!("{o}.plaintext[2].path"),
            format!("{o}.plaintext[3].value"),
            format!("{o}.plaintext[4].path"),
            format!("{o}.imageOverrider[0].component"),
            format!("{o}.imageOverrider[1].value"),
            format!("{o}.imageOverrider[2].predicate.path"),
            format!("{o}.commandOverrider[0].containerName"),
            format!("{o}.commandOverrider[0].operator"),
            format!("{o}.labelsOverrider[0].value"),
            format!("{o}.labelsOverrider[0].value[k]"),
            "spec.overrideRules[1].overriders".into(),
        ] {
            assert!(fields.contains(&want.as_str()), "missing cause for {want}: {fields:?}");
        }
        let unsupported = causes.iter().find(|c| c.field == format!("{o}.plaintext[1].operator")).unwrap();
        assert_eq!(unsupported.reason, "FieldValueNotSupported");
        assert!(unsupported.message.contains("\"add\", \"remove\", \"replace\""), "{}", unsupported.message);
        assert_eq!(validate_cluster_override_policy(&json!({"metadata": {"name": "x"}, "spec": {}}))[0].field, "spec.overrideRules");
    }
}
