//! Acceptance: malformed, invalid and unauthenticated requests get kube's exact Status and leave etcd untouched.

mod common;

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{assert_same_dump, etcd_dump, ApiClient, FedServer, Reply};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

struct Env {
    api: ApiClient,
    server: FedServer,
    etcd: EtcdServer,
}

fn env() -> Env {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    Env { api: server.client(), server, etcd }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

impl Env {
    /// Sends one request through `send` and asserts that etcd holds exactly what it held
    /// before (full keyspace dump: keys, values, revisions).
    async fn untouched<F, Fut>(&self, what: &str, send: F) -> Reply
    where
        F: FnOnce(ApiClient) -> Fut,
        Fut: std::future::Future<Output = Reply>,
    {
        let before = etcd_dump(&self.etcd.endpoint()).await;
        assert!(!before.is_empty(), "the server bootstraps namespaces, so etcd is not empty");
        let reply = send(self.api.clone()).await;
        let after = etcd_dump(&self.etcd.endpoint()).await;
        assert_same_dump(&before, &after, what);
        reply
    }

    async fn raw(&self, what: &str, method: &str, path: &str, ct: &str, body: Vec<u8>) -> Reply {
        let (m, p, c) = (method.to_string(), path.to_string(), ct.to_string());
        self.untouched(what, move |api| async move { api.request(&m, &p, Some(&c), Some(body)).await }).await
    }
}

#[tokio::test]
async fn malformed_json_is_400() {
    let e = env();
    let r = e.raw("malformed JSON", "POST", CMS, "application/json", br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}"#.to_vec()).await;
    let s = r.assert_status(400, "BadRequest");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn malformed_yaml_is_400() {
    let e = env();
    let body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n data: : :\n".to_vec();
    let r = e.raw("malformed YAML", "POST", CMS, "application/yaml", body).await;
    r.assert_status(400, "BadRequest");
}

#[tokio::test]
async fn yaml_body_that_is_not_an_object_is_400() {
    let e = env();
    let r = e.raw("YAML list body", "POST", CMS, "application/yaml", b"- a\n- b\n".to_vec()).await;
    r.assert_status(400, "BadRequest");
}

#[tokio::test]
async fn wrong_kind_is_400() {
    let e = env();
    let body = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    let r = e.raw("wrong kind", "POST", CMS, "application/json", serde_json::to_vec(&body).unwrap()).await;
    let s = r.assert_status(400, "BadRequest");
    assert_eq!(s["message"], "the kind in the data (Secret) does not match the expected kind (ConfigMap)");
}

#[tokio::test]
async fn wrong_api_version_is_400() {
    let e = env();
    let body = json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let r = e.raw("wrong apiVersion", "POST", CMS, "application/json", serde_json::to_vec(&body).unwrap()).await;
    let s = r.assert_status(400, "BadRequest");
    assert_eq!(s["message"], "the API version in the data (apps/v1) does not match the expected API version (v1)");
}

#[tokio::test]
async fn invalid_name_is_422_with_cause() {
    let e = env();
    let r = e.raw("invalid name", "POST", CMS, "application/json", serde_json::to_vec(&configmap("Bad_Name")).unwrap()).await;
    let s = r.assert_status(422, "Invalid");
    let detail = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    assert_eq!(s["message"], format!("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {detail}"));
    assert_eq!(s["details"]["name"], "Bad_Name");
    assert_eq!(s["details"]["kind"], "ConfigMap");
    assert!(s["details"].get("group").is_none(), "core group is omitted: {s}");
    let causes = s["details"]["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0]["field"], "metadata.name");
    assert_eq!(causes[0]["reason"], "FieldValueInvalid");
    assert_eq!(causes[0]["message"], format!("Invalid value: \"Bad_Name\": {detail}"));
}

#[tokio::test]
async fn invalid_namespace_name_is_422_with_label_message() {
    let e = env();
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Bad_Name"}});
    let r = e.raw("invalid namespace name", "POST", "/api/v1/namespaces", "application/json", serde_json::to_vec(&body).unwrap()).await;
    let s = r.assert_status(422, "Invalid");
    assert_eq!(
        s["message"],
        "Namespace \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    );
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
}

#[tokio::test]
async fn missing_name_is_422() {
    let e = env();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": {"k": "v"}});
    let r = e.raw("missing name", "POST", CMS, "application/json", serde_json::to_vec(&body).unwrap()).await;
    let s = r.assert_status(422, "Invalid");
    assert_eq!(s["message"], "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required");
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
    assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
}

#[tokio::test]
async fn body_over_3mib_is_413() {
    let e = env();
    let mut cm = configmap("big");
    cm["data"]["k"] = json!("x".repeat(3 * 1024 * 1024));
    let body = serde_json::to_vec(&cm).unwrap();
    assert!(body.len() > 3 * 1024 * 1024);
    let r = e.raw("oversized body", "POST", CMS, "application/json", body).await;
    let s = r.assert_status(413, "RequestEntityTooLarge");
    assert_eq!(s["message"], "Request entity too large: limit is 3145728");
}

#[tokio::test]
async fn unknown_resource_path_is_404() {
    let e = env();
    for path in ["/api/v1/namespaces/default/widgets", "/apis/apps/v1/widgets", "/apis/nope.example.com/v1/things", "/api/v2/pods"] {
        let p = path.to_string();
        let r = e.untouched(path, move |api| async move { api.get(&p).await }).await;
        let s = r.assert_status(404, "NotFound");
        assert_eq!(s["message"], "the server could not find the requested resource", "{path}");
        let p = path.to_string();
        let r = e.untouched(path, move |api| async move { api.post(&p, &configmap("x")).await }).await;
        r.assert_status(404, "NotFound");
    }
    // `/namespaces/default/widgets` reads as namespace "default", subresource "widgets": an
    // unknown subresource is a 404 for every verb and must never write the namespace
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"hijacked": "yes"}}});
    for method in ["PUT", "PATCH", "DELETE", "POST"] {
        let (m, body) = (method.to_string(), ns.clone());
        let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let r = e
            .untouched("write to an unknown subresource", move |api| async move { api.request(&m, "/api/v1/namespaces/default/widgets", Some(ct), Some(serde_json::to_vec(&body).unwrap())).await })
            .await;
        let s = r.assert_status(404, "NotFound");
        assert_eq!(s["message"], "the server could not find the requested resource", "{method}");
    }
    let r = e.untouched("unknown subresource of a configmap", |api| async move { api.get(&format!("{CMS}/x/scale")).await }).await;
    r.assert_status(404, "NotFound");
}

