//! Discovery documents and OpenAPI: `/api`, `/apis`, resource lists, `/openapi/v2`, `/openapi/v3`.
//!
//! Discovery comes in the legacy (unaggregated) JSON form and, for a client that asks for it
//! in `Accept` (client-go since 1.26), as the aggregated `apidiscovery.k8s.io` document on
//! `/api` and `/apis`; client-go picks the form by the response Content-Type. OpenAPI v3 carries, per group-version, every path's
//! operations with `x-kubernetes-group-version-kind` and the `fieldValidation` query parameter,
//! which is what kubectl's field-validation check looks for (cli-runtime QueryParamVerifierV3).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::registry::{Registry, ResourceInfo};
use super::typed_schema::{kinds_key, memo, Memo};

/// `/api`: APIVersions.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": vs.clone(), "preferredVersion": vs[0]})
}

/// `/apis`: APIGroupList (named groups only).
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg.groups().iter().filter(|(g, _)| !g.is_empty()).map(|(g, vs)| group_json(g, &vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`: APIGroup.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let (g, vs) = reg.groups().iter().find(|(g, _)| *g == name)?;
    let mut v = group_json(g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

fn verbs(r: &ResourceInfo) -> Vec<&'static str> {
    if r.create_only() {
        return vec!["create"];
    }
    ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"].into_iter().filter(|v| r.kind != "Namespace" || *v != "deletecollection").collect()
}

/// `/api/v1` or `/apis/<g>/<v>`: APIResourceList with subresources.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Value {
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let mut resources = Vec::new();
    for r in reg.all().iter().filter(|r| r.group == group && r.version == version) {
        let mut e = json!({
            "name": r.resource,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(r),
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            e["categories"] = json!(r.categories);
        }
        resources.push(e);
        if r.has_status {
            resources.push(json!({"name": format!("{}/status", r.resource), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if super::request::has_approval(r) {
            resources.push(json!({"name": format!("{}/approval", r.resource), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if r.has_scale {
            resources.push(json!({"name": format!("{}/scale", r.resource), "singularName": "", "namespaced": r.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// The aggregated discovery form a request's `Accept` asks for (`…;g=apidiscovery.k8s.io;
/// v=v2;as=APIGroupDiscoveryList`, or `v=v2beta1`): the first listed one kube-apiserver
/// serves, `None` for the plain (legacy) documents.
pub fn wants_aggregated(accept: Option<&str>) -> Option<&'static str> {
    for media in accept?.split(',') {
        let mut parts = media.split(';').map(str::trim);
        if !parts.next().is_some_and(|t| t.eq_ignore_ascii_case("application/json")) {
            continue;
        }
        let (mut g, mut v, mut as_) = (None, None, None);
        for p in parts {
            match p.split_once('=') {
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                Some(("as", x)) => as_ = Some(x),
                _ => {}
            }
        }
        if g == Some("apidiscovery.k8s.io") && as_ == Some("APIGroupDiscoveryList") {
            match v {
                Some("v2") => return Some("v2"),
                Some("v2beta1") => return Some("v2beta1"),
                _ => {}
            }
        }
    }
    None
}

/// The Content-Type of an aggregated discovery answer in `version` (`v2`, `v2beta1`), as
/// kube-apiserver sends it; client-go picks the document's format by these parameters.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// The aggregated discovery document (mirrors kube-apiserver's
/// `apidiscovery.k8s.io/<version>` APIGroupDiscoveryList): one item per group, in the
/// order given, each with its versions (preferred first) and their resources, built from the
/// legacy APIResourceLists `lists[(group, [(version, list)])]` (their `<res>/<sub>` entries
/// become the resource's `subresources`). `responseKind` of a built-in resource leaves group
/// and version empty, as kube-apiserver does; a custom resource's (`custom(group)` true)
/// names its group and version, as the CRD discovery controller does.
pub fn aggregated(version: &str, lists: &[(String, Vec<(String, Value)>)], custom: &dyn Fn(&str) -> bool) -> Value {
    let items: Vec<Value> = lists
        .iter()
        .map(|(group, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|(v, list)| {
                    let entries = list.get("resources").and_then(Value::as_array).cloned().unwrap_or_default();
                    let kind_of = |e: &Value, own: bool| {
                        let (g, ver) = if own && !custom(group) {
                            (String::new(), String::new())
                        } else {
                            (
                                e.get("group").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| group.clone()),
                                e.get("version").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| v.clone()),
                            )
                        };
                        json!({"group": g, "version": ver, "kind": e.get("kind").cloned().unwrap_or(json!(""))})
                    };
                    let mut resources: Vec<Value> = Vec::new();
                    for e in entries.iter().filter(|e| !e["name"].as_str().unwrap_or("").contains('/')) {
                        let mut r = json!({
                            "resource": e["name"],
                            "responseKind": kind_of(e, true),
                            "scope": if e["namespaced"].as_bool() == Some(true) { "Namespaced" } else { "Cluster" },
                            "singularResource": e.get("singularName").cloned().unwrap_or(json!("")),
                            "verbs": e.get("verbs").cloned().unwrap_or(json!([])),
                        });
                        for k in ["shortNames", "categories"] {
                            if let Some(x) = e.get(k) {
                                r[k] = x.clone();
                            }
                        }
                        let name = e["name"].as_str().unwrap_or("");
                        let subs: Vec<Value> = entries
                            .iter()
                            .filter_map(|s| {
                                let (res, sub) = s["name"].as_str()?.split_once('/')?;
                                (res == name).then(|| {
                                    let own = s.get("group").is_none();
                                    json!({"subresource": sub, "responseKind": kind_of(s, own), "verbs": s.get("verbs").cloned().unwrap_or(json!([]))})
                                })
                            })
                            .collect();
                        if !subs.is_empty() {
                            r["subresources"] = json!(subs);
                        }
                        resources.push(r);
                    }
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut meta = json!({"creationTimestamp": null});
            if !group.is_empty() {
                meta["name"] = json!(group);
            }
            json!({"metadata": meta, "versions": vs})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}

/// The OpenAPI v3 path key of a group-version: `api/v1` or `apis/<g>/<v>`.
pub fn openapi_gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3_root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, vs) in reg.groups() {
        for v in vs.iter().copied() {
            let p = openapi_gv_path(g, v);
            paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", gv_hash(reg, g, v))}));
        }
    }
    json!({"paths": paths})
}

