//! Built-in kinds served in a version other than the one they are stored in, and the
//! conversion between the two (mirrors kube-apiserver's hand-written conversions, e.g.
//! `pkg/apis/autoscaling/v1/conversion.go`); uses serde_json only.
//!
//! An object of such a kind is always stored in its storage version: a write through the
//! other version is converted on its way to storage ([`Conversion::to_storage`]) and every
//! read through it converted back ([`Conversion::from_storage`]). What the served version
//! cannot express travels in annotations, as kube-apiserver keeps it, so a read-modify-write
//! through the older version loses nothing.

use serde_json::{json, Map, Value};

/// How objects of a served version are converted to and from their storage version.
pub struct Conversion {
    /// The version objects are stored in, e.g. `v2` (same group).
    pub storage_version: &'static str,
    /// Converts an object of the served version (its `apiVersion` included) to the storage
    /// version, in place.
    pub to_storage: fn(&mut Value),
    /// Converts a stored object to the served version, in place.
    pub from_storage: fn(&mut Value),
}

/// `autoscaling/v1` HorizontalPodAutoscaler, stored as `autoscaling/v2`.
pub static HPA_V1: Conversion = Conversion { storage_version: "v2", to_storage: hpa_v1_to_v2, from_storage: hpa_v2_to_v1 };

/// v2 `spec.metrics` v1 cannot express (`autoscaling.MetricSpecsAnnotation`), as a JSON list
/// of v1 MetricSpecs.
pub const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// v2 `status.currentMetrics` (`autoscaling.MetricStatusesAnnotation`), as v1 MetricStatuses.
pub const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// v2 `status.conditions` (`autoscaling.HorizontalPodAutoscalerConditionsAnnotation`).
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// v2 `spec.behavior` (`autoscaling.BehaviorSpecsAnnotation`), with Go's field names
/// (`ScaleUp`, `StabilizationWindowSeconds`), as kube-apiserver writes it.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

const ROUND_TRIP: [&str; 4] = [METRICS_ANNOTATION, CURRENT_METRICS_ANNOTATION, CONDITIONS_ANNOTATION, BEHAVIOR_ANNOTATION];

type Obj = Map<String, Value>;

fn copy(from: &Obj, to: &mut Obj, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(*k).filter(|v| !v.is_null()) {
            to.insert((*k).to_string(), v.clone());
        }
    }
}

fn obj_at<'a>(m: &'a Obj, k: &str) -> Option<&'a Obj> {
    m.get(k).and_then(Value::as_object)
}

fn is_cpu_resource(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource") && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
}

/// The annotations of `o`, taken out (an empty map when there are none).
fn take_annotations(o: &mut Obj) -> Obj {
    match o.get_mut("metadata").and_then(Value::as_object_mut).and_then(|m| m.remove("annotations")) {
        Some(Value::Object(a)) => a,
        _ => Map::new(),
    }
}

/// Puts `a` back as the annotations of `o` (left out when empty, as Go omits an empty map).
fn put_annotations(o: &mut Obj, a: Obj) {
    if a.is_empty() {
        return;
    }
    if let Some(m) = o.entry("metadata").or_insert_with(|| json!({})).as_object_mut() {
        m.insert("annotations".into(), Value::Object(a));
    }
}

/// A JSON list held in an annotation; `None` when it is missing or does not parse.
fn annotation_list(a: &Obj, key: &str) -> Option<Vec<Value>> {
    serde_json::from_str::<Vec<Value>>(a.get(key)?.as_str()?).ok()
}

fn quantity_or_zero(v: Option<&Value>) -> Value {
    v.filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!("0"))
}

// ---- v2 MetricSpec / MetricStatus ↔ v1 MetricSpec / MetricStatus (the v2beta1-like forms)

