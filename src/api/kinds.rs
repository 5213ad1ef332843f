//! The built-in kinds of Kubernetes 1.33, derived from k8s-openapi's `Resource` types plus the
//! facts kube-apiserver's registries add (short names, categories, subresources, printers).
//!
//! Every kind is named once, in [`builtins`]; its group, version, kind, plural and scope come
//! from [`k8s_openapi::Resource`], and [`facts`] adds what each kube-apiserver registry
//! declares (`ShortNames()`, `Categories()`, the `/status` and `/scale` subresources, whether
//! its strategy tracks `metadata.generation`). Table columns of the kinds people `get` most
//! mirror kube-apiserver's printers (`pkg/printers/internalversion/printers.go`); other kinds
//! get NAME and AGE.
//!
//! The federation stores every one of these as a template: it never calls a webhook of a
//! webhook configuration, never routes to an APIService, never provisions for a
//! StorageClass; such objects only take effect where they are propagated.

use std::any::TypeId;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::{
    admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v2 as autoscaling, batch::v1 as batch, core::v1 as core, discovery::v1 as discovery, events::v1 as events,
    flowcontrol::v1 as flowcontrol, networking::v1 as networking, node::v1 as node, policy::v1 as policy, scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
use k8s_openapi::{NamespaceResourceScope, Resource};
use serde_json::{json, Value};

use super::registry::{self as reg, age_col, c, wide, Cell, Column, ResourceInfo};

/// Interns a name built at run time (a kind's singular name; later a custom resource's
/// names), so [`ResourceInfo`] keeps `&'static str` fields: each distinct string is leaked
/// once per process, however often a registry is built.
pub fn intern(s: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.insert(n);
    n
}

/// What a kube-apiserver registry declares about a kind besides its schema.
#[derive(Clone, Copy, Default)]
pub struct Facts {
    /// `ShortNames()`, e.g. `["deploy"]`.
    pub short_names: &'static [&'static str],
    /// `Categories()`, e.g. `["all"]`.
    pub categories: &'static [&'static str],
    /// Served `/status` subresource (the main endpoint then ignores `status`).
    pub status: bool,
    /// Served `/scale` subresource (`spec.replicas` as `autoscaling/v1` Scale).
    pub scale: bool,
    /// The strategy bumps `metadata.generation` on spec changes.
    pub generation: bool,
}

const ALL: &[&str] = &["all"];
const API_EXT: &[&str] = &["api-extensions"];

/// The registry facts of a built-in resource, by group and plural, as kube-apiserver 1.33
/// declares them (each `pkg/registry/<group>/<resource>/storage/storage.go` and strategy).
/// Resources not listed have none of them.
pub fn facts(group: &str, resource: &str) -> Facts {
    let f = |short_names, categories, status, scale, generation| Facts { short_names, categories, status, scale, generation };
    match (group, resource) {
        ("", "configmaps") => f(&["cm"], &[], false, false, false),
        ("", "endpoints") => f(&["ep"], &[], false, false, false),
        ("", "events") | ("events.k8s.io", "events") => f(&["ev"], &[], false, false, false),
        ("", "limitranges") => f(&["limits"], &[], false, false, false),
        ("", "namespaces") => f(&["ns"], &[], true, false, false),
        ("", "nodes") => f(&["no"], &[], true, false, false),
        ("", "persistentvolumeclaims") => f(&["pvc"], &[], true, false, false),
        ("", "persistentvolumes") => f(&["pv"], &[], true, false, false),
        ("", "pods") => f(&["po"], ALL, true, false, false),
        ("", "replicationcontrollers") => f(&["rc"], ALL, true, true, true),
        ("", "resourcequotas") => f(&["quota"], &[], true, false, false),
        ("", "serviceaccounts") => f(&["sa"], &[], false, false, false),
        ("", "services") => f(&["svc"], ALL, true, false, false),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations" | "validatingwebhookconfigurations") => f(&[], API_EXT, false, false, true),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => f(&[], API_EXT, true, false, true),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => f(&[], API_EXT, false, false, true),
        ("apiextensions.k8s.io", "customresourcedefinitions") => f(&["crd", "crds"], API_EXT, true, false, true),
        ("apiregistration.k8s.io", "apiservices") => f(&[], API_EXT, true, false, false),
        ("apps", "daemonsets") => f(&["ds"], ALL, true, false, true),
        ("apps", "deployments") => f(&["deploy"], ALL, true, true, true),
        ("apps", "replicasets") => f(&["rs"], ALL, true, true, true),
        ("apps", "statefulsets") => f(&["sts"], ALL, true, true, true),
        ("autoscaling", "horizontalpodautoscalers") => f(&["hpa"], ALL, true, false, false),
        ("batch", "cronjobs") => f(&["cj"], ALL, true, false, true),
        ("batch", "jobs") => f(&[], ALL, true, false, true),
        ("certificates.k8s.io", "certificatesigningrequests") => f(&["csr"], &[], true, false, false),
        ("flowcontrol.apiserver.k8s.io", "flowschemas" | "prioritylevelconfigurations") => f(&[], &[], true, false, true),
        ("networking.k8s.io", "ingresses") => f(&["ing"], &[], true, false, true),
        ("networking.k8s.io", "ingressclasses") => f(&[], &[], false, false, true),
        ("networking.k8s.io", "networkpolicies") => f(&["netpol"], &[], false, false, true),
        ("networking.k8s.io", "ipaddresses") => f(&["ip"], &[], false, false, false),
        ("networking.k8s.io", "servicecidrs") => f(&[], &[], true, false, false),
        ("policy", "poddisruptionbudgets") => f(&["pdb"], &[], true, false, true),
        ("scheduling.k8s.io", "priorityclasses") => f(&["pc"], &[], false, false, false),
        ("storage.k8s.io", "storageclasses") => f(&["sc"], &[], false, false, false),
        ("storage.k8s.io", "volumeattachments") => f(&[], &[], true, false, false),
        _ => Facts::default(),
    }
}

