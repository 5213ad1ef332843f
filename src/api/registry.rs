//! The resource registry: which kinds an API server serves, their names, scope, storage keys
//! and Table columns (mirrors kube-apiserver's RESTStorage map plus its printers).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, certificates::v1 as certificates, coordination::v1 as coordination, core::v1 as core, rbac::v1 as rbac};
use serde_json::{json, Value};

use super::kinds;

/// How a Table cell is computed from an object.
#[derive(Clone, Copy)]
pub enum Cell {
    /// A dotted JSON path (`spec.replicas`); missing → `""` for strings, `0` for integers.
    Path(&'static str),
    /// Any function of the whole object.
    Func(fn(&Value) -> Value),
    /// A CRD printer column's JSONPath (`.spec.replicas`,
    /// `.status.conditions[?(@.type=="Ready")].status`); no match → `null` (kubectl prints an
    /// empty cell), evaluated by [`super::crd::printer_cell`].
    JsonPath(&'static str),
}

/// One Table column (mirrors `metav1.TableColumnDefinition` + the printer's cell function).
#[derive(Clone, Copy)]
pub struct Column {
    /// Header, e.g. `Ready`; kubectl upper-cases it.
    pub name: &'static str,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: &'static str,
    /// OpenAPI format; `name` marks the name column.
    pub format: &'static str,
    /// Shown by `kubectl get` at priority 0; `-o wide` adds priority 1.
    pub priority: i32,
    /// Column description.
    pub description: &'static str,
    /// How to compute the cell.
    pub cell: Cell,
}

/// One served resource (a group/version/resource with its kind).
pub struct ResourceInfo {
    /// API group, `""` for core.
    pub group: &'static str,
    /// API version, e.g. `v1`, `v1alpha1`.
    pub version: &'static str,
    /// Plural resource name, e.g. `deployments`.
    pub resource: &'static str,
    /// Singular name, e.g. `deployment`.
    pub singular: &'static str,
    /// Kind, e.g. `Deployment`.
    pub kind: &'static str,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// kubectl short names, e.g. `["deploy"]`.
    pub short_names: &'static [&'static str],
    /// Categories, e.g. `["all"]`.
    pub categories: &'static [&'static str],
    /// Has a `/status` subresource (status ignored on the main endpoint and vice versa).
    pub has_status: bool,
    /// Has a `/scale` subresource (`spec.replicas`).
    pub has_scale: bool,
    /// Tracks `metadata.generation` (bumped on every change outside metadata and status).
    pub has_generation: bool,
    /// Built into kubectl (strategic merge patch applies); false for the federation kinds.
    pub builtin: bool,
    /// Table columns after NAME (NAME is implicit and first).
    pub columns: Vec<Column>,
    /// Field selector paths supported besides `metadata.name`/`metadata.namespace`.
    pub field_selectors: &'static [&'static str],
    /// Kind-specific validation run on every write; returns 422 causes.
    pub validate: Option<fn(&Value) -> Vec<crate::api::Cause>>,
    /// Set for a custom resource: what its CustomResourceDefinition says about this version
    /// (schema, storage version, scale paths); `None` for built-in and federation kinds.
    pub custom: Option<Arc<super::crd::CustomVersion>>,
    /// Set for a built-in kind served in a version other than its storage version (e.g.
    /// autoscaling/v1 HorizontalPodAutoscaler, stored as v2): how its objects are converted.
    pub conversion: Option<&'static super::conversion::Conversion>,
    /// Set for a built-in kind: decodes an object into the kind's typed form (k8s-openapi's),
    /// as kube-apiserver decodes a request body into its Go type, and gives the first value
    /// of the wrong JSON type (`invalid type: integer `5`, expected a string`). Missing
    /// required fields are not its business (kube reports them as validation, 422).
    pub decode: Option<fn(&Value) -> Result<(), String>>,
    /// Its OpenAPI schema ([`super::typed_schema`]): for a built-in kind k8s-openapi's, as a
    /// reference into the generator's definitions
    /// (`{"$ref": "#/components/schemas/io.k8s.api.apps.v1.Deployment"}`); for a federation
    /// kind the whole schema; `None` for custom resources (their CRD describes them).
    pub schema: Option<fn(&mut schemars::SchemaGenerator) -> schemars::Schema>,
}

impl ResourceInfo {
    /// `apiVersion` string: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `apiVersion` objects are stored with: the storage version of a custom resource served
    /// in several versions or of a built-in kind with a [`ResourceInfo::conversion`], else
    /// [`ResourceInfo::api_version`].
    pub fn storage_api_version(&self) -> String {
        match &self.custom {
            Some(c) if c.multi_version => format!("{}/{}", self.group, c.storage_version),
            _ => match self.conversion {
                Some(c) => format!("{}/{}", self.group, c.storage_version),
                None => self.api_version(),
            },
        }
    }

    /// An object of this version as stored: converted to the storage version when the kind
    /// has a [`ResourceInfo::conversion`], else unchanged.
    pub fn to_storage(&self, obj: &mut Value) {
        if let Some(c) = self.conversion {
            (c.to_storage)(obj);
        }
    }

    /// A stored object as served in this version: converted from the storage version when the
    /// kind has a [`ResourceInfo::conversion`], else only its `apiVersion` set (a custom
    /// resource served in several versions, conversion strategy None).
    pub fn from_storage(&self, obj: &mut Value) {
        if let Some(c) = self.conversion {
            (c.from_storage)(obj);
        } else if self.custom.as_ref().is_some_and(|c| c.multi_version) {
            obj["apiVersion"] = json!(self.api_version());
        }
    }

