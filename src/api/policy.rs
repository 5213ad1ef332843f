//! PropagationPolicy / ClusterPropagationPolicy: parsed form, validation (422 causes) and template matching.
//!
//! The shape mirrors Karmada's `policy.karmada.io/v1alpha1` PropagationPolicy, trimmed to
//! what fedctl schedules on:
//!
//! ```yaml
//! spec:
//!   resourceSelectors:            # required, ≥ 1
//!   - {apiVersion: apps/v1, kind: Deployment, namespace: shop, name: web,
//!      labelSelector: {matchLabels: {…}, matchExpressions: […]}}
//!   placement:
//!     clusterAffinity: {clusterNames: [..], exclude: [..], labelSelector: {..}, zones: [..]}
//!     clusterTolerations: [{key, operator: Equal|Exists, value, effect}]
//!     replicaScheduling: {type: Duplicated|Divided, weights: [{cluster, weight ≥ 0}], zoneSpread: bool}
//!   priority: 0                   # int32
//!   failover: {afterSeconds: 30}  # ≥ 0
//!   propagateDeps: false          # the workloads' ConfigMaps, Secrets, ServiceAccounts, PVCs follow them
//! ```
//!
//! A namespaced PropagationPolicy selects only templates of its own namespace and never
//! cluster-scoped ones (Namespace); a ClusterPropagationPolicy selects anywhere, optionally
//! narrowed by `resourceSelectors[].namespace`.

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use crate::api::selector::{valid_label_key, valid_label_value, LabelSelector};
use crate::api::{Cause, Registry, ResourceInfo};

/// True when objects of `info` are resource templates the federation propagates: every
/// built-in kind it serves except the records of a cluster's own machinery (Events,
/// Leases, CertificateSigningRequests, Nodes, CSINodes, VolumeAttachments, IPAddresses,
/// ControllerRevisions), which belong to the cluster they describe, and every custom
/// resource of a served CRD. The federation kinds (Cluster, Work, the policies) never
/// propagate. Kinds without replicas are duplicated.
pub fn propagatable(info: &ResourceInfo) -> bool {
    (info.builtin || info.custom.is_some())
        && !matches!(
            (info.group, info.kind),
            ("", "Event")
                | ("events.k8s.io", "Event")
                | ("coordination.k8s.io", "Lease")
                | ("certificates.k8s.io", "CertificateSigningRequest")
                | ("", "Node")
                | ("storage.k8s.io", "CSINode" | "VolumeAttachment")
                | ("networking.k8s.io", "IPAddress")
                | ("apps", "ControllerRevision")
        )
}

/// The propagatable kinds of `reg` ([`propagatable`]), in registration order; one per kind
/// name (a kind served in two versions is propagated in its first, preferred one).
pub fn template_kinds(reg: &Registry) -> Vec<Arc<ResourceInfo>> {
    let mut out: Vec<Arc<ResourceInfo>> = Vec::new();
    for r in reg.all().iter().filter(|r| propagatable(r)) {
        if !out.iter().any(|o| o.kind == r.kind) {
            out.push(r.clone());
        }
    }
    out
}

/// True for an `apiVersion` a CRD may serve: `<group>/<version>` with a dot in the group and
/// the group none of the federation's own (built-in or federation kinds).
fn is_custom_api_version(api_version: &str) -> bool {
    let Some((group, _)) = api_version.split_once('/') else { return false };
    // a group the federation serves itself (coordination.k8s.io's Leases, the federation's
    // own kinds) is never a custom resource's
    static BUILT_IN: OnceLock<Vec<&'static str>> = OnceLock::new();
    let built_in = BUILT_IN.get_or_init(|| Registry::federation().groups().iter().map(|(g, _)| *g).collect());
    group.contains('.') && !built_in.contains(&group)
}

/// The kinds a policy may select, as the federation serves them (built once).
fn served_templates() -> &'static [Arc<ResourceInfo>] {
    static KINDS: OnceLock<Vec<Arc<ResourceInfo>>> = OnceLock::new();
    KINDS.get_or_init(|| template_kinds(&Registry::federation()))
}

/// Namespaces whose objects are never propagated (the federation's own machinery; mirrors
/// Karmada skipping `karmada-system`, `karmada-es-*` and `kube-*`): `kube-system`,
/// `kube-public`, `kube-node-lease`, `fed-system` and every `fed-exec-*`.
pub fn is_reserved_namespace(ns: &str) -> bool {
    matches!(ns, "kube-system" | "kube-public" | "kube-node-lease" | "fed-system") || ns.starts_with("fed-exec-")
}

/// One entry of `spec.resourceSelectors`.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSelector {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, a [`propagatable`] kind.
    pub kind: String,
    /// Restricts to one namespace (ClusterPropagationPolicy; a PropagationPolicy's is its own).
    pub namespace: Option<String>,
    /// Selects exactly this name.
    pub name: Option<String>,
    /// Selects by template labels.
    pub label_selector: Option<LabelSelector>,
}