#[tokio::test]
async fn missing_namespace_is_404() {
    let e = env();
    let r = e.untouched("create in missing namespace", |api| async move { api.post("/api/v1/namespaces/nope/configmaps", &configmap("x")).await }).await;
    let s = r.assert_status(404, "NotFound");
    assert_eq!(s["message"], "namespaces \"nope\" not found");
    assert_eq!(s["details"], json!({"name": "nope", "kind": "namespaces"}));
}

/// `default`, `kube-system` and `kube-public` may not be deleted (NamespaceLifecycle's
/// immortal namespaces): 403, nothing written, not even with dryRun; another namespace can be.
#[tokio::test]
async fn immortal_namespaces_may_not_be_deleted() {
    let e = env();
    for ns in ["default", "kube-system", "kube-public"] {
        if e.api.get(&format!("/api/v1/namespaces/{ns}")).await.status == 404 {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            assert_eq!(e.api.post("/api/v1/namespaces", &obj).await.status, 201, "{ns}");
        }
        for path in [format!("/api/v1/namespaces/{ns}"), format!("/api/v1/namespaces/{ns}?dryRun=All")] {
            let r = e.untouched(&format!("DELETE {path}"), |api| async move { api.delete(&path).await }).await;
            let s = r.assert_status(403, "Forbidden");
            assert_eq!(s["message"], format!("namespaces \"{ns}\" is forbidden: this namespace may not be deleted"));
        }
        assert_eq!(e.api.get(&format!("/api/v1/namespaces/{ns}")).await.status, 200, "{ns} is still there");
    }
    let other = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mortal"}});
    assert_eq!(e.api.post("/api/v1/namespaces", &other).await.status, 201);
    let r = e.api.delete("/api/v1/namespaces/mortal").await;
    assert!(r.status == 200 || r.status == 202, "{}", r.text);
}