    /// True when a stored object needs [`ResourceInfo::from_storage`] before it is served.
    pub fn converts(&self) -> bool {
        self.conversion.is_some() || self.custom.as_ref().is_some_and(|c| c.multi_version)
    }

    /// Whether the resource only takes creates and stores nothing: the access and token
    /// reviews of `authorization.k8s.io` and `authentication.k8s.io`, answered by whoever
    /// serves them (kube-apiserver lists them with the single verb `create`).
    pub fn create_only(&self) -> bool {
        matches!(self.group, "authorization.k8s.io" | "authentication.k8s.io") && self.resource.ends_with("reviews")
    }

    /// `<Kind>List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Resource qualified by group as used in error messages: `deployments.apps`, `pods`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// Storage prefix for all objects: `/registry/<group|core>/<resource>/`.
    pub fn prefix(&self) -> String {
        let g = if self.group.is_empty() { "core" } else { self.group };
        format!("/registry/{g}/{}/", self.resource)
    }

    /// Storage prefix for one namespace (`None` or cluster-scoped: the whole resource).
    pub fn ns_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.prefix()),
            _ => self.prefix(),
        }
    }

    /// Storage key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.prefix()),
            _ => format!("{}{name}", self.prefix()),
        }
    }
}

/// The set of resources an API server serves, looked up by group/version/resource or kind.
///
/// Lookups go through an index by plural name and by kind (no allocation per lookup), and the
/// group list is kept ready for discovery and path parsing. A registry is built once and
/// shared; kinds added later (custom resources) are added to a copy with [`Registry::add`],
/// which keeps the indexes current, and the copy replaces the served one.
#[derive(Clone, Default)]
pub struct Registry {
    resources: Vec<Arc<ResourceInfo>>,
    by_resource: HashMap<&'static str, Vec<usize>>,
    by_kind: HashMap<&'static str, Vec<usize>>,
    groups: Vec<(&'static str, Vec<&'static str>)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a resource; a resource already served under the same group, version and plural
    /// is replaced.
    pub fn add(&mut self, r: ResourceInfo) -> &mut Self {
        if let Some(i) = self.index_of(r.group, r.version, r.resource) {
            self.resources[i] = Arc::new(r);
            return self;
        }
        let i = self.resources.len();
        self.by_resource.entry(r.resource).or_default().push(i);
        self.by_kind.entry(r.kind).or_default().push(i);
        match self.groups.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                if !vs.contains(&r.version) {
                    vs.push(r.version)
                }
            }
            None => self.groups.push((r.group, vec![r.version])),
        }
        self.resources.push(Arc::new(r));
        self
    }

    fn index_of(&self, group: &str, version: &str, resource: &str) -> Option<usize> {
        self.by_resource.get(resource)?.iter().copied().find(|&i| {
            let r = &self.resources[i];
            r.group == group && r.version == version
        })
    }

    /// All resources, in registration order.
    pub fn all(&self) -> &[Arc<ResourceInfo>] {
        &self.resources
    }

    /// Finds by group, version and plural resource name.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.index_of(group, version, resource).map(|i| self.resources[i].clone())
    }

    /// Finds by `apiVersion` (`v1`, `apps/v1`) and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.by_kind.get(kind)?.iter().map(|&i| &self.resources[i]).find(|r| r.group == group && r.version == version).cloned()
    }

    /// Distinct groups (core as `""`), each with its versions in registration order (the
    /// first one preferred), in registration order.
    pub fn groups(&self) -> &[(&'static str, Vec<&'static str>)] {
        &self.groups
    }

    /// True when `group` (with `version`, if given) is served.
    pub fn serves_group(&self, group: &str, version: Option<&str>) -> bool {
        self.groups.iter().any(|(g, vs)| *g == group && version.is_none_or(|v| vs.contains(&v)))
    }

    /// The federation's registry: every built-in kind ([`kinds::builtins`], stored as
    /// templates) and the federation kinds.
    pub fn federation() -> Self {
        let mut r = Registry::member();
        for info in [cluster(), work(), propagation_policy(), cluster_propagation_policy(), override_policy(), cluster_override_policy()] {
            r.add(info);
        }
        for info in reviews() {
            r.add(info);
        }
        r
    }

    /// A member cluster's registry (what fedsim serves, like a kube-apiserver): every
    /// built-in kind of [`kinds::builtins`], with the Table columns kubectl shows for them.
    /// Pods support the field selectors `spec.nodeName` and `status.phase` (as
    /// kube-apiserver's pod strategy).
    pub fn member() -> Self {
        let mut r = Registry::new();
        for info in kinds::builtins() {
            r.add(info);
        }
        r
    }
}

/// The registry an [`ApiServer`](super::ApiServer) serves, replaceable at run time: the kinds
/// it was built with plus the custom resources of the CustomResourceDefinitions in its
/// store ([`super::crd`] swaps in a new snapshot whenever they change).
///
/// A request takes one snapshot (a read lock held for an `Arc` clone, never across an await)
/// and works on it; a change builds a new [`Registry`] aside and swaps it in, so lookups of
/// built-in kinds cost the same as with a fixed registry.
pub struct LiveRegistry {
    base: Arc<Registry>,
    current: std::sync::RwLock<Arc<Registry>>,
    /// The source snapshot [`LiveRegistry::follow_custom`] last copied from.
    followed: std::sync::Mutex<Option<std::sync::Weak<Registry>>>,
}

