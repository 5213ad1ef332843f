//! Label and field selectors (mirrors apimachinery `labels.Parse` and `fields.ParseSelector`).

use serde_json::{Map, Value};

/// One label requirement.
#[derive(Clone, Debug, PartialEq)]
pub enum Requirement {
    /// `k=v`, `k==v`.
    Eq(String, String),
    /// `k!=v` (also true when `k` is absent).
    NotEq(String, String),
    /// `k in (a,b)`.
    In(String, Vec<String>),
    /// `k notin (a,b)` (also true when `k` is absent).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    NotExists(String),
    /// `k>n`: the label is an integer greater than `n` (kube's `gt` operator).
    Gt(String, i64),
    /// `k<n`: the label is an integer less than `n` (kube's `lt` operator).
    Lt(String, i64),
}

/// A parsed label selector: all requirements must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    /// Conjunction of requirements.
    pub reqs: Vec<Requirement>,
}

/// A selector that could not be parsed; the API layer answers 400 BadRequest with it.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

/// A label key: optional DNS-subdomain prefix and `/`, then a name of ≤ 63 chars of
/// `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(|l| valid_dns_label(l)) {
            return false;
        }
    }
    valid_label_value(name) && !name.is_empty()
}

fn valid_dns_label(l: &str) -> bool {
    !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !l.starts_with('-') && !l.ends_with('-')
}

/// A label value: empty, or ≤ 63 chars of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn valid_label_value(v: &str) -> bool {
    if v.is_empty() {
        return true;
    }
    v.len() <= 63 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') && v.as_bytes()[0].is_ascii_alphanumeric() && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(s: &str) -> Result<Vec<String>, SelectorError> {
    let s = s.trim();
    let inner = s.strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or_else(|| SelectorError(format!("expected a parenthesised set, found '{s}'")))?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    for v in &vals {
        if !valid_label_value(v) {
            return Err(SelectorError(format!("invalid label value: \"{v}\"")));
        }
    }
    Ok(vals)
}

