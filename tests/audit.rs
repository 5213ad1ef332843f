//! The audit log: one `audit.k8s.io/v1` Event line per request of a kubectl session (matched by the `Audit-Id` each response carried), Secret bodies never logged at level Request while a ConfigMap's is, size-based rotation keeping `--audit-log-maxbackup` files — real etcd, real `fedctl server`, real kubectl.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::server::FedServer;
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};

/// The newest kubectl on the machine (1.33, else 1.27).
fn kubectl_bin() -> (String, PathBuf) {
    ["1.33", "1.27"].iter().find_map(|v| find_kubectl(v).map(|b| (v.to_string(), b))).expect("no kubectl.1.33 or kubectl.1.27 on PATH")
}

/// Every event of the log at `path` and its rotated files, each line parsed (a line that is
/// not JSON fails the test).
fn events(path: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = fedctl::server::audit::rotated_files(path).into_iter().map(|(_, p)| p).collect();
    files.sort();
    files.push(path.to_path_buf());
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{}: a line that is not JSON ({e}): {line}", f.display()));
            out.push(v);
        }
    }
    out
}

/// Waits until `pred` holds for the log's events; returns them.
fn wait_events(path: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let evs = events(path);
        if pred(&evs) {
            return evs;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; {} events", evs.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `Audit-Id` header values of the responses kubectl logged at `-v=8`, in order.
fn audit_ids(stderr: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, _) in stderr.match_indices("Audit-Id: ") {
        let id: String = stderr[i + "Audit-Id: ".len()..].chars().take_while(|c| c.is_ascii_hexdigit() || *c == '-').collect();
        if id.len() == 36 {
            ids.push(id);
        }
    }
    ids
}

/// The number of HTTP requests kubectl logged: one `Response Status`/`"Response"` line each
/// (kubectl 1.27 and 1.33 word them differently).
fn request_count(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.contains("round_trippers.go") && (l.contains("] Response Status: ") || l.contains("] \"Response\" "))).count()
}

fn kubectl_for(server: &FedServer, kubeconfig: &Path, name: &str) -> Kubectl {
    let (version, bin) = kubectl_bin();
    let cache = server.scratch_dir().join(format!("kubectl-{name}"));
    std::fs::create_dir_all(&cache).unwrap();
    Kubectl::new(bin, &version, kubeconfig, &cache)
}