impl LiveRegistry {
    /// A live registry serving `base` (and no custom resources yet).
    pub fn new(base: Registry) -> Self {
        let base = Arc::new(base);
        LiveRegistry { current: std::sync::RwLock::new(base.clone()), base, followed: Default::default() }
    }

    /// Serves the custom resources `source` serves now, over this registry's own base (the
    /// global view follows the federation's CustomResourceDefinitions this way, which the
    /// federation places on its members). Rebuilds only when `source` swapped in a new
    /// snapshot since the last call, so calling it on every request costs a lock and a
    /// pointer comparison.
    pub fn follow_custom(&self, source: &LiveRegistry) {
        let snap = source.snapshot();
        let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        if followed.as_ref().is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&snap))) {
            return;
        }
        self.set_custom(snap.all().iter().filter(|i| i.custom.is_some()).map(|i| ResourceInfo { columns: i.columns.clone(), custom: i.custom.clone(), ..**i }).collect());
        *followed = Some(Arc::downgrade(&snap));
    }

    /// The registry served now.
    pub fn snapshot(&self) -> Arc<Registry> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves the base kinds plus `custom` (custom resources replace nothing: one whose
    /// group, version and plural a base kind already has is left out).
    pub fn set_custom(&self, custom: Vec<ResourceInfo>) {
        let mut r = (*self.base).clone();
        for info in custom {
            if self.base.lookup(info.group, info.version, info.resource).is_none() {
                r.add(info);
            }
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(r);
    }

    /// [`Registry::lookup`] on the current snapshot.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.snapshot().lookup(group, version, resource)
    }

    /// [`Registry::by_kind`] on the current snapshot.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.snapshot().by_kind(api_version, kind)
    }

    /// Every resource of the current snapshot, in registration order.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.snapshot().all().to_vec()
    }
}

// ---------------------------------------------------------------------------------------
// Cell helpers

/// Follows a dotted path (`status.readyReplicas`) into an object.
pub fn path<'a>(obj: &'a Value, p: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in p.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

pub(super) fn int_at(obj: &Value, p: &str) -> i64 {
    path(obj, p).and_then(Value::as_i64).unwrap_or(0)
}

/// Renders a timestamp age like kubectl (`5s`, `3m12s`, `4h`, `2d3h`, `45d`).
pub fn human_age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    human_duration(secs)
}

/// kubectl's `HumanDuration` for seconds.
pub fn human_duration(secs: i64) -> String {
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

pub(super) fn age(obj: &Value) -> Value {
    json!(path(obj, "metadata.creationTimestamp").and_then(Value::as_str).map(human_age).unwrap_or_else(|| "<unknown>".into()))
}

pub(super) const fn c(name: &'static str, type_: &'static str, cell: Cell) -> Column {
    Column { name, type_, format: "", priority: 0, description: "", cell }
}

pub(super) const fn wide(name: &'static str, type_: &'static str, cell: Cell) -> Column {
    Column { name, type_, format: "", priority: 1, description: "", cell }
}

pub(super) fn age_col() -> Column {
    c("Age", "string", Cell::Func(age))
}

pub(super) fn count_keys(obj: &Value, fields: &[&str]) -> Value {
    let n: usize = fields.iter().filter_map(|f| obj.get(*f).and_then(Value::as_object).map(|m| m.len())).sum();
    json!(n)
}

pub(super) fn images(obj: &Value, what: &str) -> Value {
    let list = path(obj, "spec.template.spec.containers").and_then(Value::as_array);
    json!(list.map(|cs| cs.iter().filter_map(|c| c.get(what).and_then(Value::as_str)).collect::<Vec<_>>().join(",")).unwrap_or_default())
}

pub(super) fn selector_string(obj: &Value) -> Value {
    let sel = path(obj, "spec.selector.matchLabels").or_else(|| path(obj, "spec.selector"));
    let s = sel.and_then(Value::as_object).map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(",")).unwrap_or_default();
    json!(if s.is_empty() { "<none>".to_string() } else { s })
}

pub(super) fn condition_status(obj: &Value, ty: &str) -> Option<String> {
    path(obj, "status.conditions")?.as_array()?.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?.get("status")?.as_str().map(str::to_string)
}

// ---------------------------------------------------------------------------------------
// Resource definitions

pub(super) fn base(group: &'static str, version: &'static str, resource: &'static str, singular: &'static str, kind: &'static str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        has_status: false,
        has_scale: false,
        has_generation: false,
        builtin: true,
        columns: vec![age_col()],
        field_selectors: &[],
        validate: None,
        custom: None,
        conversion: None,
        decode: None,
        schema: None,
    }
}

/// core/v1 Namespace.
pub fn namespace() -> ResourceInfo {
    ResourceInfo { columns: vec![c("Status", "string", Cell::Path("status.phase")), age_col()], ..kinds::builtin::<core::Namespace>() }
}

/// core/v1 ConfigMap.
pub fn configmap() -> ResourceInfo {
    ResourceInfo { columns: vec![c("Data", "integer", Cell::Func(|o| count_keys(o, &["data", "binaryData"]))), age_col()], ..kinds::builtin::<core::ConfigMap>() }
}

/// core/v1 Secret.
pub fn secret() -> ResourceInfo {
    ResourceInfo { columns: vec![c("Type", "string", Cell::Path("type")), c("Data", "integer", Cell::Func(|o| count_keys(o, &["data", "stringData"]))), age_col()], ..kinds::builtin::<core::Secret>() }
}