fn metric_spec_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    out.insert("type".into(), json!(ty));
    let target = |src: &Value| src.get("target").cloned().unwrap_or(json!({}));
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).and_then(Value::as_object) {
            let t = r.get("target").cloned().unwrap_or(json!({}));
            let mut x = Map::new();
            copy(r, &mut x, &["name", "container"]);
            if let Some(u) = t.get("averageUtilization").filter(|v| !v.is_null()) {
                x.insert("targetAverageUtilization".into(), u.clone());
            }
            if let Some(v) = t.get("averageValue").filter(|v| !v.is_null()) {
                x.insert("targetAverageValue".into(), v.clone());
            }
            out.insert(key.into(), Value::Object(x));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let t = target(p);
        let mut x = Map::new();
        identifier_to_v1(p, &mut x, "selector");
        x.insert("targetAverageValue".into(), quantity_or_zero(t.get("averageValue")));
        out.insert("pods".into(), Value::Object(x));
    }
    if let Some(ob) = m.get("object").filter(|v| v.is_object()) {
        let t = target(ob);
        let mut x = Map::new();
        x.insert("target".into(), ob.get("describedObject").cloned().unwrap_or(json!({})));
        identifier_to_v1(ob, &mut x, "selector");
        x.insert("targetValue".into(), quantity_or_zero(t.get("value")));
        if let Some(v) = t.get("averageValue").filter(|v| !v.is_null()) {
            x.insert("averageValue".into(), v.clone());
        }
        out.insert("object".into(), Value::Object(x));
    }
    if let Some(e) = m.get("external").filter(|v| v.is_object()) {
        let t = target(e);
        let mut x = Map::new();
        identifier_to_v1(e, &mut x, "metricSelector");
        if let Some(v) = t.get("value").filter(|v| !v.is_null()) {
            x.insert("targetValue".into(), v.clone());
        }
        if let Some(v) = t.get("averageValue").filter(|v| !v.is_null()) {
            x.insert("targetAverageValue".into(), v.clone());
        }
        out.insert("external".into(), Value::Object(x));
    }
    Value::Object(out)
}

/// v2's `metric: {name, selector}` as v1's `metricName` and `<selector_key>`.
fn identifier_to_v1(src: &Value, out: &mut Obj, selector_key: &str) {
    out.insert("metricName".into(), src.pointer("/metric/name").cloned().unwrap_or(json!("")));
    if let Some(s) = src.pointer("/metric/selector").filter(|v| !v.is_null()) {
        out.insert(selector_key.into(), s.clone());
    }
}

/// v1's `metricName` and `<selector_key>` as v2's `metric: {name, selector}`.
fn identifier_to_v2(src: &Obj, selector_key: &str) -> Value {
    let mut id = Map::new();
    id.insert("name".into(), src.get("metricName").cloned().unwrap_or(json!("")));
    if let Some(s) = src.get(selector_key).filter(|v| !v.is_null()) {
        id.insert("selector".into(), s.clone());
    }
    Value::Object(id)
}

fn metric_spec_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), m.get("type").cloned().unwrap_or(json!("")));
    let empty = Map::new();
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).and_then(Value::as_object) {
            let mut x = Map::new();
            copy(r, &mut x, &["name", "container"]);
            let mut t = Map::new();
            let util = r.get("targetAverageUtilization").filter(|v| !v.is_null());
            t.insert("type".into(), json!(if util.is_some() { "Utilization" } else { "AverageValue" }));
            if let Some(v) = r.get("targetAverageValue").filter(|v| !v.is_null()) {
                t.insert("averageValue".into(), v.clone());
            }
            if let Some(u) = util {
                t.insert("averageUtilization".into(), u.clone());
            }
            x.insert("target".into(), Value::Object(t));
            out.insert(key.into(), Value::Object(x));
        }
    }
    if let Some(p) = m.get("pods").and_then(Value::as_object) {
        out.insert(
            "pods".into(),
            json!({
                "metric": identifier_to_v2(p, "selector"),
                "target": {"type": "AverageValue", "averageValue": quantity_or_zero(p.get("targetAverageValue"))},
            }),
        );
    }
    if let Some(o) = m.get("object").and_then(Value::as_object) {
        let avg = o.get("averageValue").filter(|v| !v.is_null());
        let mut t = Map::new();
        t.insert("type".into(), json!(if avg.is_none() { "Value" } else { "AverageValue" }));
        t.insert("value".into(), quantity_or_zero(o.get("targetValue")));
        if let Some(a) = avg {
            t.insert("averageValue".into(), a.clone());
        }
        out.insert(
            "object".into(),
            json!({
                "describedObject": obj_at(o, "target").cloned().unwrap_or_else(|| empty.clone()),
                "metric": identifier_to_v2(o, "selector"),
                "target": t,
            }),
        );
    }
    if let Some(e) = m.get("external").and_then(Value::as_object) {
        let value = e.get("targetValue").filter(|v| !v.is_null());
        let mut t = Map::new();
        t.insert("type".into(), json!(if value.is_none() { "AverageValue" } else { "Value" }));
        if let Some(v) = value {
            t.insert("value".into(), v.clone());
        }
        if let Some(v) = e.get("targetAverageValue").filter(|v| !v.is_null()) {
            t.insert("averageValue".into(), v.clone());
        }
        out.insert("external".into(), json!({"metric": identifier_to_v2(e, "metricSelector"), "target": t}));
    }
    Value::Object(out)
}

