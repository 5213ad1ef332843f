//! The manifest corpus (`testdata/corpus/`, real files of public projects, see its SOURCES)
//! applied unchanged with kubectl 1.27 and 1.33, client-side and `--server-side`, to a
//! federation and to a fedsim: every object is accepted, and a second apply changes nothing
//! (no object's content or kubectl's managedFields entries move).
//!
//! Every file of the corpus is applied, in name order: a CRD's file comes before the file of
//! its custom resources (`website-shirt-resource-definition.yaml`, then
//! `website-shirt-resources.yaml`), which are served once the CRD is established.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::procs::FedsimProcess;
use serde_json::Value;

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::server::FedServer;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus")
}

/// The corpus files, by name (SOURCES and non-manifests left out).
fn corpus_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(corpus_dir()).expect("testdata/corpus").filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml")).collect();
    files.sort();
    files
}

#[test]
fn corpus_is_large_and_sourced() {
    let files = corpus_files();
    assert!(files.len() >= 20, "corpus has {} files", files.len());
    let sources = std::fs::read_to_string(corpus_dir().join("SOURCES")).expect("SOURCES");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let line = sources.lines().find(|l| l.split_whitespace().next() == Some(name.as_str()));
        let line = line.unwrap_or_else(|| panic!("{name} is not in SOURCES"));
        // name repository path commit licence
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(cols.len() >= 5, "SOURCES line of {name} lacks a column: {line}");
        assert_eq!(cols[3].len(), 40, "commit of {name} is not a full id: {line}");
    }
}

/// `(apiVersion/kind, namespace, name) → what an apply may change` of every object of
/// `file`: the object without `status` and `resourceVersion`, with only the managedFields
/// entries of kubectl (fedsim's simulated controllers update the status of workloads on
/// their own, which moves resourceVersions without any apply). `strict` (the federation,
/// where nothing else writes) keeps the resourceVersion: a no-op write is a change.
fn versions(k: &Kubectl, file: &Path, strict: bool) -> BTreeMap<String, String> {
    let f = file.to_string_lossy();
    let run = k.run(&["get", "-f", &f, "-o", "json"]);
    let v = run.json();
    let items: Vec<Value> = match v.get("items") {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![v],
    };
    items
        .into_iter()
        .map(|mut o| {
            let id = format!(
                "{}/{} {}/{}",
                o["apiVersion"].as_str().unwrap_or(""),
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            );
            if strict {
                return (id, o.to_string());
            }
            let obj = o.as_object_mut().unwrap();
            obj.remove("status");
            let meta = obj.get_mut("metadata").and_then(Value::as_object_mut).unwrap();
            meta.remove("resourceVersion");
            if let Some(Value::Array(mf)) = meta.get_mut("managedFields") {
                mf.retain(|e| e["manager"].as_str().is_some_and(|m| m.starts_with("kubectl")));
            }
            (id, o.to_string())
        })
        .collect()
}

/// Number of objects in a manifest file (YAML documents that are not empty).
fn object_count(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    text.split("\n---").filter(|d| d.lines().any(|l| l.trim_start().starts_with("kind:") || l.contains("kind: \""))).count()
}

fn ensure_namespaces(k: &Kubectl) {
    for ns in ["kube-system", "default"] {
        let run = k.run(&["create", "ns", ns]);
        assert!(run.code == Some(0) || run.stderr.contains("AlreadyExists"), "create ns {ns}: {}", run.stderr);
    }
}

/// Applies every corpus file twice with `k` (server-side when `ssa`), as a user does: objects
/// without a namespace go to the context's (`default`). Checks that each
/// apply succeeds for every object and the second leaves every object as it was.
fn apply_corpus(k: &Kubectl, ssa: bool, strict: bool) {
    ensure_namespaces(k);
    let mut failures = Vec::new();
    for file in corpus_files() {
        let f = file.to_string_lossy().to_string();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let mut args = vec!["apply", "-f", f.as_str()];
        if ssa {
            args.push("--server-side");
        }
        let run = k.run(&args);
        if run.code != Some(0) {
            failures.push(format!("{name}: first apply failed: {}{}", run.stdout, run.stderr));
            continue;
        }
        let applied = run.stdout.lines().filter(|l| !l.trim().is_empty()).count();
        let want = object_count(&file);
        if applied != want {
            failures.push(format!("{name}: {applied} of {want} objects applied: {}", run.stdout));
        }
        let before = versions(k, &file, strict);
        let run = k.run(&args);
        if run.code != Some(0) {
            failures.push(format!("{name}: second apply failed: {}{}", run.stdout, run.stderr));
            continue;
        }
        // kubectl itself sends a patch for some unchanged objects (a PodDisruptionBudget's
        // `replace` selector, a ConfigMap's `data:` left empty) and then says "configured",
        // against kube-apiserver too; the server must not change them (checked below)
        if !ssa && !run.stdout.lines().filter(|l| !l.trim().is_empty()).all(|l| l.ends_with(" unchanged") || l.ends_with(" configured")) {
            failures.push(format!("{name}: second client-side apply created something: {}", run.stdout));
        }
        let after = versions(k, &file, strict);
        if before != after {
            let moved: Vec<&String> = before.keys().filter(|id| before.get(*id) != after.get(*id)).collect();
            failures.push(format!("{name}: second apply changed {moved:?}"));
        }
    }
    assert!(failures.is_empty(), "kubectl {} ({}):\n{}", k.version, if ssa { "server-side" } else { "client-side" }, failures.join("\n"));
    tables_and_discovery(k);
}

