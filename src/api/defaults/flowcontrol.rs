//! `flowcontrol.apiserver.k8s.io/v1` defaults: pkg/apis/flowcontrol/v1/defaults.go.

use super::{child, default, default_zero, member, path, Obj};

/// FlowSchema (SetDefaults_FlowSchemaSpec: matchingPrecedence 1000) and
/// PriorityLevelConfiguration (SetDefaults_LimitedPriorityLevelConfiguration:
/// nominalConcurrencyShares 30, lendablePercent 0; SetDefaults_QueuingConfiguration: handSize
/// 8, queues 64, queueLengthLimit 50; SetDefaults_ExemptPriorityLevelConfiguration:
/// nominalConcurrencyShares and lendablePercent 0).
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "FlowSchema" => {
            if let Some(spec) = member(o, "spec") {
                default_zero(spec, "matchingPrecedence", 1000);
            }
        }
        "PriorityLevelConfiguration" => {
            let Some(spec) = child(o, "spec") else { return };
            if let Some(l) = child(spec, "limited") {
                default(l, "nominalConcurrencyShares", 30);
                default(l, "lendablePercent", 0);
                if let Some(q) = path(l, &["limitResponse", "queuing"]) {
                    default_zero(q, "handSize", 8);
                    default_zero(q, "queues", 64);
                    default_zero(q, "queueLengthLimit", 50);
                }
            }
            if let Some(e) = child(spec, "exempt") {
                default(e, "nominalConcurrencyShares", 0);
                default(e, "lendablePercent", 0);
            }
        }
        _ => {}
    }
}