fn service_ports(o: &Value) -> Value {
    let ports = path(o, "spec.ports").and_then(Value::as_array);
    let s = ports
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) => format!("{port}:{np}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!(if s.is_empty() { "<none>".to_string() } else { s })
}

/// core/v1 Service.
pub fn service() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Type", "string", Cell::Func(|o| json!(path(o, "spec.type").and_then(Value::as_str).unwrap_or("ClusterIP")))),
            c("Cluster-IP", "string", Cell::Func(|o| json!(path(o, "spec.clusterIP").and_then(Value::as_str).unwrap_or("<none>")))),
            c(
                "External-IP",
                "string",
                Cell::Func(|o| {
                    let ips = path(o, "status.loadBalancer.ingress").and_then(Value::as_array).map(|a| a.iter().filter_map(|i| i.get("ip").and_then(Value::as_str)).collect::<Vec<_>>().join(","));
                    json!(ips.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into()))
                }),
            ),
            c("Port(s)", "string", Cell::Func(service_ports)),
            age_col(),
            wide(
                "Selector",
                "string",
                Cell::Func(|o| {
                    let s = path(o, "spec.selector").and_then(Value::as_object).map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(","));
                    json!(s.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into()))
                }),
            ),
        ],
        ..kinds::builtin::<core::Service>()
    }
}

/// core/v1 ServiceAccount.
pub fn serviceaccount() -> ResourceInfo {
    ResourceInfo {
        columns: vec![c("Secrets", "integer", Cell::Func(|o| json!(o.get("secrets").and_then(Value::as_array).map_or(0, |a| a.len())))), age_col()],
        ..kinds::builtin::<core::ServiceAccount>()
    }
}

/// coordination.k8s.io/v1 Lease.
pub fn lease() -> ResourceInfo {
    ResourceInfo { columns: vec![c("Holder", "string", Cell::Path("spec.holderIdentity")), age_col()], ..kinds::builtin::<coordination::Lease>() }
}

fn workload(info: ResourceInfo) -> ResourceInfo {
    ResourceInfo { validate: Some(validate_workload), ..info }
}

/// Validation of apps/v1 workloads (the registry's `validate`), the part of kube-apiserver's
/// apps validation a mistyped manifest trips: `spec.replicas` a whole number from 0 to
/// 2³¹−1, `spec.selector` a valid label selector that is not empty, and the template's labels
/// matching it (`selector` does not match template `labels`). Objects without a selector
/// are let through (fedctl stores templates it does not run).
pub fn validate_workload(obj: &Value) -> Vec<crate::api::Cause> {
    use crate::api::Cause;
    let invalid = |field: &str, v: &Value, why: &str| Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: {v}: {why}"), field: field.into() };
    let mut causes = Vec::new();
    let Some(spec) = obj.get("spec").filter(|s| !s.is_null()) else { return causes };
    let Some(spec) = spec.as_object() else {
        return vec![invalid("spec", spec, "must be an object")];
    };
    match spec.get("replicas") {
        None | Some(Value::Null) => {}
        Some(r) => match r.as_i64() {
            Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => {}
            Some(_) if r.is_i64() => causes.push(invalid("spec.replicas", r, "must be greater than or equal to 0")),
            _ => causes.push(invalid("spec.replicas", r, "spec.replicas in body must be of type integer")),
        },
    }
    let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) else { return causes };
    let parsed = match crate::api::selector::LabelSelector::from_json(sel) {
        Ok(p) => p,
        Err(e) => {
            causes.push(invalid("spec.selector", sel, &e.to_string()));
            return causes;
        }
    };
    if parsed.is_empty() {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("workload").to_lowercase();
        causes.push(invalid("spec.selector", sel, &format!("empty selector is invalid for {kind}")));
        return causes;
    }
    let labels = spec.get("template").and_then(|t| t.pointer("/metadata/labels"));
    if !parsed.matches(labels.and_then(Value::as_object)) {
        causes.push(invalid("spec.template.metadata.labels", labels.unwrap_or(&Value::Null), "`selector` does not match template `labels`"));
    }
    causes
}

/// apps/v1 Deployment.
pub fn deployment() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Ready", "string", Cell::Func(|o| json!(format!("{}/{}", int_at(o, "status.readyReplicas"), int_at(o, "spec.replicas"))))),
            c("Up-to-date", "integer", Cell::Func(|o| json!(int_at(o, "status.updatedReplicas")))),
            c("Available", "integer", Cell::Func(|o| json!(int_at(o, "status.availableReplicas")))),
            age_col(),
            wide("Containers", "string", Cell::Func(|o| images(o, "name"))),
            wide("Images", "string", Cell::Func(|o| images(o, "image"))),
            wide("Selector", "string", Cell::Func(selector_string)),
        ],
        ..workload(kinds::builtin::<apps::Deployment>())
    }
}

/// apps/v1 StatefulSet.
pub fn statefulset() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Ready", "string", Cell::Func(|o| json!(format!("{}/{}", int_at(o, "status.readyReplicas"), int_at(o, "spec.replicas"))))),
            age_col(),
            wide("Containers", "string", Cell::Func(|o| images(o, "name"))),
            wide("Images", "string", Cell::Func(|o| images(o, "image"))),
        ],
        ..workload(kinds::builtin::<apps::StatefulSet>())
    }
}