/// `kubectl api-resources` lists the new kinds with kube-apiserver's short names, and
/// `kubectl get` prints them as Tables with the printers' columns.
fn tables_and_discovery(k: &Kubectl) {
    let out = k.run(&["api-resources", "--no-headers"]).ok().to_string();
    for (resource, short) in [
        ("storageclasses", "sc"),
        ("poddisruptionbudgets", "pdb"),
        ("horizontalpodautoscalers", "hpa"),
        ("networkpolicies", "netpol"),
        ("ingresses", "ing"),
        ("customresourcedefinitions", "crd,crds"),
        ("cronjobs", "cj"),
        ("persistentvolumeclaims", "pvc"),
        ("priorityclasses", "pc"),
    ] {
        let line = out.lines().find(|l| l.split_whitespace().next() == Some(resource));
        let line = line.unwrap_or_else(|| panic!("api-resources lacks {resource}:\n{out}"));
        assert!(line.split_whitespace().nth(1) == Some(short), "{resource}: {line}");
    }
    for line in ["clusterroles", "apiservices", "validatingwebhookconfigurations", "ingressclasses"] {
        assert!(out.lines().any(|l| l.split_whitespace().next() == Some(line)), "api-resources lacks {line}");
    }
    for (args, header) in [
        (vec!["get", "storageclass", "fast"], vec!["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]),
        (vec!["get", "pdb", "zk-pdb"], vec!["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]),
        (vec!["get", "hpa", "php-apache"], vec!["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]),
        (vec!["get", "ingress", "minimal-ingress"], vec!["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]),
        (vec!["get", "netpol", "test-network-policy"], vec!["NAME", "POD-SELECTOR", "AGE"]),
        (vec!["get", "ingressclass", "example-class"], vec!["NAME", "CONTROLLER", "PARAMETERS", "AGE"]),
        (vec!["get", "crd", "shirts.stable.example.com"], vec!["NAME", "CREATED AT"]),
        (vec!["get", "clusterrole", "system:metrics-server"], vec!["NAME", "CREATED AT"]),
    ] {
        let out = k.run(&args).ok().to_string();
        let first = out.lines().next().unwrap_or("");
        let cols: Vec<&str> = first.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cols, header, "{args:?}:\n{out}");
    }
    // custom resources: the CRD's printer columns (no AGE: columns given) and its
    // selectableFields as field selectors
    let out = k.run(&["get", "shirts"]).ok().to_string();
    let cols: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(cols, ["NAME", "COLOR", "SIZE"], "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["example3", "green", "M"]), "{out}");
    let out = k.run(&["get", "shirts", "--field-selector", "spec.color=blue", "-o", "name"]).ok().to_string();
    assert_eq!(out.lines().collect::<Vec<_>>(), ["shirt.stable.example.com/example1", "shirt.stable.example.com/example2"], "{out}");
    let out = k.run(&["get", "appproj", "-A"]).ok().to_string();
    assert!(out.starts_with("No resources found") || out.is_empty() || out.contains("NAME"), "{out}");
    let out = k.run(&["get", "pdb", "zk-pdb", "--no-headers"]).ok().to_string();
    let cells: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(&cells[..3], ["zk-pdb", "N/A", "1"], "{out}");
    let out = k.run(&["get", "hpa", "php-apache", "--no-headers"]).ok().to_string();
    assert!(out.contains("Deployment/php-apache") && out.contains("cpu: <unknown>/50%"), "{out}");
}

fn federation_run(version: &str, ssa: bool) {
    let Some(bin) = find_kubectl(version) else {
        eprintln!("SKIPPED: kubectl.{version} not found");
        return;
    };
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let k = Kubectl::new(bin, version, &server.kubeconfig(), &server.scratch_dir());
    apply_corpus(&k, ssa, true);
}

fn fedsim_run(version: &str, ssa: bool) {
    let Some(bin) = find_kubectl(version) else {
        eprintln!("SKIPPED: kubectl.{version} not found");
        return;
    };
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "corpus", &["--nodes", "2", "--pods-per-node", "2", "--churn", "0"], Duration::from_secs(60)).expect("start fedsim");
    let cache = tempfile::tempdir().unwrap();
    let k = Kubectl::new(bin, version, &sim.kubeconfig, cache.path());
    apply_corpus(&k, ssa, false);
}

#[test]
fn corpus_federation_kubectl_1_27() {
    federation_run("1.27", false);
    federation_run("1.27", true);
}

#[test]
fn corpus_federation_kubectl_1_33() {
    federation_run("1.33", false);
    federation_run("1.33", true);
}

#[test]
fn corpus_fedsim_kubectl_1_27() {
    fedsim_run("1.27", false);
    fedsim_run("1.27", true);
}

#[test]
fn corpus_fedsim_kubectl_1_33() {
    fedsim_run("1.33", false);
    fedsim_run("1.33", true);
}