/// Creates follow the namespace's life (the server answers from its namespace cache when it
/// can): a namespace created a moment ago takes content at once; a terminating one refuses it
/// with 403 and nothing written; once gone, 404.
#[tokio::test]
async fn creates_follow_the_namespace_lifecycle() {
    let e = env();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "life"}});
    assert_eq!(e.api.post("/api/v1/namespaces", &ns).await.status, 201);
    let mut held = configmap("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(e.api.post("/api/v1/namespaces/life/configmaps", &held).await.status, 201, "content right after the namespace");
    let r = e.api.delete("/api/v1/namespaces/life").await;
    assert!(r.status == 200 || r.status == 202, "{}", r.text);
    // the finalizer holds the namespace in Terminating; the cache may lag by a watch event
    let mut refused = None;
    for i in 0..100 {
        let r = e.api.post("/api/v1/namespaces/life/configmaps", &configmap(&format!("late-{i}"))).await;
        if r.status == 403 {
            refused = Some((i, r));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (i, r) = refused.expect("creates in a terminating namespace are refused");
    // named by the object refused, as kube-apiserver's NamespaceLifecycle does
    let want = format!("configmaps \"late-{i}\" is forbidden: unable to create new content in namespace life because it is being terminated");
    assert_eq!(r.json["message"], want.as_str(), "{}", r.text);
    // the namespace finalizer has removed what it can and holds at `held` (marked deleted)
    let mut settled = false;
    for _ in 0..200 {
        let l = e.api.get("/api/v1/namespaces/life/configmaps").await;
        let items = l.json["items"].as_array().cloned().unwrap_or_default();
        if items.len() == 1 && items[0]["metadata"]["name"] == "held" && items[0]["metadata"]["deletionTimestamp"].is_string() {
            settled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(settled, "the namespace's content is removed but for the object a finalizer holds");
    let r = e.untouched("create in a terminating namespace", |api| async move { api.post("/api/v1/namespaces/life/configmaps", &configmap("refused")).await }).await;
    r.assert_status(403, "Forbidden");
    // release it: the namespace goes, and creates get 404
    assert_eq!(e.api.merge_patch("/api/v1/namespaces/life/configmaps/held", &json!({"metadata": {"finalizers": null}})).await.status, 200);
    let mut gone = false;
    for _ in 0..200 {
        if e.api.get("/api/v1/namespaces/life").await.status == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(gone, "the namespace is removed once its content is");
    let r = e.untouched("create in a deleted namespace", |api| async move { api.post("/api/v1/namespaces/life/configmaps", &configmap("after")).await }).await;
    r.assert_status(404, "NotFound");
}

/// A mistyped workload is refused with the field at fault, as kube-apiserver's apps
/// validation does, and nothing is written.
#[tokio::test]
async fn invalid_workloads_are_422_with_the_field() {
    let e = env();
    let deploy = |spec: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": spec});
    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let cases = [
        (deploy(json!({"replicas": "six", "selector": {"matchLabels": {"app": "web"}}, "template": template})), "spec.replicas", "must be of type integer"),
        (deploy(json!({"replicas": -1, "selector": {"matchLabels": {"app": "web"}}, "template": template})), "spec.replicas", "greater than or equal to 0"),
        (deploy(json!({"replicas": 2, "selector": {"matchLabels": {"app": "other"}}, "template": template})), "spec.template.metadata.labels", "`selector` does not match template `labels`"),
        (deploy(json!({"replicas": 2, "selector": {}, "template": template})), "spec.selector", "empty selector is invalid for deployment"),
    ];
    for (obj, field, msg) in cases {
        let r = e.untouched(field, |api| async move { api.post("/apis/apps/v1/namespaces/default/deployments", &obj).await }).await;
        let s = r.assert_status(422, "Invalid");
        let causes = s["details"]["causes"].as_array().cloned().unwrap_or_default();
        assert!(causes.iter().any(|c| c["field"] == field && c["message"].as_str().unwrap_or("").contains(msg)), "{field}: {s}");
    }
    let ok = deploy(json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}));
    assert_eq!(e.api.post("/apis/apps/v1/namespaces/default/deployments", &ok).await.status, 201);
}

#[tokio::test]
async fn stale_resource_version_put_is_409_conflict() {
    let e = env();
    let created = e.api.post(CMS, &configmap("cas")).await;
    let stale_rv = created.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let updated = e.api.merge_patch(&format!("{CMS}/cas"), &json!({"data": {"k": "newer"}})).await;
    let current = updated.ok().clone();
    assert_ne!(current["metadata"]["resourceVersion"], stale_rv);

    let mut stale = created.json.clone();
    stale["data"]["k"] = json!("lost update");
    let r = e.untouched("PUT with stale resourceVersion", |api| async move { api.put(&format!("{CMS}/cas"), &stale).await }).await;
    let s = r.assert_status(409, "Conflict");
    assert_eq!(s["message"], "Operation cannot be fulfilled on configmaps \"cas\": the object has been modified; please apply your changes to the latest version and try again");
    assert_eq!(s["details"], json!({"name": "cas", "kind": "configmaps"}));
    let now = e.api.get(&format!("{CMS}/cas")).await;
    assert_eq!(now.ok(), &current, "the object is unchanged");
}

#[tokio::test]
async fn create_twice_is_409_already_exists() {
    let e = env();
    let first = e.api.post(CMS, &configmap("dup")).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let mut second_body = configmap("dup");
    second_body["data"]["k"] = json!("second");
    let r = e.untouched("second create", |api| async move { api.post(CMS, &second_body).await }).await;
    let s = r.assert_status(409, "AlreadyExists");
    assert_eq!(s["message"], "configmaps \"dup\" already exists");
    assert_eq!(s["details"], json!({"name": "dup", "kind": "configmaps"}));
    let got = e.api.get(&format!("{CMS}/dup")).await;
    assert_eq!(got.ok()["data"]["k"], "v");
}

#[tokio::test]
async fn unauthenticated_request_is_401() {
    let e = env();
    let anon = e.server.anonymous_client();
    for (method, path) in [("GET", CMS), ("POST", CMS), ("GET", "/api"), ("GET", "/apis"), ("GET", "/openapi/v2")] {
        let body = (method == "POST").then(|| serde_json::to_vec(&configmap("anon")).unwrap());
        let (a, m, p) = (anon.clone(), method.to_string(), path.to_string());
        let r = e.untouched("anonymous request", move |_| async move { a.request(&m, &p, Some("application/json"), body).await }).await;
        let s = r.assert_status(401, "Unauthorized");
        assert_eq!(s["message"], "Unauthorized", "{method} {path}");
    }
    // health endpoints stay open, as kube-apiserver's are to anonymous probes
    assert_eq!(anon.get("/healthz").await.status, 200);
}

/// `GET /version/` answers as `/version` does, to anyone, as kube-apiserver's does (a client
/// asking with the trailing slash got a 401 or 404).
#[tokio::test]
async fn version_answers_with_a_trailing_slash() {
    let e = env();
    let anon = e.server.anonymous_client();
    let plain = anon.get("/version").await;
    let slash = anon.get("/version/").await;
    assert_eq!((plain.status, slash.status), (200, 200), "{} / {}", plain.text, slash.text);
    assert!(plain.json["gitVersion"].as_str().is_some_and(|v| v.starts_with("v1.")), "{}", plain.text);
    assert_eq!(plain.json, slash.json);
    // other unknown paths still need a caller, then are 404
    assert_eq!(anon.get("/versionz").await.status, 401);
    assert_eq!(e.api.get("/versionz").await.status, 404);
}

#[tokio::test]
async fn bad_bearer_token_is_401() {
    let e = env();
    for token in ["nope", "abcdef.0123456789abcdef", ""] {
        let c = e.server.token_client(token);
        let r = e.untouched("bad bearer token", move |_| async move { c.post(CMS, &configmap("tok")).await }).await;
        let s = r.assert_status(401, "Unauthorized");
        assert_eq!(s["message"], "Unauthorized");
    }
}

#[tokio::test]
async fn garbage_label_selector_is_400() {
    let e = env();
    for sel in ["a%20in%20(", "!!!", "a=b=c", "a%20notin%20b", "%3Dx"] {
        let p = format!("{CMS}?labelSelector={sel}");
        let r = e.untouched("garbage label selector", move |api| async move { api.get(&p).await }).await;
        r.assert_status(400, "BadRequest");
        let p = format!("{CMS}?watch=1&labelSelector={sel}");
        let r = e.untouched("garbage label selector on watch", move |api| async move { api.get(&p).await }).await;
        r.assert_status(400, "BadRequest");
    }
    let p = format!("{CMS}?fieldSelector=spec.nope%3Dx");
    let r = e.untouched("unsupported field selector", move |api| async move { api.get(&p).await }).await;
    r.assert_status(400, "BadRequest");
}

#[tokio::test]
async fn bad_continue_token_is_400() {
    use base64::Engine;
    let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let e = env();
    let tokens = [
        "garbage!".to_string(),
        enc("{not json"),
        enc(r#"{"v":"meta.k8s.io/v2","rv":5,"start":"a\u0000"}"#),
        enc(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"../kube-system/x"}"#),
        enc(r#"{"v":"meta.k8s.io/v1","rv":5,"start":""}"#),
    ];
    for tok in tokens {
        let p = format!("{CMS}?limit=1&continue={tok}");
        let r = e.untouched("bad continue token", move |api| async move { api.get(&p).await }).await;
        let s = r.assert_status(400, "BadRequest");
        assert!(s["message"].as_str().is_some_and(|m| m.starts_with("continue key is not valid")), "{s}");
    }
}

#[tokio::test]
async fn strict_field_validation_refuses_unknown_fields() {
    let e = env();
    let mut cm = configmap("typo");
    cm["dataa"] = json!({"x": "y"});
    let body = serde_json::to_vec(&cm).unwrap();
    let r = e.raw("unknown field, Strict", "POST", &format!("{CMS}?fieldValidation=Strict"), "application/json", body.clone()).await;
    let s = r.assert_status(400, "BadRequest");
    assert_eq!(s["message"], "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dataa\"");
    let r = e.raw("bad fieldValidation value", "POST", &format!("{CMS}?fieldValidation=Loose"), "application/json", body.clone()).await;
    r.assert_status(400, "BadRequest");
    // Ignore: accepted (the unknown field is kept, as for any JSON the server stores)
    let r = e.api.request("POST", &format!("{CMS}?fieldValidation=Ignore"), Some("application/json"), Some(body)).await;
    assert_eq!(r.status, 201, "{:?}", r.json);
}

/// Keys repeated within one object, as kube-apiserver treats them: refused under
/// `fieldValidation=Strict` (400 `strict decoding error: duplicate field "<path>"`, nothing
/// written), accepted with a `Warning` under the default (Warn), silently under Ignore; the
/// stored object keeps the last occurrence. YAML bodies are reported by line, as yaml.v2 does.
#[tokio::test]
async fn duplicate_keys_follow_field_validation() {
    let e = env();
    let json_body = |name: &str| format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"a":"1","a":"2"}}}},"data":{{"k":"first","k":"last"}}}}"#).into_bytes();

    // Strict: 400 naming every repeated field by path, nothing written
    let r = e.raw("duplicate keys, Strict", "POST", &format!("{CMS}?fieldValidation=Strict"), "application/json", json_body("dup-strict")).await;
    let s = r.assert_status(400, "BadRequest");
    assert_eq!(s["message"], "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"metadata.labels.a\", duplicate field \"data.k\"");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    // default (Warn): created, one warning per repeated field, last occurrence kept
    let r = e.api.request("POST", CMS, Some("application/json"), Some(json_body("dup-warn"))).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.warnings, ["duplicate field \"metadata.labels.a\"", "duplicate field \"data.k\""]);
    assert_eq!(r.json["data"]["k"], "last");
    assert_eq!(r.json["metadata"]["labels"]["a"], "2");
    let got = e.api.get(&format!("{CMS}/dup-warn")).await;
    assert_eq!(got.ok()["data"], json!({"k": "last"}));

    // Ignore: created without warnings
    let r = e.api.request("POST", &format!("{CMS}?fieldValidation=Ignore"), Some("application/json"), Some(json_body("dup-ignore"))).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    // a key both unknown and repeated is reported once, as unknown (kube's typed kinds)
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup-unknown"},"extra":1,"extra":2}"#.to_vec();
    let r = e.raw("unknown and repeated, Strict", "POST", &format!("{CMS}?fieldValidation=Strict"), "application/json", body).await;
    assert_eq!(r.assert_status(400, "BadRequest")["message"], "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"extra\"");

    // PUT and merge PATCH are checked the same way
    let cur = e.api.get(&format!("{CMS}/dup-warn")).await;
    let rv = cur.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let put = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"dup-warn","resourceVersion":"{rv}"}},"data":{{"k":"x","k":"y"}}}}"#).into_bytes();
    let r = e.raw("duplicate keys in PUT, Strict", "PUT", &format!("{CMS}/dup-warn?fieldValidation=Strict"), "application/json", put).await;
    assert!(r.assert_status(400, "BadRequest")["message"].as_str().unwrap().ends_with("strict decoding error: duplicate field \"data.k\""), "{}", r.text);
    let patch = br#"{"data":{"k":"x","k":"y"}}"#.to_vec();
    let r = e.raw("duplicate keys in merge patch, Strict", "PATCH", &format!("{CMS}/dup-warn?fieldValidation=Strict"), "application/merge-patch+json", patch.clone()).await;
    r.assert_status(400, "BadRequest");
    let r = e.api.request("PATCH", &format!("{CMS}/dup-warn"), Some("application/merge-patch+json"), Some(patch)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.warnings, ["duplicate field \"data.k\""]);
    assert_eq!(r.json["data"]["k"], "y");

    // YAML: each repetition by line
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dup-yaml\ndata:\n  k: first\n  k: last\n".to_vec();
    let r = e.raw("duplicate keys in YAML, Strict", "POST", &format!("{CMS}?fieldValidation=Strict"), "application/yaml", yaml.clone()).await;
    assert_eq!(
        r.assert_status(400, "BadRequest")["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: yaml: unmarshal errors:\n  line 7: key \"k\" already set in map"
    );
    let r = e.api.request("POST", CMS, Some("application/yaml"), Some(yaml)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.warnings, ["line 7: key \"k\" already set in map"]);
    assert_eq!(r.json["data"]["k"], "last");
}

