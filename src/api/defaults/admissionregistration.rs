//! `admissionregistration.k8s.io/v1` webhook configuration defaults:
//! pkg/apis/admissionregistration/v1/defaults.go.

use serde_json::json;

use super::{child, default, each, path, Obj};

/// ValidatingWebhookConfiguration and MutatingWebhookConfiguration: every webhook gets
/// SetDefaults_ValidatingWebhook / SetDefaults_MutatingWebhook (failurePolicy Fail,
/// matchPolicy Equivalent, empty namespace and object selectors, sideEffects Unknown,
/// timeoutSeconds 30, admissionReviewVersions `[v1]`; mutating ones also reinvocationPolicy
/// Never), each rule SetDefaults_Rule (scope `*`) and a service reference
/// SetDefaults_ServiceReference (port 443).
pub(super) fn apply(kind: &str, o: &mut Obj) {
    let mutating = match kind {
        "ValidatingWebhookConfiguration" => false,
        "MutatingWebhookConfiguration" => true,
        _ => return,
    };
    for w in each(o, "webhooks") {
        default(w, "failurePolicy", "Fail");
        default(w, "matchPolicy", "Equivalent");
        default(w, "namespaceSelector", json!({}));
        default(w, "objectSelector", json!({}));
        default(w, "sideEffects", "Unknown");
        default(w, "timeoutSeconds", 30);
        if mutating {
            default(w, "reinvocationPolicy", "Never");
        }
        if w.get("admissionReviewVersions").and_then(|v| v.as_array()).is_none_or(|v| v.is_empty()) {
            w.insert("admissionReviewVersions".into(), json!(["v1"]));
        }
        for r in each(w, "rules") {
            default(r, "scope", "*");
        }
        if let Some(s) = path(w, &["clientConfig"]).and_then(|c| child(c, "service")) {
            default(s, "port", 443);
        }
    }
}
