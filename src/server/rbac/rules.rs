//! RBAC policy rules: parsing, matching a request, and whether one rule set covers another (mirrors kube-apiserver's `rbac/v1/evaluation_helpers.go` and `registry/rbac/validation/policy_comparator.go`).

use serde_json::{json, Value};

/// `*`: every verb, group, resource or URL.
pub const ALL: &str = "*";

/// One `rbac.authorization.k8s.io/v1` PolicyRule (`verbs`, `apiGroups`, `resources`,
/// `resourceNames`, `nonResourceURLs`), each list as stored (empty when absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    /// `verbs`: `get`, `list`, …, `*`.
    pub verbs: Vec<String>,
    /// `apiGroups`: `""` for core, `*`.
    pub api_groups: Vec<String>,
    /// `resources`: `pods`, `pods/log`, `*/scale`, `*`.
    pub resources: Vec<String>,
    /// `resourceNames`: empty means every name.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`: `/healthz`, `/apis/*`, `*`.
    pub non_resource_urls: Vec<String>,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

impl Rule {
    /// Reads a PolicyRule object; unknown fields are ignored, non-string entries dropped.
    pub fn from_json(v: &Value) -> Rule {
        Rule {
            verbs: strings(v.get("verbs")),
            api_groups: strings(v.get("apiGroups")),
            resources: strings(v.get("resources")),
            resource_names: strings(v.get("resourceNames")),
            non_resource_urls: strings(v.get("nonResourceURLs")),
        }
    }

    /// The rules of a Role or ClusterRole object (`rules`, absent → none).
    pub fn list_of(role: &Value) -> Vec<Rule> {
        role.get("rules").and_then(Value::as_array).map(|a| a.iter().map(Rule::from_json).collect()).unwrap_or_default()
    }

    /// The PolicyRule object, omitting empty lists (as the API serializes them).
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        o.insert("verbs".into(), json!(self.verbs));
        for (k, v) in [("apiGroups", &self.api_groups), ("resources", &self.resources), ("resourceNames", &self.resource_names), ("nonResourceURLs", &self.non_resource_urls)] {
            if !v.is_empty() {
                o.insert(k.into(), json!(v));
            }
        }
        Value::Object(o)
    }

    /// A rule from string slices (for the bootstrap policy).
    pub fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
        let own = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule { verbs: own(verbs), api_groups: own(groups), resources: own(resources), ..Rule::default() }
    }

    /// A non-resource rule from string slices.
    pub fn urls(verbs: &[&str], urls: &[&str]) -> Rule {
        let own = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule { verbs: own(verbs), non_resource_urls: own(urls), ..Rule::default() }
    }

    /// Whether the rule allows `a` (kube's `RuleAllows`).
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        if !verb_matches(self, a.verb) {
            return false;
        }
        match &a.target {
            Target::Resource { group, resource, subresource, name, .. } => api_group_matches(self, group) && resource_matches(self, resource, subresource) && resource_name_matches(self, name),
            Target::NonResource { path } => non_resource_url_matches(self, path),
        }
    }
}

/// What a request does, as the authorizer sees it (mirrors `authorizer.Attributes` without the
/// user, which the caller passes alongside).
#[derive(Clone, Debug)]
pub struct Attributes<'a> {
    /// Lower-case verb: `get`, `list`, `create`, …, `impersonate`, `bind`, `escalate`; for a
    /// non-resource request the lower-case HTTP method.
    pub verb: &'a str,
    /// The resource or URL requested.
    pub target: Target<'a>,
}

/// A resource or a non-resource request.
#[derive(Clone, Debug)]
pub enum Target<'a> {
    /// A resource request.
    Resource {
        /// API group (`""` for core).
        group: &'a str,
        /// Plural resource.
        resource: &'a str,
        /// Subresource, `""` for none.
        subresource: &'a str,
        /// Namespace, `""` for cluster scope or across namespaces.
        namespace: &'a str,
        /// Object name, `""` for none.
        name: &'a str,
    },
    /// A path outside the resource space (`/metrics`, `/healthz`, `/apis`).
    NonResource {
        /// URL path.
        path: &'a str,
    },
}