/// Selector forms kube-apiserver accepts that a real client sent: a field selector with an
/// empty term (`metadata.name=a,`) lists as without it, an escaped comma is part of the
/// value, and label selectors compare integers with `>`/`<`; a label selector ending in a
/// comma stays a 400 (kube-apiserver refuses it too).
#[tokio::test]
async fn selector_forms_kube_apiserver_accepts() {
    let e = env();
    for (name, n) in [("a", "1"), ("b", "7")] {
        let mut cm = configmap(name);
        cm["metadata"]["labels"] = json!({"n": n});
        assert_eq!(e.api.post(CMS, &cm).await.status, 201);
    }
    let names = |r: &Reply| -> Vec<String> { r.json["items"].as_array().map(|a| a.iter().filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string)).collect()).unwrap_or_default() };
    for q in ["fieldSelector=metadata.name%3Da%2C", "fieldSelector=%2Cmetadata.name%3Da", "fieldSelector=metadata.name%3Da%2C%2Cmetadata.namespace%3Ddefault", "labelSelector=n%3C5"] {
        let r = e.api.get(&format!("{CMS}?{q}")).await;
        assert_eq!(r.status, 200, "{q}: {}", r.text);
        assert_eq!(names(&r), vec!["a".to_string()], "{q}");
    }
    let r = e.api.get(&format!("{CMS}?labelSelector=n%3E5")).await;
    assert_eq!(names(&r), vec!["b".to_string()]);
    let r = e.api.get(&format!("{CMS}?fieldSelector=metadata.name%3Da%5C%2Cb")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(names(&r).is_empty(), "the escaped comma belongs to the name");
    for q in ["labelSelector=n%3D1%2C", "labelSelector=n%3Ex", "fieldSelector=metadata.name%3Da%5Cx"] {
        let r = e.untouched(q, move |api| async move { api.get(&format!("{CMS}?{q}")).await }).await;
        r.assert_status(400, "BadRequest");
    }
}

