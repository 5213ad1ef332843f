//! CustomResourceDefinitions and their custom resources, with kubectl 1.27 and 1.33 against
//! the federation (real etcd and server) and against fedsim: CRDs get `NamesAccepted` and
//! `Established`, their custom resources are served with structural-schema validation (422
//! causes, nothing written), pruning, defaults, `status` and `scale` subresources, printer
//! columns, several versions, CEL rules, OpenAPI for `kubectl explain`; deleting a CRD
//! deletes its custom resources; a restarted server serves them again.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl, Run};
use common::procs::FedsimProcess;
use common::server::FedServer;
use serde_json::Value;

/// A CRD of our own making that uses every feature: two served versions (v1 stored),
/// status and scale subresources, printer columns, short names and a category, required
/// fields, an enum, bounds, a default, a preserved free-form field and CEL rules (one of them
/// with a function of Kubernetes' CEL libraries the interpreter lacks).
const WIDGETS: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.fedctl.io
spec:
  group: test.fedctl.io
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wdg]
    categories: [fedctl-test]
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Phase
      type: string
      jsonPath: .status.phase
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What a widget should be.
            required: [color]
            x-kubernetes-validations:
            - rule: "self.replicas <= 5 || self.size == 'L'"
              message: more than 5 replicas need size L
            properties:
              color:
                type: string
                description: The widget's colour.
                enum: [red, blue]
              size:
                type: string
                description: S, M or L.
                default: M
              replicas:
                type: integer
                minimum: 0
                maximum: 10
                default: 1
              free:
                type: object
                x-kubernetes-preserve-unknown-fields: true
              homepage:
                type: string
                x-kubernetes-validations:
                - rule: isURL(self)
          status:
            type: object
            properties:
              phase:
                type: string
              replicas:
                type: integer
"#;

fn widget(name: &str, spec: &str) -> String {
    format!("apiVersion: test.fedctl.io/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}")
}

fn corpus(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus").join(file).to_string_lossy().to_string()
}

#[track_caller]
fn failed(run: &Run) -> String {
    assert_ne!(run.code, Some(0), "kubectl succeeded but should not have: {}", run.stdout);
    run.stderr.clone()
}

fn apply(k: &Kubectl, yaml: &str, extra: &[&str]) -> Run {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    k.run_with_stdin(&args, Some(yaml))
}

fn get_json(k: &Kubectl, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    k.run(&a).json()
}

/// Retries `f` until it returns true (CRD changes are served within a second).
fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_established(k: &Kubectl, crd: &str) {
    let run = k.run(&["wait", "--for", "condition=established", "--timeout", "10s", &format!("crd/{crd}")]);
    run.ok();
}

