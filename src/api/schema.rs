//! Structural OpenAPI v3 schemas of CustomResourceDefinitions: pruning, defaulting and
//! validation of custom resources, and the structural checks of a CRD's schema (mirrors
//! apiextensions-apiserver's `pkg/apiserver/schema` and `pkg/apiserver/validation`); uses
//! serde_json, regex and the `cel` crate only.
//!
//! A schema is kept as the JSON the CRD carries (`spec.versions[].schema.openAPIV3Schema`).
//! `x-kubernetes-validations` rules are compiled and evaluated with the `cel` crate (the
//! cel-rust interpreter) with `self` bound to the value and, for transition rules, `oldSelf`
//! to the stored one; a rule the interpreter cannot compile or evaluate (a Kubernetes CEL
//! library function it lacks, a runtime type error) never passes silently: it becomes a
//! warning (`Warning` response header) naming the rule and the field.

use serde_json::{Map, Value};

use super::error::Cause;

/// Removes the fields a structural schema does not specify (mirrors
/// `structuralpruning.Prune` with `isResourceRoot`): at the root `apiVersion`, `kind` and
/// `metadata` are kept; `x-kubernetes-preserve-unknown-fields: true` keeps unknown fields of
/// that object; `additionalProperties` applies its schema to every key;
/// `x-kubernetes-embedded-resource` keeps an embedded object's `apiVersion`, `kind` and
/// `metadata`.
pub fn prune(obj: &mut Value, schema: &Value) {
    prune_at(obj, schema, true, "", &mut None);
}

/// The fields [`prune`] would remove from `obj`, as paths (`spec.junk`, `spec.items[0].x`),
/// in document order: what `fieldValidation=Strict` refuses and `Warn` reports (mirrors the
/// unknown-field detection of the CRD handler's decoder).
pub fn unknown_fields(obj: &Value, schema: &Value) -> Vec<String> {
    let mut copy = obj.clone();
    let mut found = Some(Vec::new());
    prune_at(&mut copy, schema, true, "", &mut found);
    found.unwrap_or_default()
}

fn preserves(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
}

fn prune_at(v: &mut Value, s: &Value, root: bool, path: &str, found: &mut Option<Vec<String>>) {
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            let keep_meta = root || s.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            let keep_unknown = preserves(s) || additional.and_then(Value::as_bool) == Some(true);
            m.retain(|k, child| {
                // an object's own apiVersion, kind and metadata are kept whole, whatever the
                // schema says of them (metadata is ObjectMeta, checked as such)
                if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    return true;
                }
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    prune_at(child, ps, false, &child_path(path, k), found);
                    return true;
                }
                if let Some(a) = additional.filter(|a| a.is_object()) {
                    prune_at(child, a, false, &child_path(path, k), found);
                    return true;
                }
                if !keep_unknown {
                    if let Some(f) = found.as_mut() {
                        f.push(child_path(path, k));
                    }
                }
                keep_unknown
            });
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_at(item, is, false, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

/// Fills the schema's `default`s of missing fields, depth first (mirrors
/// `structuraldefaulting.Default`): a field absent, or `null` where the schema is not
/// `nullable`, gets a copy of its default, which is then defaulted itself.
pub fn default(obj: &mut Value, schema: &Value) {
    match obj {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    let Some(d) = ps.get("default") else { continue };
                    let nullable = ps.get("nullable").and_then(Value::as_bool) == Some(true);
                    match m.get(k) {
                        None => {
                            m.insert(k.clone(), d.clone());
                        }
                        Some(Value::Null) if !nullable => {
                            m.insert(k.clone(), d.clone());
                        }
                        _ => {}
                    }
                }
                for (k, child) in m.iter_mut() {
                    if k == "metadata" {
                        continue;
                    }
                    if let Some(ps) = props.get(k) {
                        default(child, ps);
                    }
                }
            } else if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in m.values_mut() {
                    default(child, a);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for i in items {
                    default(i, is);
                }
            }
        }
        _ => {}
    }
}

