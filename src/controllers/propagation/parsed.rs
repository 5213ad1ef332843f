//! Policies parsed once per change, by namespace: what a reconcile reads instead of parsing every policy object again.
//!
//! The policy informers' handlers keep a [`ParsedIndex`] in step with every change they
//! deliver (before they queue the templates the change affects, so those reconciles see it).
//! A reconcile then costs a lookup of its namespace's policies and the cluster-scoped ones,
//! not a parse of every (Cluster)PropagationPolicy or (Cluster)OverridePolicy in the
//! federation: with a thousand members and a policy per three of them, parsing was most of
//! a reconcile's CPU.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::super::informer::Change;
use crate::api::object::meta_str;

/// Parsed objects of one policy kind, by namespace (`None`: cluster-scoped) then name. A
/// terminating object or one that does not parse is absent, as the reconciles ignored it.
pub struct ParsedIndex<T> {
    by_namespace: Mutex<BTreeMap<Option<String>, BTreeMap<String, Arc<T>>>>,
}

impl<T> Default for ParsedIndex<T> {
    fn default() -> Self {
        ParsedIndex { by_namespace: Mutex::new(BTreeMap::new()) }
    }
}

impl<T> ParsedIndex<T> {
    /// Applies an informer change: parses the new object with `parse` (`None`: it does not
    /// parse) and keeps it, or forgets the object when it was deleted, is terminating or no
    /// longer parses.
    pub fn apply(&self, ch: &Change, parse: impl FnOnce(&Value) -> Option<T>) {
        let obj = ch.object();
        let Some(name) = meta_str(obj, "name") else { return };
        let ns = meta_str(obj, "namespace").map(str::to_string);
        let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
        let parsed = match ch {
            Change::Deleted(_) => None,
            _ if terminating => None,
            _ => parse(obj).map(Arc::new),
        };
        let mut g = self.by_namespace.lock().unwrap_or_else(|e| e.into_inner());
        match parsed {
            Some(p) => {
                g.entry(ns).or_default().insert(name.to_string(), p);
            }
            None => {
                if let Some(m) = g.get_mut(&ns) {
                    m.remove(name);
                    if m.is_empty() {
                        g.remove(&ns);
                    }
                }
            }
        }
    }

    /// The parsed objects of namespace `ns` (`None`: the cluster-scoped ones), by name.
    pub fn of(&self, ns: Option<&str>) -> Vec<Arc<T>> {
        let g = self.by_namespace.lock().unwrap_or_else(|e| e.into_inner());
        g.get(&ns.map(str::to_string)).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(ns: Option<&str>, name: &str, v: i64) -> Arc<Value> {
        let mut o = json!({"metadata": {"name": name}, "spec": {"v": v}});
        if let Some(ns) = ns {
            o["metadata"]["namespace"] = json!(ns);
        }
        Arc::new(o)
    }

    fn parse(o: &Value) -> Option<i64> {
        o.pointer("/spec/v").and_then(Value::as_i64).filter(|v| *v >= 0)
    }

    fn values(ix: &ParsedIndex<i64>, ns: Option<&str>) -> Vec<i64> {
        ix.of(ns).iter().map(|v| **v).collect()
    }

    #[test]
    fn follows_adds_changes_and_deletes_per_namespace() {
        let ix = ParsedIndex::default();
        ix.apply(&Change::Added(obj(Some("a"), "p1", 1)), parse);
        ix.apply(&Change::Added(obj(Some("a"), "p2", 2)), parse);
        ix.apply(&Change::Added(obj(Some("b"), "p1", 3)), parse);
        ix.apply(&Change::Added(obj(None, "c1", 4)), parse);
        assert_eq!(values(&ix, Some("a")), vec![1, 2]);
        assert_eq!(values(&ix, Some("b")), vec![3]);
        assert_eq!(values(&ix, None), vec![4]);
        assert!(values(&ix, Some("other")).is_empty());
        ix.apply(&Change::Modified { old: obj(Some("a"), "p1", 1), new: obj(Some("a"), "p1", 10) }, parse);
        assert_eq!(values(&ix, Some("a")), vec![10, 2]);
        ix.apply(&Change::Deleted(obj(Some("a"), "p2", 2)), parse);
        assert_eq!(values(&ix, Some("a")), vec![10]);
        // the same name in another namespace is another policy
        assert_eq!(values(&ix, Some("b")), vec![3]);
    }

    #[test]
    fn a_terminating_or_unparsable_object_is_dropped() {
        let ix = ParsedIndex::default();
        ix.apply(&Change::Added(obj(Some("a"), "p", 1)), parse);
        // no longer parses: the old parse must not linger
        ix.apply(&Change::Modified { old: obj(Some("a"), "p", 1), new: obj(Some("a"), "p", -1) }, parse);
        assert!(values(&ix, Some("a")).is_empty());
        ix.apply(&Change::Added(obj(Some("a"), "q", 5)), parse);
        let mut t = (*obj(Some("a"), "q", 5)).clone();
        t["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        ix.apply(&Change::Modified { old: obj(Some("a"), "q", 5), new: Arc::new(t) }, parse);
        assert!(values(&ix, Some("a")).is_empty());
    }
}
