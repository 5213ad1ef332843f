//! `batch/v1` defaults: pkg/apis/batch/v1/defaults.go (and the pod templates' core defaults).

use serde_json::Value;

use super::core::pod_template;
use super::{child, default, default_zero, each, member, path, unset, Obj};

/// `batch/v1` kinds.
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "Job" => job(o),
        "CronJob" => cron_job(o),
        _ => {}
    }
}

/// SetDefaults_Job with 1.33's default-on gates (JobBackoffLimitPerIndex,
/// JobPodFailurePolicy, JobPodReplacementPolicy): completions and parallelism 1 when both
/// unset, parallelism 1, backoffLimit 6 (2147483647 with backoffLimitPerIndex), labels from
/// the template when the Job has none, completionMode NonIndexed, suspend false,
/// onPodConditions' status True, podReplacementPolicy (Failed with a podFailurePolicy,
/// TerminatingOrFailed without). `manualSelector: false` is what the conversion to the
/// internal type stores (the Job strategy's PrepareForCreate reads it); the selector that
/// strategy then generates from the uid is left out (see the module documentation).
fn job(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), 1.into());
    }
    default(spec, "parallelism", 1);
    let per_index = !unset(spec, "backoffLimitPerIndex");
    default(spec, "backoffLimit", if per_index { i32::MAX as i64 } else { 6 });
    default(spec, "completionMode", "NonIndexed");
    default(spec, "suspend", false);
    default(spec, "manualSelector", false);
    let has_failure_policy = !unset(spec, "podFailurePolicy");
    if let Some(pfp) = child(spec, "podFailurePolicy") {
        for rule in each(pfp, "rules") {
            for cond in each(rule, "onPodConditions") {
                default_zero(cond, "status", "True");
            }
        }
    }
    default(spec, "podReplacementPolicy", if has_failure_policy { "Failed" } else { "TerminatingOrFailed" });
    let labels = path(spec, &["template", "metadata"]).and_then(|m| m.get("labels")).filter(|l| l.is_object()).cloned();
    if let Some(t) = member(spec, "template") {
        pod_template(t);
    }
    if let Some(labels) = labels {
        if let Some(m) = member(o, "metadata") {
            if m.get("labels").and_then(Value::as_object).is_none_or(|l| l.is_empty()) {
                m.insert("labels".into(), labels);
            }
        }
    }
}

/// SetDefaults_CronJob: concurrencyPolicy Allow, suspend false, history limits 3 and 1; the
/// job template's pod template gets the pod defaults (SetDefaults_Job itself is not applied
/// to a JobTemplateSpec).
fn cron_job(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    default_zero(spec, "concurrencyPolicy", "Allow");
    default(spec, "suspend", false);
    default(spec, "successfulJobsHistoryLimit", 3);
    default(spec, "failedJobsHistoryLimit", 1);
    if let Some(t) = member(spec, "jobTemplate").and_then(|jt| member(jt, "spec")).and_then(|js| member(js, "template")) {
        pod_template(t);
    }
}