/// What validating one custom resource found: 422 causes and warnings.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Refusals, in kube-apiserver's wording (`spec.replicas: Invalid value: …`).
    pub causes: Vec<Cause>,
    /// Rules that could not be checked (`x-kubernetes-validations` the interpreter cannot
    /// compile or evaluate).
    pub warnings: Vec<String>,
}

/// Validates `obj` against `schema` (mirrors `validation.ValidateCustomResource` and the CEL
/// validator): types, `required`, `enum`, bounds, lengths, `pattern`, item and property
/// counts, `x-kubernetes-validations`. `old` is the stored object on updates (for transition
/// rules with `oldSelf`). `metadata` is checked by the generic object validation instead.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Outcome {
    let mut out = Outcome::default();
    if let (Some(m), Some(props)) = (obj.as_object(), schema.get("properties").and_then(Value::as_object)) {
        check_required(m, schema, "", &mut out);
        for (k, v) in m {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(ps) = props.get(k) {
                validate_at(v, old.and_then(|o| o.get(k)), ps, k, &mut out);
            }
        }
        rules(obj, old, schema, "", &mut out);
    }
    out
}

fn child_path(base: &str, k: &str) -> String {
    if base.is_empty() {
        k.to_string()
    } else {
        format!("{base}.{k}")
    }
}

/// Go's `%#v`-like rendering of a value in `Invalid value: …` (strings quoted, numbers bare,
/// composite values by their type name).
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        Value::Array(_) => "\"array\"".into(),
        Value::Object(_) => "\"object\"".into(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(out: &mut Outcome, field: &str, value: &Value, detail: String) {
    out.causes.push(Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: {}: {detail}", shown(value)), field: field.to_string() });
}

fn check_required(m: &Map<String, Value>, s: &Value, path: &str, out: &mut Outcome) {
    for r in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !m.contains_key(r) {
            out.causes.push(Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: child_path(path, r) });
        }
    }
}

fn type_ok(v: &Value, ty: &str, s: &Value) -> bool {
    if s.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => v.to_string(),
    }
}

