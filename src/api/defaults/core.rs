//! Core (`v1`) defaults: pkg/apis/core/v1/defaults.go and its zz_generated.defaults.go.

use serde_json::{json, Value};

use super::{child, default, default_zero, each, member, path, unset, Obj};

/// `v1` kinds.
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "Pod" => pod(o),
        "PodTemplate" => {
            if let Some(t) = member(o, "template") {
                pod_template(t);
            }
        }
        "ReplicationController" => replication_controller(o),
        "Service" => service(o),
        // SetDefaults_Secret
        "Secret" => default_zero(o, "type", "Opaque"),
        "Endpoints" => {
            // SetDefaults_Endpoints
            for ss in each(o, "subsets") {
                for p in each(ss, "ports") {
                    default_zero(p, "protocol", "TCP");
                }
            }
        }
        "PersistentVolumeClaim" => {
            // SetDefaults_PersistentVolumeClaim, SetDefaults_PersistentVolumeClaimSpec
            pvc(o);
        }
        "PersistentVolume" => {
            // SetDefaults_PersistentVolume (+ the volume sources' defaulters)
            if let Some(s) = member(o, "status") {
                default_zero(s, "phase", "Pending");
            }
            if let Some(s) = member(o, "spec") {
                default_zero(s, "persistentVolumeReclaimPolicy", "Retain");
                default(s, "volumeMode", "Filesystem");
                volume_sources(s);
            }
        }
        "LimitRange" => {
            if let Some(spec) = child(o, "spec") {
                for item in each(spec, "limits") {
                    limit_range_item(item);
                }
            }
        }
        "Namespace" => {
            // SetDefaults_Namespace (the name label, kept on every write), SetDefaults_NamespaceStatus
            let name = o.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
            if !name.is_empty() {
                if let Some(labels) = member(o, "metadata").and_then(|m| member(m, "labels")) {
                    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            if let Some(s) = member(o, "status") {
                default_zero(s, "phase", "Active");
            }
        }
        "Node" => {
            // SetDefaults_NodeStatus: allocatable defaults to capacity
            if let Some(s) = child(o, "status") {
                if unset(s, "allocatable") {
                    if let Some(c) = s.get("capacity").filter(|c| c.is_object()).cloned() {
                        s.insert("allocatable".into(), c);
                    }
                }
            }
        }
        _ => {}
    }
}

/// A PersistentVolumeClaim, alone or as a StatefulSet's claim template:
/// SetDefaults_PersistentVolumeClaim (`status.phase` Pending) and
/// SetDefaults_PersistentVolumeClaimSpec (`spec.volumeMode` Filesystem).
pub(super) fn pvc(o: &mut Obj) {
    if let Some(s) = member(o, "status") {
        default_zero(s, "phase", "Pending");
    }
    if let Some(s) = member(o, "spec") {
        default(s, "volumeMode", "Filesystem");
    }
}

/// SetDefaults_ReplicationController (selector and labels from the template's labels) and
/// its declarative `spec.replicas` default of 1; then the pod template's defaults.
fn replication_controller(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    default(spec, "replicas", 1);
    let labels = path(spec, &["template", "metadata"]).and_then(|m| m.get("labels")).filter(|l| l.is_object()).cloned();
    if let Some(labels) = labels {
        if spec.get("selector").and_then(Value::as_object).is_none_or(|s| s.is_empty()) {
            spec.insert("selector".into(), labels.clone());
        }
        if let Some(t) = child(spec, "template") {
            pod_template(t);
        }
        if let Some(m) = member(o, "metadata") {
            if m.get("labels").and_then(Value::as_object).is_none_or(|l| l.is_empty()) {
                m.insert("labels".into(), labels);
            }
        }
    } else if let Some(t) = child(spec, "template") {
        pod_template(t);
    }
}

/// SetDefaults_Service and the declarative `ports[].protocol` default.
fn service(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    default_zero(spec, "sessionAffinity", "None");
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let has_timeout = spec.get("sessionAffinityConfig").and_then(|c| c.pointer("/clientIP/timeoutSeconds")).is_some_and(|t| !t.is_null());
            if !has_timeout {
                spec.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
            }
        }
        _ => {}
    }
    default_zero(spec, "type", "ClusterIP");
    for p in each(spec, "ports") {
        default_zero(p, "protocol", "TCP");
        let target_unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            _ => false,
        };
        if target_unset {
            if let Some(port) = p.get("port").cloned() {
                p.insert("targetPort".into(), port);
            }
        }
    }
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    // the Service storage's initIPFamilyFields, the part that needs no allocator: a new
    // Service without a policy is SingleStack, a headless one without selector
    // RequireDualStack (ipFamilies come from the cluster's service CIDRs and are left out)
    if ty != "ExternalName" && unset(spec, "ipFamilyPolicy") {
        let cluster_ip = match spec.get("clusterIP").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(ip) => Some(ip.to_string()),
            None => spec.get("clusterIPs").and_then(|a| a.get(0)).and_then(Value::as_str).map(str::to_string),
        };
        let selectorless = spec.get("selector").and_then(Value::as_object).is_none_or(|s| s.is_empty());
        let policy = if cluster_ip.as_deref() == Some("None") && selectorless { "RequireDualStack" } else { "SingleStack" };
        spec.insert("ipFamilyPolicy".into(), json!(policy));
    }
    let has_external_ips = spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    // pkg/api/v1/service ExternallyAccessible
    let externally_accessible = ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && has_external_ips);
    if externally_accessible {
        default_zero(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        default(spec, "internalTrafficPolicy", "Cluster");
    }
    if ty == "LoadBalancer" {
        default(spec, "allocateLoadBalancerNodePorts", true);
        if let Some(lb) = path(o, &["status", "loadBalancer"]) {
            for ing in each(lb, "ingress") {
                if ing.get("ip").and_then(Value::as_str).is_some_and(|ip| !ip.is_empty()) {
                    default(ing, "ipMode", "VIP");
                }
            }
        }
    }
}