/// Every check of one CRD's lifecycle with kubectl `k` (the federation or a fedsim).
fn widget_checks(k: &Kubectl) {
    // a webhook conversion is refused with a clear 422, nothing stored
    let webhook = WIDGETS
        .replace("widgets.test.fedctl.io", "gadgets.test.fedctl.io")
        .replace("plural: widgets", "plural: gadgets")
        .replace("singular: widget", "singular: gadget")
        .replace("kind: Widget", "kind: Gadget")
        .replace("shortNames: [wdg]", "shortNames: [gdg]")
        .replace(
            "  scope: Namespaced\n",
            "  scope: Namespaced\n  conversion:\n    strategy: Webhook\n    webhook:\n      conversionReviewVersions: [v1]\n      clientConfig:\n        url: https://127.0.0.1:1/convert\n",
        );
    let err = failed(&apply(k, &webhook, &[]));
    assert!(err.contains("is invalid") && err.contains("spec.conversion.strategy") && err.contains("webhook conversion is not supported"), "{err}");
    assert!(failed(&k.run(&["get", "crd", "gadgets.test.fedctl.io"])).contains("NotFound"));
    // a CRD with two storage versions is refused
    let two = WIDGETS.replace("    storage: false\n", "    storage: true\n");
    let err = failed(&apply(k, &two, &[]));
    assert!(err.contains("spec.versions") && err.contains("must have exactly one version marked as storage version"), "{err}");

    apply(k, WIDGETS, &[]).ok();
    wait_established(k, "widgets.test.fedctl.io");
    let crd = get_json(k, &["crd", "widgets.test.fedctl.io"]);
    let conds: Vec<(String, String)> = crd["status"]["conditions"].as_array().unwrap().iter().map(|c| (c["type"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string())).collect();
    assert!(conds.contains(&("NamesAccepted".into(), "True".into())) && conds.contains(&("Established".into(), "True".into())), "{conds:?}");
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));
    // a second apply of the CRD changes nothing
    let rv = crd["metadata"]["resourceVersion"].clone();
    assert!(apply(k, WIDGETS, &[]).ok().contains("unchanged"));
    assert_eq!(get_json(k, &["crd", "widgets.test.fedctl.io"])["metadata"]["resourceVersion"], rv);

    // discovery: short name, category, kubectl api-resources
    let out = k.run(&["api-resources", "--api-group", "test.fedctl.io", "--no-headers"]).ok().to_string();
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["widgets", "wdg", "test.fedctl.io/v1", "true", "Widget"]), "{out}");

    // create with defaults; unknown fields refused by kubectl's default (Strict), pruned otherwise
    let w1 = widget("w1", "  color: red\n  junk: 1\n  free:\n    anything: [1, 2]\n");
    let err = failed(&apply(k, &w1, &[]));
    assert!(err.contains("unknown field \"spec.junk\""), "{err}");
    apply(k, &w1, &["--validate=false"]).ok();
    let obj = get_json(k, &["widget", "w1"]);
    assert!(obj["spec"].get("junk").is_none(), "pruned: {obj}");
    assert_eq!(obj["spec"]["free"]["anything"], serde_json::json!([1, 2]), "preserved: {obj}");
    assert_eq!(obj["spec"]["size"], "M", "defaulted: {obj}");
    assert_eq!(obj["spec"]["replicas"], 1, "defaulted: {obj}");
    assert_eq!(obj["metadata"]["generation"], 1);

    // invalid objects: 422 with kube-apiserver's causes, nothing written
    let bad = widget("bad", "  color: green\n  replicas: 20\n");
    let err = failed(&apply(k, &bad, &[]));
    assert!(err.contains("The Widget \"bad\" is invalid"), "{err}");
    assert!(err.contains("spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\""), "{err}");
    assert!(err.contains("spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10"), "{err}");
    let err = failed(&apply(k, &widget("bad", "  size: S\n"), &[]));
    assert!(err.contains("spec.color: Required value"), "{err}");
    let err = failed(&apply(k, &widget("bad", "  color: red\n  replicas: \"two\"\n"), &[]));
    assert!(err.contains("spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""), "{err}");
    // CEL rule
    let err = failed(&apply(k, &widget("bad", "  color: red\n  replicas: 7\n"), &[]));
    assert!(err.contains("spec: Invalid value: \"object\": more than 5 replicas need size L"), "{err}");
    assert!(failed(&k.run(&["get", "widget", "bad"])).contains("NotFound"));
    apply(k, &widget("big", "  color: blue\n  replicas: 7\n  size: L\n"), &[]).ok();
    // a rule the CEL interpreter cannot evaluate (Kubernetes' URL library) is a warning, never
    // a silent pass
    let run = apply(k, &widget("linked", "  color: red\n  homepage: https://example.com/\n"), &[]);
    run.ok();
    assert!(run.stderr.contains("Warning: spec.homepage: x-kubernetes-validations rule \"isURL(self)\" was not checked"), "{}", run.stderr);

    // server-side apply, twice: the second changes nothing
    let w2 = widget("w2", "  color: blue\n");
    apply(k, &w2, &["--server-side"]).ok();
    let rv = get_json(k, &["widget", "w2"])["metadata"]["resourceVersion"].clone();
    apply(k, &w2, &["--server-side"]).ok();
    assert_eq!(get_json(k, &["widget", "w2"])["metadata"]["resourceVersion"], rv);
    // and a second client-side apply changes nothing either
    let rv = get_json(k, &["widget", "w1"])["metadata"]["resourceVersion"].clone();
    apply(k, &w1, &["--validate=false"]).ok();
    assert_eq!(get_json(k, &["widget", "w1"])["metadata"]["resourceVersion"], rv);

    // status subresource: the main resource ignores status, /status ignores spec
    k.run(&["patch", "widget", "w2", "--type", "merge", "-p", r#"{"status":{"phase":"Ignored"}}"#]).ok();
    assert!(get_json(k, &["widget", "w2"]).get("status").is_none());
    k.run(&["patch", "widget", "w2", "--subresource", "status", "--type", "merge", "-p", r#"{"status":{"phase":"Ready","replicas":1},"spec":{"color":"red"}}"#]).ok();
    let obj = get_json(k, &["widget", "w2"]);
    assert_eq!(obj["status"]["phase"], "Ready");
    assert_eq!(obj["spec"]["color"], "blue");
    // JSON patch works, strategic merge patch is refused (415) as kube-apiserver does for CRs
    k.run(&["patch", "widget", "w2", "--type", "json", "-p", r#"[{"op":"replace","path":"/spec/color","value":"red"}]"#]).ok();
    assert_eq!(get_json(k, &["widget", "w2"])["spec"]["color"], "red");
    let err = failed(&k.run(&["patch", "widget", "w2", "--type", "strategic", "-p", r#"{"spec":{"color":"blue"}}"#]));
    assert!(err.contains("the body of the request was in an unknown format"), "{err}");

    // scale subresource
    k.run(&["scale", "widget", "w2", "--replicas", "3"]).ok();
    assert_eq!(get_json(k, &["widget", "w2"])["spec"]["replicas"], 3);
    let scale: Value = serde_json::from_str(k.run(&["get", "--raw", "/apis/test.fedctl.io/v1/namespaces/default/widgets/w2/scale"]).ok()).unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 1);

    // printer columns, short name, category
    let out = k.run(&["get", "wdg"]).ok().to_string();
    let header: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "REPLICAS", "PHASE", "AGE"], "{out}");
    let row = out.lines().find(|l| l.starts_with("w2 ")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(&row.split_whitespace().collect::<Vec<_>>()[..3], ["w2", "3", "Ready"], "{out}");
    let row = out.lines().find(|l| l.starts_with("w1 ")).unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.len(), 3, "no phase yet, an empty cell: {out}");
    assert_eq!(&cells[..2], ["w1", "1"], "{out}");
    assert!(cells[2].ends_with('s') || cells[2].ends_with('m'), "AGE is an age: {out}");
    let out = k.run(&["get", "fedctl-test", "-o", "name"]).ok().to_string();
    assert!(out.contains("widget.test.fedctl.io/w1"), "{out}");

    // the other version: the same objects, apiVersion rewritten
    let obj = get_json(k, &["widgets.v1beta1.test.fedctl.io", "w1"]);
    assert_eq!(obj["apiVersion"], "test.fedctl.io/v1beta1");
    assert_eq!(obj["spec"]["color"], "red");

    // OpenAPI: kubectl explain
    let out = k.run(&["explain", "widgets.spec"]).ok().to_string();
    assert!(out.contains("What a widget should be.") && out.contains("color") && out.contains("The widget's colour."), "{out}");
    if k.version == "1.27" {
        // from the OpenAPI v2 document (protobuf, as kubectl 1.27 asks for it)
        let out = k.run(&["explain", "widgets.spec", "--output=plaintext-openapiv2"]).ok().to_string();
        assert!(out.contains("KIND:") && out.contains("Widget") && out.contains("color") && out.contains("The widget's colour."), "{out}");
        let out = k.run(&["explain", "widgets.spec.replicas", "--output=plaintext-openapiv2"]).ok().to_string();
        assert!(out.contains("integer"), "{out}");
    }

    // deleting the CRD deletes its custom resources and stops serving them
    k.run(&["delete", "crd", "widgets.test.fedctl.io", "--timeout", "20s"]).ok();
    eventually("widgets no longer served", || k.run(&["get", "--raw", "/apis/test.fedctl.io/v1/namespaces/default/widgets"]).code != Some(0));
    apply(k, WIDGETS, &[]).ok();
    wait_established(k, "widgets.test.fedctl.io");
    eventually("widgets served again", || k.run(&["get", "widgets", "-o", "name"]).code == Some(0));
    assert_eq!(k.run(&["get", "widgets", "-o", "name"]).ok().trim(), "", "no custom resource survived the CRD");
}

/// The corpus's CRDs with their custom resources, client-side and server-side: the shirts
/// (printer columns) and Argo CD's AppProject with a real project of a newer Argo CD, whose
/// two newer fields the older schema prunes.
fn corpus_crd_checks(k: &Kubectl, ssa: bool) {
    let extra: &[&str] = if ssa { &["--server-side"] } else { &[] };
    for crd in ["website-shirt-resource-definition.yaml", "argocd-appproject-crd.yaml"] {
        let f = corpus(crd);
        let mut args = vec!["apply", "-f", f.as_str()];
        args.extend_from_slice(extra);
        k.run(&args).ok();
    }
    wait_established(k, "shirts.stable.example.com");
    wait_established(k, "appprojects.argoproj.io");
    let f = corpus("website-shirt-resources.yaml");
    let mut args = vec!["apply", "-f", f.as_str()];
    args.extend_from_slice(extra);
    k.run(&args).ok();
    let rv = get_json(k, &["shirt", "example1"])["metadata"]["resourceVersion"].clone();
    k.run(&args).ok();
    assert_eq!(get_json(k, &["shirt", "example1"])["metadata"]["resourceVersion"], rv, "a second apply changes nothing");
    let out = k.run(&["get", "shirts"]).ok().to_string();
    assert_eq!(out.lines().next().unwrap_or("").split_whitespace().collect::<Vec<_>>(), ["NAME", "COLOR", "SIZE"], "{out}");
    let out = k.run(&["explain", "shirt.spec"]).ok().to_string();
    assert!(out.contains("color") && out.contains("size"), "{out}");

    let ns = k.run(&["create", "ns", "argocd"]);
    assert!(ns.code == Some(0) || ns.stderr.contains("AlreadyExists"), "{}", ns.stderr);
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/crd/argocd-project.yaml");
    let p = project.to_string_lossy().to_string();
    let err = failed(&k.run(&["apply", "-f", &p]));
    assert!(err.contains("unknown field \"spec.permitOnlyProjectScopedClusters\"") && err.contains("unknown field \"spec.sourceNamespaces\""), "{err}");
    let mut args = vec!["apply", "-f", p.as_str(), "--validate=warn"];
    args.extend_from_slice(extra);
    let run = k.run(&args);
    run.ok();
    let obj = get_json(k, &["appproj", "my-project", "-n", "argocd"]);
    assert!(obj["spec"].get("sourceNamespaces").is_none() && obj["spec"].get("permitOnlyProjectScopedClusters").is_none(), "pruned: {obj}");
    assert_eq!(obj["spec"]["roles"][1]["jwtTokens"][0]["iat"], 1535390316);
    assert_eq!(obj["spec"]["syncWindows"].as_array().map(Vec::len), Some(3));
}

fn kubectl_for(version: &str, kubeconfig: &Path, cache: &Path) -> Option<Kubectl> {
    let Some(bin) = find_kubectl(version) else {
        eprintln!("SKIPPED: kubectl.{version} not found");
        return None;
    };
    Some(Kubectl::new(bin, version, kubeconfig, cache))
}

#[test]
fn crds_on_the_federation_with_kubectl_1_33_and_a_restart() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start(&etcd.endpoint());
    let Some(k) = kubectl_for("1.33", &server.kubeconfig(), &server.scratch_dir()) else { return };
    widget_checks(&k);
    corpus_crd_checks(&k, false);
    apply(&k, &widget("kept", "  color: blue\n"), &[]).ok();
    // a restarted server serves the stored CRDs' custom resources again
    server.stop();
    server.restart();
    eventually("custom resources served after a restart", || k.run(&["get", "widget", "kept"]).code == Some(0));
    assert_eq!(get_json(&k, &["widget", "kept"])["spec"]["size"], "M");
    assert_eq!(get_json(&k, &["shirts"])["items"].as_array().map(Vec::len), Some(3));
    // a built-in kind still applies client-side after the OpenAPI documents grew CRD schemas
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  namespace: default\ndata:\n  a: \"1\"\n";
    apply(&k, cm, &[]).ok();
    assert!(apply(&k, &cm.replace("\"1\"", "\"2\""), &[]).ok().contains("configured"));
}

#[test]
fn crds_on_the_federation_with_kubectl_1_27() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let Some(k) = kubectl_for("1.27", &server.kubeconfig(), &server.scratch_dir()) else { return };
    widget_checks(&k);
    corpus_crd_checks(&k, true);
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  namespace: default\ndata:\n  a: \"1\"\n";
    apply(&k, cm, &[]).ok();
    assert!(apply(&k, &cm.replace("\"1\"", "\"2\""), &[]).ok().contains("configured"));
}

#[test]
fn crds_on_fedsim() {
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "crd", &["--nodes", "1", "--pods-per-node", "1", "--churn", "0"], Duration::from_secs(60)).expect("start fedsim");
    let cache = tempfile::tempdir().unwrap();
    for version in ["1.33", "1.27"] {
        let Some(k) = kubectl_for(version, &sim.kubeconfig, cache.path()) else { continue };
        widget_checks(&k);
        corpus_crd_checks(&k, version == "1.27");
    }
}

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// `GET path` with `Accept: accept`: the response Content-Type and JSON body.
fn discovery_get(server: &FedServer, path: &str, accept: &str) -> (String, Value) {
    let client = server.client();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let resp = client.request_builder(reqwest::Method::GET, path).header("accept", accept).send().await.expect("discovery request");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let body: Value = resp.json().await.expect("JSON body");
        (ct, body)
    })
}

fn discovery_group<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc["items"].as_array()?.iter().find(|g| g["metadata"]["name"].as_str().unwrap_or("") == name)
}

/// Aggregated discovery: `/api` and `/apis` answer the `apidiscovery.k8s.io` document to a
/// client asking for it (kubectl 1.33 does, and then reads no per-group-version list), with
/// custom resources appearing and going with their CRDs; other Accepts get the plain form.
#[test]
fn aggregated_discovery_with_kubectl_1_33() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let Some(k) = kubectl_for("1.33", &server.kubeconfig(), &server.scratch_dir()) else { return };

    // /api: the core group, its resources and their subresources
    let (ct, core) = discovery_get(&server, "/api", &format!("{AGGREGATED_V2},{AGGREGATED_V2BETA1},application/json"));
    assert_eq!(ct, AGGREGATED_V2);
    assert_eq!((core["kind"].as_str(), core["apiVersion"].as_str()), (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io/v2")));
    let items = core["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert!(items[0]["metadata"].get("name").is_none(), "{}", items[0]["metadata"]);
    let v1 = &items[0]["versions"][0];
    assert_eq!((v1["version"].as_str(), v1["freshness"].as_str()), (Some("v1"), Some("Current")));
    let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").expect("pods");
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["singularResource"], "pod");
    assert_eq!(pods["responseKind"], serde_json::json!({"group": "", "version": "", "kind": "Pod"}));
    assert_eq!(pods["shortNames"], serde_json::json!(["po"]));
    assert!(pods["subresources"].as_array().unwrap().iter().any(|s| s["subresource"] == "status"), "{pods}");

    // /apis: named groups, preferred version first, the scale subresource's kind
    let (ct, apis) = discovery_get(&server, "/apis", AGGREGATED_V2);
    assert_eq!(ct, AGGREGATED_V2);
    let apps = discovery_group(&apis, "apps").expect("apps");
    let deploy = apps["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "deployments").expect("deployments");
    let scale = deploy["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "scale").expect("scale");
    assert_eq!(scale["responseKind"], serde_json::json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
    let autoscaling: Vec<&str> = discovery_group(&apis, "autoscaling").unwrap()["versions"].as_array().unwrap().iter().filter_map(|v| v["version"].as_str()).collect();
    assert_eq!(autoscaling, ["v2", "v1"]);
    assert!(discovery_group(&apis, "").is_none() && discovery_group(&apis, "test.fedctl.io").is_none());
    // v2beta1 when that is what is asked for; the plain forms otherwise
    let (ct, beta) = discovery_get(&server, "/apis", AGGREGATED_V2BETA1);
    assert_eq!((ct.as_str(), beta["apiVersion"].as_str()), (AGGREGATED_V2BETA1, Some("apidiscovery.k8s.io/v2beta1")));
    let (ct, plain) = discovery_get(&server, "/apis", "application/json");
    assert_eq!((ct.as_str(), plain["kind"].as_str()), ("application/json", Some("APIGroupList")));
    let (_, plain) = discovery_get(&server, "/api", "application/json, */*");
    assert_eq!(plain["kind"], "APIVersions");

    // kubectl 1.33 uses it: the aggregated answer, and no per-group-version list fetched
    let run = k.run(&["api-resources", "-v=8"]);
    let out = run.ok().to_string();
    assert!(out.lines().any(|l| l.starts_with("deployments") && l.contains("apps/v1")), "{out}");
    // (-v=8 logs request and response headers: the request's Accept names the form too)
    assert!(run.stderr.contains(&format!("Content-Type: {AGGREGATED_V2}")), "kubectl did not get the aggregated form: {}", run.stderr);
    let requested = |path: &str| run.stderr.contains(&format!("{path}\"")) || run.stderr.contains(&format!("{path}?"));
    assert!(requested("/apis"), "kubectl's log shows no discovery request: {}", run.stderr);
    assert!(!requested("/apis/apps/v1") && !requested("/api/v1"), "kubectl fell back to the legacy lists: {}", run.stderr);

    // a CRD's group appears once it is established, with its resource's full kind ...
    apply(&k, WIDGETS, &[]).ok();
    wait_established(&k, "widgets.test.fedctl.io");
    let (_, apis) = discovery_get(&server, "/apis", AGGREGATED_V2);
    let g = discovery_group(&apis, "test.fedctl.io").expect("the CRD's group");
    let v1 = g["versions"].as_array().unwrap().iter().find(|v| v["version"] == "v1").expect("v1");
    let w = &v1["resources"][0];
    assert_eq!(w["resource"], "widgets");
    assert_eq!(w["responseKind"], serde_json::json!({"group": "test.fedctl.io", "version": "v1", "kind": "Widget"}));
    assert_eq!(w["shortNames"], serde_json::json!(["wdg"]));
    let subs: Vec<&str> = w["subresources"].as_array().unwrap().iter().filter_map(|s| s["subresource"].as_str()).collect();
    assert!(subs.contains(&"status") && subs.contains(&"scale"), "{w}");
    let run = k.run(&["api-resources", "--api-group=test.fedctl.io"]);
    assert!(run.ok().lines().any(|l| l.starts_with("widgets") && l.contains("wdg")), "{}", run.stdout);
    // ... and goes with it
    k.run(&["delete", "crd", "widgets.test.fedctl.io"]).ok();
    eventually("the CRD's group leaves discovery", || discovery_group(&discovery_get(&server, "/apis", AGGREGATED_V2).1, "test.fedctl.io").is_none());
}

/// A second CRD whose names clash with an established one of its group gets
/// `NamesAccepted=False` with the naming controller's reason and is not served; once the
/// first CRD is gone, its names are accepted and it is served.
#[test]
fn crd_name_conflicts_with_kubectl_1_33() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let Some(k) = kubectl_for("1.33", &server.kubeconfig(), &server.scratch_dir()) else { return };
    apply(&k, WIDGETS, &[]).ok();
    wait_established(&k, "widgets.test.fedctl.io");
    // same group, other plural, but the kind and a short name of the first
    let clash = WIDGETS.replace("name: widgets.test.fedctl.io", "name: gizmos.test.fedctl.io").replace("plural: widgets", "plural: gizmos").replace("singular: widget", "singular: gizmo");
    apply(&k, &clash, &[]).ok();
    let cond = |crd: &str, ty: &str| -> (String, String, String) {
        let c = get_json(&k, &["crd", crd]);
        let found = c["status"]["conditions"].as_array().into_iter().flatten().find(|x| x["type"] == ty).cloned().unwrap_or(Value::Null);
        (found["status"].as_str().unwrap_or("").into(), found["reason"].as_str().unwrap_or("").into(), found["message"].as_str().unwrap_or("").into())
    };
    eventually("the clashing CRD's NamesAccepted", || cond("gizmos.test.fedctl.io", "NamesAccepted").0 == "False");
    let (_, reason, message) = cond("gizmos.test.fedctl.io", "NamesAccepted");
    // checked in the naming controller's order: plural, singular, short names, kind, list kind
    assert_eq!((reason.as_str(), message.as_str()), ("ListKindConflict", "\"WidgetList\" is already in use"));
    assert_eq!(cond("gizmos.test.fedctl.io", "Established"), ("False".into(), "NotAccepted".into(), "not all names are accepted".into()));
    let accepted = &get_json(&k, &["crd", "gizmos.test.fedctl.io"])["status"]["acceptedNames"];
    assert_eq!(accepted["plural"], "gizmos");
    assert!(accepted.get("kind").is_none(), "{accepted}");
    // not served; the first CRD is untouched
    let err = failed(&k.run(&["get", "gizmos.test.fedctl.io"]));
    assert!(err.contains("the server doesn't have a resource type") || err.contains("NotFound"), "{err}");
    assert_eq!(cond("widgets.test.fedctl.io", "NamesAccepted").0, "True");
    apply(&k, &widget("w1", "  color: blue\n"), &[]).ok();
    assert_eq!(get_json(&k, &["wdg", "w1"])["kind"], "Widget");
    // the conflict gone, the names are accepted and served
    k.run(&["delete", "crd", "widgets.test.fedctl.io"]).ok();
    wait_established(&k, "gizmos.test.fedctl.io");
    assert_eq!(cond("gizmos.test.fedctl.io", "NamesAccepted"), ("True".into(), "NoConflicts".into(), "no conflicts found".into()));
    assert_eq!(get_json(&k, &["crd", "gizmos.test.fedctl.io"])["status"]["acceptedNames"]["kind"], "Widget");
    eventually("the second CRD served", || k.run(&["get", "gizmos"]).code == Some(0));
}
