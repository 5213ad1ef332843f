//! `apps/v1` defaults: pkg/apis/apps/v1/defaults.go (and the pod templates' core defaults).

use serde_json::json;

use super::core::pod_template;
use super::{child, default, default_zero, member, Obj};

/// `apps/v1` kinds.
pub(super) fn apply(kind: &str, o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    match kind {
        "Deployment" => deployment(spec),
        "DaemonSet" => daemon_set(spec),
        "StatefulSet" => stateful_set(spec),
        // SetDefaults_ReplicaSet
        "ReplicaSet" => default(spec, "replicas", 1),
        _ => return,
    }
    if let Some(t) = member(spec, "template") {
        pod_template(t);
    }
}

/// SetDefaults_Deployment: replicas 1, RollingUpdate 25%/25%, revisionHistoryLimit 10,
/// progressDeadlineSeconds 600.
fn deployment(spec: &mut Obj) {
    default(spec, "replicas", 1);
    if let Some(strategy) = member(spec, "strategy") {
        default_zero(strategy, "type", "RollingUpdate");
        if strategy.get("type").and_then(|t| t.as_str()) == Some("RollingUpdate") {
            if let Some(ru) = member(strategy, "rollingUpdate") {
                default(ru, "maxUnavailable", "25%");
                default(ru, "maxSurge", "25%");
            }
        }
    }
    default(spec, "revisionHistoryLimit", 10);
    default(spec, "progressDeadlineSeconds", 600);
}

/// SetDefaults_DaemonSet: RollingUpdate with maxUnavailable 1 and maxSurge 0,
/// revisionHistoryLimit 10.
fn daemon_set(spec: &mut Obj) {
    if let Some(us) = member(spec, "updateStrategy") {
        default_zero(us, "type", "RollingUpdate");
        if us.get("type").and_then(|t| t.as_str()) == Some("RollingUpdate") {
            if let Some(ru) = member(us, "rollingUpdate") {
                default(ru, "maxUnavailable", 1);
                default(ru, "maxSurge", 0);
            }
        }
    }
    default(spec, "revisionHistoryLimit", 10);
}

/// SetDefaults_StatefulSet: OrderedReady, RollingUpdate with partition 0, the PVC retention
/// policy Retain/Retain (StatefulSetAutoDeletePVC, on in 1.33), replicas 1,
/// revisionHistoryLimit 10, and the claim templates' PVC defaults (`status.phase` Pending,
/// `spec.volumeMode` Filesystem).
fn stateful_set(spec: &mut Obj) {
    default_zero(spec, "podManagementPolicy", "OrderedReady");
    if let Some(us) = member(spec, "updateStrategy") {
        if super::zero(us, "type") {
            us.insert("type".into(), json!("RollingUpdate"));
            default(us, "rollingUpdate", json!({}));
        }
        if us.get("type").and_then(|t| t.as_str()) == Some("RollingUpdate") {
            if let Some(ru) = child(us, "rollingUpdate") {
                default(ru, "partition", 0);
            }
        }
    }
    if let Some(rp) = member(spec, "persistentVolumeClaimRetentionPolicy") {
        default_zero(rp, "whenDeleted", "Retain");
        default_zero(rp, "whenScaled", "Retain");
    }
    default(spec, "replicas", 1);
    default(spec, "revisionHistoryLimit", 10);
    // every claim template is a PersistentVolumeClaim with its defaults
    for t in super::each(spec, "volumeClaimTemplates") {
        super::core::pvc(t);
    }
}
