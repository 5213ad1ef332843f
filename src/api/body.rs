//! Request body decoding (JSON, YAML, protobuf) into a JSON value, noting duplicate keys as kube-apiserver's strict decoders do.
//!
//! JSON and YAML are read through one serde visitor that builds the [`Value`] and records
//! every key that repeats within one object. The value keeps the last occurrence of a
//! repeated key (as Go's `encoding/json` and `yaml.v2` do). What the caller does with the
//! duplicates follows `fieldValidation` (see the handler): kube-apiserver refuses them under
//! `Strict` and warns about them otherwise.
//!
//! Depth is bounded by the parsers themselves (128 levels for both serde_json and
//! serde_yaml), and YAML alias expansion by serde_yaml's repetition limit, so a hostile body
//! is refused without deep recursion or unbounded work.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::error::{ApiError, ApiResult};
pub use crate::config::yaml::{check_yaml_nesting, MAX_YAML_FLOW_DEPTH};

/// At most this many repeated YAML keys are given a line number (each costs one more parse
/// of the body); the rest are reported by path.
const MAX_YAML_LINE_PROBES: usize = 8;

/// A key that occurs more than once in one object of a request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// Field path as kube-apiserver prints it: keys joined by `.`, list indexes as `[i]`
    /// (e.g. `spec.template.spec.containers[0].image`).
    pub path: String,
    /// The repeated key itself.
    pub key: String,
    /// 1-based line of the repeated occurrence (YAML bodies only, when known).
    pub line: Option<usize>,
}

impl Duplicate {
    /// The text kube-apiserver uses for this duplicate: `duplicate field "<path>"` for JSON,
    /// `line <n>: key "<key>" already set in map` for YAML (yaml.v2's wording).
    pub fn message(&self) -> String {
        match self.line {
            Some(n) => format!("line {n}: key {} already set in map", quote(&self.key)),
            None => format!("duplicate field {}", quote(&self.path)),
        }
    }
}

/// Go's `%q`-like quoting of a key (JSON string syntax).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// A decoded body and the duplicate keys found in it.
#[derive(Debug)]
pub struct Decoded {
    /// The document (the last occurrence of a repeated key wins).
    pub value: Value,
    /// Repeated keys in document order. JSON: one entry per repeated key of an object.
    /// YAML: one entry per repeated occurrence (yaml.v2 reports each).
    pub duplicates: Vec<Duplicate>,
    /// Whether the body was YAML (duplicates carry lines and are reported as yaml.v2 does).
    pub yaml: bool,
}

/// Decodes a request body as JSON, YAML or Kubernetes protobuf according to its media type
/// `ct` (parameters already stripped). With `find_duplicates`, repeated keys are collected
/// (YAML ones with their line, which costs a re-parse per repeated key, at most
/// [`MAX_YAML_LINE_PROBES`]). Errors: 400 for malformed input (including nesting beyond
/// 128 levels and YAML alias expansion beyond serde_yaml's limit), 415 for an unsupported
/// media type.
pub fn decode(ct: &str, body: &[u8], find_duplicates: bool) -> ApiResult<Decoded> {
    match ct {
        "" | "application/json" | "application/merge-patch+json" | "application/strategic-merge-patch+json" | "application/json-patch+json" | "*/*" => {
            let (value, duplicates) = decode_json(body).map_err(|e| ApiError::BadRequest(format!("the body of the request was in an unknown format: {e}")))?;
            let duplicates = if find_duplicates { duplicates } else { Vec::new() };
            Ok(Decoded { value, duplicates, yaml: false })
        }
        "application/yaml" | "application/apply-patch+yaml" | "application/x-yaml" | "text/yaml" => {
            let s = std::str::from_utf8(body).map_err(|_| ApiError::BadRequest("body is not UTF-8".into()))?;
            check_yaml_nesting(s).map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
            let (value, mut duplicates) = decode_yaml(s, None).map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}")))?;
            if !find_duplicates {
                duplicates.clear();
            }
            for (i, d) in duplicates.iter_mut().enumerate().take(MAX_YAML_LINE_PROBES) {
                d.line = yaml_duplicate_line(s, i);
            }
            Ok(Decoded { value, duplicates, yaml: true })
        }
        "application/vnd.kubernetes.protobuf" => {
            let value = super::protobuf::decode_k8s_protobuf(body).map_err(|e| {
                if e.is_unsupported() {
                    ApiError::UnsupportedMediaType(e.to_string())
                } else {
                    ApiError::BadRequest(format!("the body of the request was in an unknown format: {e}"))
                }
            })?;
            Ok(Decoded { value, duplicates: Vec::new(), yaml: false })
        }
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {other})"
        ))),
    }
}

/// Decodes JSON text into a value and its repeated keys (one entry per repeated key of an
/// object, in document order, as sigs.k8s.io/json reports them).
pub fn decode_json(body: &[u8]) -> Result<(Value, Vec<Duplicate>), serde_json::Error> {
    let st = RefCell::new(State::default());
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = ValueSeed { st: &st }.deserialize(&mut de)?;
    de.end()?;
    let mut dups = st.into_inner().dups;
    let mut seen = std::collections::HashSet::new();
    dups.retain(|d| seen.insert(d.path.clone()));
    Ok((value, dups))
}

/// Decodes one YAML document into a value and every repeated occurrence of a key (lines
/// unset). With `probe = Some(i)`, fails at the `i`-th repeated occurrence instead (used to
/// learn its line from serde_yaml's error position).
fn decode_yaml(s: &str, probe: Option<usize>) -> Result<(Value, Vec<Duplicate>), serde_yaml::Error> {
    let st = RefCell::new(State { probe, ..State::default() });
    let value = ValueSeed { st: &st }.deserialize(serde_yaml::Deserializer::from_str(s))?;
    Ok((value, st.into_inner().dups))
}

