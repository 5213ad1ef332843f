//! Virtual fedsim members: generated objects rendered on read with changes stored, and many members in one process.
//!
//! Every test starts its own fedsim on loopback ports and kills it (by pid) at the end.

#[path = "../cmd/fedctl-bench/procs.rs"]
#[allow(dead_code)]
mod procs;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use procs::{client_from_kubeconfig, FedsimProcess};
use serde_json::{json, Value};

fn fedsim_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fedsim"))
}

fn start(name: &str, virt: bool, nodes: usize, pods_per_node: usize) -> FedsimProcess {
    let (n, p) = (nodes.to_string(), pods_per_node.to_string());
    let mut args = vec!["--nodes", &n, "--pods-per-node", &p, "--namespaces", "6", "--seed", "11"];
    if virt {
        args.push("--virtual");
    }
    FedsimProcess::start(&fedsim_bin(), name, &args, Duration::from_secs(60)).expect("start fedsim")
}

struct Http {
    c: reqwest::Client,
    base: String,
}

impl Http {
    fn new(kubeconfig: &Path) -> Http {
        let (c, base) = client_from_kubeconfig(kubeconfig).expect("client");
        Http { c, base: base.trim_end_matches('/').to_string() }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.c.request(method, format!("{}{path}", self.base)).timeout(Duration::from_secs(20));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request");
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|p| format!("{}/{}", p["metadata"]["namespace"].as_str().unwrap_or(""), p["metadata"]["name"].as_str().unwrap())).collect()
}

/// All pods by pages of `limit`, checking remainingItemCount and one resourceVersion.
async fn paged(h: &Http, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cont = String::new();
    let mut rv: Option<String> = None;
    loop {
        let (code, page) = h.get(&format!("/api/v1/pods?limit={limit}&continue={cont}")).await;
        assert_eq!(code, 200, "{page}");
        let items = names(&page);
        assert!(items.len() <= limit);
        out.extend(items);
        let this_rv = page["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        assert_eq!(rv.get_or_insert(this_rv.clone()), &this_rv, "every page at the first page's resourceVersion");
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => {
                let left = page["metadata"]["remainingItemCount"].as_i64().expect("remainingItemCount with continue");
                assert!(left > 0);
                cont = c.to_string();
            }
            _ => return out,
        }
    }
}

/// A virtual member serves the same generated objects as a loaded one (same name and seed),
/// and pages with continue across generated and stored objects agree with an unpaged LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_member_pages_generated_and_stored_pods_like_a_loaded_one() {
    let loaded = start("member-v", false, 5, 12);
    let virt = start("member-v", true, 5, 12);
    let (hl, hv) = (Http::new(&loaded.kubeconfig), Http::new(&virt.kubeconfig));
    let strip = |mut list: Value| -> Vec<Value> {
        let mut items = list["items"].take().as_array().cloned().unwrap();
        for p in items.iter_mut() {
            p["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        }
        items
    };
    let (_, l) = hl.get("/api/v1/pods").await;
    let (_, v) = hv.get("/api/v1/pods").await;
    let (l, v) = (strip(l), strip(v));
    assert_eq!(l.len(), 60);
    assert!(l == v, "virtual pods differ from loaded ones");
    let (_, ln) = hl.get("/api/v1/nodes").await;
    let (_, vn) = hv.get("/api/v1/nodes").await;
    assert!(strip(ln) == strip(vn), "virtual nodes differ from loaded ones");

    // stored changes among the generated pods: new pods, a deleted and a modified generated one
    let listed = hv.get("/api/v1/pods").await.1;
    let all = names(&listed);
    // a pod without finalizers, so that DELETE removes it at once
    let victim = listed["items"].as_array().unwrap().iter().position(|p| p["metadata"].get("finalizers").is_none()).expect("a pod without finalizers");
    for (i, ns) in ["default", "kube-system", "aaa-first"].iter().enumerate() {
        if *ns == "aaa-first" {
            let (code, b) = hv.send(reqwest::Method::POST, "/api/v1/namespaces", Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))).await;
            assert_eq!(code, 201, "{b}");
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("extra-{i}")}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let (code, b) = hv.send(reqwest::Method::POST, &format!("/api/v1/namespaces/{ns}/pods"), Some(pod)).await;
        assert_eq!(code, 201, "{b}");
    }
    let (ns, name) = all[victim].split_once('/').unwrap();
    let (code, _) = hv.send(reqwest::Method::DELETE, &format!("/api/v1/namespaces/{ns}/pods/{name}"), None).await;
    assert_eq!(code, 200);
    let (ns2, name2) = all[(victim + 30) % all.len()].split_once('/').unwrap();
    let patch =
        hv.c.patch(format!("{}/api/v1/namespaces/{ns2}/pods/{name2}", hv.base))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"touched":"yes"}}}"#)
            .send()
            .await
            .unwrap();
    assert_eq!(patch.status().as_u16(), 200);

    let (_, full) = hv.get("/api/v1/pods").await;
    let unpaged = names(&full);
    assert_eq!(unpaged.len(), 60 - 1 + 3);
    assert!(unpaged.contains(&"aaa-first/extra-2".to_string()) && !unpaged.contains(&all[victim]));
    let (_, first) = hv.get("/api/v1/pods?limit=7").await;
    assert_eq!(first["metadata"]["remainingItemCount"], 62 - 7);
    for limit in [1, 7, 25] {
        assert_eq!(paged(&hv, limit).await, unpaged, "pages of {limit}");
    }
    let touched = hv.get(&format!("/api/v1/namespaces/{ns2}/pods/{name2}")).await.1;
    assert_eq!(touched["metadata"]["labels"]["touched"], "yes");
    let status = hv.get("/fedsim/status").await.1;
    assert_eq!((status["virtual"].as_bool(), status["pods"].as_i64(), status["generated"].as_i64()), (Some(true), Some(62), Some(65)), "{status}");
}

