//! The ClusterRole aggregation controller (mirrors kube-controller-manager's `clusterrole-aggregation` controller): a ClusterRole with `aggregationRule.clusterRoleSelectors` gets as `rules` the rules of every other ClusterRole one of its selectors matches; uses `api` and the RBAC index.
//!
//! It reacts to every rebuild of the [`Rbac`] index (so a newly labelled role shows up in
//! the aggregate within the watch latency), computes each aggregate's rules in ClusterRole
//! name order without duplicates, and writes only those that differ. Chains (`view` feeds
//! `edit`, which feeds `admin`) settle in as many rounds as they are long, each write being
//! one more index rebuild.

use std::sync::Arc;

use serde_json::{json, Value};

use super::rules::Rule;
use super::Rbac;
use crate::api::request::ResourceRequest;
use crate::api::selector::LabelSelector;
use crate::api::{ApiServer, Ctx};

/// The rules `role`'s aggregation rule selects among `all` (`None`: not an aggregate).
pub fn aggregate_rules(role: &Value, all: &[Value]) -> Option<Vec<Rule>> {
    let selectors = role.pointer("/aggregationRule/clusterRoleSelectors")?.as_array()?;
    let selectors: Vec<LabelSelector> = selectors.iter().filter_map(|s| LabelSelector::from_json(s).ok()).collect();
    let name = role.pointer("/metadata/name");
    let mut sources: Vec<&Value> = all
        .iter()
        .filter(|o| o.pointer("/metadata/name") != name)
        .filter(|o| {
            let labels = o.pointer("/metadata/labels").and_then(Value::as_object);
            // an empty selector selects nothing here (kube skips it too)
            selectors.iter().any(|s| !s.is_empty() && s.matches(labels))
        })
        .collect();
    sources.sort_by_key(|o| o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string());
    let mut rules: Vec<Rule> = Vec::new();
    for r in sources.into_iter().flat_map(Rule::list_of) {
        if !rules.contains(&r) {
            rules.push(r);
        }
    }
    Some(rules)
}

/// `all` with every aggregate's rules computed, repeated until nothing changes (chains of
/// aggregates settle in as many rounds as they are long; bounded for cycles).
pub fn settled(mut all: Vec<Value>) -> Vec<Value> {
    for _ in 0..16 {
        let mut changed = false;
        for i in 0..all.len() {
            let Some(want) = aggregate_rules(&all[i], &all) else { continue };
            if Rule::list_of(&all[i]) != want {
                all[i]["rules"] = json!(want.iter().map(Rule::to_json).collect::<Vec<_>>());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    all
}

/// Fills every aggregate from the stored ClusterRoles at once (read from the store, not the
/// index), so a starting server is ready with its default aggregates complete and the
/// controller finds nothing to do. Errors: the first store or API error.
pub async fn settle_from_store(api: &Arc<ApiServer>) -> crate::api::ApiResult<()> {
    let info = api.registry.lookup(super::RBAC_GROUP, "v1", "clusterroles").ok_or(crate::api::ApiError::NoSuchResource)?;
    let r = ResourceRequest { info, namespace: None, name: None, subresource: None, watch_path: false };
    let all = api.list(&r, &crate::api::request::Query::default()).await?.items;
    write_changed(api, &all, &settled(all.clone())).await;
    Ok(())
}

/// One pass: writes the aggregates whose rules are out of date. Returns how many it wrote.
async fn sync(api: &Arc<ApiServer>, rbac: &Rbac) -> usize {
    let all = rbac.cluster_roles();
    let wanted: Vec<Value> = all
        .iter()
        .map(|role| match aggregate_rules(role, &all) {
            Some(want) => {
                let mut r = role.clone();
                r["rules"] = json!(want.iter().map(Rule::to_json).collect::<Vec<_>>());
                r
            }
            None => role.clone(),
        })
        .collect();
    write_changed(api, &all, &wanted).await
}

/// Writes the `rules` of each aggregate in `wanted` that differ from the same role in `all`.
async fn write_changed(api: &Arc<ApiServer>, all: &[Value], wanted: &[Value]) -> usize {
    let Some(info) = api.registry.lookup(super::RBAC_GROUP, "v1", "clusterroles") else { return 0 };
    let ctx = Ctx { caller: super::policy::internal_caller(), dry_run: false, manager: "clusterrole-aggregation-controller".into(), apply: false };
    let mut written = 0;
    for (role, target) in all.iter().zip(wanted) {
        if role.get("aggregationRule").is_none() {
            continue;
        }
        let want = Rule::list_of(target);
        if Rule::list_of(role) == want {
            continue;
        }
        let name = role.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let r = ResourceRequest { info: info.clone(), namespace: None, name: Some(name.clone()), subresource: None, watch_path: false };
        let rules: Vec<Value> = want.iter().map(Rule::to_json).collect();
        let res = api
            .guaranteed_update(&r, &name, None, &ctx, |cur| {
                let mut n = cur.clone();
                n["rules"] = json!(rules);
                Ok(n)
            })
            .await;
        match res {
            Ok(_) => written += 1,
            Err(e) => tracing::warn!(role = %name, error = %e, "aggregating ClusterRole rules"),
        }
    }
    written
}

/// Runs the controller until the task is aborted (spawn it on the leader).
pub async fn run(api: Arc<ApiServer>, rbac: Arc<Rbac>) {
    let mut gen = rbac.subscribe();
    loop {
        if *gen.borrow_and_update() > 0 {
            sync(&api, &rbac).await;
        }
        // a periodic pass too, in case a write failed
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), gen.changed()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_by_label_in_name_order_without_duplicates() {
        let agg = json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "true"}}]}, "rules": []});
        let r = |name: &str, labels: Value, res: &str| json!({"metadata": {"name": name, "labels": labels}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": [res]}]});
        let all = vec![agg.clone(), r("b", json!({"x": "true"}), "pods"), r("a", json!({"x": "true"}), "secrets"), r("c", json!({"x": "false"}), "nodes"), r("d", json!({"x": "true"}), "pods")];
        let got = aggregate_rules(&agg, &all).unwrap();
        assert_eq!(got, vec![Rule::new(&["get"], &[""], &["secrets"]), Rule::new(&["get"], &[""], &["pods"])]);
        assert!(aggregate_rules(&all[1], &all).is_none());
    }
}
