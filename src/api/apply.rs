//! Server-side apply and managed-fields tracking (mirrors kube-apiserver's fieldmanager over structured-merge-diff).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::api::error::{ApiError, Cause};
use crate::api::patch::{json_equal, ListKey, Shape, Ty};

/// One field owned by another manager that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldConflict {
    /// The other manager's name, e.g. `kubectl-client-side-apply`.
    pub manager: String,
    /// Its operation: `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion its entry records.
    pub api_version: String,
    /// Its subresource (`""` for the main resource).
    pub subresource: String,
    /// The field as structured-merge-diff prints paths:
    /// `.spec.template.spec.containers[name="web"].image`.
    pub field: String,
}

impl FieldConflict {
    /// The manager as kube-apiserver names it in conflict messages: `"kubectl"` for an
    /// applier, `"kubectl-edit" using apps/v1` for an updater.
    pub fn manager_description(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// A server-side apply that was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// The applied configuration changes fields other managers own and `force` was not
    /// set (HTTP 409). `message` is kube-apiserver's:
    /// `Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas`.
    #[error("{message}")]
    Conflict {
        /// The full message.
        message: String,
        /// Every conflicting field, grouped by manager.
        conflicts: Vec<FieldConflict>,
    },
    /// The applied configuration is malformed (HTTP 400): not an object, wrong
    /// apiVersion/kind, `metadata.managedFields` set, an associative-list element without
    /// its key or with a duplicate key.
    #[error("{0}")]
    BadRequest(String),
}

impl ApplyError {
    /// HTTP status code: 409 or 400.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflict { .. } => 409,
            ApplyError::BadRequest(_) => 400,
        }
    }

    /// The `Status.details.causes` kube-apiserver sends with a conflict: one
    /// `{reason: FieldManagerConflict, message: "conflict with …", field: ".spec.replicas"}`
    /// per field. Empty for other errors.
    pub fn causes(&self) -> Vec<Cause> {
        match self {
            ApplyError::Conflict { conflicts, .. } => {
                conflicts.iter().map(|c| Cause { reason: "FieldManagerConflict".into(), message: format!("conflict with {}", c.manager_description()), field: c.field.clone() }).collect()
            }
            ApplyError::BadRequest(_) => Vec::new(),
        }
    }
}

impl From<ApplyError> for ApiError {
    fn from(e: ApplyError) -> Self {
        let causes = e.causes();
        match e {
            ApplyError::Conflict { message, .. } => ApiError::ConflictMessage { message, causes },
            ApplyError::BadRequest(m) => ApiError::BadRequest(m),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Field sets

/// A set of field paths as a tree keyed by serialized path elements (`f:name`,
/// `k:{"name":"web"}`, `v:"x"`, `i:0`). Invariant: no child is empty.
#[derive(Clone, Debug, Default, PartialEq)]
struct FieldSet {
    /// The path leading to this node is itself in the set.
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn leaf() -> Self {
        FieldSet { member: true, children: BTreeMap::new() }
    }

    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    fn insert_child(&mut self, pe: String, child: FieldSet) {
        if !child.is_empty() {
            self.children.entry(pe).or_default().union_with(&child);
        }
    }

    fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, c) in &other.children {
            self.children.entry(k.clone()).or_default().union_with(c);
        }
    }

    /// Paths in `self` that are not in `other`.
    fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && !other.member, children: BTreeMap::new() };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            out.insert_child(k.clone(), d);
        }
        out
    }

    /// Paths in both.
    fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && other.member, children: BTreeMap::new() };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                out.insert_child(k.clone(), c.intersection(o));
            }
        }
        out
    }

    /// Parses a `fieldsV1` object (the root is never a member itself).
    fn from_fields_v1(v: &Value) -> Option<FieldSet> {
        let mut fs = FieldSet::node_from_json(v)?;
        fs.member = false;
        Some(fs)
    }

    fn node_from_json(v: &Value) -> Option<FieldSet> {
        let m = v.as_object()?;
        let mut fs = FieldSet { member: m.is_empty(), children: BTreeMap::new() };
        for (k, c) in m {
            if k == "." {
                fs.member = true;
            } else if ["f:", "k:", "v:", "i:"].iter().any(|p| k.starts_with(p)) {
                fs.insert_child(k.clone(), FieldSet::node_from_json(c)?);
            } else {
                return None;
            }
        }
        Some(fs)
    }

    /// Serializes as `fieldsV1`: `{}` for a leaf, `"."` first for a member with children.
    fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            m.insert(k.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Member paths, printed like structured-merge-diff (`.spec.containers[name="web"].image`).
    fn paths(&self, prefix: &str, out: &mut Vec<String>) {
        if self.member {
            out.push(prefix.to_string());
        }
        for (k, c) in &self.children {
            c.paths(&format!("{prefix}{}", print_path_element(k)), out);
        }
    }
}