/// One built-in kind from its k8s-openapi type: identity and scope from
/// [`k8s_openapi::Resource`], [`facts`], and the printer's Table columns ([`printer`]).
pub fn builtin<K>() -> ResourceInfo
where
    K: Resource + serde::de::DeserializeOwned + schemars::JsonSchema,
    K::Scope: 'static,
{
    let namespaced = TypeId::of::<K::Scope>() == TypeId::of::<NamespaceResourceScope>();
    let singular = intern(&K::KIND.to_ascii_lowercase());
    let mut info = reg::base(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT, singular, K::KIND, namespaced);
    let f = facts(K::GROUP, K::URL_PATH_SEGMENT);
    info.short_names = f.short_names;
    info.categories = f.categories;
    info.has_status = f.status;
    info.has_scale = f.scale;
    info.has_generation = f.generation;
    if let Some(cols) = printer(K::GROUP, K::URL_PATH_SEGMENT) {
        info.columns = cols;
    }
    info.decode = Some(decode_as::<K>);
    info.schema = Some(|g| g.subschema_for::<K>());
    info
}

/// Decodes `obj` as a `K` ([`ResourceInfo::decode`]): `Err` with serde's message for a value
/// of the wrong type (Go's `json: cannot unmarshal …` in kube-apiserver); a missing required
/// field is not an error here (Go's decoding does not require fields either).
fn decode_as<K: serde::de::DeserializeOwned>(obj: &Value) -> Result<(), String> {
    match K::deserialize(obj) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().starts_with("missing field") => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Every creatable built-in resource kube-apiserver 1.33 serves by default (GA groups; the
/// review kinds, `bindings` and `componentstatuses`, which are never stored, are left out).
/// Preferred versions come first within a group. Kinds with kube-apiserver behaviour fedctl
/// mirrors (columns, validation, field selectors) are built by their own function in
/// [`super::registry`], each from [`builtin`].
pub fn builtins() -> Vec<ResourceInfo> {
    vec![
        // core/v1
        reg::namespace(),
        reg::node(),
        reg::pod(),
        reg::event(),
        reg::endpoints(),
        reg::configmap(),
        reg::secret(),
        reg::service(),
        reg::serviceaccount(),
        builtin::<core::LimitRange>(),
        builtin::<core::PersistentVolume>(),
        builtin::<core::PersistentVolumeClaim>(),
        builtin::<core::PodTemplate>(),
        builtin::<core::ReplicationController>(),
        builtin::<core::ResourceQuota>(),
        // admissionregistration.k8s.io/v1
        builtin::<admission::MutatingWebhookConfiguration>(),
        builtin::<admission::ValidatingWebhookConfiguration>(),
        builtin::<admission::ValidatingAdmissionPolicy>(),
        builtin::<admission::ValidatingAdmissionPolicyBinding>(),
        // apiextensions.k8s.io/v1, apiregistration.k8s.io/v1
        ResourceInfo { validate: Some(super::crd::validate_crd), ..builtin::<apiextensions::CustomResourceDefinition>() },
        builtin::<apiregistration::APIService>(),
        // apps/v1
        reg::deployment(),
        reg::replicaset(),
        reg::statefulset(),
        reg::daemonset(),
        builtin::<apps::ControllerRevision>(),
        // autoscaling/v2, and v1 stored as v2 (kube-apiserver's storage version)
        builtin::<autoscaling::HorizontalPodAutoscaler>(),
        hpa_v1(),
        // batch/v1
        reg::job(),
        builtin::<batch::CronJob>(),
        // certificates.k8s.io/v1, coordination.k8s.io/v1, discovery.k8s.io/v1, events.k8s.io/v1
        reg::csr(),
        reg::lease(),
        builtin::<discovery::EndpointSlice>(),
        builtin::<events::Event>(),
        // flowcontrol.apiserver.k8s.io/v1
        builtin::<flowcontrol::FlowSchema>(),
        builtin::<flowcontrol::PriorityLevelConfiguration>(),
        // networking.k8s.io/v1
        builtin::<networking::Ingress>(),
        builtin::<networking::IngressClass>(),
        builtin::<networking::NetworkPolicy>(),
        builtin::<networking::IPAddress>(),
        builtin::<networking::ServiceCIDR>(),
        // node.k8s.io/v1, policy/v1
        builtin::<node::RuntimeClass>(),
        builtin::<policy::PodDisruptionBudget>(),
        // rbac.authorization.k8s.io/v1
        reg::role(),
        reg::rolebinding(),
        reg::clusterrole(),
        reg::clusterrolebinding(),
        // scheduling.k8s.io/v1, storage.k8s.io/v1
        builtin::<scheduling::PriorityClass>(),
        builtin::<storage::CSIDriver>(),
        builtin::<storage::CSINode>(),
        builtin::<storage::CSIStorageCapacity>(),
        builtin::<storage::StorageClass>(),
        builtin::<storage::VolumeAttachment>(),
    ]
}

/// autoscaling/v1 HorizontalPodAutoscaler: served next to v2 and stored as v2, converted as
/// kube-apiserver converts it ([`super::conversion::HPA_V1`]); its Table is the v2 printer's,
/// computed on the object converted to v2 (kube-apiserver prints the internal form).
fn hpa_v1() -> ResourceInfo {
    let mut info = builtin::<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler>();
    info.conversion = Some(&super::conversion::HPA_V1);
    for col in &mut info.columns {
        if col.name == "Targets" {
            col.cell = Cell::Func(|o| hpa_targets(&super::conversion::hpa_as_v2(o)));
        }
    }
    info
}

/// Keeps the k8s-openapi types of the kinds built in [`super::registry`] named here too, so
/// their identity is checked against the schema by the unit tests.
#[cfg(test)]
fn identities() -> Vec<ResourceInfo> {
    use k8s_openapi::api::{certificates::v1 as certificates, coordination::v1 as coordination, rbac::v1 as rbac};
    vec![
        builtin::<core::Namespace>(),
        builtin::<core::Node>(),
        builtin::<core::Pod>(),
        builtin::<core::Event>(),
        builtin::<core::Endpoints>(),
        builtin::<core::ConfigMap>(),
        builtin::<core::Secret>(),
        builtin::<core::Service>(),
        builtin::<core::ServiceAccount>(),
        builtin::<apps::Deployment>(),
        builtin::<apps::ReplicaSet>(),
        builtin::<apps::StatefulSet>(),
        builtin::<apps::DaemonSet>(),
        builtin::<batch::Job>(),
        builtin::<certificates::CertificateSigningRequest>(),
        builtin::<coordination::Lease>(),
        builtin::<rbac::Role>(),
        builtin::<rbac::RoleBinding>(),
        builtin::<rbac::ClusterRole>(),
        builtin::<rbac::ClusterRoleBinding>(),
    ]
}

// ---------------------------------------------------------------------------------------
// Printers of the kinds without their own function (mirrors printers.go)

fn s_at(o: &Value, p: &str) -> Option<String> {
    reg::path(o, p).and_then(Value::as_str).map(str::to_string)
}

fn or_none(s: String) -> Value {
    json!(if s.is_empty() { "<none>".to_string() } else { s })
}

fn join_keys(v: Option<&Value>) -> String {
    v.and_then(Value::as_object).map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(",")).unwrap_or_default()
}

/// A label selector as `metav1.FormatLabelSelector` prints it.
fn label_selector(v: Option<&Value>) -> String {
    let Some(v) = v else { return "<none>".into() };
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
        parts.extend(m.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))));
    }
    for e in v.get("matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let vals: Vec<&str> = e.get("values").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        parts.push(match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", vals.join(",")),
            "NotIn" => format!("{key} notin ({})", vals.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", vals.join(",")),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

fn access_modes(o: &Value, p: &str) -> Value {
    let short = |m: &str| {
        match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        }
        .to_string()
    };
    json!(reg::path(o, p).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(short).collect::<Vec<_>>().join(",")).unwrap_or_default())
}