/// apps/v1 DaemonSet.
pub fn daemonset() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Desired", "integer", Cell::Func(|o| json!(int_at(o, "status.desiredNumberScheduled")))),
            c("Current", "integer", Cell::Func(|o| json!(int_at(o, "status.currentNumberScheduled")))),
            c("Ready", "integer", Cell::Func(|o| json!(int_at(o, "status.numberReady")))),
            c("Up-to-date", "integer", Cell::Func(|o| json!(int_at(o, "status.updatedNumberScheduled")))),
            c("Available", "integer", Cell::Func(|o| json!(int_at(o, "status.numberAvailable")))),
            c(
                "Node Selector",
                "string",
                Cell::Func(|o| {
                    let s = path(o, "spec.template.spec.nodeSelector")
                        .and_then(Value::as_object)
                        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(","));
                    json!(s.filter(|s| !s.is_empty()).unwrap_or_else(|| "<none>".into()))
                }),
            ),
            age_col(),
        ],
        ..workload(kinds::builtin::<apps::DaemonSet>())
    }
}

/// batch/v1 Job.
pub fn job() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c(
                "Status",
                "string",
                Cell::Func(|o| {
                    let s = if condition_status(o, "Complete").as_deref() == Some("True") {
                        "Complete"
                    } else if condition_status(o, "Failed").as_deref() == Some("True") {
                        "Failed"
                    } else {
                        "Running"
                    };
                    json!(s)
                }),
            ),
            c(
                "Completions",
                "string",
                Cell::Func(|o| {
                    let want = path(o, "spec.completions").and_then(Value::as_i64).unwrap_or(1);
                    json!(format!("{}/{}", int_at(o, "status.succeeded"), want))
                }),
            ),
            c(
                "Duration",
                "string",
                Cell::Func(|o| {
                    let start = path(o, "status.startTime").and_then(Value::as_str);
                    let end = path(o, "status.completionTime").and_then(Value::as_str);
                    let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&chrono::Utc));
                    match (start.and_then(parse), end.and_then(parse)) {
                        (Some(s), Some(e)) => json!(human_duration((e - s).num_seconds())),
                        (Some(s), None) => json!(human_duration((chrono::Utc::now() - s).num_seconds())),
                        _ => json!(""),
                    }
                }),
            ),
            age_col(),
        ],
        ..kinds::builtin::<batch::Job>()
    }
}

/// certificates.k8s.io/v1 CertificateSigningRequest (agent client certificates).
pub fn csr() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            age_col(),
            c("SignerName", "string", Cell::Path("spec.signerName")),
            c("Requestor", "string", Cell::Path("spec.username")),
            c(
                "Condition",
                "string",
                Cell::Func(|o| {
                    let conds = path(o, "status.conditions").and_then(Value::as_array);
                    let mut s: Vec<String> = conds.map(|a| a.iter().filter_map(|c| c.get("type").and_then(Value::as_str).map(str::to_string)).collect()).unwrap_or_default();
                    if path(o, "status.certificate").is_some() {
                        s.push("Issued".into());
                    }
                    json!(if s.is_empty() { "Pending".to_string() } else { s.join(",") })
                }),
            ),
        ],
        ..kinds::builtin::<certificates::CertificateSigningRequest>()
    }
}

/// cluster.fedctl.io/v1alpha1 Cluster: one member cluster (cluster-scoped).
///
/// Spec: `apiEndpoint`, `secretRef {namespace, name}`, `syncMode` (`Pull`), `region`, `zone`,
/// `taints[]`, `id` (the member's kube-system namespace uid). Status: `conditions[]` (Ready,
/// with `lastHeartbeatTime`), `kubernetesVersion`, `nodeSummary {totalNum, readyNum}`,
/// `resourceSummary {allocatable, allocated}`, `apiEnablements[]`.
pub fn cluster() -> ResourceInfo {
    ResourceInfo {
        group: "cluster.fedctl.io",
        version: "v1alpha1",
        has_status: true,
        has_generation: true,
        builtin: false,
        columns: vec![
            c("Ready", "string", Cell::Func(|o| json!(condition_status(o, "Ready").unwrap_or_else(|| "Unknown".into())))),
            c("Version", "string", Cell::Path("status.kubernetesVersion")),
            c("Zone", "string", Cell::Path("spec.zone")),
            c("Nodes", "string", Cell::Func(|o| json!(format!("{}/{}", int_at(o, "status.nodeSummary.readyNum"), int_at(o, "status.nodeSummary.totalNum"))))),
            age_col(),
        ],
        schema: Some(|_| super::typed_schema::federation_schema("Cluster")),
        ..base("cluster.fedctl.io", "v1alpha1", "clusters", "cluster", "Cluster", false)
    }
}

/// work.fedctl.io/v1alpha1 Work: manifests to apply on one member (in its exec namespace).
///
/// Spec: `manifests[]` (whole objects). Status: `conditions[]` and `manifestStatuses[]` with
/// `identifier {group, version, kind, namespace, name}`, `applied`, `message`, `status`.
pub fn work() -> ResourceInfo {
    ResourceInfo {
        has_status: true,
        has_generation: true,
        builtin: false,
        columns: vec![
            c("Manifests", "integer", Cell::Func(|o| json!(path(o, "spec.manifests").and_then(Value::as_array).map_or(0, |a| a.len())))),
            c(
                "Applied",
                "string",
                Cell::Func(|o| {
                    let st = path(o, "status.manifestStatuses").and_then(Value::as_array);
                    json!(match st {
                        None => "Unknown".to_string(),
                        Some(a) => (a.iter().all(|m| m.get("applied").and_then(Value::as_bool) == Some(true))).to_string(),
                    })
                }),
            ),
            age_col(),
        ],
        schema: Some(|_| super::typed_schema::federation_schema("Work")),
        ..base("work.fedctl.io", "v1alpha1", "works", "work", "Work", true)
    }
}