/// How specifically a policy selects a template (the first key of policy precedence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// Matched by apiVersion/kind only.
    Kind = 1,
    /// Matched by a label selector.
    Labels = 2,
    /// Matched by name.
    Name = 3,
}

/// Taint toleration operator (mirrors `corev1.TolerationOperator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TolerationOp {
    /// Key and value must be equal (the default).
    Equal,
    /// Any value of the key (an empty key tolerates every taint).
    Exists,
}

/// One `placement.clusterTolerations` entry (mirrors `corev1.Toleration`).
#[derive(Clone, Debug, PartialEq)]
pub struct Toleration {
    /// Taint key; empty with `Exists` matches all keys.
    pub key: String,
    /// Operator.
    pub operator: TolerationOp,
    /// Value compared with `Equal`.
    pub value: String,
    /// Effect matched; empty matches all effects.
    pub effect: String,
}

/// A member cluster taint (mirrors `corev1.Taint`): `{key, value, effect}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Toleration {
    /// Whether this toleration tolerates `t` (mirrors `Toleration.ToleratesTaint`).
    pub fn tolerates(&self, t: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != t.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != t.key {
            return false;
        }
        match self.operator {
            TolerationOp::Exists => true,
            TolerationOp::Equal => self.value == t.value,
        }
    }
}

/// `placement.clusterAffinity`: all given constraints must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterAffinity {
    /// Only these clusters (empty: no restriction).
    pub cluster_names: Vec<String>,
    /// Never these clusters.
    pub exclude: Vec<String>,
    /// Cluster labels must match.
    pub label_selector: Option<LabelSelector>,
    /// `spec.zone` must be one of these (empty: no restriction).
    pub zones: Vec<String>,
}

/// `placement.replicaScheduling`.
#[derive(Clone, Debug, PartialEq)]
pub enum Scheduling {
    /// Every target cluster runs the template's full replica count.
    Duplicated,
    /// Replicas are split over the targets.
    Divided {
        /// Static weights `(cluster, weight)`; `None` divides by available capacity.
        weights: Option<Vec<(String, i64)>>,
        /// First split evenly over the targets' zones, then within each zone.
        zone_spread: bool,
    },
}

/// `spec.placement`.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// Which clusters may be chosen.
    pub affinity: ClusterAffinity,
    /// Which cluster taints are tolerated.
    pub tolerations: Vec<Toleration>,
    /// How replicas are spread (default Duplicated).
    pub scheduling: Scheduling,
}

/// A parsed, valid PropagationPolicy (`namespace: Some`) or ClusterPropagationPolicy (`None`).
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The policy's namespace; `None` for a ClusterPropagationPolicy.
    pub namespace: Option<String>,
    /// The policy's name.
    pub name: String,
    /// `spec.resourceSelectors`.
    pub selectors: Vec<ResourceSelector>,
    /// `spec.placement`.
    pub placement: Placement,
    /// `spec.priority` (higher wins among equally specific policies).
    pub priority: i64,
    /// `spec.failover.afterSeconds`: move workloads off a cluster NotReady this long.
    pub failover_after_seconds: Option<i64>,
    /// `spec.propagateDeps`: the ConfigMaps, Secrets, ServiceAccounts and
    /// PersistentVolumeClaims the selected workloads' pod templates reference follow them
    /// (mirrors Karmada's `propagateDeps`; the controller's `propagation::deps` finds them).
    pub propagate_deps: bool,
}

/// The identity and labels of a resource template, as policies match it.
#[derive(Clone, Copy, Debug)]
pub struct TemplateRef<'a> {
    /// `apiVersion`.
    pub api_version: &'a str,
    /// `kind`.
    pub kind: &'a str,
    /// Namespace (`None` for cluster-scoped templates).
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: &'a str,
    /// `metadata.labels`.
    pub labels: Option<&'a Map<String, Value>>,
}

impl ResourceSelector {
    /// How specifically this selector matches `t`, or `None` when it does not.
    pub(super) fn matches(&self, t: &TemplateRef) -> Option<Specificity> {
        if self.api_version != t.api_version || self.kind != t.kind {
            return None;
        }
        if let Some(ns) = &self.namespace {
            if t.namespace != Some(ns.as_str()) {
                return None;
            }
        }
        if let Some(n) = &self.name {
            if n != t.name {
                return None;
            }
        }
        if let Some(ls) = &self.label_selector {
            if !ls.matches(t.labels) {
                return None;
            }
        }
        Some(if self.name.is_some() {
            Specificity::Name
        } else if self.label_selector.is_some() {
            Specificity::Labels
        } else {
            Specificity::Kind
        })
    }
}