fn containers_at(o: &Value, p: &str, what: &str) -> Value {
    json!(reg::path(o, p).and_then(Value::as_array).map(|cs| cs.iter().filter_map(|c| c.get(what).and_then(Value::as_str)).collect::<Vec<_>>().join(",")).unwrap_or_default())
}

fn count_at(o: &Value, p: &str) -> Value {
    json!(reg::path(o, p).and_then(Value::as_array).map_or(0, Vec::len))
}

fn bool_text(o: &Value, p: &str, default: bool) -> Value {
    json!(reg::path(o, p).and_then(Value::as_bool).unwrap_or(default).to_string())
}

fn int_or_string(o: &Value, p: &str) -> Value {
    json!(match reg::path(o, p) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "N/A".to_string(),
    })
}

fn ingress_hosts(o: &Value) -> Value {
    let hosts: Vec<&str> = reg::path(o, "spec.rules").and_then(Value::as_array).map(|a| a.iter().filter_map(|r| r.get("host").and_then(Value::as_str)).collect()).unwrap_or_default();
    let rules = reg::path(o, "spec.rules").and_then(Value::as_array).map_or(0, Vec::len);
    json!(if hosts.is_empty() && rules == 0 {
        "*".to_string()
    } else if hosts.len() > 4 {
        format!("{} + {} more...", hosts[..4].join(","), hosts.len() - 4)
    } else if hosts.is_empty() {
        "*".to_string()
    } else {
        hosts.join(",")
    })
}