fn metric_status_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), m.get("type").cloned().unwrap_or(json!("")));
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).and_then(Value::as_object) {
            let mut x = Map::new();
            copy(r, &mut x, &["name", "container"]);
            if let Some(u) = r.get("current").and_then(|c| c.get("averageUtilization")).filter(|v| !v.is_null()) {
                x.insert("currentAverageUtilization".into(), u.clone());
            }
            x.insert("currentAverageValue".into(), quantity_or_zero(r.get("current").and_then(|c| c.get("averageValue"))));
            out.insert(key.into(), Value::Object(x));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut x = Map::new();
        identifier_to_v1(p, &mut x, "selector");
        x.insert("currentAverageValue".into(), quantity_or_zero(p.pointer("/current/averageValue")));
        out.insert("pods".into(), Value::Object(x));
    }
    if let Some(o) = m.get("object").filter(|v| v.is_object()) {
        let mut x = Map::new();
        x.insert("target".into(), o.get("describedObject").cloned().unwrap_or(json!({})));
        identifier_to_v1(o, &mut x, "selector");
        x.insert("currentValue".into(), quantity_or_zero(o.pointer("/current/value")));
        if let Some(a) = o.pointer("/current/averageValue").filter(|v| !v.is_null()) {
            x.insert("averageValue".into(), a.clone());
        }
        out.insert("object".into(), Value::Object(x));
    }
    if let Some(e) = m.get("external").filter(|v| v.is_object()) {
        let mut x = Map::new();
        identifier_to_v1(e, &mut x, "metricSelector");
        x.insert("currentValue".into(), quantity_or_zero(e.pointer("/current/value")));
        if let Some(a) = e.pointer("/current/averageValue").filter(|v| !v.is_null()) {
            x.insert("currentAverageValue".into(), a.clone());
        }
        out.insert("external".into(), Value::Object(x));
    }
    Value::Object(out)
}

fn metric_status_to_v2(m: &Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), m.get("type").cloned().unwrap_or(json!("")));
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).and_then(Value::as_object) {
            let mut x = Map::new();
            copy(r, &mut x, &["name", "container"]);
            let mut cur = Map::new();
            cur.insert("averageValue".into(), quantity_or_zero(r.get("currentAverageValue")));
            if let Some(u) = r.get("currentAverageUtilization").filter(|v| !v.is_null()) {
                cur.insert("averageUtilization".into(), u.clone());
            }
            x.insert("current".into(), Value::Object(cur));
            out.insert(key.into(), Value::Object(x));
        }
    }
    if let Some(p) = m.get("pods").and_then(Value::as_object) {
        out.insert("pods".into(), json!({"metric": identifier_to_v2(p, "selector"), "current": {"averageValue": quantity_or_zero(p.get("currentAverageValue"))}}));
    }
    if let Some(o) = m.get("object").and_then(Value::as_object) {
        let mut cur = Map::new();
        cur.insert("value".into(), quantity_or_zero(o.get("currentValue")));
        copy(o, &mut cur, &["averageValue"]);
        out.insert(
            "object".into(),
            json!({
                "describedObject": o.get("target").cloned().unwrap_or(json!({})),
                "metric": identifier_to_v2(o, "selector"),
                "current": cur,
            }),
        );
    }
    if let Some(e) = m.get("external").and_then(Value::as_object) {
        let mut cur = Map::new();
        cur.insert("value".into(), quantity_or_zero(e.get("currentValue")));
        if let Some(a) = e.get("currentAverageValue").filter(|v| !v.is_null()) {
            cur.insert("averageValue".into(), a.clone());
        }
        out.insert("external".into(), json!({"metric": identifier_to_v2(e, "metricSelector"), "current": cur}));
    }
    Value::Object(out)
}

/// Renames every object key of `v` with `f` (the behavior annotation's Go field names).
fn rename_keys(v: &Value, f: &dyn Fn(&str) -> String) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (f(k), rename_keys(v, f))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(|v| rename_keys(v, f)).collect()),
        other => other.clone(),
    }
}