impl Policy {
    /// How specifically this policy selects `t` (best of its selectors), `None` when it does
    /// not select it. A PropagationPolicy only selects templates of its own namespace.
    pub fn matches(&self, t: &TemplateRef) -> Option<Specificity> {
        if let Some(ns) = &self.namespace {
            if t.namespace != Some(ns.as_str()) {
                return None;
            }
        }
        if t.namespace.is_some_and(is_reserved_namespace) || (t.kind == "Namespace" && is_reserved_namespace(t.name)) {
            return None;
        }
        self.selectors.iter().filter_map(|s| s.matches(t)).max()
    }

    /// The kind of this policy object: `PropagationPolicy` or `ClusterPropagationPolicy`.
    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            "PropagationPolicy"
        } else {
            "ClusterPropagationPolicy"
        }
    }
}

/// Picks the policy that governs `t` among `policies`. Precedence, in order:
/// 1. specificity of the match: by name > by label selector > by kind only;
/// 2. higher `spec.priority`;
/// 3. a namespaced PropagationPolicy before a ClusterPropagationPolicy;
/// 4. policy name, ascending (then namespace) — so the choice is deterministic.
/// `policies` may hold the policies or shared pointers to them (`P`: [`Policy`] or
/// `Arc<Policy>`).
pub fn select<'p, P: std::borrow::Borrow<Policy>>(policies: &'p [P], t: &TemplateRef) -> Option<&'p Policy> {
    policies
        .iter()
        .map(|p| p.borrow())
        .filter_map(|p| p.matches(t).map(|s| (s, p)))
        .min_by(|(sa, a), (sb, b)| sb.cmp(sa).then(b.priority.cmp(&a.priority)).then(b.namespace.is_some().cmp(&a.namespace.is_some())).then(a.name.cmp(&b.name)).then(a.namespace.cmp(&b.namespace)))
        .map(|(_, p)| p)
}

// ---------------------------------------------------------------------------------------
// Parsing and validation

/// 422 causes collected while parsing a policy (shared with [`super::overrides`]).
pub(super) struct Causes(pub(super) Vec<Cause>);

impl Causes {
    pub(super) fn required(&mut self, field: &str) {
        self.0.push(Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: field.into() });
    }
    pub(super) fn invalid(&mut self, field: &str, value: &Value, why: &str) {
        self.0.push(Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: {value}: {why}"), field: field.into() });
    }
    pub(super) fn unsupported(&mut self, field: &str, value: &Value, supported: &[&str]) {
        let list = supported.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ");
        self.0.push(Cause { reason: "FieldValueNotSupported".into(), message: format!("Unsupported value: {value}: supported values: {list}"), field: field.into() });
    }
    pub(super) fn duplicate(&mut self, field: &str, value: &Value) {
        self.0.push(Cause { reason: "FieldValueDuplicate".into(), message: format!("Duplicate value: {value}"), field: field.into() });
    }
    pub(super) fn wrong_type(&mut self, field: &str, value: &Value, ty: &str) {
        self.invalid(field, value, &format!("must be {ty}"));
    }

    pub(super) fn opt_str(&mut self, obj: &Value, key: &str, field: &str) -> Option<String> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                self.wrong_type(&format!("{field}.{key}"), v, "a string");
                None
            }
        }
    }

    pub(super) fn str_list(&mut self, obj: &Value, key: &str, field: &str) -> Vec<String> {
        let f = format!("{field}.{key}");
        match obj.get(key) {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match v.as_str() {
                    Some(s) if !s.is_empty() => Some(s.to_string()),
                    _ => {
                        self.invalid(&format!("{f}[{i}]"), v, "must be a non-empty string");
                        None
                    }
                })
                .collect(),
            Some(v) => {
                self.wrong_type(&f, v, "a list of strings");
                vec![]
            }
        }
    }

    pub(super) fn object<'v>(&mut self, obj: &'v Value, key: &str, field: &str) -> Option<&'v Value> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v),
            Some(v) => {
                self.wrong_type(&format!("{field}.{key}"), v, "an object");
                None
            }
        }
    }

    pub(super) fn int(&mut self, obj: &Value, key: &str, field: &str, min: i64, max: i64) -> Option<i64> {
        let f = format!("{field}.{key}");
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(n) if n < min => {
                    self.invalid(&f, v, &format!("must be greater than or equal to {min}"));
                    None
                }
                Some(n) if n > max => {
                    self.invalid(&f, v, &format!("must be less than or equal to {max}"));
                    None
                }
                Some(n) => Some(n),
                None => {
                    self.wrong_type(&f, v, "an integer");
                    None
                }
            },
        }
    }

    /// Validates a `metav1.LabelSelector` and parses it.
    pub(super) fn label_selector(&mut self, v: &Value, field: &str) -> Option<LabelSelector> {
        let before = self.0.len();
        if !v.is_object() {
            self.wrong_type(field, v, "an object");
            return None;
        }
        match v.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, val) in m {
                    let f = format!("{field}.matchLabels");
                    if !valid_label_key(k) {
                        self.invalid(&f, &Value::String(k.clone()), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character");
                    }
                    if !val.as_str().is_some_and(valid_label_value) {
                        self.invalid(&f, val, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character");
                    }
                }
            }
            Some(other) => self.wrong_type(&format!("{field}.matchLabels"), other, "a map of strings"),
        }
        match v.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, e) in exprs.iter().enumerate() {
                    let f = format!("{field}.matchExpressions[{i}]");
                    match e.get("key").and_then(Value::as_str) {
                        None | Some("") => self.required(&format!("{f}.key")),
                        Some(k) if !valid_label_key(k) => self.invalid(&format!("{f}.key"), &Value::String(k.into()), "invalid label key"),
                        Some(_) => {}
                    }
                    let values = match e.get("values") {
                        None | Some(Value::Null) => vec![],
                        Some(Value::Array(a)) => a.clone(),
                        Some(other) => {
                            self.wrong_type(&format!("{f}.values"), other, "a list of strings");
                            vec![]
                        }
                    };
                    for (j, val) in values.iter().enumerate() {
                        if !val.as_str().is_some_and(valid_label_value) {
                            self.invalid(&format!("{f}.values[{j}]"), val, "a valid label value");
                        }
                    }
                    match e.get("operator").and_then(Value::as_str) {
                        Some("In") | Some("NotIn") if values.is_empty() => {
                            self.required(&format!("{f}.values"));
                        }
                        Some("Exists") | Some("DoesNotExist") if !values.is_empty() => {
                            self.0.push(Cause {
                                reason: "FieldValueForbidden".into(),
                                message: "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".into(),
                                field: format!("{f}.values"),
                            });
                        }
                        Some("In") | Some("NotIn") | Some("Exists") | Some("DoesNotExist") => {}
                        None => self.required(&format!("{f}.operator")),
                        Some(op) => self.unsupported(&format!("{f}.operator"), &Value::String(op.into()), &["In", "NotIn", "Exists", "DoesNotExist"]),
                    }
                }
            }
            Some(other) => self.wrong_type(&format!("{field}.matchExpressions"), other, "a list"),
        }
        if self.0.len() != before {
            return None;
        }
        match LabelSelector::from_json(v) {
            Ok(s) => Some(s),
            Err(e) => {
                self.invalid(field, v, &e.to_string());
                None
            }
        }
    }
}