fn validate_at(v: &Value, old: Option<&Value>, s: &Value, path: &str, out: &mut Outcome) {
    if v.is_null() && s.get("nullable").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(ty) = s.get("type").and_then(Value::as_str) {
        if !type_ok(v, ty, s) {
            let actual = type_name(v);
            out.causes.push(Cause {
                reason: "FieldValueTypeInvalid".into(),
                message: format!("Invalid value: \"{actual}\": {path} in body must be of type {ty}: \"{actual}\""),
                field: path.to_string(),
            });
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            let supported = e.iter().map(shown).collect::<Vec<_>>().join(", ");
            out.causes.push(Cause { reason: "FieldValueNotSupported".into(), message: format!("Unsupported value: {}: supported values: {supported}", shown(v)), field: path.to_string() });
        }
    }
    if let Some(x) = v.as_f64() {
        let excl = |k: &str| s.get(k).and_then(Value::as_bool) == Some(true);
        if let Some(max) = s.get("maximum").filter(|m| m.is_number()) {
            let m = max.as_f64().unwrap_or(f64::MAX);
            if excl("exclusiveMaximum") && x >= m {
                invalid(out, path, v, format!("{path} in body should be less than {}", num(max)));
            } else if x > m {
                invalid(out, path, v, format!("{path} in body should be less than or equal to {}", num(max)));
            }
        }
        if let Some(min) = s.get("minimum").filter(|m| m.is_number()) {
            let m = min.as_f64().unwrap_or(f64::MIN);
            if excl("exclusiveMinimum") && x <= m {
                invalid(out, path, v, format!("{path} in body should be greater than {}", num(min)));
            } else if x < m {
                invalid(out, path, v, format!("{path} in body should be greater than or equal to {}", num(min)));
            }
        }
        if let Some(mo) = s.get("multipleOf").and_then(Value::as_f64).filter(|m| *m > 0.0) {
            if (x / mo).fract() != 0.0 {
                invalid(out, path, v, format!("{path} in body should be a multiple of {}", num(&s["multipleOf"])));
            }
        }
    }
    if let Some(st) = v.as_str() {
        let len = st.chars().count() as u64;
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            if len > max {
                let unit = if max == 1 { "byte" } else { "bytes" };
                out.causes.push(Cause { reason: "FieldValueTooLong".into(), message: format!("Too long: may not be more than {max} {unit}"), field: path.to_string() });
            }
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64) {
            if len < min {
                invalid(out, path, v, format!("{path} in body should be at least {min} chars long"));
            }
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            if let Ok(re) = regex::Regex::new(p) {
                if !re.is_match(st) {
                    invalid(out, path, v, format!("{path} in body should match '{p}'"));
                }
            }
        }
    }
    if let Some(items) = v.as_array() {
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64) {
            if items.len() as u64 > max {
                out.causes.push(Cause { reason: "FieldValueTooMany".into(), message: format!("Too many: {}: must have at most {max} items", items.len()), field: path.to_string() });
            }
        }
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (items.len() as u64) < min {
                invalid(out, path, v, format!("{path} in body should have at least {min} items"));
            }
        }
        if let Some(is) = s.get("items") {
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                // oldSelf of a list item is only correlated for map lists; other items have none
                let old_item = if s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") { old_items.and_then(|o| o.get(i)) } else { None };
                validate_at(item, old_item, is, &format!("{path}[{i}]"), out);
            }
        }
    }
    if let Some(m) = v.as_object() {
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64) {
            if m.len() as u64 > max {
                out.causes.push(Cause { reason: "FieldValueTooMany".into(), message: format!("Too many: {}: must have at most {max} items", m.len()), field: path.to_string() });
            }
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_u64) {
            if (m.len() as u64) < min {
                invalid(out, path, v, format!("{path} in body should have at least {min} properties"));
            }
        }
        check_required(m, s, path, out);
        let props = s.get("properties").and_then(Value::as_object);
        let additional = s.get("additionalProperties").filter(|a| a.is_object());
        for (k, child) in m {
            let cs = props.and_then(|p| p.get(k)).or(additional);
            if let Some(cs) = cs {
                validate_at(child, old.and_then(|o| o.get(k)), cs, &child_path(path, k), out);
            }
        }
    }
    rules(v, old, s, path, out);
}

/// Evaluates the `x-kubernetes-validations` of schema node `s` on `v` (mirrors the CEL
/// validator: a rule is `self`-relative; one naming `oldSelf` is a transition rule, checked
/// only on updates that had an old value; a false rule gives `Invalid value: "<type>":
/// <message or "failed rule: <rule>">`, reason from the rule's `reason`, default
/// FieldValueInvalid).
fn rules(v: &Value, old: Option<&Value>, s: &Value, path: &str, out: &mut Outcome) {
    let Some(rs) = s.get("x-kubernetes-validations").and_then(Value::as_array) else { return };
    for r in rs {
        let Some(rule) = r.get("rule").and_then(Value::as_str) else { continue };
        let transition = mentions_old_self(rule);
        if transition && old.is_none() {
            continue;
        }
        let shown_path = if path.is_empty() { "<root>" } else { path };
        match eval_rule(rule, v, old) {
            Ok(true) => {}
            Ok(false) => {
                let msg = r.get("message").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_string).unwrap_or_else(|| format!("failed rule: {rule}"));
                let field = match r.get("fieldPath").and_then(Value::as_str) {
                    Some(fp) if !fp.is_empty() => child_path(path, fp.trim_start_matches('.')),
                    _ => path.to_string(),
                };
                let reason = match r.get("reason").and_then(Value::as_str) {
                    Some("FieldValueRequired") => "FieldValueRequired",
                    Some("FieldValueDuplicate") => "FieldValueDuplicate",
                    Some("FieldValueForbidden") => "FieldValueForbidden",
                    _ => "FieldValueInvalid",
                };
                let message = match reason {
                    "FieldValueRequired" => format!("Required value: {msg}"),
                    "FieldValueDuplicate" => format!("Duplicate value: {}", shown_type(v)),
                    "FieldValueForbidden" => format!("Forbidden: {msg}"),
                    _ => format!("Invalid value: {}: {msg}", shown_type(v)),
                };
                out.causes.push(Cause { reason: reason.into(), message, field });
            }
            Err(e) => out.warnings.push(format!("{shown_path}: x-kubernetes-validations rule {rule:?} was not checked: {e}")),
        }
    }
}