fn print_path_element(pe: &str) -> String {
    if let Some(f) = pe.strip_prefix("f:") {
        format!(".{f}")
    } else if let Some(k) = pe.strip_prefix("k:") {
        match serde_json::from_str::<Map<String, Value>>(k) {
            Ok(m) => {
                format!("[{}]", m.iter().map(|(k, v)| format!("{k}={}", compact(v))).collect::<Vec<_>>().join(","))
            }
            Err(_) => format!("[{k}]"),
        }
    } else if let Some(v) = pe.strip_prefix("v:") {
        format!("[={v}]")
    } else if let Some(i) = pe.strip_prefix("i:") {
        format!("[{i}]")
    } else {
        pe.to_string()
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Lists: identity of elements

#[derive(Clone, Copy)]
enum Items {
    Atomic,
    Keyed(&'static [ListKey]),
    Set,
}

fn items(shape: Shape) -> Items {
    match shape {
        Shape::Keyed { keys, .. } => Items::Keyed(keys),
        Shape::Set => Items::Set,
        Shape::Plain | Shape::AtomicMap => Items::Atomic,
    }
}

/// `k:{"containerPort":80,"protocol":"TCP"}` for an associative-list element (key fields
/// sorted, defaults filled in); `None` when the element is not an object or lacks a key.
fn item_key(elem: &Value, keys: &[ListKey]) -> Option<String> {
    let m = elem.as_object()?;
    let mut sorted: Vec<&ListKey> = keys.iter().collect();
    sorted.sort_by_key(|k| k.name);
    let mut out = Map::new();
    for k in sorted {
        let v = match m.get(k.name) {
            Some(v) if !v.is_null() => v.clone(),
            _ => Value::String(k.default?.to_string()),
        };
        out.insert(k.name.to_string(), v);
    }
    Some(format!("k:{}", compact(&Value::Object(out))))
}

fn value_key(elem: &Value) -> String {
    format!("v:{}", compact(elem))
}

/// Path-element keys of all elements, or `None` when the list has to be treated as
/// atomic (atomic list, an element without key, duplicate keys).
fn list_keys(list: &[Value], mode: Items) -> Option<Vec<String>> {
    let keys: Vec<String> = match mode {
        Items::Atomic => return None,
        Items::Keyed(keys) => list.iter().map(|e| item_key(e, keys)).collect::<Option<_>>()?,
        Items::Set => list.iter().map(value_key).collect(),
    };
    let unique: HashSet<&String> = keys.iter().collect();
    (unique.len() == keys.len()).then_some(keys)
}

// ---------------------------------------------------------------------------------------
// Walkers: field set of a value, comparison, merge, prune

fn is_atomic_map(shape: Shape) -> bool {
    shape == Shape::AtomicMap
}

/// Field set of an object's fields (the object itself is not a member).
fn fs_map(m: &Map<String, Value>, ty: Ty) -> FieldSet {
    let mut fs = FieldSet::default();
    for (k, v) in m {
        let (cty, cshape) = ty.child(k);
        fs.insert_child(format!("f:{k}"), fs_value(v, cty, cshape));
    }
    fs
}

/// Field set of a value as seen from its own node (structured-merge-diff `ToFieldSet`):
/// scalars, nulls, empty maps, atomic lists and atomic maps are leaves; maps own their
/// fields; associative and set lists own their elements.
fn fs_value(v: &Value, ty: Ty, shape: Shape) -> FieldSet {
    match v {
        Value::Object(m) if !is_atomic_map(shape) && !m.is_empty() => fs_map(m, ty),
        Value::Array(a) => match list_keys(a, items(shape)) {
            Some(keys) => {
                let mut fs = FieldSet::default();
                for (k, e) in keys.into_iter().zip(a) {
                    let mut c = match items(shape) {
                        Items::Keyed(_) => fs_value(e, ty, Shape::Plain),
                        _ => FieldSet::default(),
                    };
                    c.member = true;
                    fs.insert_child(k, c);
                }
                fs
            }
            None => FieldSet::leaf(),
        },
        _ => FieldSet::leaf(),
    }
}

fn fs_root(v: &Value, ty: Ty) -> FieldSet {
    match v {
        Value::Object(m) => fs_map(m, ty),
        _ => FieldSet::default(),
    }
}

/// What changed between two versions of an object (structured-merge-diff `Compare`).
#[derive(Debug, Default)]
struct Diff {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Diff {
    fn attach(&mut self, pe: &str, sub: Diff) {
        self.added.insert_child(pe.to_string(), sub.added);
        self.modified.insert_child(pe.to_string(), sub.modified);
        self.removed.insert_child(pe.to_string(), sub.removed);
    }
}

fn compare(old: &Value, new: &Value, ty: Ty) -> Diff {
    let mut d = Diff::default();
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => cmp_maps(o, n, ty, &mut d),
        _ => cmp_value(old, new, ty, Shape::Plain, &mut d),
    }
    d
}

fn cmp_maps(o: &Map<String, Value>, n: &Map<String, Value>, ty: Ty, d: &mut Diff) {
    for (k, ov) in o {
        let pe = format!("f:{k}");
        let (cty, cshape) = ty.child(k);
        match n.get(k) {
            None => d.removed.insert_child(pe, fs_value(ov, cty, cshape)),
            Some(nv) => {
                let mut sub = Diff::default();
                cmp_value(ov, nv, cty, cshape, &mut sub);
                d.attach(&pe, sub);
            }
        }
    }
    for (k, nv) in n {
        if !o.contains_key(k) {
            let (cty, cshape) = ty.child(k);
            d.added.insert_child(format!("f:{k}"), fs_value(nv, cty, cshape));
        }
    }
}

fn cmp_value(old: &Value, new: &Value, ty: Ty, shape: Shape, d: &mut Diff) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !is_atomic_map(shape) && !o.is_empty() && !n.is_empty() => {
            return cmp_maps(o, n, ty, d);
        }
        (Value::Array(o), Value::Array(n)) => {
            let mode = items(shape);
            if let (Some(ok), Some(nk)) = (list_keys(o, mode), list_keys(n, mode)) {
                let new_pos: HashMap<&str, usize> = nk.iter().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
                let old_keys: HashSet<&str> = ok.iter().map(String::as_str).collect();
                for (k, e) in ok.iter().zip(o) {
                    match new_pos.get(k.as_str()) {
                        None => d.removed.insert_child(k.clone(), item_fs(e, ty, mode)),
                        Some(&j) => {
                            if let Items::Keyed(_) = mode {
                                let mut sub = Diff::default();
                                cmp_value(e, &n[j], ty, Shape::Plain, &mut sub);
                                d.attach(k, sub);
                            }
                        }
                    }
                }
                for (k, e) in nk.iter().zip(n) {
                    if !old_keys.contains(k.as_str()) {
                        d.added.insert_child(k.clone(), item_fs(e, ty, mode));
                    }
                }
                return;
            }
        }
        _ => {}
    }
    if json_equal(old, new) {
        return;
    }
    let fo = fs_value(old, ty, shape);
    let fnew = fs_value(new, ty, shape);
    if fo == FieldSet::leaf() && fnew == FieldSet::leaf() {
        d.modified.member = true;
    } else {
        d.removed.union_with(&fo.difference(&fnew));
        d.added.union_with(&fnew.difference(&fo));
        d.modified.union_with(&fo.intersection(&fnew));
    }
}

fn item_fs(e: &Value, ty: Ty, mode: Items) -> FieldSet {
    let mut c = match mode {
        Items::Keyed(_) => fs_value(e, ty, Shape::Plain),
        _ => FieldSet::default(),
    };
    c.member = true;
    c
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), strip_nulls(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

fn new_value(cfg: &Value, keep_nulls: bool) -> Value {
    if keep_nulls {
        cfg.clone()
    } else {
        strip_nulls(cfg)
    }
}

/// Merges an applied configuration into a live value (structured-merge-diff `Merge`).
/// With `keep_nulls` a `null` in the configuration is stored as a value (used to detect
/// conflicts: setting a field to null changes it); without, it removes the field.
fn merge(live: &Value, cfg: &Value, ty: Ty, shape: Shape, keep_nulls: bool) -> Value {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) if !is_atomic_map(shape) => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() && !keep_nulls {
                    out.shift_remove(k);
                    continue;
                }
                let (cty, cshape) = ty.child(k);
                let nv = match out.get(k) {
                    Some(lv) => merge(lv, cv, cty, cshape, keep_nulls),
                    None => new_value(cv, keep_nulls),
                };
                out.insert(k.clone(), nv);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => {
            let mode = items(shape);
            match (list_keys(l, mode), list_keys(c, mode)) {
                (Some(lk), Some(ck)) => Value::Array(merge_lists(l, &lk, c, &ck, ty, mode, keep_nulls)),
                _ => new_value(cfg, keep_nulls),
            }
        }
        _ => new_value(cfg, keep_nulls),
    }
}