impl Attributes<'_> {
    /// The namespace the request is in (`""`: cluster scope).
    pub fn namespace(&self) -> &str {
        match &self.target {
            Target::Resource { namespace, .. } => namespace,
            Target::NonResource { .. } => "",
        }
    }
}

fn verb_matches(r: &Rule, verb: &str) -> bool {
    r.verbs.iter().any(|v| v == ALL || v == verb)
}

fn api_group_matches(r: &Rule, group: &str) -> bool {
    r.api_groups.iter().any(|g| g == ALL || g == group)
}

/// `resource`, `resource/subresource`, `*` and `*/subresource` (kube's `ResourceMatches`).
fn resource_matches(r: &Rule, resource: &str, sub: &str) -> bool {
    r.resources.iter().any(|rr| {
        if rr == ALL {
            return true;
        }
        if sub.is_empty() {
            return rr == resource;
        }
        // "<resource>/<sub>" without allocating
        let combined = rr.len() == resource.len() + 1 + sub.len() && rr.starts_with(resource) && rr.as_bytes()[resource.len()] == b'/' && rr.ends_with(sub);
        combined || rr.strip_prefix("*/") == Some(sub)
    })
}

fn resource_name_matches(r: &Rule, name: &str) -> bool {
    r.resource_names.is_empty() || r.resource_names.iter().any(|n| n == name)
}

