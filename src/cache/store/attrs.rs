//! The selector attributes of a cached object read once into flat label and field pairs.
//!
//! A store keeps, beside each object's body, its selector attributes: compact JSON of the
//! object's shape holding `metadata.name`, `metadata.namespace`, `metadata.labels` and the
//! kind's field-selector paths (see [`super::Obj::selectable`]). Watchers and filtered LISTs
//! test label and field selectors on them. [`Attrs`] reads those bytes once into one text
//! buffer and two small tables, so a test is a few string comparisons and no JSON tree is
//! built (mirrors kube-apiserver's cacher, which computes an object's label set and field set
//! once per event and shares them with every watcher).

use super::scan::{str_value, Bad, Scan};
use crate::api::selector::{FieldSelector, LabelSelector};

/// A byte range of [`Attrs::text`]: `(start, end)`.
type Span = (u32, u32);

/// The labels and fields of one object, as selectors see them.
///
/// Shape: every string in one buffer; labels as `(key, value)` spans, later duplicates
/// replacing earlier ones (as a JSON object decodes); fields as `(dotted path, value)` spans,
/// e.g. `("spec.nodeName", "node-1")`, for each string, number or boolean reached through
/// objects other than `metadata.labels`. A number or boolean is held as the text
/// `serde_json::Value::to_string` gives it, which is what [`FieldSelector::matches`] compares;
/// `null`, arrays and objects are absent, which a field selector reads as `""`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    text: String,
    labels: Vec<(Span, Span)>,
    fields: Vec<(Span, Span)>,
}

impl Attrs {
    /// Reads attribute bytes (a JSON object). Errors: [`Bad`] when they are not one.
    pub fn parse(b: &[u8]) -> Result<Attrs, Bad> {
        let mut a = Attrs { text: String::with_capacity(b.len()), labels: Vec::new(), fields: Vec::new() };
        let mut s = Scan::new(b)?;
        let mut path = String::new();
        if s.peek() != Some(b'{') {
            return Err(Bad);
        }
        a.object(&mut s, &mut path)?;
        s.end()?;
        a.dedup_labels();
        Ok(a)
    }

    /// The members of the object at the cursor, their paths under `path`.
    fn object(&mut self, s: &mut Scan<'_>, path: &mut String) -> Result<(), Bad> {
        s.object(|s, k| {
            let key = str_value(s.bytes(), k)?;
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            let r = match s.peek() {
                Some(b'{') if path == "metadata.labels" => self.labels(s),
                Some(b'{') => self.object(s, path),
                Some(b'"') => {
                    let v = s.string()?;
                    let v = str_value(s.bytes(), v)?;
                    self.field(path, &v);
                    Ok(())
                }
                Some(b't' | b'f' | b'-' | b'0'..=b'9') => {
                    let at = s.pos;
                    s.value()?;
                    let raw = &s.bytes()[at..s.pos];
                    let v: serde_json::Value = serde_json::from_slice(raw).map_err(|_| Bad)?;
                    self.field(path, &v.to_string());
                    Ok(())
                }
                // null and arrays select as "" (absent)
                _ => s.value(),
            };
            path.truncate(len);
            r
        })
    }

    /// The labels object at the cursor; members whose value is not a string are skipped (a
    /// label selector reads them as absent).
    fn labels(&mut self, s: &mut Scan<'_>) -> Result<(), Bad> {
        s.object(|s, k| {
            if s.peek() != Some(b'"') {
                return s.value();
            }
            let key = str_value(s.bytes(), k)?;
            let v = s.string()?;
            let v = str_value(s.bytes(), v)?;
            let k = self.push(&key);
            let v = self.push(&v);
            self.labels.push((k, v));
            Ok(())
        })
    }

    fn field(&mut self, path: &str, v: &str) {
        let p = self.push(path);
        let v = self.push(v);
        self.fields.push((p, v));
    }

    fn push(&mut self, t: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.push_str(t);
        (start, self.text.len() as u32)
    }

    fn get(&self, (a, b): Span) -> &str {
        &self.text[a as usize..b as usize]
    }