/// policy.fedctl.io/v1alpha1 PropagationPolicy (namespaced).
///
/// Spec: `resourceSelectors[] {apiVersion, kind, namespace, name, labelSelector}`,
/// `placement {clusterAffinity {clusterNames, exclude, labelSelector, zones}, clusterTolerations,
/// replicaScheduling {type: Duplicated|Divided, weights[] {cluster, weight}, zoneSpread}}`,
/// `priority`, `failover {afterSeconds}`. Validated by
/// [`crate::api::policy`] (422 with causes naming the field).
pub fn propagation_policy() -> ResourceInfo {
    ResourceInfo {
        short_names: &["pp"],
        has_generation: true,
        builtin: false,
        validate: Some(crate::api::policy::validate_propagation_policy),
        columns: vec![c("Scheduling", "string", Cell::Func(|o| json!(path(o, "spec.placement.replicaScheduling.type").and_then(Value::as_str).unwrap_or("Duplicated")))), age_col()],
        schema: Some(|_| super::typed_schema::federation_schema("PropagationPolicy")),
        ..base("policy.fedctl.io", "v1alpha1", "propagationpolicies", "propagationpolicy", "PropagationPolicy", true)
    }
}

/// policy.fedctl.io/v1alpha1 ClusterPropagationPolicy (cluster-scoped; same spec).
pub fn cluster_propagation_policy() -> ResourceInfo {
    ResourceInfo {
        short_names: &["cpp"],
        namespaced: false,
        validate: Some(crate::api::policy::validate_cluster_propagation_policy),
        schema: Some(|_| super::typed_schema::federation_schema("ClusterPropagationPolicy")),
        ..ResourceInfo { kind: "ClusterPropagationPolicy", resource: "clusterpropagationpolicies", singular: "clusterpropagationpolicy", ..propagation_policy() }
    }
}

/// policy.fedctl.io/v1alpha1 OverridePolicy (namespaced): per-member changes to the
/// templates it selects, in Karmada's shape. Spec: `resourceSelectors[]` (optional),
/// `overrideRules[] {targetCluster {clusterNames, exclude, labelSelector, zones}, overriders
/// {plaintext, imageOverrider, commandOverrider, argsOverrider, labelsOverrider,
/// annotationsOverrider}}`. Validated by [`crate::controllers::propagation::overrides`].
pub fn override_policy() -> ResourceInfo {
    ResourceInfo {
        short_names: &["op"],
        has_generation: true,
        builtin: false,
        validate: Some(crate::api::overrides::validate_override_policy),
        columns: vec![c("Rules", "integer", Cell::Func(|o| json!(path(o, "spec.overrideRules").and_then(Value::as_array).map_or(0, |a| a.len())))), age_col()],
        schema: Some(|_| super::typed_schema::federation_schema("OverridePolicy")),
        ..base("policy.fedctl.io", "v1alpha1", "overridepolicies", "overridepolicy", "OverridePolicy", true)
    }
}

/// policy.fedctl.io/v1alpha1 ClusterOverridePolicy (cluster-scoped; same spec).
pub fn cluster_override_policy() -> ResourceInfo {
    ResourceInfo {
        short_names: &["cop"],
        namespaced: false,
        validate: Some(crate::api::overrides::validate_cluster_override_policy),
        schema: Some(|_| super::typed_schema::federation_schema("ClusterOverridePolicy")),
        ..ResourceInfo { kind: "ClusterOverridePolicy", resource: "clusteroverridepolicies", singular: "clusteroverridepolicy", ..override_policy() }
    }
}

// ---------------------------------------------------------------------------------------
// Member-cluster kinds (served by fedsim)

fn pod_container_statuses(o: &Value) -> &[Value] {
    path(o, "status.containerStatuses").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// kubectl's READY column of a pod: ready containers / containers.
fn pod_ready(o: &Value) -> Value {
    let total = path(o, "spec.containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = pod_container_statuses(o).iter().filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true)).count();
    json!(format!("{ready}/{total}"))
}

/// kubectl's STATUS column of a pod (mirrors the pod printer): `status.reason`, else the
/// phase, overridden by a waiting or terminated container's reason (`Completed` for exit 0),
/// and `Terminating` once deletion has begun.
pub fn pod_status_reason(o: &Value) -> String {
    let mut reason = path(o, "status.reason").and_then(Value::as_str).or_else(|| path(o, "status.phase").and_then(Value::as_str)).unwrap_or("Pending").to_string();
    for cs in pod_container_statuses(o).iter().rev() {
        if let Some(r) = cs.pointer("/state/waiting/reason").and_then(Value::as_str) {
            reason = r.to_string();
        } else if let Some(t) = cs.pointer("/state/terminated") {
            reason = match t.get("reason").and_then(Value::as_str) {
                Some(r) if !r.is_empty() => r.to_string(),
                _ if t.get("exitCode").and_then(Value::as_i64) == Some(0) => "Completed".into(),
                _ => "Error".into(),
            };
        }
    }
    if path(o, "metadata.deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    reason
}

/// core/v1 Pod: NAME READY STATUS RESTARTS AGE, wide IP NODE; field selectors
/// `spec.nodeName`, `status.phase`.
pub fn pod() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Ready", "string", Cell::Func(pod_ready)),
            c("Status", "string", Cell::Func(|o| json!(pod_status_reason(o)))),
            c(
                "Restarts",
                "string",
                Cell::Func(|o| {
                    let n: i64 = pod_container_statuses(o).iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum();
                    json!(n.to_string())
                }),
            ),
            age_col(),
            wide("IP", "string", Cell::Func(|o| json!(path(o, "status.podIP").and_then(Value::as_str).unwrap_or("<none>")))),
            wide("Node", "string", Cell::Func(|o| json!(path(o, "spec.nodeName").and_then(Value::as_str).unwrap_or("<none>")))),
        ],
        field_selectors: &["spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "status.podIP"],
        ..kinds::builtin::<core::Pod>()
    }
}

fn node_roles(o: &Value) -> Value {
    let mut roles: Vec<String> = path(o, "metadata.labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                        Some(r.to_string())
                    } else if k == "kubernetes.io/role" {
                        v.as_str().map(str::to_string)
                    } else {
                        None
                    }
                })
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") })
}