fn ingress_address(o: &Value) -> Value {
    let a: Vec<&str> = reg::path(o, "status.loadBalancer.ingress")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|i| i.get("ip").or_else(|| i.get("hostname")).and_then(Value::as_str)).collect())
        .unwrap_or_default();
    json!(a.join(","))
}

fn hpa_targets(o: &Value) -> Value {
    let metrics = reg::path(o, "spec.metrics").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if metrics.is_empty() {
        return json!("<none>");
    }
    let parts: Vec<String> = metrics
        .iter()
        .map(|m| {
            let target = m.get("resource").or_else(|| m.get("containerResource")).or_else(|| m.get("pods")).or_else(|| m.get("object")).or_else(|| m.get("external")).and_then(|x| x.get("target"));
            let want = target
                .map(|t| match (t.get("averageUtilization"), t.get("averageValue"), t.get("value")) {
                    (Some(u), _, _) => format!("{u}%"),
                    (_, Some(Value::String(v)), _) | (_, _, Some(Value::String(v))) => v.clone(),
                    _ => "<unset>".into(),
                })
                .unwrap_or_else(|| "<unset>".into());
            let name = m.pointer("/resource/name").and_then(Value::as_str).map(|n| format!("{n}: ")).unwrap_or_default();
            format!("{name}<unknown>/{want}")
        })
        .collect();
    json!(parts.join(", "))
}

fn cronjob_last(o: &Value) -> Value {
    json!(s_at(o, "status.lastScheduleTime").map(|t| reg::human_age(&t)).unwrap_or_else(|| "<none>".into()))
}

fn endpointslice_endpoints(o: &Value) -> Value {
    let mut addrs: Vec<String> = Vec::new();
    for e in reg::path(o, "endpoints").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        for a in e.get("addresses").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(a) = a.as_str() {
                addrs.push(a.to_string());
            }
        }
    }
    let more = addrs.len().saturating_sub(3);
    addrs.truncate(3);
    let mut s = addrs.join(",");
    if more > 0 {
        s.push_str(&format!(" + {more} more..."));
    }
    or_none(s)
}

fn endpointslice_ports(o: &Value) -> Value {
    let ports: Vec<String> =
        reg::path(o, "ports").and_then(Value::as_array).map(|a| a.iter().map(|p| p.get("port").and_then(Value::as_i64).map_or("<unset>".to_string(), |n| n.to_string())).collect()).unwrap_or_default();
    or_none(ports.join(","))
}

