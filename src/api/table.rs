//! `meta.k8s.io/v1 Table` rendering for `kubectl get` (mirrors kube-apiserver's TableConvertor).

use serde_json::{json, Map, Value};

use super::registry::{path, Cell, ResourceInfo};

/// True when an Accept header asks for a Table (`as=Table`).
pub fn wants_table(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.split(',').next().is_some_and(|first| first.contains("as=Table")))
}

/// Column definitions: NAME first, then the resource's columns.
pub fn column_definitions(info: &ResourceInfo) -> Value {
    let mut cols = vec![json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0})];
    for c in &info.columns {
        cols.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}));
    }
    Value::Array(cols)
}

/// One row for `obj`; `include_object`: `None` → PartialObjectMetadata, `Object`, or `None`.
pub fn row(info: &ResourceInfo, obj: &Value, include_object: &str) -> Value {
    let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(json!(""))];
    for c in &info.columns {
        let v = match c.cell {
            Cell::Path(p) => path(obj, p).cloned().unwrap_or_else(|| if c.type_ == "integer" { json!(0) } else { json!("") }),
            Cell::Func(f) => f(obj),
            Cell::JsonPath(p) => super::crd::printer_cell(obj, p, c.type_),
        };
        cells.push(v);
    }
    let mut r = Map::new();
    r.insert("cells".into(), Value::Array(cells));
    match include_object {
        "None" => {}
        "Object" => {
            r.insert("object".into(), obj.clone());
        }
        _ => {
            r.insert("object".into(), json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))}));
        }
    }
    Value::Object(r)
}

/// A whole Table; `with_columns` false leaves `columnDefinitions` empty (watch events after the first).
pub fn table(info: &ResourceInfo, objs: &[Value], list_meta: Value, include_object: &str, with_columns: bool) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": if with_columns { column_definitions(info) } else { json!([]) },
        "rows": objs.iter().map(|o| row(info, o, include_object)).collect::<Vec<_>>(),
    })
}