fn node_address(o: &Value, ty: &str) -> Value {
    let a =
        path(o, "status.addresses").and_then(Value::as_array).and_then(|a| a.iter().find(|x| x.get("type").and_then(Value::as_str) == Some(ty)).and_then(|x| x.get("address")).and_then(Value::as_str));
    json!(a.unwrap_or("<none>"))
}

/// core/v1 Node: NAME STATUS ROLES AGE VERSION, wide INTERNAL-IP EXTERNAL-IP OS-IMAGE
/// KERNEL-VERSION CONTAINER-RUNTIME.
pub fn node() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c(
                "Status",
                "string",
                Cell::Func(|o| {
                    let mut s = match condition_status(o, "Ready").as_deref() {
                        Some("True") => "Ready".to_string(),
                        _ => "NotReady".to_string(),
                    };
                    if path(o, "spec.unschedulable").and_then(Value::as_bool) == Some(true) {
                        s.push_str(",SchedulingDisabled");
                    }
                    json!(s)
                }),
            ),
            c("Roles", "string", Cell::Func(node_roles)),
            age_col(),
            c("Version", "string", Cell::Path("status.nodeInfo.kubeletVersion")),
            wide("Internal-IP", "string", Cell::Func(|o| node_address(o, "InternalIP"))),
            wide("External-IP", "string", Cell::Func(|o| node_address(o, "ExternalIP"))),
            wide("OS-Image", "string", Cell::Path("status.nodeInfo.osImage")),
            wide("Kernel-Version", "string", Cell::Path("status.nodeInfo.kernelVersion")),
            wide("Container-Runtime", "string", Cell::Path("status.nodeInfo.containerRuntimeVersion")),
        ],
        field_selectors: &["spec.unschedulable"],
        ..kinds::builtin::<core::Node>()
    }
}

/// core/v1 Event: LAST SEEN TYPE REASON OBJECT MESSAGE (after NAME).
pub fn event() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c(
                "Last Seen",
                "string",
                Cell::Func(|o| {
                    let t = path(o, "lastTimestamp")
                        .and_then(Value::as_str)
                        .or_else(|| path(o, "eventTime").and_then(Value::as_str))
                        .or_else(|| path(o, "metadata.creationTimestamp").and_then(Value::as_str));
                    json!(t.map(human_age).unwrap_or_else(|| "<unknown>".into()))
                }),
            ),
            c("Type", "string", Cell::Path("type")),
            c("Reason", "string", Cell::Path("reason")),
            c(
                "Object",
                "string",
                Cell::Func(|o| {
                    let kind = path(o, "involvedObject.kind").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
                    let name = path(o, "involvedObject.name").and_then(Value::as_str).unwrap_or("");
                    json!(format!("{kind}/{name}"))
                }),
            ),
            c("Message", "string", Cell::Path("message")),
            wide("Source", "string", Cell::Path("source.component")),
            wide("Count", "integer", Cell::Path("count")),
        ],
        field_selectors: &["involvedObject.kind", "involvedObject.name", "involvedObject.namespace", "involvedObject.uid", "reason", "type", "source"],
        ..kinds::builtin::<core::Event>()
    }
}

/// core/v1 Endpoints: NAME ENDPOINTS AGE.
pub fn endpoints() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c(
                "Endpoints",
                "string",
                Cell::Func(|o| {
                    let mut out = Vec::new();
                    for s in path(o, "subsets").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
                        let ports: Vec<i64> = s.get("ports").and_then(Value::as_array).map(|p| p.iter().filter_map(|p| p.get("port").and_then(Value::as_i64)).collect()).unwrap_or_default();
                        for a in s.get("addresses").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
                            let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                            if ports.is_empty() {
                                out.push(ip.to_string());
                            }
                            for p in &ports {
                                out.push(format!("{ip}:{p}"));
                            }
                        }
                    }
                    let more = out.len().saturating_sub(3);
                    out.truncate(3);
                    let mut s = out.join(",");
                    if more > 0 {
                        s.push_str(&format!(" + {more} more..."));
                    }
                    json!(if s.is_empty() { "<none>".to_string() } else { s })
                }),
            ),
            age_col(),
        ],
        ..kinds::builtin::<core::Endpoints>()
    }
}