fn shown_type(v: &Value) -> String {
    format!("\"{}\"", type_name(v))
}

fn mentions_old_self(rule: &str) -> bool {
    rule.match_indices("oldSelf").any(|(i, _)| {
        let before = rule[..i].chars().next_back();
        let after = rule[i + 7..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Compiles `rule` (checked when a CRD is written: a rule that does not parse refuses the
/// CRD, as kube-apiserver's compile check does). Returns the parser's message.
pub fn compile_rule(rule: &str) -> Result<(), String> {
    cel::Program::compile(rule).map(|_| ()).map_err(|e| e.to_string())
}

/// Evaluates one rule: `Ok(bool)` when the interpreter could, `Err(reason)` otherwise.
fn eval_rule(rule: &str, v: &Value, old: Option<&Value>) -> Result<bool, String> {
    let program = cel::Program::compile(rule).map_err(|e| format!("cannot compile: {e}"))?;
    let mut ctx = cel::Context::default();
    ctx.add_variable_from_value("self", cel::to_value(v).map_err(|e| e.to_string())?);
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", cel::to_value(o).map_err(|e| e.to_string())?);
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("the rule evaluated to {other:?}, not a bool")),
        Err(e) => Err(format!("cannot evaluate: {e}")),
    }
}

/// Structural-schema problems of a CRD version's `openAPIV3Schema` at `field` (mirrors the
/// structural checks of `apiextensions/validation`: every node specifies a `type` unless it
/// is `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`; `properties`
/// and `additionalProperties` are exclusive; the root is an object; `x-kubernetes-validations`
/// rules compile). Returns 422 causes.
pub fn structural_problems(schema: &Value, field: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    if !schema.is_object() {
        out.push(Cause { reason: "FieldValueRequired".into(), message: "Required value: schemas are required".into(), field: field.to_string() });
        return out;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        if t != "object" {
            out.push(Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: \"{t}\": must be object at the root"), field: format!("{field}.type") });
        }
    }
    check_node(schema, field, true, &mut out);
    out
}

fn check_node(s: &Value, field: &str, root: bool, out: &mut Vec<Cause>) {
    let Some(m) = s.as_object() else { return };
    let int_or_string = m.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if !m.contains_key("type") && !int_or_string && !preserves(s) && !(root && m.is_empty()) {
        out.push(Cause { reason: "FieldValueRequired".into(), message: "Required value: must not be empty for specified object fields".into(), field: format!("{field}.type") });
    }
    if m.contains_key("properties") && m.get("additionalProperties").is_some_and(|a| a.is_object() || a == &Value::Bool(true)) {
        out.push(Cause { reason: "FieldValueForbidden".into(), message: "Forbidden: additionalProperties and properties are mutual exclusive".into(), field: format!("{field}.additionalProperties") });
    }
    for (i, r) in m.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        match r.get("rule").and_then(Value::as_str) {
            None | Some("") => out.push(Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: format!("{field}.x-kubernetes-validations[{i}].rule") }),
            Some(rule) => {
                if let Err(e) = compile_rule(rule) {
                    out.push(Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: {}: compilation failed: {e}", serde_json::to_string(rule).unwrap_or_default()),
                        field: format!("{field}.x-kubernetes-validations[{i}].rule"),
                    });
                }
            }
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            check_node(p, &format!("{field}.properties[{k}]"), false, out);
        }
    }
    if let Some(a) = m.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(a, &format!("{field}.additionalProperties"), false, out);
    }
    if let Some(i) = m.get("items") {
        check_node(i, &format!("{field}.items"), false, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shirt_schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["color"], "properties": {
                "color": {"type": "string", "enum": ["black", "white"]},
                "size": {"type": "string", "default": "M", "maxLength": 3},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }, "x-kubernetes-validations": [{"rule": "self.size != 'XL' || self.color == 'black'", "message": "XL comes in black"}]},
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
        }})
    }

    #[test]
    fn prunes_unknown_keeps_meta_and_preserved() {
        let mut o = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "junk": 1,
            "spec": {"color": "black", "extra": true, "free": {"any": {"thing": 1}}}});
        prune(&mut o, &shirt_schema());
        assert_eq!(o, json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {"color": "black", "free": {"any": {"thing": 1}}}}));
        // a schema that describes metadata as a bare object does not prune it
        let mut s = shirt_schema();
        s["properties"]["metadata"] = json!({"type": "object"});
        let mut o = json!({"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"color": "black"}});
        prune(&mut o, &s);
        assert_eq!(o["metadata"], json!({"name": "x", "labels": {"a": "b"}}));
        let o = json!({"metadata": {}, "junk": 1, "spec": {"color": "black", "extra": true}});
        assert_eq!(unknown_fields(&o, &shirt_schema()), vec!["junk", "spec.extra"]);
    }

    #[test]
    fn defaults_missing_fields() {
        let mut o = json!({"spec": {"color": "white"}});
        default(&mut o, &shirt_schema());
        assert_eq!(o["spec"]["size"], "M");
    }

    #[test]
    fn validation_words_causes_as_kube_apiserver() {
        let o = json!({"metadata": {"name": "x"}, "spec": {"replicas": "two", "size": "XXXL", "color": "red"}});
        let out = validate(&o, None, &shirt_schema());
        let msgs: Vec<String> = out.causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert!(msgs.contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"spec.color: Unsupported value: \"red\": supported values: \"black\", \"white\"".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"spec.size: Too long: may not be more than 3 bytes".to_string()), "{msgs:?}");
        let out = validate(&json!({"spec": {"replicas": 20}}), None, &shirt_schema());
        let msgs: Vec<String> = out.causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert!(msgs.contains(&"spec.color: Required value".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10".to_string()), "{msgs:?}");
    }

    #[test]
    fn cel_rules_refuse_and_unknown_functions_warn() {
        let out = validate(&json!({"spec": {"color": "white", "size": "XL"}}), None, &shirt_schema());
        assert_eq!(out.causes.len(), 1, "{:?}", out.causes);
        assert_eq!(out.causes[0].message, "Invalid value: \"object\": XL comes in black");
        assert_eq!(out.causes[0].field, "spec");
        assert!(validate(&json!({"spec": {"color": "black", "size": "XL"}}), None, &shirt_schema()).causes.is_empty());
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.name.notAKubernetesFunction()"}], "properties": {"name": {"type": "string"}}}}});
        let out = validate(&json!({"spec": {"name": "a"}}), None, &s);
        assert!(out.causes.is_empty());
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        // transition rules only on updates
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"v": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]}}}}});
        assert!(validate(&json!({"spec": {"v": "a"}}), None, &s).causes.is_empty());
        assert_eq!(validate(&json!({"spec": {"v": "b"}}), Some(&json!({"spec": {"v": "a"}})), &s).causes.len(), 1);
    }

    #[test]
    fn structural_checks() {
        assert!(structural_problems(&shirt_schema(), "spec.versions[0].schema.openAPIV3Schema").is_empty());
        let bad = json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}});
        let p = structural_problems(&bad, "s");
        assert_eq!(p[0].field, "s.properties[spec].type");
        let bad_rule = json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a =="}]});
        assert_eq!(structural_problems(&bad_rule, "s").len(), 1);
    }
}