    /// Keeps the last of labels that share a key.
    fn dedup_labels(&mut self) {
        if self.labels.len() < 2 {
            return;
        }
        let mut order: Vec<usize> = (0..self.labels.len()).collect();
        order.sort_by(|x, y| self.get(self.labels[*x].0).cmp(self.get(self.labels[*y].0)).then(x.cmp(y)));
        let dup: Vec<usize> = order.windows(2).filter(|w| self.get(self.labels[w[0]].0) == self.get(self.labels[w[1]].0)).map(|w| w[0]).collect();
        if dup.is_empty() {
            return;
        }
        let mut i = 0;
        self.labels.retain(|_| {
            i += 1;
            !dup.contains(&(i - 1))
        });
    }

    /// The value of label `key`, if the object has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| self.get(*k) == key).map(|(_, v)| self.get(*v))
    }

    /// The labels, in the order written.
    pub fn labels_iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.labels.iter().map(|(k, v)| (self.get(*k), self.get(*v)))
    }

    /// The value at a dotted field path (`metadata.name`, `spec.nodeName`), if it is a
    /// string, number or boolean.
    pub fn field_value(&self, path: &str) -> Option<&str> {
        self.fields.iter().rev().find(|(p, _)| self.get(*p) == path).map(|(_, v)| self.get(*v))
    }

    /// True when both selectors match (an empty selector matches everything).
    pub fn matches(&self, labels: &LabelSelector, fields: &FieldSelector) -> bool {
        labels.matches_with(|k| self.label(k)) && fields.matches_with(|p| self.field_value(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn both(v: &Value, label: &str, field: &str) -> (bool, bool) {
        let l = LabelSelector::parse(label).unwrap();
        let f = FieldSelector::parse(field, &["spec.nodeName", "status.phase", "spec.n", "spec.b", "status.podIP", "spec.o"]).unwrap();
        let a = Attrs::parse(serde_json::to_string(v).unwrap().as_bytes()).unwrap();
        (a.matches(&l, &f), l.matches_object(v) && f.matches(v))
    }

    #[test]
    fn selects_as_the_decoded_object_does() {
        let objs = [
            json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "fe", "app.kubernetes.io/name": "x\"y\\z\u{e9}"}}, "spec": {"nodeName": "n1", "n": 1.5e3, "b": true, "o": {"x": 1}}, "status": {"phase": "Running", "podIP": null}}),
            json!({"metadata": {"name": "b", "namespace": "ns"}, "spec": {"n": -0, "b": false, "o": [1]}, "status": {}}),
            json!({"metadata": {"name": "c", "labels": {"odd": 1, "app": "db"}}}),
        ];
        let labels = ["", "app=web", "app!=web", "app in (web,db)", "app notin (web)", "app", "!app", "odd", "tier=fe,app=web", "app.kubernetes.io/name=x", "missing!=x"];
        let fields = [
            "",
            "metadata.name=a",
            "metadata.namespace!=ns",
            "spec.nodeName=n1",
            "spec.nodeName=",
            "spec.n=1500.0",
            "spec.n=0",
            "spec.b=true",
            "spec.b=false",
            "status.podIP=",
            "spec.o=",
            "status.phase==Running",
        ];
        for o in &objs {
            for l in labels {
                for f in fields {
                    let (got, want) = both(o, l, f);
                    assert_eq!(got, want, "{o} {l:?} {f:?}");
                }
            }
        }
    }

    #[test]
    fn reads_escapes_duplicates_and_refuses_what_is_not_an_object() {
        let a = Attrs::parse(br#"{"metadata":{"na\u006de":"a\nb","labels":{"k":"1","j":"x","k":"2"}}}"#).unwrap();
        assert_eq!(a.field_value("metadata.name"), Some("a\nb"));
        assert_eq!(a.label("k"), Some("2"), "the last of duplicate keys, as decoding keeps");
        assert_eq!(a.labels_iter().collect::<Vec<_>>(), vec![("j", "x"), ("k", "2")]);
        for bad in [&b"[]"[..], b"{", b"{\"a\":}", b"{} x", b"\xff"] {
            assert!(Attrs::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(Attrs::parse(b" { } ").unwrap(), Attrs::default());
    }
}