/// Deleting a generated pod: GET 404, gone from LIST, a DELETED watch event from before,
/// still there in a LIST at an older resourceVersion; its name can be created again, while a
/// generated name that exists cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_generated_pod_is_gone_from_get_list_and_watch() {
    let sim = start("member-w", true, 3, 8);
    let h = Http::new(&sim.kubeconfig);
    let (_, list) = h.get("/api/v1/pods").await;
    let rv0 = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let victim = list["items"].as_array().unwrap().iter().find(|p| p["metadata"].get("finalizers").is_none()).unwrap().clone();
    let (ns, name) = (victim["metadata"]["namespace"].as_str().unwrap(), victim["metadata"]["name"].as_str().unwrap());
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    // a stale precondition is a conflict; the generated resourceVersion is the right one
    let stale = json!({"preconditions": {"resourceVersion": "1"}});
    assert_eq!(h.send(reqwest::Method::DELETE, &path, Some(stale)).await.0, 409);
    let gen_rv = victim["metadata"]["resourceVersion"].as_str().unwrap();
    let (code, _) = h.send(reqwest::Method::DELETE, &path, Some(json!({"preconditions": {"resourceVersion": gen_rv}}))).await;
    assert_eq!(code, 200);
    assert_eq!(h.get(&path).await.0, 404);
    let (_, after) = h.get("/api/v1/pods").await;
    assert_eq!(after["items"].as_array().unwrap().len(), 23);
    assert!(!names(&after).contains(&format!("{ns}/{name}")));
    // the watch from before the delete sees it
    let resp = h.c.get(format!("{}/api/v1/pods?watch=1&resourceVersion={rv0}&timeoutSeconds=2", h.base)).send().await.unwrap();
    let body = resp.text().await.unwrap();
    let events: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 1, "{body}");
    assert_eq!(events[0]["type"], "DELETED");
    assert_eq!(events[0]["object"]["metadata"]["name"], name);
    assert_eq!(events[0]["object"]["metadata"]["uid"], victim["metadata"]["uid"]);
    // LIST at the old resourceVersion still has it
    let (_, old) = h.get(&format!("/api/v1/pods?resourceVersion={rv0}&resourceVersionMatch=Exact")).await;
    assert!(names(&old).contains(&format!("{ns}/{name}")));
    assert_eq!(old["items"].as_array().unwrap().len(), 24);
    // create: the deleted name again works, an existing generated name conflicts
    let pod = |n: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    assert_eq!(h.send(reqwest::Method::POST, &format!("/api/v1/namespaces/{ns}/pods"), Some(pod(name))).await.0, 201);
    let other = &list["items"][6];
    let (ons, oname) = (other["metadata"]["namespace"].as_str().unwrap(), other["metadata"]["name"].as_str().unwrap());
    assert_eq!(h.send(reqwest::Method::POST, &format!("/api/v1/namespaces/{ons}/pods"), Some(pod(oname))).await.0, 409);
    // logs of a generated pod are served
    let container = other["spec"]["containers"][0]["name"].as_str().unwrap();
    let logs = h.c.get(format!("{}/api/v1/namespaces/{ons}/pods/{oname}/log?tailLines=2&container={container}", h.base)).send().await.unwrap();
    assert_eq!(logs.status().as_u16(), 200);
    let text = logs.text().await.unwrap();
    assert!(text.lines().count() == 2 && text.contains(&format!("{oname} {container} line")), "{text}");
}