/// Path and query forms kube-apiserver accepts: trailing slashes on discovery, collection and
/// object paths; `watch` as `1`, `true`, `True` or even empty (only absent, `0` and `false`
/// are false, as apimachinery converts a boolean parameter); label selectors with spaces
/// around operators, values and commas.
#[tokio::test]
async fn path_and_query_forms_kube_apiserver_accepts() {
    let e = env();
    for (name, n) in [("a", "1"), ("b", "7")] {
        let mut cm = configmap(name);
        cm["metadata"]["labels"] = json!({"n": n});
        assert_eq!(e.api.post(CMS, &cm).await.status, 201);
    }
    for (path, kind) in [("/api/", "APIVersions"), ("/apis/", "APIGroupList"), ("/apis/apps/", "APIGroup"), ("/api/v1/", "APIResourceList"), ("/apis/apps/v1/", "APIResourceList")] {
        let r = e.api.get(path).await;
        assert_eq!((r.status, r.json["kind"].as_str()), (200, Some(kind)), "{path}: {}", r.text);
    }
    let r = e.api.get(&format!("{CMS}/")).await;
    assert_eq!((r.status, r.json["kind"].as_str()), (200, Some("ConfigMapList")), "{}", r.text);
    let r = e.api.get(&format!("{CMS}/a/")).await;
    assert_eq!((r.status, r.json["metadata"]["name"].as_str()), (200, Some("a")), "{}", r.text);

    // watch=<true> streams events (the watch ends after timeoutSeconds); watch=<false> lists
    for v in ["1", "true", "True", ""] {
        let r = e.api.get(&format!("{CMS}?watch={v}&timeoutSeconds=1")).await;
        assert_eq!(r.status, 200, "watch={v}: {}", r.text);
        assert!(r.text.lines().filter(|l| !l.is_empty()).all(|l| l.contains("\"type\":\"ADDED\"")) && r.text.contains("\"name\":\"b\""), "watch={v}: {}", r.text);
    }
    for v in ["0", "false", "FALSE"] {
        let r = e.api.get(&format!("{CMS}?watch={v}")).await;
        assert_eq!((r.status, r.json["kind"].as_str()), (200, Some("ConfigMapList")), "watch={v}: {}", r.text);
    }

    let names = |r: &Reply| -> Vec<String> { r.json["items"].as_array().map(|a| a.iter().filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string)).collect()).unwrap_or_default() };
    for (sel, want) in [
        ("n%20in%20(1,%207)", vec!["a", "b"]),
        ("n%20%3D%201", vec!["a"]),
        ("%20n%3D%3D1%20", vec!["a"]),
        ("n%20!%3D%201", vec!["b"]),
        ("n%20notin%20(%201%20)", vec!["b"]),
        ("n%3D7%20,%20!missing", vec!["b"]),
        ("%20n%20", vec!["a", "b"]),
    ] {
        let r = e.api.get(&format!("{CMS}?labelSelector={sel}")).await;
        assert_eq!(r.status, 200, "{sel}: {}", r.text);
        assert_eq!(names(&r), want, "{sel}");
    }
}