/// apps/v1 ReplicaSet: NAME DESIRED CURRENT READY AGE, wide CONTAINERS IMAGES SELECTOR.
pub fn replicaset() -> ResourceInfo {
    ResourceInfo {
        columns: vec![
            c("Desired", "integer", Cell::Func(|o| json!(int_at(o, "spec.replicas")))),
            c("Current", "integer", Cell::Func(|o| json!(int_at(o, "status.replicas")))),
            c("Ready", "integer", Cell::Func(|o| json!(int_at(o, "status.readyReplicas")))),
            age_col(),
            wide("Containers", "string", Cell::Func(|o| images(o, "name"))),
            wide("Images", "string", Cell::Func(|o| images(o, "image"))),
            wide("Selector", "string", Cell::Func(selector_string)),
        ],
        ..workload(kinds::builtin::<apps::ReplicaSet>())
    }
}

pub(super) fn created_at(o: &Value) -> Value {
    json!(path(o, "metadata.creationTimestamp").and_then(Value::as_str).unwrap_or(""))
}

fn role_ref(o: &Value) -> Value {
    let kind = path(o, "roleRef.kind").and_then(Value::as_str).unwrap_or("");
    let name = path(o, "roleRef.name").and_then(Value::as_str).unwrap_or("");
    json!(format!("{kind}/{name}"))
}

fn subjects_of(o: &Value, kind: &str) -> Value {
    let s: Vec<String> = path(o, "subjects")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
                .map(|s| {
                    let name = s.get("name").and_then(Value::as_str).unwrap_or("");
                    match (kind, s.get("namespace").and_then(Value::as_str)) {
                        ("ServiceAccount", Some(ns)) => format!("{ns}/{name}"),
                        _ => name.to_string(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    json!(s.join(", "))
}

fn rbac(info: ResourceInfo, binding: bool) -> ResourceInfo {
    let columns = if binding {
        vec![
            c("Role", "string", Cell::Func(role_ref)),
            age_col(),
            wide("Users", "string", Cell::Func(|o| subjects_of(o, "User"))),
            wide("Groups", "string", Cell::Func(|o| subjects_of(o, "Group"))),
            wide("ServiceAccounts", "string", Cell::Func(|o| subjects_of(o, "ServiceAccount"))),
        ]
    } else {
        vec![c("Created At", "date", Cell::Func(created_at))]
    };
    ResourceInfo { columns, ..info }
}

/// The review kinds the federation answers (create-only, never stored; see
/// [`ResourceInfo::create_only`]): `authorization.k8s.io/v1` SelfSubjectAccessReview,
/// SelfSubjectRulesReview, SubjectAccessReview, LocalSubjectAccessReview and
/// `authentication.k8s.io/v1` (and `v1beta1`) SelfSubjectReview and `v1` TokenReview.
pub fn reviews() -> Vec<ResourceInfo> {
    use k8s_openapi::api::{authentication::v1 as authn, authorization::v1 as authz};
    let bare = |info: ResourceInfo| ResourceInfo { columns: vec![], ..info };
    vec![
        bare(kinds::builtin::<authz::LocalSubjectAccessReview>()),
        bare(kinds::builtin::<authz::SelfSubjectAccessReview>()),
        bare(kinds::builtin::<authz::SelfSubjectRulesReview>()),
        bare(kinds::builtin::<authz::SubjectAccessReview>()),
        bare(kinds::builtin::<authn::SelfSubjectReview>()),
        bare(kinds::builtin::<authn::TokenReview>()),
        // kubectl 1.27's `auth whoami` asks v1beta1 (beta in Kubernetes 1.27)
        bare(base("authentication.k8s.io", "v1beta1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", false)),
    ]
}

/// rbac.authorization.k8s.io/v1 Role.
pub fn role() -> ResourceInfo {
    rbac(kinds::builtin::<rbac::Role>(), false)
}

/// rbac.authorization.k8s.io/v1 RoleBinding.
pub fn rolebinding() -> ResourceInfo {
    rbac(kinds::builtin::<rbac::RoleBinding>(), true)
}

/// rbac.authorization.k8s.io/v1 ClusterRole.
pub fn clusterrole() -> ResourceInfo {
    rbac(kinds::builtin::<rbac::ClusterRole>(), false)
}

/// rbac.authorization.k8s.io/v1 ClusterRoleBinding.
pub fn clusterrolebinding() -> ResourceInfo {
    rbac(kinds::builtin::<rbac::ClusterRoleBinding>(), true)
}

#[cfg(test)]
mod live_tests {
    use super::*;

    #[test]
    fn custom_resources_are_swapped_in_and_never_replace_base_kinds() {
        let live = LiveRegistry::new(Registry::member());
        let before = live.snapshot();
        let widget = ResourceInfo { builtin: false, ..base("test.fedctl.io", "v1", "widgets", "widget", "Widget", true) };
        let fake_pods = ResourceInfo { builtin: false, ..base("", "v1", "pods", "pod", "Pod", true) };
        live.set_custom(vec![widget, fake_pods]);
        assert!(live.lookup("test.fedctl.io", "v1", "widgets").is_some());
        assert!(live.snapshot().serves_group("test.fedctl.io", Some("v1")));
        assert!(live.lookup("", "v1", "pods").is_some_and(|p| p.builtin), "a base kind is kept");
        assert!(before.lookup("test.fedctl.io", "v1", "widgets").is_none(), "an old snapshot is unchanged");
        live.set_custom(Vec::new());
        assert!(live.lookup("test.fedctl.io", "v1", "widgets").is_none());
        assert_eq!(live.all().len(), Registry::member().all().len());
    }
}