/// The `hash` of a group-version's OpenAPI v3 document (clients cache documents by URL): the
/// build's version, and for custom resources a digest of their schemas too, so a changed CRD
/// gives a new URL.
fn gv_hash(reg: &Registry, group: &str, version: &str) -> String {
    use sha2::Digest;
    let typed = super::typed_schema::definitions(group, version, reg.all());
    let base = format!("{}{}", env!("CARGO_PKG_VERSION").replace('.', ""), typed.digest);
    let mut h = sha2::Sha256::new();
    let mut custom = false;
    for r in reg.all().iter().filter(|r| r.group == group && r.version == version) {
        if let Some(s) = custom_schema(r) {
            custom = true;
            h.update(r.resource.as_bytes());
            h.update(serde_json::to_vec(&s).unwrap_or_default());
            h.update(serde_json::to_vec(&[r.has_status, r.has_scale, r.namespaced]).unwrap_or_default());
        }
    }
    if !custom {
        return base;
    }
    format!("{base}{}", hex::encode(&h.finalize()[..8]))
}

/// OpenAPI path template of a resource's collection, e.g.
/// `/apis/apps/v1/namespaces/{namespace}/deployments`.
fn collection_path(r: &ResourceInfo) -> String {
    let base = format!("/{}", openapi_gv_path(r.group, r.version));
    if r.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", r.resource)
    } else {
        format!("{base}/{}", r.resource)
    }
}

fn param(name: &str, desc: &str) -> Value {
    json!({"name": name, "in": "query", "description": desc, "schema": {"type": "string", "uniqueItems": true}})
}