/// Validation hook for PropagationPolicy objects (the registry's `validate`): 422 causes.
pub fn validate_propagation_policy(obj: &Value) -> Vec<Cause> {
    parse(obj, false).err().unwrap_or_default()
}

/// Validation hook for ClusterPropagationPolicy objects (the registry's `validate`).
pub fn validate_cluster_propagation_policy(obj: &Value) -> Vec<Cause> {
    parse(obj, true).err().unwrap_or_default()
}

/// Parses `spec.resourceSelectors` (shared with override policies): each selector names a
/// served template kind in its served apiVersion; a namespaced policy selects only
/// namespaced kinds of `own_ns`. `required`: an empty or missing list is a cause.
pub(super) fn resource_selectors(c: &mut Causes, spec: &Value, own_ns: Option<&str>, cluster_scoped: bool, required: bool) -> Vec<ResourceSelector> {
    let mut selectors = Vec::new();
    match spec.get("resourceSelectors") {
        None | Some(Value::Null) => {
            if spec.is_object() && required {
                c.required("spec.resourceSelectors");
            }
        }
        Some(Value::Array(a)) if a.is_empty() => {
            if required {
                c.required("spec.resourceSelectors")
            }
        }
        Some(Value::Array(a)) => {
            for (i, s) in a.iter().enumerate() {
                let f = format!("spec.resourceSelectors[{i}]");
                if !s.is_object() {
                    c.wrong_type(&f, s, "an object");
                    continue;
                }
                let api_version = s.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
                if api_version.is_empty() {
                    c.required(&format!("{f}.apiVersion"));
                }
                let kinds: Vec<&str> = served_templates().iter().map(|r| r.kind).collect();
                let mut ok = !api_version.is_empty();
                if kind.is_empty() {
                    c.required(&format!("{f}.kind"));
                    ok = false;
                } else {
                    match served_templates().iter().find(|r| r.kind == kind) {
                        // a custom resource (its group has a dot; CRDs come and go, so any such
                        // kind may be selected, as Karmada allows)
                        None if is_custom_api_version(api_version) => {}
                        None => {
                            c.unsupported(&format!("{f}.kind"), &Value::String(kind.into()), &kinds);
                            ok = false;
                        }
                        Some(r) if !api_version.is_empty() && r.api_version() != api_version => {
                            c.invalid(&format!("{f}.apiVersion"), &Value::String(api_version.into()), &format!("kind {kind} is served as {}", r.api_version()));
                            ok = false;
                        }
                        Some(_) => {}
                    }
                }
                let cluster_kind = served_templates().iter().any(|r| r.kind == kind && !r.namespaced);
                if cluster_kind && !cluster_scoped {
                    c.invalid(
                        &format!("{f}.kind"),
                        &Value::String(kind.into()),
                        &format!("a PropagationPolicy selects only namespaced templates of its own namespace; use a ClusterPropagationPolicy for {kind} (cluster-scoped)"),
                    );
                    ok = false;
                }
                let namespace = c.opt_str(s, "namespace", &f);
                if let (Some(sel_ns), false) = (&namespace, cluster_scoped) {
                    if own_ns.is_some_and(|own| own != sel_ns) {
                        c.invalid(&format!("{f}.namespace"), &Value::String(sel_ns.clone()), "a PropagationPolicy selects only templates of its own namespace");
                        ok = false;
                    }
                }
                if cluster_kind && namespace.is_some() {
                    c.invalid(&format!("{f}.namespace"), &Value::String(namespace.clone().unwrap_or_default()), &format!("{kind} is cluster-scoped"));
                    ok = false;
                }
                let sel_name = c.opt_str(s, "name", &f);
                let label_selector = match s.get("labelSelector") {
                    None | Some(Value::Null) => None,
                    Some(v) => {
                        let parsed = c.label_selector(v, &format!("{f}.labelSelector"));
                        if parsed.is_none() {
                            ok = false;
                        }
                        parsed
                    }
                };
                if ok {
                    selectors.push(ResourceSelector { api_version: api_version.into(), kind: kind.into(), namespace, name: sel_name, label_selector });
                }
            }
        }
        Some(other) => c.wrong_type("spec.resourceSelectors", other, "a list"),
    }

    selectors
}