/// A kubeconfig for the server authenticating with `token`.
fn token_kubeconfig(server: &FedServer, token: &str, name: &str) -> PathBuf {
    let ca = Kubeconfig::load(&server.kubeconfig()).unwrap().current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let kc = Kubeconfig::single("fed", &server.url(), &ca, AuthInfo::bearer_token(token));
    let path = server.scratch_dir().join(format!("{name}.kubeconfig"));
    kc.write(&path).unwrap();
    path
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn random_hex(n: usize) -> String {
    (0..n).map(|_| format!("{:x}", rand::random::<u8>() % 16)).collect()
}

#[test]
fn kubectl_session_is_one_line_per_request() {
    let etcd = EtcdServer::start_new();
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "jane-token-0123456789abcdef,jane,uid-jane,\"team-a\"\n").unwrap();
    let log = tmp.path().join("audit").join("audit.log");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--token-auth-file", tokens.to_str().unwrap(), "--audit-log-path", log.to_str().unwrap()]);
    let admin = kubectl_for(&server, &server.kubeconfig(), "admin");
    let jane = kubectl_for(&server, &token_kubeconfig(&server, "jane-token-0123456789abcdef", "jane"), "jane");
    let nobody = kubectl_for(&server, &token_kubeconfig(&server, "not-a-known-token", "nobody"), "nobody");

    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: audit-a\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - {name: c, image: nginx}\n";
    // (command, who, expect success)
    let session: Vec<(Vec<&str>, &Kubectl, Option<&str>, bool)> = vec![
        (vec!["create", "namespace", "audit-a"], &admin, None, true),
        (vec!["apply", "-f", "-"], &admin, Some(deploy), true),
        (vec!["-n", "audit-a", "get", "deployment", "web", "-o", "name"], &admin, None, true),
        (vec!["-n", "audit-a", "patch", "deployment", "web", "--type", "merge", "-p", r#"{"spec":{"replicas":2}}"#], &admin, None, true),
        (vec!["-n", "audit-a", "delete", "deployment", "web", "--wait=false"], &admin, None, true),
        (vec!["-n", "audit-a", "get", "pods"], &jane, None, false),
        (vec!["-n", "audit-a", "get", "pods"], &nobody, None, false),
    ];
    let mut seen: Vec<(usize, String)> = Vec::new();
    for (i, (args, who, stdin, ok)) in session.iter().enumerate() {
        let mut a = vec!["-v=8"];
        a.extend(args.iter().copied());
        let r = who.run_with_stdin(&a, *stdin);
        if *ok {
            r.ok();
        } else {
            r.failed();
        }
        let ids = audit_ids(&r.stderr);
        let n = request_count(&r.stderr);
        assert!(n > 0, "kubectl {args:?} logged no request:\n{}", r.stderr);
        assert_eq!(ids.len(), n, "kubectl {args:?}: every response carries Audit-Id ({} ids, {n} requests):\n{}", ids.len(), r.stderr);
        seen.extend(ids.into_iter().map(|id| (i, id)));
    }
    let ids: Vec<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "audit IDs repeat: {ids:?}");
    // discovery, OpenAPI, the commands' own requests, the 401s kubectl retries
    assert!(ids.len() >= 12, "only {} requests: {ids:?}", ids.len());

    let evs = wait_events(&log, "an event for every request", |evs| ids.iter().all(|id| evs.iter().any(|e| e["auditID"] == *id)));
    // exactly one line per request kubectl made (a 401 is logged at ResponseStarted, as
    // kube-apiserver logs failed authentication), and no line of kubectl's it did not make
    let by_id: BTreeMap<&str, Vec<&Value>> = ids.iter().map(|id| (*id, evs.iter().filter(|e| e["auditID"] == *id).collect())).collect();
    for (id, es) in &by_id {
        assert_eq!(es.len(), 1, "events of {id}: {es:#?}");
        let e = es[0];
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(e["level"], "Metadata");
        assert!(!s(e, "/requestReceivedTimestamp").is_empty() && s(e, "/stageTimestamp").ends_with('Z'), "{e}");
        assert_eq!(e["sourceIPs"][0], "127.0.0.1", "{e}");
        assert!(s(e, "/userAgent").starts_with("kubectl"), "{e}");
        assert!(e.get("requestObject").is_none(), "{e}");
        if e["responseStatus"]["code"] != 401 {
            assert_eq!(e["stage"], "ResponseComplete", "{e}");
            let ms: f64 = s(e, "/annotations/fedctl.io~1latency-ms").parse().unwrap_or_else(|_| panic!("latency annotation: {e}"));
            assert!((0.0..60_000.0).contains(&ms), "{e}");
        }
    }
    let kubectl_lines = evs.iter().filter(|e| s(e, "/userAgent").starts_with("kubectl")).count();
    assert_eq!(kubectl_lines, ids.len(), "lines with kubectl's user agent vs requests kubectl made");
    // the Audit-Id kubectl saw is the event's auditID; the server's own counter agrees
    let events_of = |i: usize| -> Vec<&Value> { seen.iter().filter(|(j, _)| *j == i).map(|(_, id)| by_id[id.as_str()][0]).collect() };
    let find = |i: usize, verb: &str, resource: &str| -> &Value {
        events_of(i).into_iter().find(|e| e["verb"] == verb && s(e, "/objectRef/resource") == resource).unwrap_or_else(|| panic!("command {i}: no {verb} {resource} among {:#?}", events_of(i)))
    };
    // create namespace: the name comes from the body
    let e = find(0, "create", "namespaces");
    assert_eq!((s(e, "/objectRef/name"), s(e, "/objectRef/apiVersion"), e["responseStatus"]["code"].as_u64()), ("audit-a", "v1", Some(201)), "{e}");
    assert!(e["objectRef"].get("apiGroup").is_none(), "core group left out: {e}");
    let admin_user = s(e, "/user/username").to_string();
    assert!(e["user"]["groups"].as_array().unwrap().iter().any(|g| g == "system:masters"), "{e}");
    assert!(e.get("impersonatedUser").is_none(), "{e}");
    // apply: a GET (404) then the create, both of deployment web in audit-a
    let e = find(1, "get", "deployments");
    assert_eq!((s(e, "/objectRef/name"), s(e, "/objectRef/namespace"), s(e, "/objectRef/apiGroup")), ("web", "audit-a", "apps"), "{e}");
    assert_eq!((e["responseStatus"]["code"].as_u64(), s(e, "/responseStatus/reason")), (Some(404), "NotFound"), "{e}");
    let e = find(1, "create", "deployments");
    assert_eq!((s(e, "/objectRef/name"), s(e, "/objectRef/namespace"), e["responseStatus"]["code"].as_u64()), ("web", "audit-a", Some(201)), "{e}");
    let e = find(2, "get", "deployments");
    assert_eq!((s(e, "/objectRef/name"), e["responseStatus"]["code"].as_u64(), s(e, "/user/username")), ("web", Some(200), admin_user.as_str()), "{e}");
    assert_eq!(e["responseStatus"], serde_json::json!({"metadata": {}, "code": 200}), "{e}");
    let e = find(3, "patch", "deployments");
    assert_eq!((s(e, "/objectRef/name"), s(e, "/objectRef/namespace"), e["responseStatus"]["code"].as_u64()), ("web", "audit-a", Some(200)), "{e}");
    let e = find(4, "delete", "deployments");
    assert_eq!((s(e, "/objectRef/name"), e["responseStatus"]["code"].as_u64()), ("web", Some(200)), "{e}");
    // the forbidden list: jane, 403 with the Status' reason and message
    let e = find(5, "list", "pods");
    assert_eq!((s(e, "/user/username"), s(e, "/objectRef/namespace")), ("jane", "audit-a"), "{e}");
    assert!(e["user"]["groups"].as_array().unwrap().iter().any(|g| g == "team-a"), "{e}");
    assert_eq!((e["responseStatus"]["code"].as_u64(), s(e, "/responseStatus/reason"), s(e, "/responseStatus/status")), (Some(403), "Forbidden", "Failure"), "{e}");
    assert!(s(e, "/responseStatus/message").contains("jane"), "{e}");
    // the unknown token: 401, no user, logged once at ResponseStarted as kube-apiserver does
    let e = events_of(6).into_iter().find(|e| e["responseStatus"]["code"] == 401).expect("a 401 event");
    assert_eq!(e["stage"], "ResponseStarted", "{e}");
    assert_eq!(e["user"], serde_json::json!({}), "{e}");
    assert_eq!(s(e, "/responseStatus/message"), "Authentication failed, attempted: bearer", "{e}");
    // no token, no Authorization header in the log
    let text = std::fs::read_to_string(&log).unwrap();
    for secret in ["jane-token-0123456789abcdef", "not-a-known-token", "Bearer ", "Authorization", "authorization\""] {
        assert!(!text.contains(secret), "{secret} in the audit log");
    }

    // a watch is logged when the response starts and again when it ends
    let is_watch = |e: &Value| e["verb"] == "watch" && s(e, "/objectRef/resource") == "configmaps" && s(e, "/objectRef/namespace") == "audit-a";
    let mut w = admin.spawn(&["-n", "audit-a", "get", "configmaps", "-w", "-v=8"]);
    let evs = wait_events(&log, "the watch's ResponseStarted", |evs| evs.iter().any(|e| is_watch(e) && e["stage"] == "ResponseStarted"));
    let watch_id = evs.iter().find(|e| is_watch(e)).unwrap()["auditID"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(500));
    let running: Vec<Value> = events(&log).into_iter().filter(|e| e["auditID"] == watch_id.as_str()).collect();
    assert_eq!(running.len(), 1, "only ResponseStarted while the watch runs: {running:#?}");
    assert_eq!(s(&running[0], "/user/username"), admin_user, "{:?}", running[0]);
    w.stop();
    assert!(audit_ids(&w.stderr()).contains(&watch_id), "kubectl saw the watch's Audit-Id {watch_id}:\n{}", w.stderr());
    let evs = wait_events(&log, "the watch's ResponseComplete", |evs| evs.iter().any(|e| e["auditID"] == watch_id.as_str() && e["stage"] == "ResponseComplete"));
    assert_eq!(evs.iter().filter(|e| e["auditID"] == watch_id.as_str()).count(), 2);
    // the server counts its events
    let metrics = admin.run(&["get", "--raw", "/metrics"]);
    let m = metrics.ok();
    let total: f64 = m.lines().find(|l| l.starts_with("apiserver_audit_event_total ")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).expect("apiserver_audit_event_total");
    assert!(total >= evs.len() as f64, "{total} < {}", evs.len());
}

#[test]
fn request_level_logs_writes_but_never_secrets() {
    let etcd = EtcdServer::start_new();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("audit.log");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--audit-log-path", log.to_str().unwrap(), "--audit-level", "Request"]);
    let admin = kubectl_for(&server, &server.kubeconfig(), "admin");
    let password = random_hex(32);
    let again = random_hex(32);
    let applied = random_hex(32);
    let plain = random_hex(32);
    admin.run(&["create", "namespace", "audit-b"]).ok();
    admin.run(&["-n", "audit-b", "create", "secret", "generic", "s", &format!("--from-literal=password={password}")]).ok();
    admin.run(&["-n", "audit-b", "patch", "secret", "s", "-p", &format!(r#"{{"stringData":{{"password":"{again}"}}}}"#)]).ok();
    let secret = format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: t\n  namespace: audit-b\nstringData:\n  token: {applied}\n");
    admin.run_with_stdin(&["apply", "-f", "-"], Some(&secret)).ok();
    admin.run_with_stdin(&["apply", "-f", "-"], Some(&secret.replace("token:", "other:"))).ok();
    admin.run(&["-n", "audit-b", "create", "configmap", "cm", &format!("--from-literal=k={plain}")]).ok();
    admin.run(&["-n", "audit-b", "get", "secret", "s", "-o", "yaml"]).ok();

    let evs = wait_events(&log, "the ConfigMap's create", |evs| evs.iter().any(|e| e["verb"] == "create" && s(e, "/objectRef/resource") == "configmaps"));
    // the ConfigMap's body is logged
    let cm = evs.iter().find(|e| e["verb"] == "create" && s(e, "/objectRef/resource") == "configmaps").unwrap();
    assert_eq!(cm["level"], "Request", "{cm}");
    assert_eq!(s(cm, "/objectRef/name"), "cm", "{cm}");
    assert_eq!(s(cm, "/requestObject/data/k"), plain, "{cm}");
    // the Secrets' writes are there, at Metadata, without bodies
    let secret_writes: Vec<&Value> = evs.iter().filter(|e| s(e, "/objectRef/resource") == "secrets" && matches!(e["verb"].as_str(), Some("create" | "patch" | "update"))).collect();
    assert!(secret_writes.len() >= 4, "{secret_writes:#?}");
    for e in &secret_writes {
        assert_eq!(e["level"], "Metadata", "{e}");
        assert!(e.get("requestObject").is_none(), "{e}");
    }
    assert!(secret_writes.iter().any(|e| e["verb"] == "create" && s(e, "/objectRef/name") == "s" && e["responseStatus"]["code"] == 201), "{secret_writes:#?}");
    // no secret value, plain or base64, anywhere in the log files
    let mut files: Vec<PathBuf> = fedctl::server::audit::rotated_files(&log).into_iter().map(|(_, p)| p).collect();
    files.push(log.clone());
    let b64 = base64::engine::general_purpose::STANDARD;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for v in [&password, &again, &applied] {
            for form in [v.clone(), b64.encode(v), b64.encode(v).trim_end_matches('=').to_string()] {
                assert!(!text.contains(&form), "{form} (of a Secret) in {}", f.display());
            }
        }
    }
}

#[test]
fn rotation_keeps_at_most_maxbackup_files() {
    let etcd = EtcdServer::start_new();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("audit.log");
    // the flags from the server's config file, as any flag
    let config = tmp.path().join("server.yaml");
    std::fs::write(&config, format!("audit-log-path: {}\naudit-log-maxsize: 1\naudit-log-maxbackup: 2\n", log.display())).unwrap();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--config", config.to_str().unwrap()]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = server.client();
    // ~4 KiB of query per request: ~250 events per MiB; 1,400 requests rotate the file 5 times
    let pad = "p".repeat(4096);
    rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..8 {
            let client = client.clone();
            let pad = pad.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..175 {
                    let r = client.get(&format!("/api/v1/namespaces/default?w={w}&i={i}&pad={pad}")).await;
                    assert_eq!(r.status, 200, "{}", r.text);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let evs = wait_events(&log, "the last request's event", |evs| evs.iter().any(|e| s(e, "/requestURI").contains("w=7&i=174&")));
    let rotated = fedctl::server::audit::rotated_files(&log);
    assert_eq!(rotated.len(), 2, "rotated files: {rotated:?}");
    let max = 1024 * 1024;
    for (_, p) in &rotated {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // lumberjack's naming: audit-2006-01-02T15-04-05.000.log
        assert!(name.starts_with("audit-") && name.ends_with(".log") && name.len() == "audit-2006-01-02T15-04-05.000.log".len(), "{name}");
        let len = std::fs::metadata(p).unwrap().len();
        assert!(len <= max && len > max / 2, "{name}: {len} bytes");
    }
    assert!(std::fs::metadata(&log).unwrap().len() <= max);
    // every line of every file is an Event (events() parses each); the kept files hold the
    // newest events, the oldest went with the removed files
    assert!(evs.iter().all(|e| e["kind"] == "Event" && e["apiVersion"] == "audit.k8s.io/v1"));
    let ours = evs.iter().filter(|e| s(e, "/requestURI").contains("&pad=")).count();
    assert!(ours < 1400 && ours > 400, "{ours} of 1400 request events kept");
    drop(server);
}

#[test]
fn global_view_requests_and_exec_sessions_are_audited() {
    let etcd = EtcdServer::start_new();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("audit.log");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--audit-log-path", log.to_str().unwrap()]);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let sim = common::procs::FedsimProcess::start(
        Path::new(env!("CARGO_BIN_EXE_fedsim")),
        "member-a",
        &["--nodes", "1", "--pods-per-node", "2", "--namespaces", "1", "--seed", "7"],
        Duration::from_secs(60),
    )
    .expect("start fedsim");
    rt.block_on(async {
        common::member::register(&server, &sim).await;
        common::member::wait_in_view(&server, &["member-a"]).await;
    });
    let admin = kubectl_for(&server, &server.kubeconfig(), "admin");
    let pods = admin.run(&["--context", "global", "get", "pods", "-A", "-o", "json"]).json();
    let running = pods["items"].as_array().unwrap().iter().find(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running")).unwrap_or_else(|| panic!("a running pod: {pods}")).clone();
    let (ns, name) = (s(&running, "/metadata/namespace").to_string(), s(&running, "/metadata/name").to_string());
    let r = admin.run(&["--context", "global", "-n", &ns, "exec", &name, "-v=8", "--", "sleep", "1"]);
    r.ok();
    let exec_ids = audit_ids(&r.stderr);
    let evs = wait_events(&log, "the exec session's ResponseComplete", |evs| evs.iter().any(|e| s(e, "/objectRef/subresource") == "exec" && e["stage"] == "ResponseComplete"));
    // the list: described by the member path, annotated with the view
    let list = evs.iter().find(|e| e["verb"] == "list" && s(e, "/objectRef/resource") == "pods" && s(e, "/userAgent").starts_with("kubectl")).expect("the LIST through the view");
    assert_eq!(s(list, "/annotations/fedctl.io~1global-view"), "global", "{list}");
    assert_eq!((s(list, "/objectRef/apiVersion"), list["responseStatus"]["code"].as_u64()), ("v1", Some(200)), "{list}");
    assert!(s(list, "/requestURI").starts_with("/apis/search.fedctl.io/v1alpha1/global/api/v1/pods"), "{list}");
    // the exec: started when the 101 went out, complete when the session ended (a second later)
    let exec: Vec<&Value> = evs.iter().filter(|e| s(e, "/objectRef/subresource") == "exec").collect();
    assert_eq!(exec.len(), 2, "{exec:#?}");
    let (started, complete) = (exec[0], exec[1]);
    assert_eq!((started["stage"].as_str(), complete["stage"].as_str()), (Some("ResponseStarted"), Some("ResponseComplete")), "{exec:#?}");
    assert_eq!(started["auditID"], complete["auditID"]);
    assert!(exec_ids.iter().any(|id| complete["auditID"] == id.as_str()), "kubectl saw {exec_ids:?}: {complete}");
    assert_eq!((s(complete, "/objectRef/name"), s(complete, "/objectRef/namespace"), s(complete, "/objectRef/resource")), (name.as_str(), ns.as_str(), "pods"), "{complete}");
    assert_eq!(complete["responseStatus"]["code"], 101, "{complete}");
    let ms: f64 = s(complete, "/annotations/fedctl.io~1latency-ms").parse().unwrap();
    assert!(ms >= 900.0, "the session lasted about a second, logged after {ms} ms: {complete}");
    drop(sim);
}

#[test]
fn bad_audit_flags_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fedctl"))
            .args(["server", "--etcd-servers", "http://127.0.0.1:1", "--secure-port", "0", "--data-dir"])
            .arg(tmp.path().join("data"))
            .args(extra)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--audit-log-path", "-", "--audit-level", "RequestResponse"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RequestResponse is not supported"), "{err}");
    // a path under a regular file cannot be created: the server does not start
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = run(&["--audit-log-path", file.join("audit.log").to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("audit log") && err.contains("plain-file"), "{err}");
    assert!(!tmp.path().join("data").join("tls").exists(), "nothing written before the audit log opened");
}