/// `/openapi/v3/<api/v1|apis/g/v>`: an OpenAPI 3.0 document for one group-version, as
/// kube-apiserver publishes it: paths with their GVK, and under `components.schemas` the
/// typed definitions of the built-in kinds ([`super::typed_schema`]: types, descriptions,
/// `x-kubernetes-group-version-kind` and patch merge keys, which `kubectl explain` and
/// kubectl's patch computation read), custom resources' schemas from their CRDs
/// ([`custom_schema`]), and the federation's own kinds' schemas.
pub fn openapi_v3_gv(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let rs: Vec<_> = reg.all().iter().filter(|r| r.group == group && r.version == version).cloned().collect();
    if rs.is_empty() {
        return None;
    }
    let typed = super::typed_schema::definitions(group, version, reg.all());
    let mut paths = Map::new();
    let mut schemas = typed.schemas.clone();
    for r in &rs {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let coll = collection_path(r);
        let typed_name = if r.custom.is_none() { typed.by_kind.get(r.kind) } else { None };
        let schema_name = typed_name.cloned().unwrap_or_else(|| definition_name(r));
        let ref_ = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let body = json!({"content": {"application/json": {"schema": ref_.clone()}}});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": ref_.clone()}}}});
        let op = |id: &str, verb: &str, extra: Vec<Value>| {
            let mut params = vec![param("dryRun", "dry run"), param("fieldManager", "field manager")];
            params.extend(extra);
            json!({
                "operationId": format!("{id}{}", r.kind),
                "parameters": params,
                "responses": ok.clone(),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk.clone(),
            })
        };
        let fv =
            || param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.");
        let mut create = op("create", "post", vec![fv()]);
        create["requestBody"] = body.clone();
        let list = op("list", "list", vec![]);
        paths.insert(coll.clone(), json!({"get": list, "post": create}));
        let mut put = op("replace", "put", vec![fv()]);
        put["requestBody"] = body.clone();
        let mut patch = op("patch", "patch", vec![fv(), param("force", "force apply")]);
        patch["requestBody"] = json!({"content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/strategic-merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}}
        }});
        if !r.builtin {
            // custom resources and the federation's own kinds take no strategic merge patch
            // (the handler refuses it, as kube-apiserver does for custom resources; kubectl
            // 1.33 looks for this media type to decide whether to send one)
            if let Some(c) = patch["requestBody"]["content"].as_object_mut() {
                c.remove("application/strategic-merge-patch+json");
            }
        }
        paths.insert(format!("{coll}/{{name}}"), json!({"get": op("read", "get", vec![]), "put": put, "patch": patch, "delete": op("delete", "delete", vec![])}));
        if typed_name.is_some() {
            continue;
        }
        let schema = match custom_schema(r) {
            Some(s) => s,
            None => json!({
                "type": "object",
                "description": format!("{} ({})", r.kind, r.api_version()),
                "x-kubernetes-preserve-unknown-fields": true,
            }),
        };
        schemas.insert(schema_name, schema);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "fedctl", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The schema name of a resource in the OpenAPI documents when it has no typed definition:
/// a custom resource's (and a federation kind's) as kube-apiserver names a custom
/// resource's (the group reversed: `com.example.stable.v1.Shirt`), others
/// `<group>.<version>.<Kind>`.
pub(super) fn definition_name(r: &ResourceInfo) -> String {
    if r.custom.is_some() || !r.builtin {
        let rev: Vec<&str> = r.group.split('.').rev().collect();
        return format!("{}.{}.{}", rev.join("."), r.version, r.kind);
    }
    format!("{}.{}.{}", if r.group.is_empty() { "io.k8s.api.core" } else { r.group }, r.version, r.kind)
}

/// A custom resource's schema as kube-apiserver publishes it: the CRD version's
/// `openAPIV3Schema` with `apiVersion`, `kind` and `metadata` added and the
/// `x-kubernetes-group-version-kind` extension (what `kubectl explain` looks up). `None` for
/// other kinds, which stay loose (`type: object`, no GVK: kubectl then builds apply patches
/// of built-in kinds from its compiled-in types, as before).
pub fn custom_schema(r: &ResourceInfo) -> Option<Value> {
    let c = r.custom.as_ref()?;
    let mut s = if c.schema.is_object() { c.schema.clone() } else { json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}) };
    let props = s.as_object_mut()?.entry("properties").or_insert_with(|| json!({}));
    if let Some(p) = props.as_object_mut() {
        p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."}));
        p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase."}));
        p.insert("metadata".into(), json!({"type": "object", "description": "Standard object's metadata."}));
    }
    s["x-kubernetes-group-version-kind"] = json!([{"group": r.group, "version": r.version, "kind": r.kind}]);
    Some(s)
}