/// Values of the wrong JSON type in a built-in kind are refused as kube-apiserver refuses
/// them when it decodes the body into the kind's type (400), and nothing is written: a
/// ConfigMap's `data` value that is a number, a Pod's `containers` that is a string, a
/// Service port that is a string; on create and on update.
#[tokio::test]
async fn values_of_the_wrong_type_are_400_and_write_nothing() {
    let e = env();
    let mut cm = configmap("typed");
    cm["data"] = json!({"k": 5});
    let r = e.raw("number in data", "POST", CMS, "application/json", serde_json::to_vec(&cm).unwrap()).await;
    let s = r.assert_status(400, "BadRequest");
    let msg = s["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: invalid type: integer `5`"), "{msg}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "nope"}});
    let r = e.raw("string containers", "POST", "/api/v1/namespaces/default/pods", "application/json", serde_json::to_vec(&pod).unwrap()).await;
    r.assert_status(400, "BadRequest");
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": "http"}]}});
    let r = e.raw("string port", "POST", "/api/v1/namespaces/default/services", "application/json", serde_json::to_vec(&svc).unwrap()).await;
    r.assert_status(400, "BadRequest");
    // the same kinds with the right types are accepted; an update with a wrong type is not
    let r = e.api.post(CMS, &configmap("typed")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut bad = r.json.clone();
    bad["data"] = json!({"k": true});
    let r = e.raw("bool in data", "PUT", &format!("{CMS}/typed"), "application/json", serde_json::to_vec(&bad).unwrap()).await;
    r.assert_status(400, "BadRequest");
}