/// Merges two keyed lists. Configuration elements keep their relative order; live-only
/// elements stay where they were relative to the shared elements they precede.
fn merge_lists(l: &[Value], lk: &[String], c: &[Value], ck: &[String], ty: Ty, mode: Items, keep_nulls: bool) -> Vec<Value> {
    let l_pos: HashMap<&str, usize> = lk.iter().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
    let in_cfg: HashSet<&str> = ck.iter().map(String::as_str).collect();
    let shared: Vec<&str> = ck.iter().map(String::as_str).filter(|k| l_pos.contains_key(k)).collect();
    let mut next_shared = 0usize;
    let mut emitted: HashSet<&str> = HashSet::new();
    let item = |li: Option<usize>, ri: usize| -> Value {
        match (mode, li) {
            (Items::Keyed(_), Some(i)) => merge(&l[i], &c[ri], ty, Shape::Plain, keep_nulls),
            _ => new_value(&c[ri], keep_nulls),
        }
    };
    let mut out = Vec::with_capacity(l.len().max(c.len()));
    let (mut li, mut ri) = (0usize, 0usize);
    while li < l.len() || ri < c.len() {
        if li < l.len() && ri < c.len() {
            if lk[li] == ck[ri] {
                out.push(item(Some(li), ri));
                emitted.insert(ck[ri].as_str());
                if shared.get(next_shared) == Some(&ck[ri].as_str()) {
                    next_shared += 1;
                }
                li += 1;
                ri += 1;
                continue;
            }
            // A shared element that the configuration wants later: emit it then.
            if in_cfg.contains(lk[li].as_str()) && shared.get(next_shared) != Some(&lk[li].as_str()) {
                li += 1;
                continue;
            }
        }
        if li < l.len() {
            let k = lk[li].as_str();
            if !in_cfg.contains(k) {
                out.push(l[li].clone());
                li += 1;
                continue;
            }
            if emitted.contains(k) || ri >= c.len() {
                li += 1;
                continue;
            }
        }
        if ri < c.len() {
            let k = ck[ri].as_str();
            out.push(item(l_pos.get(k).copied(), ri));
            emitted.insert(k);
            if shared.get(next_shared) == Some(&k) {
                next_shared += 1;
            }
            ri += 1;
        }
    }
    out
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Removes the paths of `remove` from `v`, but nothing `keep` holds at or below a path.
/// Maps and lists emptied by the removal are removed too (built-in types omit them).
/// `protect` names fields that must stay (the key fields of a kept list element).
fn prune(v: &mut Value, remove: &FieldSet, keep: Option<&FieldSet>, ty: Ty, shape: Shape, protect: &[&str]) {
    match v {
        Value::Object(m) if !is_atomic_map(shape) => {
            for (pe, rc) in &remove.children {
                let Some(name) = pe.strip_prefix("f:") else { continue };
                if protect.contains(&name) {
                    continue;
                }
                let kc = keep.and_then(|k| k.children.get(pe));
                let Some(child) = m.get_mut(name) else { continue };
                if rc.member && kc.is_none() {
                    m.shift_remove(name);
                    continue;
                }
                let (cty, cshape) = ty.child(name);
                let was_empty = is_empty_container(child);
                prune(child, rc, kc, cty, cshape, &[]);
                if !was_empty && is_empty_container(child) && !kc.is_some_and(|k| k.member) {
                    m.shift_remove(name);
                }
            }
        }
        Value::Array(a) => match items(shape) {
            Items::Keyed(keys) => {
                for (pe, rc) in &remove.children {
                    let Some(i) = a.iter().position(|e| item_key(e, keys).as_deref() == Some(pe.as_str())) else {
                        continue;
                    };
                    let kc = keep.and_then(|k| k.children.get(pe));
                    if rc.member && kc.is_none() {
                        a.remove(i);
                        continue;
                    }
                    let names: Vec<&str> = keys.iter().map(|k| k.name).collect();
                    prune(&mut a[i], rc, kc, ty, Shape::Plain, &names);
                }
            }
            Items::Set => a.retain(|e| !remove.children.get(&value_key(e)).is_some_and(|c| c.member)),
            Items::Atomic => {}
        },
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// Ignored fields, validation

const IGNORED_TOP: &[&str] = &["apiVersion", "kind", "status"];
const IGNORED_META: &[&str] =
    &["name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "clusterName", "managedFields"];

/// A copy of `obj` without the fields nobody owns.
fn strip_ignored(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Value::Object(m) = &mut o {
        for k in IGNORED_TOP {
            m.shift_remove(*k);
        }
        if let Some(Value::Object(md)) = m.get_mut("metadata") {
            for k in IGNORED_META {
                md.shift_remove(*k);
            }
            if md.is_empty() {
                m.shift_remove("metadata");
            }
        }
    }
    o
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(Value::Object(md)) = o.get_mut("metadata") {
        md.shift_remove("managedFields");
    }
    o
}

fn gvk(api_version: &str, kind: &str) -> String {
    if api_version.contains('/') {
        format!("{api_version}, Kind={kind}")
    } else {
        format!("/{api_version}, Kind={kind}")
    }
}

/// Checks associative and set lists of the applied configuration: every element has its
/// key fields, no key appears twice (structured-merge-diff rejects both).
fn validate_config(v: &Value, ty: Ty, shape: Shape, path: &str) -> Result<(), String> {
    match v {
        Value::Object(m) if !is_atomic_map(shape) => {
            for (k, cv) in m {
                let (cty, cshape) = ty.child(k);
                validate_config(cv, cty, cshape, &format!("{path}.{k}"))?;
            }
        }
        Value::Array(a) => {
            let mut seen = HashSet::new();
            match items(shape) {
                Items::Atomic => {}
                Items::Keyed(keys) => {
                    for (i, e) in a.iter().enumerate() {
                        let Some(k) = item_key(e, keys) else {
                            let Some(m) = e.as_object() else {
                                return Err(format!("{path}[{i}]: expected an object in an associative list, got {}", compact(e)));
                            };
                            let missing = keys.iter().find(|k| k.default.is_none() && m.get(k.name).is_none_or(Value::is_null));
                            return Err(format!(
                                "{path}[{i}]: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                                missing.map(|k| k.name).unwrap_or("")
                            ));
                        };
                        let printed = print_path_element(&k);
                        if !seen.insert(k) {
                            return Err(format!("{path}: duplicate entries for key {printed}"));
                        }
                        validate_config(e, ty, Shape::Plain, &format!("{path}{printed}"))?;
                    }
                }
                Items::Set => {
                    for e in a {
                        let k = value_key(e);
                        if !seen.insert(k.clone()) {
                            return Err(format!("{path}: duplicate entries for key {}", print_path_element(&k)));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// managedFields entries

#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: String,
    set: FieldSet,
}

impl Entry {
    fn same_identity(&self, other: &Entry) -> bool {
        self.manager == other.manager && self.operation == other.operation && self.subresource == other.subresource && (self.operation == "Apply" || self.api_version == other.api_version)
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert("operation".into(), Value::String(self.operation.clone()));
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), Value::String(self.subresource.clone()));
        }
        Value::Object(m)
    }
}

/// Decodes `metadata.managedFields`; `None` when any entry is malformed. Entries with the
/// same identity are merged.
fn decode_entries(v: Option<&Value>) -> Option<Vec<Entry>> {
    let Some(v) = v else { return Some(Vec::new()) };
    if v.is_null() {
        return Some(Vec::new());
    }
    let mut out: Vec<Entry> = Vec::new();
    for e in v.as_array()? {
        let m = e.as_object()?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        if m.get("fieldsType").is_some_and(|t| t != "FieldsV1") {
            return None;
        }
        let entry = Entry {
            manager: s("manager").unwrap_or_default(),
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").unwrap_or_default(),
            set: match m.get("fieldsV1") {
                Some(f) => FieldSet::from_fields_v1(f)?,
                None => FieldSet::default(),
            },
        };
        match out.iter_mut().find(|o| o.same_identity(&entry)) {
            Some(o) => o.set.union_with(&entry.set),
            None => out.push(entry),
        }
    }
    Some(out)
}

/// Writes the entries (empty ones dropped) sorted as kube-apiserver sorts them
/// (operation, time, manager, apiVersion, subresource); removes the field when none remain.
fn encode_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| (&a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(&b.operation, &b.time, &b.manager, &b.api_version, &b.subresource)));
    let Value::Object(root) = obj else { return };
    if entries.is_empty() {
        if let Some(Value::Object(md)) = root.get_mut("metadata") {
            md.shift_remove("managedFields");
        }
        return;
    }
    let md = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(md) = md {
        md.insert("managedFields".into(), Value::Array(entries.iter().map(Entry::to_json).collect()));
    }
}

fn conflict_error(conflicts: Vec<FieldConflict>) -> ApplyError {
    let message = if conflicts.len() == 1 {
        let c = &conflicts[0];
        format!("Apply failed with 1 conflict: conflict with {}: {}", c.manager_description(), c.field)
    } else {
        // Grouped by manager identity, managers sorted (kube-apiserver `getConflictMessage`).
        let mut groups: BTreeMap<[&str; 4], (String, Vec<&str>)> = BTreeMap::new();
        for c in &conflicts {
            groups.entry([&c.manager, &c.operation, &c.api_version, &c.subresource]).or_insert_with(|| (c.manager_description(), Vec::new())).1.push(&c.field);
        }
        let mut lines = Vec::new();
        for (desc, fields) in groups.values() {
            lines.push(format!("conflicts with {desc}:"));
            lines.extend(fields.iter().map(|f| format!("- {f}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    ApplyError::Conflict { message, conflicts }
}

// ---------------------------------------------------------------------------------------
// Public entry points

/// Server-side apply of `applied` (the parsed apply-patch body) by `manager` onto `live`
/// (`None` to create). Returns the new object with `metadata.managedFields` updated.
///
/// Mirrors structured-merge-diff's `Updater.Apply` as kube-apiserver runs it:
/// 1. `applied` is merged into `live`: maps merge, associative lists (the strategic merge
///    patch merge keys, all `listMapKeys`, e.g. ports by `containerPort`+`protocol`) merge
///    by key, set lists by value, other lists and atomic maps are replaced; `null` removes
///    a field.
/// 2. The manager's `Apply` entry becomes exactly the fields of `applied`.
/// 3. Fields it owned before, absent now and owned by no other manager, are removed (a
///    list element goes whole unless another manager owns something inside it).
/// 4. Fields owned by another manager whose value changes are conflicts: an
///    [`ApplyError::Conflict`] (409) unless `force`, which moves them to this manager.
///    Applying the value a field already has makes the managers co-owners.
/// 5. A live object without any managedFields is first attributed to a synthetic
///    `before-first-apply` Update manager (kube-apiserver does the same).
///
/// The entry's `time` becomes `now` (RFC 3339) when the object changes or the entry is
/// new.
///
/// Ownership is a field set per manager in `metadata.managedFields`, `fieldsType:
/// FieldsV1`: `{"f:spec":{"f:replicas":{}}}` for a field, `"k:{\"name\":\"web\"}":{".":{},…}`
/// for an associative-list element, `"v:\"x\""` for a set-list element (finalizers). A
/// node is owned itself when it is `{}` or carries `"."`. Maps are granular (their leaves
/// are owned); atomic lists and atomic maps (label selectors) are owned whole.
///
/// Never owned (kube-apiserver's `stripMeta` fields plus the main resource's status):
/// `apiVersion`, `kind`, `status`, `metadata.{name, namespace, uid, resourceVersion,
/// generation, creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds, selfLink,
/// clusterName, managedFields}`. `status` in `applied` is still merged, so the handler
/// resets it for the main resource as for any write.
///
/// Errors: [`ApplyError::BadRequest`] when `applied` is not an object, has another
/// apiVersion or kind, sets `metadata.managedFields`, or has an associative-list element
/// without its key or a duplicate key; [`ApplyError::Conflict`] as above.
pub fn server_side_apply(live: Option<&Value>, applied: &Value, manager: &str, force: bool, api_version: &str, kind: &str, now: &str) -> Result<Value, ApplyError> {
    server_side_apply_defaulted(live, applied, manager, force, api_version, kind, now, |_| {})
}

/// [`server_side_apply`] for a kind the API server defaults: `defaults` fills them into the
/// merged object before it is compared with `live` (already defaulted), as kube-apiserver
/// defaults the patched object before its field manager compares. Without that, a field the
/// applied configuration leaves to its default (a RoleBinding subject's `apiGroup`, inside
/// an atomic list) would look changed on every apply, and each apply would stamp a new
/// `time` and write although nothing changed.
#[allow(clippy::too_many_arguments)]
pub fn server_side_apply_defaulted(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    kind: &str,
    now: &str,
    defaults: impl Fn(&mut Value),
) -> Result<Value, ApplyError> {
    let Value::Object(cfg) = applied else {
        return Err(ApplyError::BadRequest("an apply patch must be an object".into()));
    };
    let patch_version = cfg.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if patch_version != api_version {
        return Err(ApplyError::BadRequest(format!("Incorrect version specified in apply patch. Specified patch version: {patch_version}, expected: {api_version}")));
    }
    let patch_kind = cfg.get("kind").and_then(Value::as_str).unwrap_or("");
    if patch_kind != kind {
        return Err(ApplyError::BadRequest(format!("Incorrect kind specified in apply patch. Specified patch kind: {patch_kind}, expected: {kind}")));
    }
    if applied.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".into()));
    }
    let ty = Ty::root(api_version, kind);
    validate_config(applied, ty, Shape::Plain, "").map_err(|e| ApplyError::BadRequest(format!("failed to create typed patch object ({}): {e}", gvk(api_version, kind))))?;

    let live_bare = live.map(without_managed_fields).unwrap_or_else(|| Value::Object(Map::new()));
    // Unreadable managedFields are reset, as kube-apiserver does.
    let mut entries = decode_entries(live.and_then(|l| l.pointer("/metadata/managedFields"))).unwrap_or_default();
    if live.is_some() && entries.is_empty() {
        let set = fs_root(&strip_ignored(&live_bare), ty);
        entries.push(Entry { manager: "before-first-apply".into(), operation: "Update".into(), api_version: api_version.into(), time: Some(now.into()), subresource: String::new(), set });
    }

    let new_set = fs_root(&strip_ignored(applied), ty);
    let me = entries.iter().position(|e| e.manager == manager && e.operation == "Apply" && e.subresource.is_empty());
    let last_set = me.map(|i| entries[i].set.clone()).unwrap_or_default();
    let mut keep = new_set.clone();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) != me {
            keep.union_with(&e.set);
        }
    }
    let to_remove = last_set.difference(&keep);

    let mut with_nulls = merge(&live_bare, applied, ty, Shape::Plain, true);
    prune(&mut with_nulls, &to_remove, Some(&keep), ty, Shape::Plain, &[]);
    let mut result = merge(&live_bare, applied, ty, Shape::Plain, false);
    prune(&mut result, &to_remove, Some(&keep), ty, Shape::Plain, &[]);

    let diff = compare(&strip_ignored(&live_bare), &strip_ignored(&with_nulls), ty);
    let mut changed = diff.added;
    changed.union_with(&diff.modified);

    let mut conflicts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == me {
            continue;
        }
        let mut fields = Vec::new();
        e.set.intersection(&changed).paths("", &mut fields);
        conflicts.extend(fields.into_iter().map(|field| FieldConflict {
            manager: e.manager.clone(),
            operation: e.operation.clone(),
            api_version: e.api_version.clone(),
            subresource: e.subresource.clone(),
            field,
        }));
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(conflicts));
    }

    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != me {
            e.set = e.set.difference(&changed).difference(&diff.removed);
        }
    }
    defaults(&mut result);
    let object_changed = live.is_none() || !json_equal(&result, &live_bare);
    // An object without managedFields (created by an apply that owns nothing, such as a
    // Namespace with only a name) re-applied unchanged with nothing to own: no entry would
    // survive but `before-first-apply`, so the object stays as it is (no write).
    if let Some(l) = live {
        let had_none = l.pointer("/metadata/managedFields").and_then(Value::as_array).is_none_or(|a| a.is_empty());
        if had_none && !object_changed && new_set.is_empty() {
            return Ok(l.clone());
        }
    }
    match me {
        Some(i) => {
            let e = &mut entries[i];
            e.set = new_set;
            e.api_version = api_version.into();
            if object_changed || e.time.is_none() {
                e.time = Some(now.into());
            }
        }
        None => entries.push(Entry { manager: manager.into(), operation: "Apply".into(), api_version: api_version.into(), time: Some(now.into()), subresource: String::new(), set: new_set }),
    }
    encode_entries(&mut result, entries);
    Ok(result)
}

/// Records an ordinary write (create, update, JSON/merge/strategic patch) by `manager` in
/// `new`'s `metadata.managedFields`, like kube-apiserver's fieldmanager `Update`, so that a
/// later apply conflicts with fields an earlier `kubectl edit/scale/patch` or client-side
/// apply set. Field sets and never-owned fields are as for [`server_side_apply`].
///
/// The fields that differ between `old` (`None` on create) and `new` — added or changed
/// leaves, added list elements — move to `manager`'s `Update` entry for `api_version`
/// (taken from every other manager); removed fields leave every manager. The entry's
/// `time` becomes `now` when it gains fields. Entries left empty are dropped; with none
/// left `managedFields` is removed. The kind is read from `new` (or `old`).
///
/// Explicit managedFields in the request body (kube-apiserver's behaviour): a non-empty,
/// well-formed list in `new` is taken as the starting point instead of `old`'s (clients
/// may edit ownership directly); an empty or absent list keeps `old`'s (clients unaware of
/// the field cannot drop it); a list of only empty objects (`[{}]`) resets ownership, so
/// only this write's changes are recorded. Unlike kube-apiserver, Update entries are not
/// capped at ten per object, and newly created maps are not recorded with `.`.
pub fn track_update(old: Option<&Value>, new: &mut Value, manager: &str, api_version: &str, now: &str) {
    if !new.is_object() {
        return;
    }
    let kind = new.get("kind").and_then(Value::as_str).or_else(|| old.and_then(|o| o.get("kind")).and_then(Value::as_str)).unwrap_or("").to_string();
    let ty = Ty::root(api_version, &kind);
    let old_entries = || decode_entries(old.and_then(|o| o.pointer("/metadata/managedFields"))).unwrap_or_default();
    let mut entries = match new.pointer("/metadata/managedFields") {
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(|e| e.as_object().is_some_and(Map::is_empty)) => Vec::new(),
        Some(v @ Value::Array(a)) if !a.is_empty() => decode_entries(Some(v)).unwrap_or_else(old_entries),
        _ => old_entries(),
    };

    let old_bare = old.map(without_managed_fields).unwrap_or_else(|| Value::Object(Map::new()));
    let new_bare = without_managed_fields(new);
    let diff = compare(&strip_ignored(&old_bare), &strip_ignored(&new_bare), ty);
    let mut changed = diff.added;
    changed.union_with(&diff.modified);
    for e in entries.iter_mut() {
        e.set = e.set.difference(&changed).difference(&diff.removed);
    }
    if !changed.is_empty() {
        let probe = Entry { manager: manager.into(), operation: "Update".into(), api_version: api_version.into(), time: Some(now.into()), subresource: String::new(), set: changed };
        match entries.iter_mut().find(|e| e.same_identity(&probe)) {
            Some(e) => {
                e.set.union_with(&probe.set);
                e.time = probe.time;
            }
            None => entries.push(probe),
        }
    }
    encode_entries(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";
    const T2: &str = "2026-01-01T00:02:00Z";

    fn config(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web",
                        "image": image,
                        "ports": [{"containerPort": 80}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
                    }]}
                }
            }
        })
    }

    fn apply(live: Option<&Value>, cfg: &Value, manager: &str, force: bool, now: &str) -> Result<Value, ApplyError> {
        server_side_apply(live, cfg, manager, force, "apps/v1", "Deployment", now)
    }

    fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
        obj["metadata"]["managedFields"].as_array()?.iter().find(|e| e["manager"] == manager)
    }

    fn owned_paths(obj: &Value, manager: &str) -> Vec<String> {
        let e = entry(obj, manager).unwrap_or_else(|| panic!("no entry for {manager}"));
        let mut out = Vec::new();
        FieldSet::from_fields_v1(&e["fieldsV1"]).unwrap().paths("", &mut out);
        out
    }

    #[test]
    fn first_apply_creates_and_owns() {
        let obj = apply(None, &config(2, "nginx:1.25"), "kubectl", false, T0).unwrap();
        assert_eq!(obj["spec"]["replicas"], 2);
        assert_eq!(obj["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.25");
        let mf = obj["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1);
        assert_eq!(
            mf[0],
            json!({
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": T0,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                ".": {},
                                "f:env": {
                                    "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
                                    "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}}
                                },
                                "f:image": {},
                                "f:name": {},
                                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                            }}}
                        }
                    }
                }
            })
        );
        // The serialized key order is kube-apiserver's.
        let text = serde_json::to_string(&mf[0]).unwrap();
        assert!(text.starts_with(r#"{"manager":"kubectl","operation":"Apply","apiVersion":"apps/v1","time":"#), "{text}");
        assert!(text.contains(r#"{".":{},"f:env""#), "{text}");
    }

    #[test]
    fn reapply_without_a_field_removes_it() {
        let obj = apply(None, &config(2, "nginx:1.25"), "kubectl", false, T0).unwrap();
        let mut cfg = config(2, "nginx:1.26");
        cfg["metadata"].as_object_mut().unwrap().shift_remove("labels");
        cfg["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        let obj = apply(Some(&obj), &cfg, "kubectl", false, T1).unwrap();
        assert_eq!(obj["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.26");
        assert_eq!(obj["spec"]["template"]["spec"]["containers"][0]["env"], json!([{"name": "A", "value": "1"}]));
        // The emptied labels map is gone with its last label.
        assert!(obj["metadata"].get("labels").is_none(), "{}", obj["metadata"]);
        assert_eq!(obj["metadata"]["name"], "web");
        let paths = owned_paths(&obj, "kubectl");
        assert!(!paths.iter().any(|p| p.starts_with(".metadata.labels")), "{paths:?}");
        assert!(paths.contains(&".spec.template.metadata.labels.app".to_string()), "{paths:?}");
        assert!(!paths.iter().any(|p| p.contains("[name=\"B\"]")), "{paths:?}");
        assert_eq!(entry(&obj, "kubectl").unwrap()["time"], T1);

        // Dropping the whole container list removes the container, unowned defaults included.
        let mut live = obj.clone();
        live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = json!("/dev/termination-log");
        let mut cfg2 = cfg.clone();
        cfg2["spec"]["template"]["spec"]["containers"] = json!([{"name": "other", "image": "busybox"}]);
        let obj = apply(Some(&live), &cfg2, "kubectl", false, T2).unwrap();
        assert_eq!(obj["spec"]["template"]["spec"]["containers"], json!([{"name": "other", "image": "busybox"}]));
    }

    #[test]
    fn reapply_unchanged_keeps_time() {
        let obj = apply(None, &config(2, "nginx:1.25"), "kubectl", false, T0).unwrap();
        let again = apply(Some(&obj), &config(2, "nginx:1.25"), "kubectl", false, T1).unwrap();
        assert_eq!(again, obj);
    }

    #[test]
    fn two_managers_conflict() {
        let obj = apply(None, &config(2, "nginx:1.25"), "alice", false, T0).unwrap();
        let err = apply(Some(&obj), &config(5, "nginx:1.25"), "bob", false, T1).unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
        let causes = err.causes();
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].reason, "FieldManagerConflict");
        assert_eq!(causes[0].message, "conflict with \"alice\"");
        assert_eq!(causes[0].field, ".spec.replicas");
        let api: ApiError = err.into();
        assert_eq!(api.code(), 409);

        // Several fields: kube-apiserver's multi-line form.
        let err = apply(Some(&obj), &config(5, "nginx:1.26"), "bob", false, T1).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"web\"].image");
    }

    #[test]
    fn same_value_is_shared_ownership() {
        let obj = apply(None, &config(2, "nginx:1.25"), "alice", false, T0).unwrap();
        let bob_cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let obj = apply(Some(&obj), &bob_cfg, "bob", false, T1).unwrap();
        assert_eq!(owned_paths(&obj, "bob"), vec![".spec.replicas"]);
        assert!(owned_paths(&obj, "alice").contains(&".spec.replicas".to_string()));
        // alice gives up replicas: bob still owns it, so it stays.
        let mut cfg = config(2, "nginx:1.25");
        cfg["spec"].as_object_mut().unwrap().shift_remove("replicas");
        let obj = apply(Some(&obj), &cfg, "alice", false, T2).unwrap();
        assert_eq!(obj["spec"]["replicas"], 2);
        assert!(!owned_paths(&obj, "alice").contains(&".spec.replicas".to_string()));
    }

    #[test]
    fn force_moves_ownership() {
        let obj = apply(None, &config(2, "nginx:1.25"), "alice", false, T0).unwrap();
        let bob_cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let obj = apply(Some(&obj), &bob_cfg, "bob", true, T1).unwrap();
        assert_eq!(obj["spec"]["replicas"], 5);
        assert_eq!(owned_paths(&obj, "bob"), vec![".spec.replicas"]);
        assert!(!owned_paths(&obj, "alice").contains(&".spec.replicas".to_string()));
        // alice re-applies without replicas: she no longer owns it, so it is not removed.
        let mut cfg = config(2, "nginx:1.25");
        cfg["spec"].as_object_mut().unwrap().shift_remove("replicas");
        let obj = apply(Some(&obj), &cfg, "alice", false, T2).unwrap();
        assert_eq!(obj["spec"]["replicas"], 5);
        // The object did not change, so alice's entry keeps its time; entries sort by
        // operation, then time.
        assert_eq!(entry(&obj, "alice").unwrap()["time"], T0);
        let managers: Vec<_> = obj["metadata"]["managedFields"].as_array().unwrap().iter().map(|e| e["manager"].clone()).collect();
        assert_eq!(managers, vec![json!("alice"), json!("bob")]);
    }

    #[test]
    fn reapplying_a_defaulted_atomic_list_keeps_the_time() {
        // a RoleBinding subject's apiGroup is defaulted inside the atomic `subjects` list:
        // re-applying the same configuration later is no change
        let cfg = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "r", "namespace": "ns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        let defaults = |v: &mut Value| crate::api::defaults::apply("rbac.authorization.k8s.io", "v1", "RoleBinding", v);
        let ssa = |live: Option<&Value>, now: &str| server_side_apply_defaulted(live, &cfg, "kubectl", false, "rbac.authorization.k8s.io/v1", "RoleBinding", now, defaults).unwrap();
        let mut created = ssa(None, T0);
        defaults(&mut created);
        assert_eq!(created["subjects"][0]["apiGroup"], "");
        let again = ssa(Some(&created), T1);
        assert_eq!(entry(&again, "kubectl").unwrap()["time"], T0, "{again}");
        assert!(crate::api::object::same_content(&again, &created), "{again}");
        // without the defaults the list looks changed
        let plain = server_side_apply(Some(&created), &cfg, "kubectl", false, "rbac.authorization.k8s.io/v1", "RoleBinding", T1).unwrap();
        assert_eq!(entry(&plain, "kubectl").unwrap()["time"], T1);
    }

    #[test]
    fn track_update_then_apply_conflicts() {
        // kubectl create / client-side apply records an Update entry owning everything.
        let mut created = config(2, "nginx:1.25");
        track_update(None, &mut created, "kubectl-client-side-apply", "apps/v1", T0);
        let paths = owned_paths(&created, "kubectl-client-side-apply");
        assert!(paths.contains(&".spec.replicas".to_string()));
        assert!(paths.contains(&".spec.template.spec.containers[name=\"web\"]".to_string()));
        assert!(!paths.iter().any(|p| p.starts_with(".metadata.name") || p.starts_with(".apiVersion")));
        assert_eq!(entry(&created, "kubectl-client-side-apply").unwrap()["operation"], "Update");

        let err = apply(Some(&created), &config(3, "nginx:1.25"), "kubectl", false, T1).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apps/v1: .spec.replicas");
        // Same values: no conflict, shared.
        let obj = apply(Some(&created), &config(2, "nginx:1.25"), "kubectl", false, T1).unwrap();
        assert!(owned_paths(&obj, "kubectl").contains(&".spec.replicas".to_string()));

        // kubectl scale (an Update by another manager) takes replicas from the applier.
        let mut scaled = obj.clone();
        scaled["spec"]["replicas"] = json!(4);
        track_update(Some(&obj), &mut scaled, "kubectl-scale", "apps/v1", T2);
        assert_eq!(owned_paths(&scaled, "kubectl-scale"), vec![".spec.replicas"]);
        assert!(!owned_paths(&scaled, "kubectl").contains(&".spec.replicas".to_string()));
        let err = apply(Some(&scaled), &config(2, "nginx:1.25"), "kubectl", false, T2).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas");
    }

    #[test]
    fn track_update_removed_fields_leave_all_managers() {
        let mut obj = config(2, "nginx:1.25");
        track_update(None, &mut obj, "creator", "apps/v1", T0);
        let mut edited = obj.clone();
        edited["metadata"]["labels"] = json!({"app": "web", "tier": "fe"});
        edited["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        track_update(Some(&obj), &mut edited, "kubectl-edit", "apps/v1", T1);
        assert_eq!(owned_paths(&edited, "kubectl-edit"), vec![".metadata.labels.tier"]);
        let creator = owned_paths(&edited, "creator");
        assert!(!creator.iter().any(|p| p.contains("[name=\"B\"]")), "{creator:?}");
        assert_eq!(entry(&edited, "creator").unwrap()["time"], T0);
        assert_eq!(entry(&edited, "kubectl-edit").unwrap()["time"], T1);

        // A no-op write records nothing.
        let mut same = edited.clone();
        track_update(Some(&edited), &mut same, "noop", "apps/v1", T2);
        assert!(entry(&same, "noop").is_none());
        assert_eq!(same, edited);
        // Status and server metadata are never owned.
        let mut st = edited.clone();
        st["status"] = json!({"replicas": 2});
        st["metadata"]["resourceVersion"] = json!("42");
        track_update(Some(&edited), &mut st, "controller", "apps/v1", T2);
        assert!(entry(&st, "controller").is_none());
    }

    #[test]
    fn track_update_explicit_managed_fields() {
        let mut obj = config(2, "nginx:1.25");
        track_update(None, &mut obj, "creator", "apps/v1", T0);

        // A body without managedFields keeps the stored ones.
        let mut put = obj.clone();
        put["metadata"].as_object_mut().unwrap().shift_remove("managedFields");
        track_update(Some(&obj), &mut put, "kubectl-replace", "apps/v1", T1);
        assert_eq!(put["metadata"]["managedFields"], obj["metadata"]["managedFields"]);

        // A body setting them explicitly wins.
        let mut put = obj.clone();
        put["metadata"]["managedFields"] = json!([{
            "manager": "someone", "operation": "Update", "apiVersion": "apps/v1", "time": T0,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}
        }]);
        track_update(Some(&obj), &mut put, "kubectl-replace", "apps/v1", T1);
        let mf = put["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1);
        assert_eq!(mf[0]["manager"], "someone");

        // [{}] resets them; with no other change nothing is left.
        let mut put = obj.clone();
        put["metadata"]["managedFields"] = json!([{}]);
        track_update(Some(&obj), &mut put, "kubectl-replace", "apps/v1", T1);
        assert!(put["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn before_first_apply_owns_unmanaged_objects() {
        let live = config(2, "nginx:1.25");
        let err = apply(Some(&live), &config(3, "nginx:1.25"), "kubectl", false, T1).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas");
        let obj = apply(Some(&live), &config(3, "nginx:1.25"), "kubectl", true, T1).unwrap();
        assert_eq!(obj["spec"]["replicas"], 3);
        assert!(!owned_paths(&obj, "before-first-apply").contains(&".spec.replicas".to_string()));
    }

    #[test]
    fn apply_merges_lists_by_key_and_keeps_others_elements() {
        let obj = apply(None, &config(2, "nginx:1.25"), "alice", false, T0).unwrap();
        // bob adds a sidecar and an env var to alice's container.
        let bob = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "C", "value": "3"}]},
                {"name": "sidecar", "image": "busybox"}
            ]}}}
        });
        let obj = apply(Some(&obj), &bob, "bob", false, T1).unwrap();
        let cs = obj["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "nginx:1.25");
        assert_eq!(cs[0]["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]));
        assert_eq!(cs[1]["name"], "sidecar");
        // bob co-owns the web element (it existed, unchanged) and owns its own pieces.
        let bob_paths = owned_paths(&obj, "bob");
        assert!(bob_paths.contains(&".spec.template.spec.containers[name=\"web\"].env[name=\"C\"].value".to_string()), "{bob_paths:?}");
        // alice drops the container from her config: bob's parts stay, hers go.
        let mut cfg = config(2, "nginx:1.25");
        cfg["spec"]["template"]["spec"]["containers"] = json!([]);
        let obj = apply(Some(&obj), &cfg, "alice", false, T2).unwrap();
        let cs = obj["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 2, "{cs:?}");
        assert_eq!(cs[0], json!({"name": "web", "env": [{"name": "C", "value": "3"}]}));
    }

    #[test]
    fn finalizers_are_a_set() {
        let mut cfg = config(1, "x");
        cfg["metadata"]["finalizers"] = json!(["a/b"]);
        let obj = apply(None, &cfg, "alice", false, T0).unwrap();
        let fv1 = &entry(&obj, "alice").unwrap()["fieldsV1"]["f:metadata"]["f:finalizers"];
        assert_eq!(fv1, &json!({"v:\"a/b\"": {}}));
        let mut other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "finalizers": ["c"]}});
        let obj = apply(Some(&obj), &other, "bob", false, T1).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["a/b", "c"]));
        other["metadata"]["finalizers"] = json!([]);
        let obj = apply(Some(&obj), &other, "bob", false, T2).unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["a/b"]));
    }

    #[test]
    fn apply_null_removes_and_conflicts() {
        let obj = apply(None, &config(2, "nginx:1.25"), "alice", false, T0).unwrap();
        let mut cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": null}});
        let err = apply(Some(&obj), &cfg, "bob", false, T1).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas");
        let out = apply(Some(&obj), &cfg, "bob", true, T1).unwrap();
        assert!(out["spec"].get("replicas").is_none());
        cfg["spec"] = json!({"paused": null});
        let out = apply(Some(&obj), &cfg, "bob", false, T1).unwrap();
        assert!(out["spec"].get("paused").is_none());
    }

    #[test]
    fn bad_apply_requests() {
        let obj = apply(None, &config(2, "x"), "alice", false, T0).unwrap();
        let mut cfg = config(2, "x");
        cfg["metadata"]["managedFields"] = obj["metadata"]["managedFields"].clone();
        let err = apply(Some(&obj), &cfg, "alice", false, T1).unwrap_err();
        assert_eq!(err, ApplyError::BadRequest("metadata.managedFields must be nil".into()));

        let mut cfg = config(2, "x");
        cfg["spec"]["template"]["spec"]["containers"] = json!([{"name": "a"}, {"name": "a"}]);
        let err = apply(None, &cfg, "alice", false, T0).unwrap_err();
        assert_eq!(err.to_string(), "failed to create typed patch object (apps/v1, Kind=Deployment): .spec.template.spec.containers: duplicate entries for key [name=\"a\"]");
        cfg["spec"]["template"]["spec"]["containers"] = json!([{"image": "a"}]);
        let err = apply(None, &cfg, "alice", false, T0).unwrap_err();
        assert!(err.to_string().contains("omits key field \"name\""), "{err}");
        assert_eq!(err.code(), 400);

        let mut cfg = config(2, "x");
        cfg["apiVersion"] = json!("apps/v1beta1");
        assert_eq!(apply(None, &cfg, "alice", false, T0).unwrap_err().code(), 400);
        assert_eq!(server_side_apply(None, &json!([]), "a", false, "v1", "Pod", T0).unwrap_err().code(), 400);
    }

    #[test]
    fn service_ports_key_defaults_protocol() {
        let mut svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]},
            "status": {"loadBalancer": {}}
        });
        track_update(None, &mut svc, "kubectl-create", "v1", T0);
        let paths = owned_paths(&svc, "kubectl-create");
        assert!(paths.contains(&".spec.ports[port=80,protocol=\"TCP\"].targetPort".to_string()), "{paths:?}");
        assert!(!paths.iter().any(|p| p.starts_with(".status")), "{paths:?}");
        // The applier omits protocol (defaulted to TCP): same element, same values, no conflict.
        let cfg = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}
        });
        let out = server_side_apply(Some(&svc), &cfg, "kubectl", false, "v1", "Service", T1).unwrap();
        assert_eq!(out["spec"]["ports"], json!([{"port": 80, "protocol": "TCP", "targetPort": 8080}, {"port": 443, "targetPort": 8443}]));
        assert_eq!(out["status"], json!({"loadBalancer": {}}));
        let fv1 = &entry(&out, "kubectl").unwrap()["fieldsV1"]["f:spec"]["f:ports"];
        assert!(fv1.get("k:{\"port\":443,\"protocol\":\"TCP\"}").is_some(), "{fv1}");
    }

    #[test]
    fn strategic_patch_then_track_update() {
        // The handler's flow for `kubectl patch`: patch, then record the write.
        let mut obj = config(2, "nginx:1.25");
        track_update(None, &mut obj, "kubectl-create", "apps/v1", T0);
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.26"}]}}}});
        let mut patched = crate::api::patch::strategic_merge_patch(&obj, &patch, "apps/v1", "Deployment").unwrap();
        track_update(Some(&obj), &mut patched, "kubectl-patch", "apps/v1", T1);
        assert_eq!(owned_paths(&patched, "kubectl-patch"), vec![".spec.template.spec.containers[name=\"web\"].image"]);
        let err = apply(Some(&patched), &config(2, "nginx:1.25"), "kubectl", false, T2).unwrap_err();
        assert_eq!(err.to_string(), "Apply failed with 1 conflict: conflict with \"kubectl-patch\" using apps/v1: .spec.template.spec.containers[name=\"web\"].image");
    }

    #[test]
    fn fields_v1_round_trips_real_objects() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real-objects");
        let mut seen = 0;
        for f in std::fs::read_dir(dir).unwrap() {
            let path = f.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let obj: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let Some(mf) = obj.pointer("/metadata/managedFields").and_then(Value::as_array) else { continue };
            for e in mf {
                let fs = FieldSet::from_fields_v1(&e["fieldsV1"]).unwrap_or_else(|| panic!("{path:?}: bad fieldsV1"));
                assert_eq!(fs.to_fields_v1(), e["fieldsV1"], "{path:?}");
                seen += 1;
            }
            assert!(decode_entries(obj.pointer("/metadata/managedFields")).is_some());
        }
        assert!(seen > 0);
    }

    #[test]
    fn apply_to_real_ssa_deployment() {
        // A Deployment server-side-applied by argocd-controller and updated by the
        // controller-manager: re-applying argocd's own values is a no-op, changing the
        // image as another manager conflicts with argocd.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real-objects/deployment-gitops-1.json");
        let live: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let c = &live["spec"]["template"]["spec"]["containers"][0];
        let cfg = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": live["metadata"]["name"], "namespace": live["metadata"]["namespace"]},
            "spec": {"template": {"spec": {"containers": [{"name": c["name"], "image": "nginx:9.9"}]}}}
        });
        let err = server_side_apply(Some(&live), &cfg, "someone", false, "apps/v1", "Deployment", T0).unwrap_err();
        assert_eq!(err.to_string(), format!("Apply failed with 1 conflict: conflict with \"argocd-controller\": .spec.template.spec.containers[name={}].image", c["name"]));
        let out = server_side_apply(Some(&live), &cfg, "someone", true, "apps/v1", "Deployment", T0).unwrap();
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:9.9");
        // controller-manager's status entry is untouched
        let before = live["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] != "argocd-controller").unwrap();
        let after = out["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == before["manager"]).unwrap();
        assert_eq!(before, after);
    }
}

#[cfg(test)]
mod reapply_tests {
    use super::*;
    use serde_json::json;

    /// A Namespace created by an apply of only its name has no managedFields; applying the
    /// same again must leave it untouched (kubectl's second `apply --server-side`).
    #[test]
    fn reapply_owning_nothing_is_a_no_op() {
        let live = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nsx", "uid": "u", "labels": {"kubernetes.io/metadata.name": "nsx"}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let cfg = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nsx"}});
        let out = server_side_apply(Some(&live), &cfg, "kubectl", false, "v1", "Namespace", "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(out, live);
        // owning something still records the manager
        let cfg = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nsx", "labels": {"team": "a"}}});
        let out = server_side_apply(Some(&live), &cfg, "kubectl", false, "v1", "Namespace", "2026-01-01T00:00:00Z").unwrap();
        assert!(out.pointer("/metadata/managedFields").is_some());
    }
}