/// A v3 schema in Swagger 2.0 terms (for custom resources mirrors apiextensions-apiserver's
/// `ToStructuralOpenAPIV2`): what v2 cannot say is dropped: `nullable` (a nullable value
/// loses its `type`, v2 having no null), and the validation-only `anyOf`, `oneOf` and
/// `not`; references move from `#/components/schemas/` to `#/definitions/`, a lone
/// `allOf: [{$ref}]` becoming the `$ref` itself; the rest, vendor extensions included, is
/// kept.
pub fn v2_schema(s: &Value) -> Value {
    const V3_REFS: &str = "#/components/schemas/";
    let v2_ref = |r: &Value| r.as_str().map(|r| Value::String(r.replacen(V3_REFS, "#/definitions/", 1)));
    match s {
        Value::Object(m) => {
            let nullable = m.get("nullable").and_then(Value::as_bool) == Some(true);
            let mut out = Map::new();
            for (k, v) in m {
                match k.as_str() {
                    "nullable" | "anyOf" | "oneOf" | "not" => {}
                    "type" if nullable => {}
                    "$ref" => {
                        out.extend(v2_ref(v).map(|r| (k.clone(), r)));
                    }
                    // a v3 reference with a description beside it is a v2 `$ref` with siblings
                    "allOf" if v.as_array().is_some_and(|a| a.len() == 1 && a[0].get("$ref").is_some()) => {
                        out.extend(v2_ref(&v[0]["$ref"]).map(|r| ("$ref".to_string(), r)));
                    }
                    "properties" => {
                        let props = v.as_object().map(|p| p.iter().map(|(n, ps)| (n.clone(), v2_schema(ps))).collect()).unwrap_or_default();
                        out.insert(k.clone(), Value::Object(props));
                    }
                    "items" | "additionalProperties" if v.is_object() => {
                        out.insert(k.clone(), v2_schema(v));
                    }
                    "allOf" => {
                        out.insert(k.clone(), Value::Array(v.as_array().map(|a| a.iter().map(v2_schema).collect()).unwrap_or_default()));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// `/openapi/v2`: a Swagger 2.0 document: paths, and under `definitions` the typed
/// definitions of the built-in kinds ([`super::typed_schema::v2_definitions`]) and the
/// schemas of custom resources ([`v2_schema`] of [`custom_schema`]), each kind's with its
/// `x-kubernetes-group-version-kind`, which `kubectl explain --output=plaintext-openapiv2`,
/// client-side validation and kubectl 1.27's apply-patch computation look them up by.
pub fn openapi_v2(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut definitions = (*super::typed_schema::v2_definitions(reg.all())).clone();
    for r in reg.all() {
        if let Some(s) = custom_schema(r) {
            definitions.insert(definition_name(r), v2_schema(&s));
        }
        let coll = collection_path(r);
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        paths.insert(
            format!("{coll}/{{name}}"),
            json!({"patch": {"x-kubernetes-group-version-kind": gvk, "parameters": [{"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true}], "responses": {"200": {"description": "OK"}}}}),
        );
    }
    json!({"swagger": "2.0", "info": {"title": "fedctl", "version": env!("CARGO_PKG_VERSION")}, "paths": paths, "definitions": definitions})
}

/// Content-Type of gnostic's protobuf OpenAPI v2 document (kubectl ≤ 1.27 asks for it on
/// `/openapi/v2` and parses the body as protobuf unconditionally, so a JSON answer fails
/// `kubectl apply`). Spelled with `.v1.0`, as kube-openapi answers: client-go runs
/// `mime.ParseMediaType` on the response type, which rejects the `@` of the request spelling.
pub const OPENAPI_V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// True when an Accept header asks for the protobuf OpenAPI v2 document (either spelling
/// kube-openapi accepts: `…spec.v2@v1.0+protobuf` or `…spec.v2.v1.0+protobuf`).
pub fn wants_openapi_v2_protobuf(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|m| {
            let m = m.split(';').next().unwrap_or("").trim();
            m.starts_with("application/com.github.proto-openapi.spec.v2") && m.ends_with("+protobuf")
        })
    })
}

/// One schema as gnostic's `openapi.v2.Schema` message (field numbers from
/// openapiv2/OpenAPIv2.proto); values (`default`, `enum`, vendor extensions) travel as
/// YAML text in `Any.yaml` (JSON is YAML).
fn pb_schema(s: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    let Some(m) = s.as_object() else { return out };
    let any = |v: &Value| {
        let mut a = Vec::new();
        pb_str(&mut a, 2, &serde_json::to_string(v).unwrap_or_default());
        a
    };
    for (k, v) in m {
        match (k.as_str(), v) {
            ("$ref", Value::String(x)) => pb_str(&mut out, 1, x),
            ("format", Value::String(x)) => pb_str(&mut out, 2, x),
            ("title", Value::String(x)) => pb_str(&mut out, 3, x),
            ("description", Value::String(x)) => pb_str(&mut out, 4, x),
            ("default", v) => pb_bytes(&mut out, 5, &any(v)),
            ("multipleOf", Value::Number(n)) => pb_double(&mut out, 6, n.as_f64().unwrap_or(0.0)),
            ("maximum", Value::Number(n)) => pb_double(&mut out, 7, n.as_f64().unwrap_or(0.0)),
            ("exclusiveMaximum", Value::Bool(b)) => pb_varint_field(&mut out, 8, u64::from(*b)),
            ("minimum", Value::Number(n)) => pb_double(&mut out, 9, n.as_f64().unwrap_or(0.0)),
            ("exclusiveMinimum", Value::Bool(b)) => pb_varint_field(&mut out, 10, u64::from(*b)),
            ("maxLength", Value::Number(n)) => pb_varint_field(&mut out, 11, n.as_i64().unwrap_or(0) as u64),
            ("minLength", Value::Number(n)) => pb_varint_field(&mut out, 12, n.as_i64().unwrap_or(0) as u64),
            ("pattern", Value::String(x)) => pb_str(&mut out, 13, x),
            ("maxItems", Value::Number(n)) => pb_varint_field(&mut out, 14, n.as_i64().unwrap_or(0) as u64),
            ("minItems", Value::Number(n)) => pb_varint_field(&mut out, 15, n.as_i64().unwrap_or(0) as u64),
            ("uniqueItems", Value::Bool(b)) => pb_varint_field(&mut out, 16, u64::from(*b)),
            ("maxProperties", Value::Number(n)) => pb_varint_field(&mut out, 17, n.as_i64().unwrap_or(0) as u64),
            ("minProperties", Value::Number(n)) => pb_varint_field(&mut out, 18, n.as_i64().unwrap_or(0) as u64),
            ("required", Value::Array(a)) => a.iter().filter_map(Value::as_str).for_each(|r| pb_str(&mut out, 19, r)),
            ("enum", Value::Array(a)) => a.iter().for_each(|e| pb_bytes(&mut out, 20, &any(e))),
            // AdditionalPropertiesItem{schema=1 | boolean=2}
            ("additionalProperties", Value::Object(_)) => pb_bytes(&mut out, 21, &pb_msg(1, &pb_schema(v))),
            ("additionalProperties", Value::Bool(b)) => {
                let mut item = Vec::new();
                pb_varint_field(&mut item, 2, u64::from(*b));
                pb_bytes(&mut out, 21, &item);
            }
            // TypeItem{value=1}
            ("type", Value::String(t)) => {
                let mut item = Vec::new();
                pb_str(&mut item, 1, t);
                pb_bytes(&mut out, 22, &item);
            }
            // ItemsItem{schema=1}
            ("items", Value::Object(_)) => pb_bytes(&mut out, 23, &pb_msg(1, &pb_schema(v))),
            ("items", Value::Array(a)) => {
                let mut item = Vec::new();
                a.iter().for_each(|x| pb_bytes(&mut item, 1, &pb_schema(x)));
                pb_bytes(&mut out, 23, &item);
            }
            ("allOf", Value::Array(a)) => a.iter().for_each(|x| pb_bytes(&mut out, 24, &pb_schema(x))),
            // Properties{additional_properties=1: NamedSchema{name=1, value=2}}
            ("properties", Value::Object(ps)) => {
                let mut props = Vec::new();
                for (name, ps) in ps {
                    let mut named = Vec::new();
                    pb_str(&mut named, 1, name);
                    pb_bytes(&mut named, 2, &pb_schema(ps));
                    pb_bytes(&mut props, 1, &named);
                }
                pb_bytes(&mut out, 25, &props);
            }
            // NamedAny{name=1, value=2: Any}
            (x, v) if x.starts_with("x-") => {
                let mut named = Vec::new();
                pb_str(&mut named, 1, x);
                pb_bytes(&mut named, 2, &any(v));
                pb_bytes(&mut out, 31, &named);
            }
            _ => {}
        }
    }
    out
}

fn pb_double(out: &mut Vec<u8>, field: u32, v: f64) {
    pb_varint(out, (u64::from(field) << 3) | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

/// `/openapi/v2` as gnostic's `openapi.v2.Document` protobuf, with the content of
/// [`openapi_v2`]: per object path a PATCH operation carrying the
/// `x-kubernetes-group-version-kind` extension and the `fieldValidation` query parameter,
/// and the custom resources' schemas under `definitions`.
pub fn openapi_v2_protobuf(reg: &Registry) -> Vec<u8> {
    // Field numbers from gnostic's openapiv2/OpenAPIv2.proto.
    let mut paths = Vec::new();
    for r in reg.all() {
        let coll = collection_path(r);
        // QueryParameterSubSchema{in=2, name=4, type=6, unique_items=20}
        let mut query = Vec::new();
        pb_str(&mut query, 2, "query");
        pb_str(&mut query, 4, "fieldValidation");
        pb_str(&mut query, 6, "string");
        pb_varint_field(&mut query, 20, 1);
        let non_body = pb_msg(3, &query); // NonBodyParameter.query_parameter_sub_schema
        let parameter = pb_msg(2, &non_body); // Parameter.non_body_parameter
        let item = pb_msg(1, &parameter); // ParametersItem.parameter
                                          // Responses{response_code=1: NamedResponseValue{name=1, value=2: ResponseValue{response=1: Response{description=1}}}}
        let mut named_resp = Vec::new();
        pb_str(&mut named_resp, 1, "200");
        pb_bytes(&mut named_resp, 2, &pb_msg(1, &pb_msg(1, b"\x0a\x02OK")));
        let responses = pb_msg(1, &named_resp);
        // NamedAny{name=1, value=2: Any{yaml=2}}
        let gvk_yaml = format!("group: {:?}\nversion: {:?}\nkind: {:?}\n", r.group, r.version, r.kind);
        let mut ext = Vec::new();
        pb_str(&mut ext, 1, "x-kubernetes-group-version-kind");
        let mut any = Vec::new();
        pb_str(&mut any, 2, &gvk_yaml);
        pb_bytes(&mut ext, 2, &any);
        // Operation{operation_id=5, parameters=8, responses=9, vendor_extension=13}
        let mut op = Vec::new();
        pb_str(&mut op, 5, &format!("patch{}", r.kind));
        pb_bytes(&mut op, 8, &item);
        pb_bytes(&mut op, 9, &responses);
        pb_bytes(&mut op, 13, &ext);
        let path_item = pb_msg(8, &op); // PathItem.patch
                                        // NamedPathItem{name=1, value=2}
        let mut named = Vec::new();
        pb_str(&mut named, 1, &format!("{coll}/{{name}}"));
        pb_bytes(&mut named, 2, &path_item);
        pb_bytes(&mut paths, 2, &named); // Paths.path
    }
    let mut info = Vec::new();
    pb_str(&mut info, 1, "fedctl");
    pb_str(&mut info, 2, env!("CARGO_PKG_VERSION"));
    // Definitions{additional_properties=1: NamedSchema{name=1, value=2}}
    let mut definitions = builtin_v2_protobuf(reg).to_vec();
    for r in reg.all() {
        if let Some(s) = custom_schema(r) {
            let mut named = Vec::new();
            pb_str(&mut named, 1, &definition_name(r));
            pb_bytes(&mut named, 2, &pb_schema(&v2_schema(&s)));
            pb_bytes(&mut definitions, 1, &named);
        }
    }
    // Document{swagger=1, info=2, paths=8, definitions=9}
    let mut doc = Vec::new();
    pb_str(&mut doc, 1, "2.0");
    pb_bytes(&mut doc, 2, &info);
    pb_bytes(&mut doc, 8, &paths);
    if !definitions.is_empty() {
        pb_bytes(&mut doc, 9, &definitions);
    }
    doc
}

/// The built-in kinds' typed definitions ([`super::typed_schema::v2_definitions`]) as
/// repeated `Definitions.additional_properties` entries, encoded once per set of kinds.
fn builtin_v2_protobuf(reg: &Registry) -> Arc<Vec<u8>> {
    static CACHE: Memo<Vec<u8>> = std::sync::OnceLock::new();
    memo(&CACHE, kinds_key(reg.all()), || {
        let mut out = Vec::new();
        for (name, s) in super::typed_schema::v2_definitions(reg.all()).iter() {
            let mut named = Vec::new();
            pb_str(&mut named, 1, name);
            pb_bytes(&mut named, 2, &pb_schema(s));
            pb_bytes(&mut out, 1, &named);
        }
        out
    })
}

fn pb_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn pb_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    pb_varint(out, u64::from(field) << 3);
    pb_varint(out, v);
}

fn pb_bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    pb_varint(out, (u64::from(field) << 3) | 2);
    pb_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn pb_str(out: &mut Vec<u8>, field: u32, s: &str) {
    pb_bytes(out, field, s.as_bytes());
}

fn pb_msg(field: u32, inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(inner.len() + 6);
    pb_bytes(&mut out, field, inner);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_v2_protobuf_negotiation_and_shape() {
        assert!(wants_openapi_v2_protobuf(Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf")));
        assert!(wants_openapi_v2_protobuf(Some("application/json;q=0.9, application/com.github.proto-openapi.spec.v2.v1.0+protobuf")));
        assert!(!wants_openapi_v2_protobuf(Some("application/json")));
        assert!(!wants_openapi_v2_protobuf(None));
        // the response type must parse as a Go media type: no '@'
        assert!(!OPENAPI_V2_PROTOBUF.contains('@'));
        let doc = openapi_v2_protobuf(&Registry::federation());
        // Document.swagger = "2.0" (field 1, length-delimited), then Document.info (field 2)
        assert_eq!(&doc[..5], b"\x0a\x032.0");
        assert_eq!(doc[5], 0x12);
        let text = String::from_utf8_lossy(&doc);
        assert!(text.contains("/apis/apps/v1/namespaces/{namespace}/deployments/{name}"));
        assert!(text.contains("x-kubernetes-group-version-kind") && text.contains("fieldValidation"));
        // no custom resources, no definitions (Document field 9)
        assert!(!text.contains("stable.example.com"));
    }

    #[test]
    fn custom_resource_schemas_are_in_openapi_v2() {
        let mut crd: Value = serde_yaml::from_str(include_str!("../../testdata/corpus/website-shirt-resource-definition.yaml")).unwrap();
        super::super::defaults::apply("apiextensions.k8s.io", "v1", "CustomResourceDefinition", &mut crd);
        let mut reg = Registry::federation();
        for r in super::super::crd::served_resources(&crd) {
            reg.add(r);
        }
        let doc = openapi_v2(&reg);
        let def = &doc["definitions"]["com.example.stable.v1.Shirt"];
        assert_eq!(def["x-kubernetes-group-version-kind"], json!([{"group": "stable.example.com", "version": "v1", "kind": "Shirt"}]));
        assert_eq!(def["properties"]["spec"]["properties"]["color"]["type"], "string");
        // the protobuf form carries the same definition: its name, the GVK extension, fields
        let pb = openapi_v2_protobuf(&reg);
        let text = String::from_utf8_lossy(&pb);
        assert!(text.contains("com.example.stable.v1.Shirt") && text.contains(r#"[{"group":"stable.example.com","version":"v1","kind":"Shirt"}]"#), "{text}");
        assert!(text.contains("color") && text.contains("size"));
        // v2 has no nullable, anyOf, oneOf or not
        let v2 = v2_schema(&json!({"type": "object", "properties": {"a": {"type": "string", "nullable": true}, "b": {"anyOf": [{"type": "integer"}], "x-kubernetes-int-or-string": true}}}));
        assert_eq!(v2, json!({"type": "object", "properties": {"a": {}, "b": {"x-kubernetes-int-or-string": true}}}));
    }
}