/// A Pod: SetDefaults_Pod (requests from limits, `enableServiceLinks`, host-network ports)
/// and everything a pod template gets.
fn pod(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    for list in ["containers", "initContainers"] {
        for c in each(spec, list) {
            let Some(res) = child(c, "resources") else { continue };
            let Some(limits) = res.get("limits").and_then(Value::as_object).filter(|l| !l.is_empty()).cloned() else { continue };
            if let Some(req) = member(res, "requests") {
                for (k, v) in limits {
                    req.entry(k).or_insert(v);
                }
            }
        }
    }
    default(spec, "enableServiceLinks", true);
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["containers", "initContainers"] {
            for c in each(spec, list) {
                for p in each(c, "ports") {
                    if super::zero(p, "hostPort") {
                        if let Some(cp) = p.get("containerPort").cloned() {
                            p.insert("hostPort".into(), cp);
                        }
                    }
                }
            }
        }
    }
    pod_spec(spec);
}

/// A PodTemplateSpec (`{metadata, spec}`): its `spec` gets [`pod_spec`] (created when
/// missing, as Go's non-pointer `Spec` field is defaulted even when empty).
pub(super) fn pod_template(t: &mut Obj) {
    if let Some(spec) = member(t, "spec") {
        pod_spec(spec);
    }
}

/// SetDefaults_PodSpec and the defaulters of everything nested in a pod spec: volumes,
/// containers, init and ephemeral containers (ports, env, probes, lifecycle hooks).
pub(super) fn pod_spec(spec: &mut Obj) {
    default_zero(spec, "dnsPolicy", "ClusterFirst");
    default_zero(spec, "restartPolicy", "Always");
    default(spec, "securityContext", json!({}));
    default(spec, "terminationGracePeriodSeconds", 30);
    default_zero(spec, "schedulerName", "default-scheduler");
    for v in each(spec, "volumes") {
        volume(v);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in each(spec, list) {
            container(c);
        }
    }
}

/// SetDefaults_Volume (a volume without a source is an emptyDir) and the defaults of its source.
fn volume(v: &mut Obj) {
    let has_source = v.iter().any(|(k, val)| k != "name" && !val.is_null());
    if !has_source {
        v.insert("emptyDir".into(), json!({}));
    }
    volume_sources(v);
    for key in ["secret", "configMap"] {
        // SetDefaults_SecretVolumeSource, SetDefaults_ConfigMapVolumeSource: 0644
        if let Some(s) = child(v, key) {
            default(s, "defaultMode", 420);
        }
    }
    if let Some(d) = child(v, "downwardAPI") {
        // SetDefaults_DownwardAPIVolumeSource
        default(d, "defaultMode", 420);
        downward_items(d);
    }
    if let Some(p) = child(v, "projected") {
        // SetDefaults_ProjectedVolumeSource, SetDefaults_ServiceAccountTokenProjection
        default(p, "defaultMode", 420);
        for s in each(p, "sources") {
            if let Some(d) = child(s, "downwardAPI") {
                downward_items(d);
            }
            if let Some(t) = child(s, "serviceAccountToken") {
                default(t, "expirationSeconds", 3600);
            }
        }
    }
    if let Some(spec) = path(v, &["ephemeral", "volumeClaimTemplate"]).and_then(|t| member(t, "spec")) {
        default(spec, "volumeMode", "Filesystem");
    }
}