/// The 1-based line of the `i`-th repeated key occurrence of YAML text `s`.
fn yaml_duplicate_line(s: &str, i: usize) -> Option<usize> {
    match decode_yaml(s, Some(i)) {
        Err(e) if e.to_string().contains(PROBE_MARK) => e.location().map(|l| l.line()),
        _ => None,
    }
}

const PROBE_MARK: &str = "repeated key probe";

#[derive(Default)]
struct State {
    /// Path from the root to the value being read.
    segs: Vec<Seg>,
    dups: Vec<Duplicate>,
    probe: Option<usize>,
}

enum Seg {
    Key(String),
    Index(usize),
}

impl State {
    fn path_with(&self, key: &str) -> String {
        let mut out = String::new();
        for s in &self.segs {
            match s {
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(key);
        out
    }
}

#[derive(Clone, Copy)]
struct ValueSeed<'s> {
    st: &'s RefCell<State>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.st.borrow_mut().segs.push(Seg::Index(out.len()));
            let next = seq.next_element_seed(self);
            self.st.borrow_mut().segs.pop();
            match next? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed { st: self.st, seen: &out })? {
            self.st.borrow_mut().segs.push(Seg::Key(key.clone()));
            let value = map.next_value_seed(self);
            self.st.borrow_mut().segs.pop();
            out.insert(key, value?);
        }
        Ok(Value::Object(out))
    }
}

/// Reads an object key and records it when `seen` already holds it. Non-string YAML keys
/// (numbers, booleans) are read as their text, as YAML-to-JSON conversion does.
struct KeySeed<'s> {
    st: &'s RefCell<State>,
    seen: &'s Map<String, Value>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        if self.seen.contains_key(v) {
            let mut st = self.st.borrow_mut();
            if st.probe == Some(st.dups.len()) {
                // serde_yaml attaches the position of this key to the error
                return Err(E::custom(PROBE_MARK));
            }
            let path = st.path_with(v);
            st.dups.push(Duplicate { path, key: v.to_string(), line: None });
        }
        Ok(v.to_string())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        self.visit_str(&v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_duplicates_are_reported_once_per_key_with_kube_paths() {
        let body = br#"{"a":1,"a":2,"a":3,"c":{"c":"","c":"x"},"e":[{"g":1,"g":2}],"d":{"k":"v"}}"#;
        let (v, dups) = decode_json(body).unwrap();
        assert_eq!(v, json!({"a": 3, "c": {"c": "x"}, "e": [{"g": 2}], "d": {"k": "v"}}));
        let msgs: Vec<String> = dups.iter().map(Duplicate::message).collect();
        assert_eq!(msgs, ["duplicate field \"a\"", "duplicate field \"c.c\"", "duplicate field \"e[0].g\""]);
    }

    #[test]
    fn json_decoding_matches_serde_json() {
        for text in [r#"{"x":[1,-2,3.5,"s",null,true,{"y":{}}]}"#, "[]", "\"s\"", "18446744073709551615", "-1e400"] {
            let ours = decode_json(text.as_bytes()).map(|(v, _)| v).map_err(|e| e.to_string());
            let theirs = serde_json::from_str::<Value>(text).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{text}");
        }
        assert!(decode_json(b"{} x").is_err(), "trailing characters");
    }

    #[test]
    fn yaml_nesting_check_follows_flow_collections_only() {
        let deep = |n: usize| format!("a: {}1{}\n", "[".repeat(n), "]".repeat(n));
        assert!(check_yaml_nesting(&deep(MAX_YAML_FLOW_DEPTH)).is_ok());
        assert!(check_yaml_nesting(&deep(MAX_YAML_FLOW_DEPTH + 1)).is_err());
        assert!(check_yaml_nesting(&format!("- !t &a {}", "{a: ".repeat(300))).is_err());
        // brackets in plain scalars, quoted scalars, comments and block scalars are text
        let many = "[".repeat(5000);
        for ok in [
            format!("a: x{many}\n"),
            format!("a: '{many}'\n"),
            format!("a: \"{many}\"\n"),
            format!("# {many}\na: 1\n"),
            format!("a: |\n  if {many}\n"),
            format!("a: [\"{many}\", '{many}', b] # {many}\n"),
            "a: [[1, 2], {b: [c]}]\nd: {e: f}\n".to_string(),
        ] {
            assert!(check_yaml_nesting(&ok).is_ok(), "{ok:.60}");
        }
        // hiding deep nesting in a would-be string that spans lines is caught
        let hiding = format!("a: plain\n  [ '\nb: {many}\nc: '\n");
        assert!(check_yaml_nesting(&hiding).is_err());
    }

    #[test]
    fn yaml_duplicates_carry_the_line_of_each_repetition() {
        let text = "apiVersion: v1\nmetadata:\n  name: a\n  name: b\ndata:\n  k: v\n  k: w\n  k: z\n";
        let d = decode("application/yaml", text.as_bytes(), true).unwrap();
        assert_eq!(d.value, json!({"apiVersion": "v1", "metadata": {"name": "b"}, "data": {"k": "z"}}));
        let msgs: Vec<String> = d.duplicates.iter().map(Duplicate::message).collect();
        assert_eq!(msgs, ["line 4: key \"name\" already set in map", "line 7: key \"k\" already set in map", "line 8: key \"k\" already set in map"]);
        assert!(decode("application/yaml", text.as_bytes(), false).unwrap().duplicates.is_empty());
    }
}