fn go_name(k: &str) -> String {
    let mut c = k.chars();
    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
}

fn json_name(k: &str) -> String {
    let mut c = k.chars();
    c.next().map(|f| f.to_ascii_lowercase().to_string() + c.as_str()).unwrap_or_default()
}

/// autoscaling/v2 → autoscaling/v1 (Convert_autoscaling_HorizontalPodAutoscaler_To_v1_…):
/// the first CPU Utilization metric becomes `targetCPUUtilizationPercentage`, the other
/// metrics, the current metrics, the conditions and `behavior` go to the round-trip
/// annotations (stale ones are dropped first); `status.currentCPUUtilizationPercentage`
/// comes from the CPU current metric.
pub fn hpa_v2_to_v1(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let mut ann = take_annotations(o);
    for k in ROUND_TRIP {
        ann.remove(k);
    }
    let spec = obj_at(o, "spec").cloned().unwrap_or_default();
    let status = obj_at(o, "status").cloned().unwrap_or_default();
    let mut s1 = Map::new();
    copy(&spec, &mut s1, &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    let metrics = spec.get("metrics").and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_resource(m)) {
        if let Some(u) = cpu.pointer("/resource/target/averageUtilization").filter(|v| !v.is_null()) {
            s1.insert("targetCPUUtilizationPercentage".into(), u.clone());
        }
    }
    let other: Vec<Value> = metrics.iter().filter(|m| !(is_cpu_resource(m) && m.pointer("/resource/target/averageUtilization").is_some_and(|v| !v.is_null()))).map(metric_spec_to_v1).collect();
    let mut st1 = Map::new();
    copy(&status, &mut st1, &["observedGeneration", "lastScaleTime"]);
    st1.insert("currentReplicas".into(), status.get("currentReplicas").cloned().unwrap_or(json!(0)));
    st1.insert("desiredReplicas".into(), status.get("desiredReplicas").cloned().unwrap_or(json!(0)));
    let current = status.get("currentMetrics").and_then(Value::as_array).cloned().unwrap_or_default();
    for m in current.iter().filter(|m| is_cpu_resource(m)) {
        if let Some(u) = m.pointer("/resource/current/averageUtilization").filter(|v| !v.is_null()) {
            st1.insert("currentCPUUtilizationPercentage".into(), u.clone());
        }
    }
    let conditions = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let encode = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    if !other.is_empty() {
        ann.insert(METRICS_ANNOTATION.into(), json!(encode(&Value::Array(other))));
    }
    if !current.is_empty() {
        let v1: Vec<Value> = current.iter().map(metric_status_to_v1).collect();
        ann.insert(CURRENT_METRICS_ANNOTATION.into(), json!(encode(&Value::Array(v1))));
    }
    if !conditions.is_empty() {
        ann.insert(CONDITIONS_ANNOTATION.into(), json!(encode(&Value::Array(conditions))));
    }
    if let Some(b) = spec.get("behavior").filter(|v| v.is_object()) {
        ann.insert(BEHAVIOR_ANNOTATION.into(), json!(encode(&rename_keys(b, &go_name))));
    }
    o.insert("apiVersion".into(), json!("autoscaling/v1"));
    put_annotations(o, ann);
    o.insert("spec".into(), Value::Object(s1));
    o.insert("status".into(), Value::Object(st1));
}