/// Table columns after NAME for a built-in resource, as kube-apiserver's printer for it
/// shows them; `None` for resources that keep NAME and AGE.
pub fn printer(group: &str, resource: &str) -> Option<Vec<Column>> {
    let cols = match (group, resource) {
        ("", "persistentvolumes") => vec![
            c("Capacity", "string", Cell::Path("spec.capacity.storage")),
            c("Access Modes", "string", Cell::Func(|o| access_modes(o, "spec.accessModes"))),
            c("Reclaim Policy", "string", Cell::Path("spec.persistentVolumeReclaimPolicy")),
            c("Status", "string", Cell::Path("status.phase")),
            c(
                "Claim",
                "string",
                Cell::Func(|o| {
                    json!(match (s_at(o, "spec.claimRef.namespace"), s_at(o, "spec.claimRef.name")) {
                        (Some(ns), Some(n)) => format!("{ns}/{n}"),
                        _ => String::new(),
                    })
                }),
            ),
            c("StorageClass", "string", Cell::Path("spec.storageClassName")),
            c("VolumeAttributesClass", "string", Cell::Func(|o| json!(s_at(o, "spec.volumeAttributesClassName").unwrap_or_else(|| "<unset>".into())))),
            c("Reason", "string", Cell::Path("status.reason")),
            age_col(),
            wide("VolumeMode", "string", Cell::Func(|o| json!(s_at(o, "spec.volumeMode").unwrap_or_else(|| "Filesystem".into())))),
        ],
        ("", "persistentvolumeclaims") => vec![
            c("Status", "string", Cell::Func(|o| json!(s_at(o, "status.phase").unwrap_or_else(|| "Pending".into())))),
            c("Volume", "string", Cell::Path("spec.volumeName")),
            c("Capacity", "string", Cell::Path("status.capacity.storage")),
            c("Access Modes", "string", Cell::Func(|o| access_modes(o, "status.accessModes"))),
            c("StorageClass", "string", Cell::Path("spec.storageClassName")),
            c("VolumeAttributesClass", "string", Cell::Func(|o| json!(s_at(o, "spec.volumeAttributesClassName").unwrap_or_else(|| "<unset>".into())))),
            age_col(),
            wide("VolumeMode", "string", Cell::Func(|o| json!(s_at(o, "spec.volumeMode").unwrap_or_else(|| "Filesystem".into())))),
        ],
        ("", "podtemplates") => vec![
            c("Containers", "string", Cell::Func(|o| containers_at(o, "template.spec.containers", "name"))),
            c("Images", "string", Cell::Func(|o| containers_at(o, "template.spec.containers", "image"))),
            c("Pod Labels", "string", Cell::Func(|o| json!(join_keys(reg::path(o, "template.metadata.labels"))))),
        ],
        ("", "replicationcontrollers") => vec![
            c("Desired", "integer", Cell::Func(|o| json!(reg::int_at(o, "spec.replicas")))),
            c("Current", "integer", Cell::Func(|o| json!(reg::int_at(o, "status.replicas")))),
            c("Ready", "integer", Cell::Func(|o| json!(reg::int_at(o, "status.readyReplicas")))),
            age_col(),
            wide("Containers", "string", Cell::Func(|o| reg::images(o, "name"))),
            wide("Images", "string", Cell::Func(|o| reg::images(o, "image"))),
            wide("Selector", "string", Cell::Func(|o| or_none(join_keys(reg::path(o, "spec.selector"))))),
        ],
        ("", "resourcequotas") => vec![age_col(), c("Request", "string", Cell::Func(|_| json!(""))), c("Limit", "string", Cell::Func(|_| json!("")))],
        ("", "limitranges") => vec![c("Created At", "date", Cell::Func(reg::created_at))],
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations" | "validatingwebhookconfigurations") => {
            vec![c("Webhooks", "integer", Cell::Func(|o| count_at(o, "webhooks"))), age_col()]
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => vec![
            c("Validations", "integer", Cell::Func(|o| count_at(o, "spec.validations"))),
            c(
                "ParamKind",
                "string",
                Cell::Func(|o| {
                    json!(match (s_at(o, "spec.paramKind.apiVersion"), s_at(o, "spec.paramKind.kind")) {
                        (Some(a), Some(k)) => format!("{a}/{k}"),
                        _ => "<unset>".to_string(),
                    })
                }),
            ),
            age_col(),
        ],
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => vec![
            c("PolicyName", "string", Cell::Path("spec.policyName")),
            c("ParamRef", "string", Cell::Func(|o| json!(s_at(o, "spec.paramRef.name").map(|n| format!("*/{n}")).unwrap_or_else(|| "<unset>".into())))),
            age_col(),
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => vec![c("Created At", "date", Cell::Func(reg::created_at))],
        ("apiregistration.k8s.io", "apiservices") => vec![
            c(
                "Service",
                "string",
                Cell::Func(|o| {
                    json!(match (s_at(o, "spec.service.namespace"), s_at(o, "spec.service.name")) {
                        (Some(ns), Some(n)) => format!("{ns}/{n}"),
                        _ => "Local".to_string(),
                    })
                }),
            ),
            c(
                "Available",
                "string",
                Cell::Func(|o| {
                    json!(match reg::condition_status(o, "Available") {
                        Some(s) if s == "True" => "True".to_string(),
                        Some(s) => {
                            let reason = reg::path(o, "status.conditions")
                                .and_then(Value::as_array)
                                .and_then(|a| a.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Available")).and_then(|c| c.get("reason")).and_then(Value::as_str));
                            reason.map(|r| format!("{s} ({r})")).unwrap_or(s)
                        }
                        None => "Unknown".to_string(),
                    })
                }),
            ),
            age_col(),
        ],
        ("apps", "controllerrevisions") => vec![
            c(
                "Controller",
                "string",
                Cell::Func(|o| {
                    let owner = reg::path(o, "metadata.ownerReferences").and_then(Value::as_array).and_then(|a| a.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true)));
                    json!(owner
                        .map(|r| {
                            let kind = r.get("kind").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
                            let group = r.get("apiVersion").and_then(Value::as_str).and_then(|a| a.split_once('/')).map(|(g, _)| format!(".{g}")).unwrap_or_default();
                            format!("{kind}{group}/{}", r.get("name").and_then(Value::as_str).unwrap_or(""))
                        })
                        .unwrap_or_else(|| "<none>".into()))
                }),
            ),
            c("Revision", "integer", Cell::Func(|o| json!(reg::int_at(o, "revision")))),
            age_col(),
        ],
        ("autoscaling", "horizontalpodautoscalers") => vec![
            c("Reference", "string", Cell::Func(|o| json!(format!("{}/{}", s_at(o, "spec.scaleTargetRef.kind").unwrap_or_default(), s_at(o, "spec.scaleTargetRef.name").unwrap_or_default())))),
            c("Targets", "string", Cell::Func(hpa_targets)),
            c("MinPods", "string", Cell::Func(|o| json!(reg::path(o, "spec.minReplicas").and_then(Value::as_i64).map_or("<unset>".to_string(), |n| n.to_string())))),
            c("MaxPods", "integer", Cell::Func(|o| json!(reg::int_at(o, "spec.maxReplicas")))),
            c("Replicas", "integer", Cell::Func(|o| json!(reg::int_at(o, "status.currentReplicas")))),
            age_col(),
        ],
        ("batch", "cronjobs") => vec![
            c("Schedule", "string", Cell::Path("spec.schedule")),
            c("Timezone", "string", Cell::Func(|o| json!(s_at(o, "spec.timeZone").unwrap_or_else(|| "<none>".into())))),
            c("Suspend", "boolean", Cell::Func(|o| json!(reg::path(o, "spec.suspend").and_then(Value::as_bool).unwrap_or(false)))),
            c("Active", "integer", Cell::Func(|o| count_at(o, "status.active"))),
            c("Last Schedule", "string", Cell::Func(cronjob_last)),
            age_col(),
            wide("Containers", "string", Cell::Func(|o| containers_at(o, "spec.jobTemplate.spec.template.spec.containers", "name"))),
            wide("Images", "string", Cell::Func(|o| containers_at(o, "spec.jobTemplate.spec.template.spec.containers", "image"))),
            wide("Selector", "string", Cell::Func(|o| json!(label_selector(reg::path(o, "spec.jobTemplate.spec.selector"))))),
        ],
        ("discovery.k8s.io", "endpointslices") => {
            vec![c("AddressType", "string", Cell::Path("addressType")), c("Ports", "string", Cell::Func(endpointslice_ports)), c("Endpoints", "string", Cell::Func(endpointslice_endpoints)), age_col()]
        }
        ("events.k8s.io", "events") => return Some(reg::event().columns),
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => vec![
            c("PriorityLevel", "string", Cell::Path("spec.priorityLevelConfiguration.name")),
            c("MatchingPrecedence", "string", Cell::Func(|o| json!(reg::path(o, "spec.matchingPrecedence").and_then(Value::as_i64).unwrap_or(1000).to_string()))),
            c("DistinguisherMethod", "string", Cell::Func(|o| json!(s_at(o, "spec.distinguisherMethod.type").unwrap_or_else(|| "<none>".into())))),
            age_col(),
            c("MissingPL", "string", Cell::Func(|o| json!(reg::condition_status(o, "Dangling").unwrap_or_else(|| "?".into())))),
        ],
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => vec![
            c("Type", "string", Cell::Path("spec.type")),
            c(
                "NominalConcurrencyShares",
                "string",
                Cell::Func(|o| json!(reg::path(o, "spec.limited.nominalConcurrencyShares").and_then(Value::as_i64).map_or("<none>".to_string(), |n| n.to_string()))),
            ),
            c("Queues", "string", Cell::Func(|o| json!(reg::path(o, "spec.limited.limitResponse.queuing.queues").and_then(Value::as_i64).map_or("<none>".to_string(), |n| n.to_string())))),
            c("HandSize", "string", Cell::Func(|o| json!(reg::path(o, "spec.limited.limitResponse.queuing.handSize").and_then(Value::as_i64).map_or("<none>".to_string(), |n| n.to_string())))),
            c(
                "QueueLengthLimit",
                "string",
                Cell::Func(|o| json!(reg::path(o, "spec.limited.limitResponse.queuing.queueLengthLimit").and_then(Value::as_i64).map_or("<none>".to_string(), |n| n.to_string()))),
            ),
            age_col(),
        ],
        ("networking.k8s.io", "ingresses") => vec![
            c("Class", "string", Cell::Func(|o| json!(s_at(o, "spec.ingressClassName").unwrap_or_else(|| "<none>".into())))),
            c("Hosts", "string", Cell::Func(ingress_hosts)),
            c("Address", "string", Cell::Func(ingress_address)),
            c("Ports", "string", Cell::Func(|o| json!(if reg::path(o, "spec.tls").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) { "80, 443" } else { "80" }))),
            age_col(),
        ],
        ("networking.k8s.io", "ingressclasses") => vec![
            c("Controller", "string", Cell::Path("spec.controller")),
            c(
                "Parameters",
                "string",
                Cell::Func(|o| {
                    json!(match (s_at(o, "spec.parameters.kind"), s_at(o, "spec.parameters.name")) {
                        (Some(k), Some(n)) => {
                            let g = s_at(o, "spec.parameters.apiGroup").map(|g| format!(".{g}")).unwrap_or_default();
                            format!("{k}{g}/{n}")
                        }
                        _ => "<none>".to_string(),
                    })
                }),
            ),
            age_col(),
        ],
        ("networking.k8s.io", "networkpolicies") => vec![
            c(
                "Pod-Selector",
                "string",
                Cell::Func(|o| {
                    let s = label_selector(reg::path(o, "spec.podSelector"));
                    json!(if s == "<none>" { String::new() } else { s })
                }),
            ),
            age_col(),
        ],
        ("networking.k8s.io", "ipaddresses") => vec![
            c("ParentRef", "string", Cell::Func(|o| json!(format!("{}/{}", s_at(o, "spec.parentRef.resource").unwrap_or_default(), s_at(o, "spec.parentRef.name").unwrap_or_default())))),
            age_col(),
        ],
        ("networking.k8s.io", "servicecidrs") => vec![
            c(
                "CIDRs",
                "string",
                Cell::Func(|o| json!(reg::path(o, "spec.cidrs").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")).unwrap_or_default())),
            ),
            age_col(),
        ],
        ("node.k8s.io", "runtimeclasses") => vec![c("Handler", "string", Cell::Path("handler")), age_col()],
        ("policy", "poddisruptionbudgets") => vec![
            c("Min Available", "string", Cell::Func(|o| int_or_string(o, "spec.minAvailable"))),
            c("Max Unavailable", "string", Cell::Func(|o| int_or_string(o, "spec.maxUnavailable"))),
            c("Allowed Disruptions", "integer", Cell::Func(|o| json!(reg::int_at(o, "status.disruptionsAllowed")))),
            age_col(),
        ],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            c("Value", "integer", Cell::Func(|o| json!(reg::int_at(o, "value")))),
            c("Global-Default", "boolean", Cell::Func(|o| json!(reg::path(o, "globalDefault").and_then(Value::as_bool).unwrap_or(false)))),
            age_col(),
            c("PreemptionPolicy", "string", Cell::Func(|o| json!(s_at(o, "preemptionPolicy").unwrap_or_else(|| "PreemptLowerPriority".into())))),
        ],
        ("storage.k8s.io", "storageclasses") => vec![
            c("Provisioner", "string", Cell::Path("provisioner")),
            c("ReclaimPolicy", "string", Cell::Func(|o| json!(s_at(o, "reclaimPolicy").unwrap_or_else(|| "Delete".into())))),
            c("VolumeBindingMode", "string", Cell::Func(|o| json!(s_at(o, "volumeBindingMode").unwrap_or_else(|| "Immediate".into())))),
            c("AllowVolumeExpansion", "string", Cell::Func(|o| bool_text(o, "allowVolumeExpansion", false))),
            age_col(),
        ],
        ("storage.k8s.io", "csidrivers") => vec![
            c("AttachRequired", "boolean", Cell::Func(|o| json!(reg::path(o, "spec.attachRequired").and_then(Value::as_bool).unwrap_or(true)))),
            c("PodInfoOnMount", "boolean", Cell::Func(|o| json!(reg::path(o, "spec.podInfoOnMount").and_then(Value::as_bool).unwrap_or(false)))),
            c("StorageCapacity", "boolean", Cell::Func(|o| json!(reg::path(o, "spec.storageCapacity").and_then(Value::as_bool).unwrap_or(false)))),
            c(
                "TokenRequests",
                "string",
                Cell::Func(|o| {
                    let a: Vec<&str> =
                        reg::path(o, "spec.tokenRequests").and_then(Value::as_array).map(|a| a.iter().filter_map(|t| t.get("audience").and_then(Value::as_str)).collect()).unwrap_or_default();
                    or_none(a.join(","))
                }),
            ),
            c("RequiresRepublish", "boolean", Cell::Func(|o| json!(reg::path(o, "spec.requiresRepublish").and_then(Value::as_bool).unwrap_or(false)))),
            c(
                "Modes",
                "string",
                Cell::Func(|o| {
                    let a: Vec<&str> = reg::path(o, "spec.volumeLifecycleModes").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                    json!(if a.is_empty() { "Persistent".to_string() } else { a.join(",") })
                }),
            ),
            age_col(),
        ],
        ("storage.k8s.io", "csinodes") => vec![c("Drivers", "integer", Cell::Func(|o| count_at(o, "spec.drivers"))), age_col()],
        ("storage.k8s.io", "csistoragecapacities") => vec![c("StorageClassName", "string", Cell::Path("storageClassName")), c("Capacity", "string", Cell::Path("capacity"))],
        ("storage.k8s.io", "volumeattachments") => vec![
            c("Attacher", "string", Cell::Path("spec.attacher")),
            c("PV", "string", Cell::Path("spec.source.persistentVolumeName")),
            c("Node", "string", Cell::Path("spec.nodeName")),
            c("Attached", "boolean", Cell::Func(|o| json!(reg::path(o, "status.attached").and_then(Value::as_bool).unwrap_or(false)))),
            age_col(),
        ],
        _ => return None,
    };
    Some(cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_comes_from_k8s_openapi() {
        let all = builtins();
        for id in identities() {
            let r = all.iter().find(|r| r.group == id.group && r.version == id.version && r.resource == id.resource).expect(id.resource);
            assert_eq!((r.kind, r.singular, r.namespaced), (id.kind, id.singular, id.namespaced), "{}", id.resource);
            assert_eq!((r.short_names, r.categories, r.has_status, r.has_scale), (id.short_names, id.categories, id.has_status, id.has_scale), "{}", id.resource);
        }
        let sc = all.iter().find(|r| r.resource == "storageclasses").unwrap();
        assert!(!sc.namespaced && sc.short_names == ["sc"] && sc.group == "storage.k8s.io");
        let crd = all.iter().find(|r| r.resource == "customresourcedefinitions").unwrap();
        assert!(!crd.namespaced && crd.short_names == ["crd", "crds"] && crd.has_status);
        let rc = all.iter().find(|r| r.resource == "replicationcontrollers").unwrap();
        assert!(rc.namespaced && rc.has_scale && rc.categories == ["all"]);
        // no resource twice in one group-version
        let mut seen = HashSet::new();
        for r in &all {
            assert!(seen.insert((r.group, r.version, r.resource)), "{} twice", r.resource);
        }
    }

    #[test]
    fn intern_leaks_once() {
        let a = intern(&"deploy".repeat(2));
        let b = intern("deploydeploy");
        assert!(std::ptr::eq(a, b));
    }
}
