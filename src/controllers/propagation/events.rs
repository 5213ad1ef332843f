//! Kubernetes Events the propagation controller records on templates: what changed between two placement statuses (pure), and the core/v1 Event object for it.
//!
//! Mirrors the events Karmada's controllers record on resource templates (scheduled,
//! applied, failed, overridden), so `kubectl describe` of a template in the federation
//! shows where it went and what happened there. Events are recorded on transitions only
//! (comparing the template's previous `fedctl.io/cluster-status` with the new one), never
//! on a reconcile that changes nothing.

use serde_json::{json, Value};

/// `Normal` or `Warning`, as core/v1 Event `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Something went as wanted.
    Normal,
    /// Something failed.
    Warning,
}

/// One event to record: type, reason (CamelCase) and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Type.
    pub ty: EventType,
    /// Reason: `Scheduled`, `Applied` (one event naming every member newly applied),
    /// `ApplyFailed`, `Overridden`, `OverrideFailed`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

fn placement_line(bd: &Value) -> String {
    let Some(m) = bd.as_object() else { return String::new() };
    m.iter()
        .map(|(c, e)| match e.get("share").and_then(Value::as_i64) {
            Some(n) => format!("{c} ({n})"),
            None => c.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The events for a template whose placement status goes from `old` (absent: never placed)
/// to `new` (both `fedctl.io/cluster-status` objects, keyed by cluster); `by` names what
/// placed it (`PropagationPolicy shop/web`, `every member`, `its workloads`).
pub fn transitions(old: Option<&Value>, new: &Value, by: &str) -> Vec<Event> {
    let mut out = Vec::new();
    let empty = json!({});
    let old = old.unwrap_or(&empty);
    if placement_line(old) != placement_line(new) {
        let msg = match placement_line(new) {
            s if s.is_empty() => format!("placed on no member ({by})"),
            s => format!("placed on {s} ({by})"),
        };
        out.push(Event { ty: EventType::Normal, reason: "Scheduled", message: msg });
    }
    let Some(members) = new.as_object() else { return out };
    // the members that became applied since `old`: one event for all of them (a template
    // placed on 3 members records `applied on a, b, c` once, not three Events)
    let applied: Vec<&str> = members
        .iter()
        .filter(|(c, e)| e.get("applied").and_then(Value::as_bool) == Some(true) && old.get(*c).and_then(|b| b.get("applied")).and_then(Value::as_bool) != Some(true))
        .map(|(c, _)| c.as_str())
        .collect();
    if !applied.is_empty() {
        out.push(Event { ty: EventType::Normal, reason: "Applied", message: format!("applied on {}", applied.join(", ")) });
    }
    for (c, e) in members {
        let before = old.get(c).unwrap_or(&empty);
        let (was, is) = (before.get("applied").and_then(Value::as_bool), e.get("applied").and_then(Value::as_bool));
        let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
        if is == Some(false) && (was != Some(false) || before.get("message") != e.get("message")) {
            out.push(Event { ty: EventType::Warning, reason: "ApplyFailed", message: format!("{c}: {msg}") });
        }
        if before.get("overrides") != e.get("overrides") {
            if let Some(list) = e.get("overrides").and_then(Value::as_array) {
                let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
                out.push(Event { ty: EventType::Normal, reason: "Overridden", message: format!("{c}: {}", names.join(", ")) });
            }
        }
        if before.get("overrideErrors") != e.get("overrideErrors") {
            for err in e.get("overrideErrors").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                out.push(Event { ty: EventType::Warning, reason: "OverrideFailed", message: format!("{c}: {err}") });
            }
        }
    }
    out
}

/// The core/v1 Event recording `e` about `template` (in its namespace; a cluster-scoped
/// template's events go to `default`, as kube-apiserver's clients do), from `component`.
pub fn event_object(template: &Value, e: &Event, component: &str, now: &str, nanos: u128) -> Value {
    let meta = &template["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let ns = meta["namespace"].as_str().filter(|s| !s.is_empty()).unwrap_or("default");
    let mut involved = json!({"apiVersion": template["apiVersion"], "kind": template["kind"], "name": name, "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]});
    if let Some(n) = meta["namespace"].as_str().filter(|s| !s.is_empty()) {
        involved["namespace"] = json!(n);
    }
    let short: String = name.chars().take(200).collect();
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{short}.{nanos:x}"), "namespace": ns},
        "involvedObject": involved,
        "reason": e.reason,
        "message": e.message,
        "type": match e.ty { EventType::Normal => "Normal", EventType::Warning => "Warning" },
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transitions_are_events() {
        let a = json!({"a": {"share": 2}, "b": {"share": 1}});
        let ev = transitions(None, &a, "PropagationPolicy shop/web");
        assert_eq!(ev, vec![Event { ty: EventType::Normal, reason: "Scheduled", message: "placed on a (2), b (1) (PropagationPolicy shop/web)".into() }]);
        assert!(transitions(Some(&a), &a, "x").is_empty(), "nothing changed, nothing recorded");
        let b = json!({"a": {"share": 2, "applied": true, "overrides": ["OverridePolicy/o"]}, "b": {"share": 1, "applied": false, "message": "no such kind", "overrideErrors": ["OverridePolicy/o rule 0: boom"]}});
        let ev = transitions(Some(&a), &b, "x");
        let reasons: Vec<&str> = ev.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, vec!["Applied", "Overridden", "ApplyFailed", "OverrideFailed"]);
        assert_eq!(ev[3].message, "b: OverridePolicy/o rule 0: boom");
        assert_eq!(ev[3].ty, EventType::Warning);
        assert!(transitions(Some(&b), &b, "x").is_empty());
        // members applied in one step are one event; one applied before is not named again
        let c = json!({"a": {"share": 2, "applied": true, "overrides": ["OverridePolicy/o"]}, "b": {"share": 1, "applied": true}, "c": {"applied": true}});
        let ev = transitions(Some(&b), &c, "x");
        assert_eq!(ev.iter().filter(|e| e.reason == "Applied").map(|e| e.message.as_str()).collect::<Vec<_>>(), vec!["applied on b, c"], "{ev:?}");
        let t = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "u1", "resourceVersion": "7"}});
        let o = event_object(&t, &ev[0], "fedctl-propagation", "2026-01-01T00:00:00Z", 255);
        assert_eq!(o["metadata"], json!({"name": "team.ff", "namespace": "default"}));
        assert_eq!(o["involvedObject"], json!({"apiVersion": "v1", "kind": "Namespace", "name": "team", "uid": "u1", "resourceVersion": "7"}));
    }
}