/// autoscaling/v1 → autoscaling/v2 (Convert_v1_HorizontalPodAutoscaler_To_autoscaling_…):
/// the metrics of the annotation first, then `targetCPUUtilizationPercentage` as a CPU
/// Utilization metric (80% when there are no metrics at all); current metrics, conditions
/// and `behavior` from their annotations, which are removed.
pub fn hpa_v1_to_v2(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let mut ann = take_annotations(o);
    let spec = obj_at(o, "spec").cloned().unwrap_or_default();
    let status = obj_at(o, "status").cloned().unwrap_or_default();
    let mut s2 = Map::new();
    copy(&spec, &mut s2, &["scaleTargetRef", "minReplicas", "maxReplicas"]);
    let mut metrics: Vec<Value> = Vec::new();
    if let Some(list) = annotation_list(&ann, METRICS_ANNOTATION) {
        metrics.extend(list.iter().map(metric_spec_to_v2));
        ann.remove(METRICS_ANNOTATION);
    }
    let cpu = |u: Value| json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": u}}});
    if let Some(u) = spec.get("targetCPUUtilizationPercentage").filter(|v| !v.is_null()) {
        metrics.push(cpu(u.clone()));
    }
    if metrics.is_empty() {
        metrics.push(cpu(json!(80)));
    }
    s2.insert("metrics".into(), Value::Array(metrics));
    if let Some(b) = ann.get(BEHAVIOR_ANNOTATION).and_then(Value::as_str).and_then(|s| serde_json::from_str::<Value>(s).ok()) {
        s2.insert("behavior".into(), rename_keys(&b, &json_name));
        ann.remove(BEHAVIOR_ANNOTATION);
    }
    let mut st2 = Map::new();
    copy(&status, &mut st2, &["observedGeneration", "lastScaleTime"]);
    if status.get("currentReplicas").and_then(Value::as_i64).is_some_and(|n| n != 0) {
        st2.insert("currentReplicas".into(), status["currentReplicas"].clone());
    }
    st2.insert("desiredReplicas".into(), status.get("desiredReplicas").cloned().unwrap_or(json!(0)));
    if let Some(u) = status.get("currentCPUUtilizationPercentage").filter(|v| !v.is_null()) {
        st2.insert("currentMetrics".into(), json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}]));
    }
    if let Some(list) = annotation_list(&ann, CURRENT_METRICS_ANNOTATION) {
        st2.insert("currentMetrics".into(), Value::Array(list.iter().map(metric_status_to_v2).collect()));
        ann.remove(CURRENT_METRICS_ANNOTATION);
    }
    if let Some(list) = annotation_list(&ann, CONDITIONS_ANNOTATION) {
        st2.insert("conditions".into(), Value::Array(list));
        ann.remove(CONDITIONS_ANNOTATION);
    }
    o.insert("apiVersion".into(), json!("autoscaling/v2"));
    put_annotations(o, ann);
    o.insert("spec".into(), Value::Object(s2));
    o.insert("status".into(), Value::Object(st2));
}

/// A copy of an autoscaling/v1 HorizontalPodAutoscaler in autoscaling/v2 (what the printer
/// of either version reads).
pub fn hpa_as_v2(obj: &Value) -> Value {
    let mut v = obj.clone();
    hpa_v1_to_v2(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpa_round_trips_through_v1() {
        let v2 = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {"keep": "me"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 2, "maxReplicas": 9,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 55}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app", "target": {"type": "Utilization", "averageUtilization": 70}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}},
            },
            "status": {"desiredReplicas": 3, "currentReplicas": 3, "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40, "averageValue": "200m"}}}]},
        });
        let mut v1 = v2.clone();
        hpa_v2_to_v1(&mut v1);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 55);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        let ann = &v1["metadata"]["annotations"];
        assert_eq!(ann["keep"], "me");
        let other: Value = serde_json::from_str(ann[METRICS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(other[0], json!({"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}}));
        assert_eq!(other[1], json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}));
        assert_eq!(other[2], json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app", "targetAverageUtilization": 70}}));
        let behavior: Value = serde_json::from_str(ann[BEHAVIOR_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 300);
        assert_eq!(behavior["ScaleDown"]["Policies"][0]["PeriodSeconds"], 60);
        let mut back = v1.clone();
        hpa_v1_to_v2(&mut back);
        assert_eq!(back["metadata"]["annotations"], json!({"keep": "me"}));
        // the annotation's metrics come first, then the CPU one
        let names: Vec<&str> = back["spec"]["metrics"].as_array().unwrap().iter().map(|m| m["type"].as_str().unwrap()).collect();
        assert_eq!(names, ["Resource", "Pods", "ContainerResource", "Resource"]);
        assert_eq!(back["spec"]["metrics"][2], v2["spec"]["metrics"][3]);
        assert_eq!(back["spec"]["metrics"][3]["resource"]["target"]["averageUtilization"], 55);
        assert_eq!(back["spec"]["behavior"], v2["spec"]["behavior"]);
        assert_eq!(back["status"]["currentMetrics"], v2["status"]["currentMetrics"]);
        // v1 without a target: 80% CPU
        let mut bare = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "b"}, "spec": {"maxReplicas": 3}});
        hpa_v1_to_v2(&mut bare);
        assert_eq!(bare["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
    }
}