fn non_resource_url_matches(r: &Rule, path: &str) -> bool {
    r.non_resource_urls.iter().any(|u| u == ALL || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
}

/// Whether one owner rule covers a broken-down servant rule (kube's `ruleCovers`).
fn rule_covers(owner: &Rule, sub: &Rule) -> bool {
    let has_all = |l: &[String], s: &String| l.iter().any(|x| x == ALL || x == s);
    let verbs = sub.verbs.iter().all(|v| has_all(&owner.verbs, v));
    let groups = sub.api_groups.iter().all(|g| has_all(&owner.api_groups, g));
    let resources = sub.resources.iter().all(|r| resource_covers(&owner.resources, r));
    let urls = sub.non_resource_urls.iter().all(|u| url_covers(&owner.non_resource_urls, u));
    // an owner limited to names covers only the same names; an unlimited one covers all
    let names = owner.resource_names.is_empty() || (!sub.resource_names.is_empty() && sub.resource_names.iter().all(|n| owner.resource_names.contains(n)));
    verbs && groups && resources && urls && names
}

fn resource_covers(owner: &[String], want: &str) -> bool {
    if owner.iter().any(|r| r == ALL || r == want) {
        return true;
    }
    // `*/sub` covers `x/sub`
    match want.split_once('/') {
        Some((_, sub)) => owner.iter().any(|r| r.strip_prefix("*/") == Some(sub)),
        None => false,
    }
}

fn url_covers(owner: &[String], want: &str) -> bool {
    owner.iter().any(|u| u == ALL || u == want || (u.ends_with('*') && want.starts_with(u.trim_end_matches('*'))))
}

/// Splits a rule into rules of one verb, group, resource and name each (kube's
/// `BreakdownRule`), so coverage can be checked piecewise.
fn breakdown(r: &Rule) -> Vec<Rule> {
    let mut out = Vec::new();
    let one = |s: &String| vec![s.clone()];
    for v in &r.verbs {
        for g in &r.api_groups {
            for res in &r.resources {
                if r.resource_names.is_empty() {
                    out.push(Rule { verbs: one(v), api_groups: one(g), resources: one(res), ..Rule::default() });
                }
                for n in &r.resource_names {
                    out.push(Rule { verbs: one(v), api_groups: one(g), resources: one(res), resource_names: one(n), ..Rule::default() });
                }
            }
        }
        for u in &r.non_resource_urls {
            out.push(Rule { verbs: one(v), non_resource_urls: one(u), ..Rule::default() });
        }
    }
    out
}

/// The pieces of `servant` that no rule of `owner` covers (kube's `Covers`): empty when the
/// owner holds every permission of the servant.
pub fn uncovered(owner: &[Rule], servant: &[Rule]) -> Vec<Rule> {
    let mut missing = Vec::new();
    for r in servant {
        for piece in breakdown(r) {
            if !owner.iter().any(|o| rule_covers(o, &piece)) {
                missing.push(piece);
            }
        }
    }
    missing
}

/// kube's compact rendering of rules for an escalation message:
/// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}`.
pub fn compact(rules: &[Rule]) -> String {
    let q = |l: &[String]| l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" ");
    let parts: Vec<String> = rules
        .iter()
        .map(|r| {
            let mut f = Vec::new();
            if !r.api_groups.is_empty() {
                f.push(format!("APIGroups:[{}]", q(&r.api_groups)));
            }
            if !r.resources.is_empty() {
                f.push(format!("Resources:[{}]", q(&r.resources)));
            }
            if !r.resource_names.is_empty() {
                f.push(format!("ResourceNames:[{}]", q(&r.resource_names)));
            }
            if !r.non_resource_urls.is_empty() {
                f.push(format!("NonResourceURLs:[{}]", q(&r.non_resource_urls)));
            }
            f.push(format!("Verbs:[{}]", q(&r.verbs)));
            format!("{{{}}}", f.join(", "))
        })
        .collect();
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res<'a>(verb: &'a str, group: &'a str, resource: &'a str, sub: &'a str, name: &'a str) -> Attributes<'a> {
        Attributes { verb, target: Target::Resource { group, resource, subresource: sub, namespace: "ns", name } }
    }

    #[test]
    fn matching() {
        let r = Rule::new(&["get", "list"], &["apps"], &["deployments", "deployments/scale"]);
        assert!(r.allows(&res("get", "apps", "deployments", "", "x")));
        assert!(r.allows(&res("get", "apps", "deployments", "scale", "x")));
        assert!(!r.allows(&res("get", "apps", "deployments", "status", "x")));
        assert!(!r.allows(&res("create", "apps", "deployments", "", "")));
        assert!(!r.allows(&res("get", "", "deployments", "", "")));
        let star_sub = Rule::new(&["*"], &["*"], &["*/scale"]);
        assert!(star_sub.allows(&res("update", "apps", "statefulsets", "scale", "x")));
        assert!(!star_sub.allows(&res("update", "apps", "statefulsets", "", "x")));
        let named = Rule { resource_names: vec!["a".into()], ..Rule::new(&["get"], &[""], &["configmaps"]) };
        assert!(named.allows(&res("get", "", "configmaps", "", "a")));
        assert!(!named.allows(&res("get", "", "configmaps", "", "b")));
        assert!(!named.allows(&res("list", "", "configmaps", "", "")));
        let urls = Rule::urls(&["get"], &["/apis/*", "/healthz"]);
        let nr = |p| Attributes { verb: "get", target: Target::NonResource { path: p } };
        assert!(urls.allows(&nr("/apis/apps")));
        assert!(urls.allows(&nr("/healthz")));
        assert!(!urls.allows(&nr("/healthz/etcd")));
        assert!(!urls.allows(&res("get", "", "pods", "", "")), "a URL rule grants no resources");
    }

    #[test]
    fn coverage() {
        let admin = vec![Rule::new(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])];
        let some = vec![Rule::new(&["get", "create"], &["apps"], &["deployments"])];
        assert!(uncovered(&admin, &some).is_empty());
        let reader = vec![Rule::new(&["get"], &["apps"], &["deployments"])];
        let missing = uncovered(&reader, &some);
        assert_eq!(missing, vec![Rule::new(&["create"], &["apps"], &["deployments"])]);
        assert_eq!(compact(&missing), r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["create"]}"#);
        let named = vec![Rule { resource_names: vec!["a".into()], ..Rule::new(&["get"], &["apps"], &["deployments"]) }];
        assert!(uncovered(&reader, &named).is_empty(), "all names cover one");
        assert!(!uncovered(&named, &reader).is_empty(), "one name does not cover all");
        assert!(uncovered(&[Rule::new(&["get"], &["*"], &["*/scale"])], &[Rule::new(&["get"], &["apps"], &["deployments/scale"])]).is_empty());
        assert!(uncovered(&[Rule::urls(&["get"], &["/apis/*"])], &[Rule::urls(&["get"], &["/apis/apps"])]).is_empty());
    }
}
