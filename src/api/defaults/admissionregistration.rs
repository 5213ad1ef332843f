//! `admissionregistration.k8s.io/v1` defaults: pkg/apis/admissionregistration/v1/defaults.go
//! and its zz_generated.defaults.go.

use serde_json::json;

use super::{child, default, each, Obj};

/// Webhook configurations and ValidatingAdmissionPolicy(Binding):
/// - every webhook: SetDefaults_ValidatingWebhook / SetDefaults_MutatingWebhook
///   (failurePolicy Fail, matchPolicy Equivalent, empty namespace and object selectors,
///   timeoutSeconds 10; mutating ones also reinvocationPolicy Never; `sideEffects` and
///   `admissionReviewVersions` are required in v1 and get no default), a service reference
///   SetDefaults_ServiceReference (port 443), every rule SetDefaults_Rule (scope `*`);
/// - a policy: SetDefaults_ValidatingAdmissionPolicySpec (failurePolicy Fail) and
///   SetDefaults_MatchResources on `matchConstraints`; a binding: SetDefaults_MatchResources
///   on `matchResources` (matchPolicy Equivalent, empty selectors, rules' scope `*`).
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "ValidatingWebhookConfiguration" => webhooks(o, false),
        "MutatingWebhookConfiguration" => webhooks(o, true),
        "ValidatingAdmissionPolicy" => {
            let Some(spec) = super::member(o, "spec") else { return };
            default(spec, "failurePolicy", "Fail");
            if let Some(m) = child(spec, "matchConstraints") {
                match_resources(m);
            }
        }
        "ValidatingAdmissionPolicyBinding" => {
            if let Some(m) = child(o, "spec").and_then(|s| child(s, "matchResources")) {
                match_resources(m);
            }
        }
        _ => {}
    }
}

fn webhooks(o: &mut Obj, mutating: bool) {
    for w in each(o, "webhooks") {
        default(w, "failurePolicy", "Fail");
        default(w, "matchPolicy", "Equivalent");
        default(w, "namespaceSelector", json!({}));
        default(w, "objectSelector", json!({}));
        default(w, "timeoutSeconds", 10);
        if mutating {
            default(w, "reinvocationPolicy", "Never");
        }
        // SetDefaults_Rule (via RuleWithOperations)
        for r in each(w, "rules") {
            default(r, "scope", "*");
        }
        if let Some(s) = child(w, "clientConfig").and_then(|c| child(c, "service")) {
            default(s, "port", 443);
        }
    }
}

/// SetDefaults_MatchResources and the rules' SetDefaults_Rule.
fn match_resources(m: &mut Obj) {
    default(m, "matchPolicy", "Equivalent");
    default(m, "namespaceSelector", json!({}));
    default(m, "objectSelector", json!({}));
    for list in ["resourceRules", "excludeResourceRules"] {
        for r in each(m, list) {
            default(r, "scope", "*");
        }
    }
}