/// The parts every policy kind starts from: `metadata.name`, `metadata.namespace` (`None`
/// when empty or cluster-scoped) and `spec` (`null` when missing or not an object, with the
/// cause recorded in `c`).
pub(super) fn policy_head<'a>(c: &mut Causes, obj: &'a Value) -> (String, Option<String>, &'a Value) {
    static NULL: Value = Value::Null;
    let meta = obj.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let own_ns = meta.and_then(|m| m.get("namespace")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let spec = match obj.get("spec") {
        Some(s @ Value::Object(_)) => s,
        None | Some(Value::Null) => {
            c.required("spec");
            &NULL
        }
        Some(other) => {
            c.wrong_type("spec", other, "an object");
            &NULL
        }
    };
    (name, own_ns, spec)
}

/// Parses and validates a policy object. `cluster_scoped` selects ClusterPropagationPolicy
/// rules. Errors: every invalid field as a 422 cause (`field` is the JSON path, e.g.
/// `spec.placement.replicaScheduling.weights[1].weight`).
pub fn parse(obj: &Value, cluster_scoped: bool) -> Result<Policy, Vec<Cause>> {
    let mut c = Causes(Vec::new());
    let (name, own_ns, spec) = policy_head(&mut c, obj);

    let selectors = resource_selectors(&mut c, spec, own_ns.as_deref(), cluster_scoped, true);

    // placement
    let mut affinity = ClusterAffinity::default();
    let mut tolerations = Vec::new();
    let mut scheduling = Scheduling::Duplicated;
    if let Some(pl) = c.object(spec, "placement", "spec") {
        let pf = "spec.placement";
        if let Some(a) = c.object(pl, "clusterAffinity", pf) {
            let af = "spec.placement.clusterAffinity";
            affinity.cluster_names = c.str_list(a, "clusterNames", af);
            affinity.exclude = c.str_list(a, "exclude", af);
            affinity.zones = c.str_list(a, "zones", af);
            if let Some(v) = a.get("labelSelector").filter(|v| !v.is_null()) {
                affinity.label_selector = c.label_selector(v, &format!("{af}.labelSelector"));
            }
        }
        match pl.get("clusterTolerations") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                for (i, t) in a.iter().enumerate() {
                    let f = format!("{pf}.clusterTolerations[{i}]");
                    if !t.is_object() {
                        c.wrong_type(&f, t, "an object");
                        continue;
                    }
                    let key = c.opt_str(t, "key", &f).unwrap_or_default();
                    let value = c.opt_str(t, "value", &f).unwrap_or_default();
                    let effect = c.opt_str(t, "effect", &f).unwrap_or_default();
                    if !key.is_empty() && !valid_label_key(&key) {
                        c.invalid(&format!("{f}.key"), &Value::String(key.clone()), "a qualified name");
                    }
                    let operator = match t.get("operator").and_then(Value::as_str) {
                        None | Some("") | Some("Equal") => TolerationOp::Equal,
                        Some("Exists") => TolerationOp::Exists,
                        Some(op) => {
                            c.unsupported(&format!("{f}.operator"), &Value::String(op.into()), &["Equal", "Exists"]);
                            TolerationOp::Equal
                        }
                    };
                    if operator == TolerationOp::Exists && !value.is_empty() {
                        c.invalid(&format!("{f}.value"), &Value::String(value.clone()), "value must be empty when `operator` is 'Exists'");
                    }
                    if operator == TolerationOp::Equal && key.is_empty() {
                        c.invalid(&format!("{f}.operator"), &Value::String("Equal".into()), "operator must be Exists when `key` is empty, which means \"match all values and all keys\"");
                    }
                    if !matches!(effect.as_str(), "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                        c.unsupported(&format!("{f}.effect"), &Value::String(effect.clone()), &["NoSchedule", "PreferNoSchedule", "NoExecute"]);
                    }
                    tolerations.push(Toleration { key, operator, value, effect });
                }
            }
            Some(other) => c.wrong_type(&format!("{pf}.clusterTolerations"), other, "a list"),
        }
        if let Some(rs) = c.object(pl, "replicaScheduling", pf) {
            let rf = "spec.placement.replicaScheduling";
            let ty = rs.get("type").and_then(Value::as_str).unwrap_or("Duplicated");
            let mut weights: Option<Vec<(String, i64)>> = None;
            match rs.get("weights") {
                None | Some(Value::Null) => {}
                Some(Value::Array(a)) => {
                    let mut ws = Vec::new();
                    for (i, w) in a.iter().enumerate() {
                        let f = format!("{rf}.weights[{i}]");
                        if !w.is_object() {
                            c.wrong_type(&f, w, "an object");
                            continue;
                        }
                        let cluster = match w.get("cluster").and_then(Value::as_str) {
                            Some(s) if !s.is_empty() => s.to_string(),
                            _ => {
                                c.required(&format!("{f}.cluster"));
                                continue;
                            }
                        };
                        let weight = match w.get("weight") {
                            None | Some(Value::Null) => {
                                c.required(&format!("{f}.weight"));
                                continue;
                            }
                            Some(_) => match c.int(w, "weight", &f, 0, i64::from(i32::MAX)) {
                                Some(n) => n,
                                None => continue,
                            },
                        };
                        if ws.iter().any(|(cl, _)| *cl == cluster) {
                            c.duplicate(&format!("{f}.cluster"), &Value::String(cluster));
                            continue;
                        }
                        ws.push((cluster, weight));
                    }
                    weights = Some(ws);
                }
                Some(other) => c.wrong_type(&format!("{rf}.weights"), other, "a list"),
            }
            let zone_spread = match rs.get("zoneSpread") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    c.wrong_type(&format!("{rf}.zoneSpread"), other, "a boolean");
                    false
                }
            };
            match ty {
                "Duplicated" => {
                    if weights.as_ref().is_some_and(|w| !w.is_empty()) {
                        c.invalid(&format!("{rf}.weights"), rs.get("weights").unwrap_or(&Value::Null), "weights apply only to type Divided");
                    }
                    if zone_spread {
                        c.invalid(&format!("{rf}.zoneSpread"), &Value::Bool(true), "zoneSpread applies only to type Divided");
                    }
                }
                "Divided" => {
                    scheduling = Scheduling::Divided { weights: weights.filter(|w| !w.is_empty()), zone_spread };
                }
                other => c.unsupported(&format!("{rf}.type"), &Value::String(other.into()), &["Duplicated", "Divided"]),
            }
        }
    }

    let priority = c.int(spec, "priority", "spec", i64::from(i32::MIN), i64::from(i32::MAX)).unwrap_or(0);
    let failover_after_seconds = c.object(spec, "failover", "spec").and_then(|f| c.int(f, "afterSeconds", "spec.failover", 0, i64::from(i32::MAX)));

    let propagate_deps = match spec.get("propagateDeps") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            c.wrong_type("spec.propagateDeps", other, "a boolean");
            false
        }
    };

    if !c.0.is_empty() {
        return Err(c.0);
    }
    Ok(Policy { propagate_deps, namespace: if cluster_scoped { None } else { own_ns }, name, selectors, placement: Placement { affinity, tolerations, scheduling }, priority, failover_after_seconds })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pp(ns: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": name, "namespace": ns}, "spec": spec})
    }

    fn policy(ns: Option<&str>, name: &str, priority: i64, selector: Value) -> Policy {
        let mut spec = json!({"resourceSelectors": [selector], "priority": priority});
        spec["placement"] = json!({});
        let obj = match ns {
            Some(ns) => pp(ns, name, spec),
            None => json!({"metadata": {"name": name}, "spec": spec}),
        };
        parse(&obj, ns.is_none()).expect("valid policy")
    }

    fn tref<'a>(kind: &'a str, ns: Option<&'a str>, name: &'a str, labels: Option<&'a Map<String, Value>>) -> TemplateRef<'a> {
        let api_version = super::served_templates().iter().find(|r| r.kind == kind).map(|r| crate::api::kinds::intern(&r.api_version())).unwrap();
        TemplateRef { api_version, kind, namespace: ns, name, labels }
    }

    #[test]
    fn quickstart_policy_parses() {
        let doc = include_str!("../../testdata/manifests/quickstart.yaml");
        let obj: Value = doc.split("\n---").filter_map(|d| serde_yaml::from_str::<Value>(d).ok()).find(|v| v["kind"] == "PropagationPolicy").unwrap();
        let p = parse(&obj, false).unwrap();
        assert_eq!(p.namespace.as_deref(), Some("shop"));
        assert_eq!(p.placement.affinity.cluster_names, vec!["member-a", "member-b"]);
        assert_eq!(p.placement.scheduling, Scheduling::Divided { weights: Some(vec![("member-a".into(), 2), ("member-b".into(), 1)]), zone_spread: false });
        assert!(validate_propagation_policy(&obj).is_empty());
    }

    #[test]
    fn any_served_kind_is_selectable() {
        let cpp = json!({"metadata": {"name": "all"}, "spec": {"placement": {}, "resourceSelectors": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"},
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass"},
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "namespace": "shop"},
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"},
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"},
        ]}});
        assert_eq!(validate_cluster_propagation_policy(&cpp), vec![]);
        let fields = |o: &Value| validate_propagation_policy(o).into_iter().map(|c| c.field).collect::<Vec<_>>();
        let cluster_kind = pp("shop", "x", json!({"placement": {}, "resourceSelectors": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}]}));
        assert_eq!(fields(&cluster_kind), vec!["spec.resourceSelectors[0].kind"]);
        let old = pp("shop", "x", json!({"placement": {}, "resourceSelectors": [{"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget"}]}));
        assert_eq!(fields(&old), vec!["spec.resourceSelectors[0].apiVersion"]);
        let work = json!({"metadata": {"name": "w"}, "spec": {"placement": {}, "resourceSelectors": [{"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work"}]}});
        assert_eq!(validate_cluster_propagation_policy(&work).len(), 1, "the federation's own kinds never propagate");
        // the kind of a CRD (served later, or not yet) may be selected
        let custom = json!({"metadata": {"name": "c"}, "spec": {"placement": {}, "resourceSelectors": [{"apiVersion": "stable.example.com/v1", "kind": "Shirt"}]}});
        assert_eq!(validate_cluster_propagation_policy(&custom), vec![]);
        let unknown_builtin_group = json!({"metadata": {"name": "c"}, "spec": {"placement": {}, "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Shirt"}]}});
        assert_eq!(validate_cluster_propagation_policy(&unknown_builtin_group).len(), 1);
    }

    #[test]
    fn invalid_fields_are_named() {
        let obj = pp(
            "shop",
            "bad",
            json!({
                "resourceSelectors": [
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"},
                    {"kind": "Deployment"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}},
                    {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "other"},
                    {"apiVersion": "v1", "kind": "Namespace"},
                ],
                "placement": {
                    "clusterAffinity": {"labelSelector": {"matchLabels": {"env": "a b"}}},
                    "clusterTolerations": [{"key": "k", "operator": "Exists", "value": "v"}, {"key": "k", "operator": "Maybe"}, {"key": "k", "effect": "Sometimes"}],
                    "replicaScheduling": {"type": "Divided", "weights": [{"cluster": "a", "weight": -1}, {"cluster": "b", "weight": 1}, {"cluster": "b", "weight": 2}, {"weight": 1}]}
                },
                "failover": {"afterSeconds": -5},
                "priority": "high"
            }),
        );
        let causes = validate_propagation_policy(&obj);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for want in [
            "spec.resourceSelectors[0].kind",
            "spec.resourceSelectors[1].apiVersion",
            "spec.resourceSelectors[2].labelSelector.matchExpressions[0].operator",
            "spec.resourceSelectors[3].namespace",
            "spec.resourceSelectors[4].kind",
            "spec.placement.clusterAffinity.labelSelector.matchLabels",
            "spec.placement.clusterTolerations[0].value",
            "spec.placement.clusterTolerations[1].operator",
            "spec.placement.clusterTolerations[2].effect",
            "spec.placement.replicaScheduling.weights[0].weight",
            "spec.placement.replicaScheduling.weights[2].cluster",
            "spec.placement.replicaScheduling.weights[3].cluster",
            "spec.failover.afterSeconds",
            "spec.priority",
        ] {
            assert!(fields.contains(&want), "missing cause for {want}: {fields:?}");
        }
        let pod = causes.iter().find(|c| c.field == "spec.resourceSelectors[0].kind").unwrap();
        assert_eq!(pod.reason, "FieldValueNotSupported");
        assert!(pod.message.contains("\"Lease\""), "{}", pod.message);
        let neg = causes.iter().find(|c| c.field == "spec.placement.replicaScheduling.weights[0].weight").unwrap();
        assert!(neg.message.contains("greater than or equal to 0"), "{}", neg.message);
    }

    #[test]
    fn missing_spec_and_bad_type() {
        let c = validate_propagation_policy(&json!({"metadata": {"name": "x", "namespace": "n"}}));
        assert_eq!(c[0].field, "spec");
        let c = validate_cluster_propagation_policy(&json!({"metadata": {"name": "x"}, "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace"}],
            "placement": {"replicaScheduling": {"type": "Spread"}}}}));
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].field, "spec.placement.replicaScheduling.type");
        let c = validate_cluster_propagation_policy(&json!({"metadata": {"name": "x"}, "spec": {"resourceSelectors": []}}));
        assert_eq!(c[0].field, "spec.resourceSelectors");
        let c = validate_propagation_policy(&json!({"metadata": {"name": "x", "namespace": "n"}, "spec": {
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "placement": {"replicaScheduling": {"type": "Duplicated", "weights": [{"cluster": "a", "weight": 1}]}}}}));
        assert_eq!(c[0].field, "spec.placement.replicaScheduling.weights");
    }

    #[test]
    fn specificity_beats_priority() {
        let labels: Map<String, Value> = json!({"app": "web"}).as_object().unwrap().clone();
        let kind_only = policy(Some("shop"), "a-kind", 100, json!({"apiVersion": "apps/v1", "kind": "Deployment"}));
        let by_label = policy(Some("shop"), "b-label", 50, json!({"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"app": "web"}}}));
        let by_name = policy(Some("shop"), "c-name", 0, json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}));
        let t = tref("Deployment", Some("shop"), "web", Some(&labels));
        let all = vec![kind_only.clone(), by_label.clone(), by_name.clone()];
        assert_eq!(select(&all, &t).unwrap().name, "c-name");
        assert_eq!(select(&all[..2], &t).unwrap().name, "b-label");
        // another template of the kind: only the kind-only policy matches
        let other = tref("Deployment", Some("shop"), "api", None);
        assert_eq!(select(&all, &other).unwrap().name, "a-kind");
        // other namespace: a PropagationPolicy never matches
        assert!(select(&all, &tref("Deployment", Some("else"), "web", Some(&labels))).is_none());
        // other kind: nothing
        assert!(select(&all, &tref("StatefulSet", Some("shop"), "web", Some(&labels))).is_none());
    }

    #[test]
    fn priority_then_scope_then_name() {
        let t = tref("ConfigMap", Some("shop"), "cfg", None);
        let sel = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let low = policy(Some("shop"), "a", 1, sel.clone());
        let high = policy(Some("shop"), "z", 5, sel.clone());
        assert_eq!(select(&[low.clone(), high.clone()], &t).unwrap().name, "z");
        let cluster_wide = policy(None, "a", 5, sel.clone());
        // same specificity and priority: the namespaced policy wins over the cluster-wide one
        assert_eq!(select(&[cluster_wide.clone(), high.clone()], &t).unwrap().kind(), "PropagationPolicy");
        // a more specific cluster-wide policy wins over a namespaced kind-only one
        let cw_named = policy(None, "zz", 0, json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg"}));
        assert_eq!(select(&[high.clone(), cw_named], &t).unwrap().name, "zz");
        // all equal: name order
        let b = policy(Some("shop"), "b", 1, sel.clone());
        assert_eq!(select(&[b, low], &t).unwrap().name, "a");
        // a cluster-wide policy narrowed to another namespace does not match
        let narrowed = policy(None, "n", 0, json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "other"}));
        assert!(narrowed.matches(&t).is_none());
        // reserved namespaces are never selected
        assert!(cluster_wide.matches(&tref("ConfigMap", Some("fed-exec-a"), "cfg", None)).is_none());
        assert!(cluster_wide.matches(&tref("ConfigMap", Some("kube-system"), "cfg", None)).is_none());
    }

    #[test]
    fn taint_toleration_as_kubernetes() {
        let taint = Taint { key: "dedicated".into(), value: "gpu".into(), effect: "NoSchedule".into() };
        let t = |key: &str, op: TolerationOp, value: &str, effect: &str| Toleration { key: key.into(), operator: op, value: value.into(), effect: effect.into() };
        assert!(t("dedicated", TolerationOp::Equal, "gpu", "NoSchedule").tolerates(&taint));
        assert!(t("dedicated", TolerationOp::Equal, "gpu", "").tolerates(&taint));
        assert!(!t("dedicated", TolerationOp::Equal, "cpu", "").tolerates(&taint));
        assert!(t("dedicated", TolerationOp::Exists, "", "").tolerates(&taint));
        assert!(!t("dedicated", TolerationOp::Exists, "", "NoExecute").tolerates(&taint));
        assert!(t("", TolerationOp::Exists, "", "").tolerates(&taint));
        assert!(!t("other", TolerationOp::Exists, "", "").tolerates(&taint));
        let p = parse(
            &pp(
                "n",
                "p",
                json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "placement": {"clusterTolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}),
            ),
            false,
        )
        .unwrap();
        assert!(p.placement.tolerations[0].tolerates(&taint));
    }
}
