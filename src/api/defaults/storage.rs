//! `storage.k8s.io/v1` defaults: pkg/apis/storage/v1/defaults.go.

use super::{default, member, Obj};

/// StorageClass (SetDefaults_StorageClass: reclaimPolicy Delete, volumeBindingMode
/// Immediate) and CSIDriver (SetDefaults_CSIDriver with 1.33's gates: attachRequired true,
/// podInfoOnMount, storageCapacity, requiresRepublish and seLinuxMount false (the latter with
/// SELinuxMountReadWriteOncePod, on since 1.28), fsGroupPolicy ReadWriteOnceWithFSType,
/// volumeLifecycleModes `[Persistent]`).
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "StorageClass" => {
            default(o, "reclaimPolicy", "Delete");
            default(o, "volumeBindingMode", "Immediate");
        }
        "CSIDriver" => {
            let Some(spec) = member(o, "spec") else { return };
            default(spec, "attachRequired", true);
            default(spec, "podInfoOnMount", false);
            default(spec, "storageCapacity", false);
            default(spec, "fsGroupPolicy", "ReadWriteOnceWithFSType");
            if spec.get("volumeLifecycleModes").and_then(|m| m.as_array()).is_none_or(|m| m.is_empty()) {
                spec.insert("volumeLifecycleModes".into(), serde_json::json!(["Persistent"]));
            }
            default(spec, "requiresRepublish", false);
            default(spec, "seLinuxMount", false);
        }
        _ => {}
    }
}