/// A child process killed (by pid) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--members 3` writes three working kubeconfigs and members.json; each member has its own
/// port, CA, kube-system uid, zone and churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_flag_runs_three_members_with_their_own_identity() {
    let dir = procs::tempfile_dir::Dir::new("fedsim-members").unwrap();
    let child = Command::new(fedsim_bin())
        .args(["--members", "3", "--name-prefix", "t-", "--zones", "z1,z2", "--nodes", "2", "--pods-per-node", "15", "--churn", "40", "--seed", "5", "--kubeconfig-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fedsim");
    let mut proc = Proc(child);
    let index = dir.path().join("members.json");
    let t0 = Instant::now();
    while !index.exists() {
        assert!(proc.0.try_wait().unwrap().is_none(), "fedsim exited");
        assert!(t0.elapsed() < Duration::from_secs(60), "members.json not written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let members: Vec<Value> = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    let got: Vec<(&str, &str, i64, i64)> = members.iter().map(|m| (m["name"].as_str().unwrap(), m["zone"].as_str().unwrap(), m["nodes"].as_i64().unwrap(), m["pods"].as_i64().unwrap())).collect();
    assert_eq!(got, [("t-0001", "z1", 2, 30), ("t-0002", "z2", 2, 30), ("t-0003", "z1", 2, 30)]);
    let (mut uids, mut servers, mut cas) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for m in &members {
        let kc = PathBuf::from(m["kubeconfig"].as_str().unwrap());
        assert_eq!(kc, dir.path().join(format!("{}.kubeconfig", m["name"].as_str().unwrap())));
        let h = Http::new(&kc);
        assert_eq!(h.base, m["server"].as_str().unwrap());
        let (code, ks) = h.get("/api/v1/namespaces/kube-system").await;
        assert_eq!(code, 200, "{ks}");
        uids.insert(ks["metadata"]["uid"].as_str().unwrap().to_string());
        servers.insert(h.base.clone());
        let parsed = fedctl::pki::kubeconfig::Kubeconfig::load(&kc).unwrap();
        cas.insert(parsed.current_cluster().unwrap().ca_pem().unwrap().unwrap());
        let (_, nodes) = h.get("/api/v1/nodes").await;
        let zone = &nodes["items"][0]["metadata"]["labels"]["topology.kubernetes.io/zone"];
        assert_eq!(zone, &m["zone"]);
        let status = h.get("/fedsim/status").await.1;
        assert_eq!(status["name"], m["name"]);
        assert_eq!(status["virtual"], true);
    }
    assert_eq!((uids.len(), servers.len(), cas.len()), (3, 3, 3));
    // churn runs on each member
    let mut before = Vec::new();
    for m in &members {
        let h = Http::new(Path::new(m["kubeconfig"].as_str().unwrap()));
        before.push(h.get("/fedsim/status").await.1["revision"].as_i64().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (m, rev0) in members.iter().zip(before) {
        let h = Http::new(Path::new(m["kubeconfig"].as_str().unwrap()));
        let status = h.get("/fedsim/status").await.1;
        assert!(status["revision"].as_i64().unwrap() > rev0 + 20, "churn advanced {}: {status}", m["name"]);
    }
    drop(proc);
}

/// Churn on a virtual member changes generated pods; a watch from a LIST's resourceVersion
/// follows it to the same state as a fresh LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_on_a_virtual_member_is_watchable() {
    let sim = FedsimProcess::start(&fedsim_bin(), "member-c", &["--virtual", "--nodes", "4", "--pods-per-node", "10", "--churn", "100", "--seed", "3"], Duration::from_secs(60)).expect("start");
    let h = Http::new(&sim.kubeconfig);
    let (_, list) = h.get("/api/v1/pods").await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut state: std::collections::BTreeMap<String, String> =
        list["items"].as_array().unwrap().iter().map(|p| (p["metadata"]["uid"].as_str().unwrap().to_string(), p["metadata"]["resourceVersion"].as_str().unwrap().to_string())).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.admin(reqwest::Method::POST, "/fedsim/churn?rate=0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, now) = h.get("/api/v1/pods").await;
    let end_rv: i64 = now["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let resp = h.c.get(format!("{}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=2", h.base)).send().await.unwrap();
    let body = resp.text().await.unwrap();
    let mut kinds = BTreeSet::new();
    for line in body.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let o = &ev["object"]["metadata"];
        let (uid, orv) = (o["uid"].as_str().unwrap().to_string(), o["resourceVersion"].as_str().unwrap().to_string());
        if orv.parse::<i64>().unwrap() > end_rv {
            continue;
        }
        kinds.insert(ev["type"].as_str().unwrap().to_string());
        match ev["type"].as_str().unwrap() {
            "DELETED" => assert!(state.remove(&uid).is_some(), "deleted an unknown pod"),
            "ADDED" => assert!(state.insert(uid, orv).is_none(), "added a known pod"),
            _ => assert!(state.insert(uid, orv).is_some(), "modified an unknown pod"),
        }
    }
    assert_eq!(kinds, ["ADDED", "DELETED", "MODIFIED"].iter().map(|s| s.to_string()).collect(), "{body}");
    let want: std::collections::BTreeMap<String, String> =
        now["items"].as_array().unwrap().iter().map(|p| (p["metadata"]["uid"].as_str().unwrap().to_string(), p["metadata"]["resourceVersion"].as_str().unwrap().to_string())).collect();
    assert_eq!(state, want);
}
