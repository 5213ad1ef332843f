//! `autoscaling/v1` and `autoscaling/v2` HorizontalPodAutoscaler defaults:
//! pkg/apis/autoscaling/v1 and v2 defaults.go (and v1's conversion.go).

use serde_json::{json, Value};

use super::{default, member, unset, Obj};

/// The CPU utilisation target kube-apiserver assumes (`autoscaling.DefaultCPUUtilization`).
const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// autoscaling/v1: SetDefaults_HorizontalPodAutoscaler (minReplicas 1) and the CPU target of
/// 80% that v1's conversion adds when neither `targetCPUUtilizationPercentage` nor other
/// metrics (the `autoscaling.alpha.kubernetes.io/metrics` annotation) are given, which a v1
/// read then shows as `targetCPUUtilizationPercentage: 80`.
pub(super) fn hpa_v1(o: &mut Obj) {
    let other_metrics = o.get("metadata").and_then(|m| m.get("annotations")).and_then(|a| a.get("autoscaling.alpha.kubernetes.io/metrics")).is_some();
    let Some(spec) = member(o, "spec") else { return };
    default(spec, "minReplicas", 1);
    if !other_metrics {
        default(spec, "targetCPUUtilizationPercentage", DEFAULT_CPU_UTILIZATION);
    }
}

/// autoscaling/v2: SetDefaults_HorizontalPodAutoscaler (minReplicas 1, a CPU Utilization
/// metric of 80% when there are no metrics) and SetDefaults_HorizontalPodAutoscalerBehavior
/// (a given `behavior` gets both rules filled from the defaults: scale-up window 0, Max,
/// 4 Pods or 100% per 15 s; scale-down Max, 100% per 15 s, no window).
pub(super) fn hpa_v2(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    default(spec, "minReplicas", 1);
    if spec.get("metrics").and_then(Value::as_array).is_none_or(|m| m.is_empty()) {
        spec.insert("metrics".into(), json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]));
    }
    if let Some(b) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = json!({
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}],
        });
        let down = json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]});
        fill_rules(b, "scaleUp", up);
        fill_rules(b, "scaleDown", down);
    }
}

/// copyHPAScalingRules: the defaults, overridden by each field the caller set.
fn fill_rules(behavior: &mut Obj, key: &str, defaults: Value) {
    let mut out = defaults.as_object().cloned().unwrap_or_default();
    if let Some(given) = behavior.get(key).and_then(Value::as_object) {
        for k in ["selectPolicy", "stabilizationWindowSeconds", "policies", "tolerance"] {
            if !unset(given, k) {
                out.insert(k.into(), given[k].clone());
            }
        }
    }
    behavior.insert(key.into(), Value::Object(out));
}