impl LabelSelector {
    /// Parses the query-string form (`app=web,tier!=db,env in (a,b),!legacy`).
    /// Errors: any malformed requirement, invalid key or value.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(SelectorError(format!("found '', expected: identifier in '{s}'")));
            }
            let int_value = |k: &str, v: &str| -> Result<(String, i64), SelectorError> {
                let v = v.trim();
                v.parse::<i64>().map(|n| (k.trim().to_string(), n)).map_err(|_| SelectorError(format!("for 'Gt', 'Lt' operators, the value must be an integer: \"{v}\"")))
            };
            let req = if let Some(k) = p.strip_prefix('!').filter(|_| !p.contains("!=")) {
                Requirement::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Requirement::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Requirement::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('>') {
                let (k, n) = int_value(k, v)?;
                Requirement::Gt(k, n)
            } else if let Some((k, v)) = p.split_once('<') {
                let (k, n) = int_value(k, v)?;
                Requirement::Lt(k, n)
            } else if let Some(idx) = p.find(" notin ").or_else(|| p.find(" notin(")) {
                Requirement::NotIn(p[..idx].trim().into(), parse_set(&p[idx + 6..])?)
            } else if let Some(idx) = p.find(" in ").or_else(|| p.find(" in(")) {
                Requirement::In(p[..idx].trim().into(), parse_set(&p[idx + 3..])?)
            } else if p.contains(' ') || p.contains('(') || p.contains(')') || p.contains('<') || p.contains('>') {
                return Err(SelectorError(format!("'{p}' is not a valid requirement")));
            } else {
                Requirement::Exists(p.to_string())
            };
            let (key, vals): (&str, Vec<&str>) = match &req {
                Requirement::Eq(k, v) | Requirement::NotEq(k, v) => (k, vec![v.as_str()]),
                Requirement::In(k, vs) | Requirement::NotIn(k, vs) => (k, vs.iter().map(String::as_str).collect()),
                Requirement::Exists(k) | Requirement::NotExists(k) | Requirement::Gt(k, _) | Requirement::Lt(k, _) => (k, vec![]),
            };
            if !valid_label_key(key) {
                return Err(SelectorError(format!("invalid label key \"{key}\"")));
            }
            if let Some(v) = vals.iter().find(|v| !valid_label_value(v)) {
                return Err(SelectorError(format!("invalid label value: \"{v}\"")));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Builds from a `metav1.LabelSelector` JSON object (`matchLabels`, `matchExpressions`
    /// with operators In, NotIn, Exists, DoesNotExist). `null`/`{}` selects everything.
    pub fn from_json(v: &Value) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if let Some(ml) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in ml {
                let val = val.as_str().ok_or_else(|| SelectorError(format!("matchLabels[{k}] must be a string")))?;
                reqs.push(Requirement::Eq(k.clone(), val.to_string()));
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).ok_or_else(|| SelectorError("matchExpressions: key is required".into()))?.to_string();
                let values: Vec<String> = e.get("values").and_then(Value::as_array).map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default();
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                reqs.push(match op {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::NotExists(key),
                    other => return Err(SelectorError(format!("\"{other}\" is not a valid label selector operator"))),
                });
            }
        }
        Ok(Self { reqs })
    }

    /// True when the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Evaluates against a label map (`None` = no labels).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_with(|k| labels.and_then(|m| m.get(k)).and_then(Value::as_str))
    }

    /// Evaluates against the labels `get` finds (`get(key)` = the label's value, `None` when
    /// the object has no such label).
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::Gt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x > *n),
            Requirement::Lt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x < *n),
        })
    }

    /// Evaluates against an object's `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        self.is_empty() || self.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// Splits `s` on every `sep` not escaped by a backslash (fields.splitTerms).
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut escaped) = (0usize, false);
    for (i, ch) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if ch == '\\' {
            escaped = true;
        } else if ch == sep {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// The first unescaped `!=`, `==` or `=` of a field selector term, with its byte offset
/// (fields.splitTerm).
fn find_operator(term: &str) -> Option<(usize, &'static str)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'!' if b.get(i + 1) == Some(&b'=') => return Some((i, "!=")),
            b'=' if b.get(i + 1) == Some(&b'=') => return Some((i, "==")),
            b'=' => return Some((i, "=")),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Undoes a field selector value's escapes `\\`, `\,` and `\=` (fields.UnescapeValue);
/// any other escape, a lone trailing backslash or an unescaped `,`/`=` is an error.
fn unescape_value(v: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(SelectorError(format!("invalid field selector: invalid escape sequence: \\{e}"))),
                None => return Err(SelectorError("invalid field selector: unterminated escape sequence".into())),
            },
            ',' | '=' => return Err(SelectorError(format!("invalid field selector: unescaped '{c}' in value \"{v}\""))),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-joined.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    /// `(field path, value, negated)`.
    pub reqs: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parses; `allowed` lists the field paths this resource supports (kube-apiserver refuses
    /// others with `field label not supported: X`). `metadata.name` and `metadata.namespace`
    /// are always allowed.
    pub fn parse(s: &str, allowed: &[&str]) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_unescaped(s, ',') {
            // empty terms (`metadata.name=x,`) are skipped, as kube-apiserver's parseSelector
            if part.is_empty() {
                continue;
            }
            let p = part.trim();
            let (f, v, neg) = match find_operator(p) {
                Some((i, "!=")) => (&p[..i], &p[i + 2..], true),
                Some((i, "==")) => (&p[..i], &p[i + 2..], false),
                Some((i, _)) => (&p[..i], &p[i + 1..], false),
                None => return Err(SelectorError(format!("invalid selector: '{s}'; can't understand '{p}'"))),
            };
            let f = f.trim();
            if f != "metadata.name" && f != "metadata.namespace" && !allowed.contains(&f) {
                return Err(SelectorError(format!("field label not supported: {f}")));
            }
            reqs.push((f.to_string(), unescape_value(v.trim())?, neg));
        }
        Ok(Self { reqs })
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The value a `metadata.name=` requirement pins, if any (lets a LIST read one key).
    pub fn exact_name(&self) -> Option<&str> {
        self.reqs.iter().find(|(f, _, neg)| f == "metadata.name" && !neg).map(|(_, v, _)| v.as_str())
    }

    /// Evaluates against an object: field paths are dotted JSON paths; a missing field is `""`.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(f, v, neg)| {
            let mut cur = Some(obj);
            for part in f.split('.') {
                cur = cur.and_then(|c| c.get(part));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (actual == *v) != *neg
        })
    }

    /// Evaluates against the fields `get` finds (`get(path)` = the field's value as text, as
    /// [`FieldSelector::matches`] renders it; `None` reads as `""`).
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|(f, v, neg)| (get(f).unwrap_or("") == v) != *neg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_forms() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("app", true),
            ("!app", false),
            ("missing!=x", true),
            ("missing notin (x)", true),
            ("app=web,tier=fe", true),
            ("app=web,tier=be", false),
            ("app in (db),tier", false),
            ("", true),
        ];
        for (s, want) in cases {
            let sel = LabelSelector::parse(s).unwrap();
            assert_eq!(sel.matches_object(&o), want, "{s}");
        }
    }

    #[test]
    fn label_selector_errors() {
        for bad in ["app=", "=web", "app in web", "a b", "app=we b", "-bad=x", "app in (a b)", ","] {
            if bad == "app=" {
                // an empty value is valid in Kubernetes (`app=` matches an empty label)
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn from_json_selector() {
        let s = LabelSelector::from_json(&json!({"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]})).unwrap();
        assert!(s.matches_object(&obj(json!({"env": "prod", "zone": "a"}))));
        assert!(!s.matches_object(&obj(json!({"env": "prod", "zone": "b"}))));
        assert!(LabelSelector::from_json(&json!({"matchExpressions": [{"key": "k", "operator": "Bogus"}]})).is_err());
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let f = FieldSelector::parse("metadata.name=a,spec.nodeName!=n2", &["spec.nodeName"]).unwrap();
        assert!(f.matches(&o));
        assert_eq!(f.exact_name(), Some("a"));
        assert!(!FieldSelector::parse("metadata.namespace=other", &[]).unwrap().matches(&o));
        assert!(FieldSelector::parse("spec.bogus=1", &["spec.nodeName"]).is_err());
        assert!(FieldSelector::parse("nonsense", &[]).is_err());
    }

    /// Forms kube-apiserver accepts (fields.ParseSelector, labels.Parse) that a real client
    /// sent: an empty field selector term is skipped, escaped values are unescaped, and
    /// label selectors take `>`/`<` integer comparisons. A trailing comma in a label
    /// selector stays an error, as there.
    #[test]
    fn kube_apiserver_forms() {
        let o = obj(json!({"gen": "5"}));
        for s in ["metadata.name=a,", ",metadata.name=a", "metadata.name=a,,metadata.namespace=ns"] {
            let f = FieldSelector::parse(s, &[]).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(f.matches(&o), "{s}");
            assert_eq!(f.exact_name(), Some("a"));
        }
        assert!(FieldSelector::parse("metadata.name=a, ", &[]).is_err(), "a blank term is not empty");
        let f = FieldSelector::parse(r"metadata.name=a\,b", &[]).unwrap();
        assert_eq!(f.reqs[0].1, "a,b");
        assert!(FieldSelector::parse(r"metadata.name=a\x", &[]).is_err());
        assert!(FieldSelector::parse("metadata.name=a=b", &[]).is_err());
        assert!(LabelSelector::parse("gen>4").unwrap().matches_object(&o));
        assert!(!LabelSelector::parse("gen>5").unwrap().matches_object(&o));
        assert!(LabelSelector::parse("gen<6").unwrap().matches_object(&o));
        assert!(!LabelSelector::parse("missing<6").unwrap().matches_object(&o));
        assert!(LabelSelector::parse("gen>x").is_err());
        assert!(LabelSelector::parse("gen!=5").unwrap().matches_object(&obj(json!({}))));
        assert!(LabelSelector::parse("app=web,").is_err());
    }
}