/// Sources shared by pod volumes and PersistentVolumes: hostPath, iscsi, rbd, azureDisk, scaleIO.
fn volume_sources(v: &mut Obj) {
    if let Some(h) = child(v, "hostPath") {
        // SetDefaults_HostPathVolumeSource: HostPathUnset
        default(h, "type", "");
    }
    if let Some(i) = child(v, "iscsi") {
        // SetDefaults_ISCSIVolumeSource
        default_zero(i, "iscsiInterface", "default");
    }
    if let Some(r) = child(v, "rbd") {
        // SetDefaults_RBDVolumeSource
        default_zero(r, "pool", "rbd");
        default_zero(r, "user", "admin");
        default_zero(r, "keyring", "/etc/ceph/keyring");
    }
    if let Some(a) = child(v, "azureDisk") {
        // SetDefaults_AzureDiskVolumeSource
        default(a, "cachingMode", "ReadWrite");
        default(a, "kind", "Shared");
        default(a, "fsType", "ext4");
        default(a, "readOnly", false);
    }
    if let Some(s) = child(v, "scaleIO") {
        // SetDefaults_ScaleIOVolumeSource
        default_zero(s, "storageMode", "ThinProvisioned");
        default_zero(s, "fsType", "xfs");
    }
}

/// `items[].fieldRef.apiVersion` of a downward API source (SetDefaults_ObjectFieldSelector).
fn downward_items(d: &mut Obj) {
    for item in each(d, "items") {
        if let Some(f) = child(item, "fieldRef") {
            default_zero(f, "apiVersion", "v1");
        }
    }
}

/// SetDefaults_Container and the defaults nested in a container.
fn container(c: &mut Obj) {
    if super::zero(c, "imagePullPolicy") {
        let policy = pull_policy(c.get("image").and_then(Value::as_str).unwrap_or(""));
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    default_zero(c, "terminationMessagePath", "/dev/termination-log");
    default_zero(c, "terminationMessagePolicy", "File");
    for p in each(c, "ports") {
        default_zero(p, "protocol", "TCP");
    }
    for e in each(c, "env") {
        if let Some(f) = path(e, &["valueFrom", "fieldRef"]) {
            default_zero(f, "apiVersion", "v1");
        }
    }
    for probe_key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = child(c, probe_key) {
            probe(p);
        }
    }
    if let Some(l) = child(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = path(l, &[hook, "httpGet"]) {
                http_get(h);
            }
        }
    }
}

/// SetDefaults_Probe, SetDefaults_HTTPGetAction and GRPCAction's declarative `service: ""`.
fn probe(p: &mut Obj) {
    default_zero(p, "timeoutSeconds", 1);
    default_zero(p, "periodSeconds", 10);
    default_zero(p, "successThreshold", 1);
    default_zero(p, "failureThreshold", 3);
    if let Some(h) = child(p, "httpGet") {
        http_get(h);
    }
    if let Some(g) = child(p, "grpc") {
        default(g, "service", "");
    }
}

/// SetDefaults_HTTPGetAction: path `/`, scheme HTTP.
fn http_get(h: &mut Obj) {
    default_zero(h, "path", "/");
    default_zero(h, "scheme", "HTTP");
}

/// SetDefaults_LimitRangeItem: for `type: Container`, `default` from `max`, then
/// `defaultRequest` from `default`, then from `min`.
fn limit_range_item(item: &mut Obj) {
    if item.get("type").and_then(Value::as_str) != Some("Container") {
        return;
    }
    let map = |item: &Obj, k: &str| item.get(k).and_then(Value::as_object).cloned().unwrap_or_default();
    let (max, min) = (map(item, "max"), map(item, "min"));
    let mut def = map(item, "default");
    for (k, v) in max {
        def.entry(k).or_insert(v);
    }
    let mut req = map(item, "defaultRequest");
    for (k, v) in def.clone().into_iter().chain(min) {
        req.entry(k).or_insert(v);
    }
    // Go makes both maps; an empty one is not serialised
    for (k, m) in [("default", def), ("defaultRequest", req)] {
        if !m.is_empty() && item.get(k).is_none_or(|v| v.is_object() || v.is_null()) {
            item.insert(k.into(), Value::Object(m));
        }
    }
}

/// The image pull policy SetDefaults_Container picks: `Always` when the image's tag is
/// `latest` or it names neither tag nor digest, `IfNotPresent` otherwise (also for an image
/// reference that does not parse, as `parsers.ParseImageName` then yields no tag).
pub(super) fn pull_policy(image: &str) -> &'static str {
    if image_tag(image).as_deref() == Some("latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

/// The tag of an image reference as `parsers.ParseImageName` reports it: the explicit tag,
/// `latest` when there is neither tag nor digest, `None` with only a digest or for a
/// reference that is not valid (empty, upper case in the repository path, bad characters).
fn image_tag(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if name.is_empty() || digest.is_some_and(|d| !d.contains(':')) {
        return None;
    }
    // the tag is after a ':' in the last path component (a ':' before it is a registry port)
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    // the first component is a registry domain when it has a '.' or ':' or is localhost;
    // it may hold upper case, the path may not
    let mut parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost") {
        parts.remove(0);
    }
    let path_ok = parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)));
    if !path_ok {
        return None;
    }
    match tag {
        Some(t) => {
            let valid = !t.is_empty() && t.len() <= 128 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            valid.then(|| t.to_string())
        }
        None if digest.is_some() => None,
        None => Some("latest".into()),
    }
}
