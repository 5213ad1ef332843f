//! Members join: `fedctl join`/`unjoin`/`token`, CSR approval and signing, authorization, cluster-controller — real etcd, real `fedctl server`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use common::cli::fedctl;
use common::etcd::EtcdServer;
use common::server::{assert_same_dump, etcd_dump, ApiClient, Auth, FedServer};
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";

/// Server flags for tests: short certificates and grace period.
const FLAGS: [&str; 4] = ["--cluster-grace-period", "3s", "--agent-cert-lifetime", "60s"];

fn start() -> (EtcdServer, FedServer) {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &FLAGS);
    (etcd, server)
}

/// `(server, token, hash)` from `DATA_DIR/join-command`.
fn join_command(server: &FedServer) -> (String, String, String) {
    let path = server.kubeconfig().parent().unwrap().join("join-command");
    let text = std::fs::read_to_string(&path).expect("join-command written at first start");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let words: Vec<&str> = text.split_whitespace().collect();
    let arg = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap_or_else(|| panic!("{flag} in {text}")) + 1].to_string();
    assert_eq!(&words[..3], ["fedctl", "join", "<cluster-name>"], "{text}");
    assert_eq!(arg("--kubeconfig"), "<member-kubeconfig>");
    (arg("--server"), arg("--token"), arg("--ca-cert-hash"))
}

fn ca_pem(server: &FedServer) -> String {
    Kubeconfig::load(&server.kubeconfig()).unwrap().current_cluster().unwrap().ca_pem().unwrap().unwrap()
}

/// A client authenticating with a client certificate (via a kubeconfig written to `dir`).
fn cert_client(server: &FedServer, dir: &Path, name: &str, cert: &str, key: &str) -> ApiClient {
    let kc = Kubeconfig::single("fed", &server.url(), &ca_pem(server), AuthInfo::client_cert(cert, key));
    let path = dir.join(format!("{name}.kubeconfig"));
    kc.write(&path).unwrap();
    ApiClient::new(&path, &server.url(), Auth::ClientCert)
}

fn csr_body(cn: &str, orgs: &[&str]) -> (Value, String) {
    let (csr, key) = fedctl::pki::generate_csr(cn, orgs).unwrap();
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "test-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(csr), "signerName": "fedctl.io/agent-client", "usages": ["digital signature", "client auth"]},
    });
    (body, key)
}

async fn wait_for<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a CSR as `client` and waits for its certificate (PEM).
async fn issued_cert(client: &ApiClient, cn: &str) -> (String, String, String) {
    let (body, key) = csr_body(cn, &["system:fedctl:agents"]);
    let created = client.post(CSRS, &body).await;
    let name = created.ok()["metadata"]["name"].as_str().unwrap().to_string();
    let path = format!("{CSRS}/{name}");
    let cert = wait_for("certificate", Duration::from_secs(15), async || {
        let r = client.get(&path).await;
        let b64 = r.ok()["status"]["certificate"].as_str()?.to_string();
        Some(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap())
    })
    .await;
    (name, cert, key)
}

/// An agent client for `cluster`, its certificate obtained with the bootstrap token.
async fn agent(server: &FedServer, dir: &Path, token: &str, cluster: &str) -> ApiClient {
    let (_, cert, key) = issued_cert(&server.token_client(token), &format!("system:fedctl:agent:{cluster}")).await;
    cert_client(server, dir, cluster, &cert, &key)
}

fn ready(cluster: &Value) -> Option<(String, String)> {
    let c = cluster["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?;
    Some((c["status"].as_str()?.to_string(), c["reason"].as_str()?.to_string()))
}

fn lease(renew: chrono::DateTime<chrono::Utc>) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "cluster-heartbeat"},
        "spec": {"holderIdentity": "agent", "leaseDurationSeconds": 40, "renewTime": renew.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_end_to_end() {
    let (_etcd, server) = start();
    let (url, token, hash) = join_command(&server);
    assert_eq!(url, server.url());
    assert_eq!(hash, fedctl::pki::ca_cert_hash(&ca_pem(&server)).unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let member = tmp.path().join("member.kubeconfig");
    std::fs::write(&member, "apiVersion: v1\nkind: Config\n").unwrap();
    let dir = tmp.path().join("agent");
    let dir_s = dir.to_str().unwrap();
    let unit = tmp.path().join("fedctl-agent-east.service");
    let join = |name: &str, token: &str, hash: &str, extra: &[&str]| {
        let mut args = vec!["join", name, "--server", &url, "--token", token, "--ca-cert-hash", hash, "--kubeconfig", member.to_str().unwrap(), "--config-dir", dir_s, "--timeout", "20s"];
        args.extend_from_slice(extra);
        fedctl(&args)
    };

    // wrong CA hash: refused before anything is sent or written
    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = join("east", &token, &wrong, &[]).failed().to_string();
    assert!(err.contains("does not match --ca-cert-hash"), "{err}");
    assert!(!dir.exists(), "nothing written on a hash mismatch");
    let csrs = server.client().get(CSRS).await;
    assert_eq!(csrs.ok()["items"].as_array().unwrap().len(), 0, "no CSR on a hash mismatch");

    // unknown token: the server's 401 surfaced
    let err = join("east", "abcdef.0123456789abcdef", &hash, &[]).failed().to_string();
    assert!(err.contains("refused the bootstrap token (401 Unauthorized"), "{err}");
    assert!(!dir.exists());

    // expired token
    let short = fedctl(&["token", "create", "--ttl", "1s", "--kubeconfig", server.kubeconfig().to_str().unwrap()]).ok().trim().to_string();
    assert!(fedctl::pki::auth::parse_bootstrap_token(&short).is_some(), "{short}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let err = join("east", &short, &hash, &[]).failed().to_string();
    assert!(err.contains("401"), "{err}");
    assert!(!dir.exists());

    // the real thing
    let out = join("east", &token, &hash.to_uppercase().replace("SHA256:", "sha256:"), &["--labels", "env=prod,team=a", "--zone", "z1", "--region", "r1", "--systemd-unit", unit.to_str().unwrap()])
        .ok()
        .to_string();
    assert!(out.contains("joined as cluster \"east\""), "{out}");
    let cfg = fedctl::agent::config::AgentConfig::load(&dir).unwrap();
    assert_eq!(cfg.cluster_name, "east");
    assert_eq!(cfg.federation_server, url);
    assert_eq!(cfg.member_kubeconfig, std::fs::canonicalize(&member).unwrap());
    assert_eq!(cfg.labels.get("env").map(String::as_str), Some("prod"));
    assert_eq!((cfg.zone.as_deref(), cfg.region.as_deref()), (Some("z1"), Some("r1")));
    let ca = std::fs::read_to_string(dir.join("federation-ca.crt")).unwrap();
    assert_eq!(fedctl::pki::ca_cert_hash(&ca).unwrap(), hash);
    let cert = std::fs::read_to_string(dir.join("agent.crt")).unwrap();
    let key = std::fs::read_to_string(dir.join("agent.key")).unwrap();
    assert_eq!(std::fs::metadata(dir.join("agent.key")).unwrap().permissions().mode() & 0o777, 0o600);
    let info = fedctl::pki::cert_info(&cert).unwrap();
    assert_eq!(info.common_name, "system:fedctl:agent:east");
    assert_eq!(info.organizations, ["system:fedctl:agents"]);
    let life = (info.not_after - chrono::Utc::now()).num_seconds();
    assert!((30..=61).contains(&life), "lifetime from --agent-cert-lifetime 60s: {life}s left");
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    assert!(unit_text.contains(&format!(" agent --config {dir_s}\n")), "{unit_text}");

    // the CSR records the requester and the auto-approval
    let csrs = server.client().get(CSRS).await;
    let items = csrs.ok()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    let id = token.split('.').next().unwrap();
    assert_eq!(items[0]["spec"]["username"], format!("system:bootstrap:{id}"));
    assert!(items[0]["spec"]["groups"].as_array().unwrap().contains(&json!("system:bootstrappers")));
    assert_eq!(items[0]["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(items[0]["status"]["conditions"][0]["reason"], "AutoApproved");

    // the certificate works: the agent may register its own Cluster, not another
    let east = cert_client(&server, tmp.path(), "east", &cert, &key);
    east.get(&format!("{CLUSTERS}/east")).await.assert_status(404, "NotFound");
    east.get(&format!("{CLUSTERS}/west")).await.assert_status(403, "Forbidden");

    // joining again into the same directory needs --force
    let err = join("east", &token, &hash, &[]).failed().to_string();
    assert!(err.contains("already exists"), "{err}");

    // token list shows the first-start token (the expired one was cleaned up)
    let list = fedctl(&["token", "list", "--kubeconfig", server.kubeconfig().to_str().unwrap()]).ok().to_string();
    assert!(list.starts_with("TOKEN"), "{list}");
    assert!(list.contains(&token), "{list}");
    let gone = wait_for("expired token deleted", Duration::from_secs(10), async || {
        let l = fedctl(&["token", "list", "--kubeconfig", server.kubeconfig().to_str().unwrap()]).ok().to_string();
        (!l.contains(&short)).then_some(())
    });
    gone.await;

    // a printed join command works as is (token create --print-join-command)
    let cmd = fedctl(&["token", "create", "--print-join-command", "--kubeconfig", server.kubeconfig().to_str().unwrap()]).ok().trim().to_string();
    let words: Vec<&str> = cmd.split_whitespace().collect();
    assert_eq!(words[..2], ["fedctl", "join"]);
    let t2 = words[words.iter().position(|w| *w == "--token").unwrap() + 1];
    let dir2 = tmp.path().join("agent2");
    fedctl(&["join", "west", "--server", &url, "--token", t2, "--ca-cert-hash", &hash, "--kubeconfig", member.to_str().unwrap(), "--config-dir", dir2.to_str().unwrap()]).ok();
    assert!(dir2.join("agent.crt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csr_renewal_approval_and_cross_cluster_requests() {
    let (_etcd, server) = start();
    let (_, token, _) = join_command(&server);
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(&server, tmp.path(), &token, "member-a").await;

    // renewal with the agent's own certificate: approved and signed
    let (name, cert, _) = issued_cert(&a, "system:fedctl:agent:member-a").await;
    let csr = server.client().get(&format!("{CSRS}/{name}")).await;
    assert_eq!(csr.ok()["spec"]["username"], "system:fedctl:agent:member-a");
    assert_eq!(csr.json["status"]["conditions"][0]["reason"], "AutoApproved");
    assert_eq!(fedctl::pki::cert_info(&cert).unwrap().common_name, "system:fedctl:agent:member-a");

    // agent A asking for member-b's identity: created (any agent may ask), never approved
    let (body, _) = csr_body("system:fedctl:agent:member-b", &["system:fedctl:agents"]);
    let other = a.post(CSRS, &body).await.ok()["metadata"]["name"].as_str().unwrap().to_string();
    // a bootstrap token asking for a non-agent identity: pending as well
    let (body, _) = csr_body("admin", &["system:fedctl:agents"]);
    let odd = server.token_client(&token).post(CSRS, &body).await.ok()["metadata"]["name"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in [&other, &odd] {
        let r = server.client().get(&format!("{CSRS}/{n}")).await;
        assert!(r.ok()["status"].get("conditions").is_none(), "{n} must stay pending: {}", r.text);
        assert!(r.json["status"].get("certificate").is_none());
    }
    // A sees its own request but not others'; it cannot approve
    a.get(&format!("{CSRS}/{other}")).await.ok();
    a.get(&format!("{CSRS}/{odd}")).await.assert_status(403, "Forbidden");
    a.get(CSRS).await.assert_status(403, "Forbidden");
    let mut approve = server.client().get(&format!("{CSRS}/{other}")).await.json;
    approve["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]);
    a.put(&format!("{CSRS}/{other}/approval"), &approve).await.assert_status(403, "Forbidden");

    // an admin approves through /approval (what `kubectl certificate approve` does): signed;
    // the non-agent identity is approved but the signer refuses it
    server.client().put(&format!("{CSRS}/{other}/approval"), &approve).await.ok();
    let mut approve_odd = server.client().get(&format!("{CSRS}/{odd}")).await.json;
    approve_odd["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "Test"}]);
    server.client().put(&format!("{CSRS}/{odd}/approval"), &approve_odd).await.ok();
    let admin = server.client();
    wait_for("admin-approved CSR signed", Duration::from_secs(10), async || {
        let r = admin.get(&format!("{CSRS}/{other}")).await;
        r.json["status"]["certificate"].as_str().map(|_| ())
    })
    .await;
    let failed = wait_for("non-agent CSR failed", Duration::from_secs(10), async || {
        let r = admin.get(&format!("{CSRS}/{odd}")).await;
        r.json["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Failed").cloned()
    })
    .await;
    assert_eq!(failed["reason"], "SignerValidationFailure");
    // approval cannot be taken back; the certificate cannot be replaced
    let mut undo = admin.get(&format!("{CSRS}/{other}")).await.json;
    undo["status"]["conditions"] = json!([]);
    admin.put(&format!("{CSRS}/{other}/approval"), &undo).await.assert_status(422, "Invalid");
    let mut swap = admin.get(&format!("{CSRS}/{other}")).await.json;
    swap["status"]["certificate"] = json!("Zm9v");
    admin.put(&format!("{CSRS}/{other}/status"), &swap).await.assert_status(422, "Invalid");
    // the same through kubectl (1.33 sends protobuf; 1.27 JSON)
    for version in ["1.27", "1.33"] {
        let Some(bin) = common::kubectl::find_kubectl(version) else {
            eprintln!("SKIPPED: kubectl.{version} not found");
            continue;
        };
        let k = common::kubectl::Kubectl::new(bin, version, &server.kubeconfig(), &server.scratch_dir());
        let (body, _) = csr_body(&format!("system:fedctl:agent:member-k{}", version.replace('.', "")), &[]);
        let n = a.post(CSRS, &body).await.ok()["metadata"]["name"].as_str().unwrap().to_string();
        k.run(&["certificate", "approve", &n]).ok();
        wait_for("kubectl-approved CSR signed", Duration::from_secs(10), async || admin.get(&format!("{CSRS}/{n}")).await.json["status"]["certificate"].as_str().map(|_| ())).await;
        let out = k.run(&["get", "csr", &n]).ok().to_string();
        assert!(out.contains("Approved,Issued"), "{out}");
        let (body, _) = csr_body("system:fedctl:agent:member-d", &[]);
        let d = a.post(CSRS, &body).await.ok()["metadata"]["name"].as_str().unwrap().to_string();
        k.run(&["certificate", "deny", &d]).ok();
        let denied = admin.get(&format!("{CSRS}/{d}")).await;
        let c = &denied.ok()["status"]["conditions"][0];
        assert_eq!((c["type"].as_str(), c["reason"].as_str()), (Some("Denied"), Some("KubectlDeny")));
        assert!(c["lastTransitionTime"].is_string(), "{c}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(admin.get(&format!("{CSRS}/{d}")).await.json["status"].get("certificate").is_none(), "denied: never signed");
    }
    // requester fields come from authentication, not from the body
    let (mut body, _) = csr_body("system:fedctl:agent:member-a", &[]);
    body["spec"]["username"] = json!("admin");
    body["spec"]["groups"] = json!(["system:masters"]);
    let r = a.post(CSRS, &body).await;
    assert_eq!(r.ok()["spec"]["username"], "system:fedctl:agent:member-a");
    assert!(!r.json["spec"]["groups"].as_array().unwrap().contains(&json!("system:masters")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix() {
    let (etcd, server) = start();
    let (_, token, _) = join_command(&server);
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(&server, tmp.path(), &token, "member-a").await;
    let b = agent(&server, tmp.path(), &token, "member-b").await;
    let admin = server.client();
    let boot = server.token_client(&token);
    let anon = server.anonymous_client();

    // each agent registers itself; the controller gives it an exec namespace
    for (c, name, id) in [(&a, "member-a", "uid-a"), (&b, "member-b", "uid-b")] {
        let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"id": id}});
        c.post(CLUSTERS, &cl).await.ok();
        let ns = format!("/api/v1/namespaces/fed-exec-{name}");
        wait_for("exec namespace", Duration::from_secs(10), async || admin.get(&ns).await.json["metadata"]["labels"]["fedctl.io/cluster"].as_str().map(|_| ())).await;
    }
    let work = |name: &str| json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": name}, "spec": {"manifests": []}});
    let works_a = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-a/works";
    let works_b = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-b/works";
    admin.post(works_b, &work("wb")).await.ok();

    // allowed
    a.get(&format!("{CLUSTERS}/member-a")).await.ok();
    a.get(&format!("{CLUSTERS}?fieldSelector=metadata.name%3Dmember-a")).await.ok();
    a.merge_patch(&format!("{CLUSTERS}/member-a"), &json!({"metadata": {"labels": {"x": "y"}}})).await.ok();
    a.merge_patch(&format!("{CLUSTERS}/member-a/status"), &json!({"status": {"kubernetesVersion": "v1.33.0"}})).await.ok();
    a.post(works_a, &work("wa")).await.ok();
    a.get(works_a).await.ok();
    a.merge_patch(&format!("{works_a}/wa/status"), &json!({"status": {"manifestStatuses": []}})).await.ok();
    a.post("/apis/coordination.k8s.io/v1/namespaces/fed-exec-member-a/leases", &lease(chrono::Utc::now())).await.ok();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-credential"}, "data": {"token": "dA=="}});
    a.post("/api/v1/namespaces/fed-exec-member-a/secrets", &secret).await.ok();
    a.get("/api/v1/namespaces/fed-exec-member-a").await.ok();
    a.get("/apis").await.ok();
    a.get("/apis/cluster.fedctl.io/v1alpha1").await.ok();
    admin.get(CLUSTERS).await.ok();
    admin.get("/api/v1/namespaces/kube-system/secrets").await.ok();
    boot.get("/apis").await.ok();
    anon.get("/api/v1/namespaces/kube-public/configmaps/cluster-info").await.ok();
    boot.get("/api/v1/namespaces/kube-public/configmaps/cluster-info").await.ok();

    // let the controllers settle (readiness written) so the dump below sees only our requests
    wait_for("both clusters not Ready (no renewals)", Duration::from_secs(15), async || {
        let l = admin.get(CLUSTERS).await.json;
        l["items"].as_array()?.iter().all(|c| ready(c).is_some_and(|(s, _)| s == "False")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = etcd_dump(&etcd.endpoint()).await;

    // denied: agent A outside its own
    let r = a.get(&format!("{CLUSTERS}/member-b")).await;
    assert_eq!(
        r.assert_status(403, "Forbidden")["message"],
        "clusters.cluster.fedctl.io \"member-b\" is forbidden: User \"system:fedctl:agent:member-a\" cannot get resource \"clusters\" in API group \"cluster.fedctl.io\" at the cluster scope"
    );
    a.get(CLUSTERS).await.assert_status(403, "Forbidden");
    a.merge_patch(&format!("{CLUSTERS}/member-b"), &json!({"spec": {"id": "x"}})).await.assert_status(403, "Forbidden");
    a.merge_patch(&format!("{CLUSTERS}/member-b/status"), &json!({"status": {}})).await.assert_status(403, "Forbidden");
    a.delete(&format!("{CLUSTERS}/member-a")).await.assert_status(403, "Forbidden");
    let other = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "member-c"}, "spec": {}});
    let r = a.post(CLUSTERS, &other).await;
    assert!(r.assert_status(403, "Forbidden")["message"].as_str().unwrap().contains("may only register its own cluster"), "{}", r.text);
    let r = a.get(works_b).await;
    assert_eq!(
        r.assert_status(403, "Forbidden")["message"],
        "works.work.fedctl.io is forbidden: User \"system:fedctl:agent:member-a\" cannot list resource \"works\" in API group \"work.fedctl.io\" in the namespace \"fed-exec-member-b\""
    );
    a.get(&format!("{works_b}/wb")).await.assert_status(403, "Forbidden");
    a.post(works_b, &work("evil")).await.assert_status(403, "Forbidden");
    a.delete(&format!("{works_b}/wb")).await.assert_status(403, "Forbidden");
    a.put(&format!("{works_b}/wb"), &work("wb")).await.assert_status(403, "Forbidden");
    a.get("/apis/work.fedctl.io/v1alpha1/works").await.assert_status(403, "Forbidden");
    a.get("/api/v1/namespaces/fed-exec-member-b").await.assert_status(403, "Forbidden");
    a.get("/api/v1/namespaces").await.assert_status(403, "Forbidden");
    a.get("/api/v1/namespaces/kube-system/secrets").await.assert_status(403, "Forbidden");
    a.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})).await.assert_status(403, "Forbidden");
    b.get(&format!("{works_a}/wa")).await.assert_status(403, "Forbidden");
    // bootstrap token: joining only
    let r = boot.get(CLUSTERS).await;
    assert_eq!(
        r.assert_status(403, "Forbidden")["message"],
        format!(
            "clusters.cluster.fedctl.io is forbidden: User \"system:bootstrap:{}\" cannot list resource \"clusters\" in API group \"cluster.fedctl.io\" at the cluster scope",
            token.split('.').next().unwrap()
        )
    );
    boot.post(CLUSTERS, &other).await.assert_status(403, "Forbidden");
    boot.get(works_a).await.assert_status(403, "Forbidden");
    boot.get("/api/v1/namespaces/kube-system/secrets").await.assert_status(403, "Forbidden");
    // anonymous: 401 except cluster-info
    anon.get(CLUSTERS).await.assert_status(401, "Unauthorized");
    anon.get("/apis").await.assert_status(401, "Unauthorized");
    anon.post(CLUSTERS, &other).await.assert_status(401, "Unauthorized");
    anon.get("/api/v1/namespaces/kube-public/configmaps").await.assert_status(401, "Unauthorized");
    anon.request("PUT", "/api/v1/namespaces/kube-public/configmaps/cluster-info", Some("application/json"), Some(b"{}".to_vec())).await.assert_status(401, "Unauthorized");
    server.token_client("nope").get("/apis").await.assert_status(401, "Unauthorized");

    let after = etcd_dump(&etcd.endpoint()).await;
    assert_same_dump(&before, &after, "denied requests");

    // identity: a second member claiming a taken name, one member under two names
    let r = admin.merge_patch(&format!("{CLUSTERS}/member-a"), &json!({"spec": {"id": "uid-z"}})).await;
    assert!(r.assert_status(409, "Conflict")["message"].as_str().unwrap().contains("uid-a"), "{}", r.text);
    let r = b.merge_patch(&format!("{CLUSTERS}/member-b"), &json!({"spec": {"id": "uid-a"}})).await;
    assert!(r.assert_status(409, "Conflict")["message"].as_str().unwrap().contains("uid-b"), "{}", r.text);
    let dup = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "member-d"}, "spec": {"id": "uid-a"}});
    let r = admin.post(CLUSTERS, &dup).await;
    assert!(r.assert_status(409, "Conflict")["message"].as_str().unwrap().contains("\"member-a\""), "{}", r.text);
    // the same member re-registering with its own id is fine
    a.merge_patch(&format!("{CLUSTERS}/member-a"), &json!({"spec": {"id": "uid-a", "zone": "z"}})).await.ok();
}

/// A new Cluster carries the controller's finalizer and has its exec namespace as soon as
/// its create is answered (an agent's first heartbeat is a Lease in that namespace); a
/// dry-run create shows the finalizer and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_comes_with_its_finalizer_and_exec_namespace() {
    let (_etcd, server) = start();
    let admin = server.client();
    let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "n1"}, "spec": {"id": "uid-n1"}});
    let finalized = |c: &Value| c["metadata"]["finalizers"].as_array().is_some_and(|f| f.contains(&json!("fedctl.io/cluster-controller")));
    let dry = admin.post(&format!("{CLUSTERS}?dryRun=All"), &cl).await;
    assert!(finalized(dry.ok()), "{}", dry.text);
    admin.get(&format!("{CLUSTERS}/n1")).await.assert_status(404, "NotFound");
    admin.get("/api/v1/namespaces/fed-exec-n1").await.assert_status(404, "NotFound");
    let created = admin.post(CLUSTERS, &cl).await;
    assert!(finalized(created.ok()), "{}", created.text);
    let ns = admin.get("/api/v1/namespaces/fed-exec-n1").await;
    assert_eq!(ns.ok()["metadata"]["labels"]["fedctl.io/cluster"], "n1", "{}", ns.text);
    // the first heartbeat right after the create is taken
    let leases = "/apis/coordination.k8s.io/v1/namespaces/fed-exec-n1/leases";
    admin.post(leases, &lease(chrono::Utc::now())).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_controller_heartbeat() {
    let (_etcd, server) = start();
    let admin = server.client();
    let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "c1"}, "spec": {"id": "uid-1"}});
    admin.post(CLUSTERS, &cl).await.ok();
    let long = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "x".repeat(60)}, "spec": {}});
    admin.post(CLUSTERS, &long).await.assert_status(422, "Invalid");
    let ns = wait_for("exec namespace", Duration::from_secs(10), async || admin.get_ok_opt("/api/v1/namespaces/fed-exec-c1").await).await;
    assert_eq!(ns["metadata"]["labels"]["fedctl.io/cluster"], "c1");
    let c = admin.get(&format!("{CLUSTERS}/c1")).await;
    assert!(c.ok()["metadata"]["finalizers"].as_array().unwrap().contains(&json!("fedctl.io/cluster-controller")));

    let leases = "/apis/coordination.k8s.io/v1/namespaces/fed-exec-c1/leases";
    admin.post(leases, &lease(chrono::Utc::now())).await.ok();
    let cond = |want: &'static str| {
        let admin = admin.clone();
        async move {
            wait_for(want, Duration::from_secs(8), async || {
                let c = admin.get(&format!("{CLUSTERS}/c1")).await.json;
                ready(&c).filter(|(s, _)| s == want)
            })
            .await
        }
    };
    let t0 = Instant::now();
    assert_eq!(cond("True").await.1, "HeartbeatRenewed");
    assert!(t0.elapsed() < Duration::from_secs(3));
    // stop renewing: not Ready within the 3 s grace (+ slack)
    let t0 = Instant::now();
    assert_eq!(cond("False").await.1, "HeartbeatMissed");
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    let c = admin.get(&format!("{CLUSTERS}/c1")).await.json;
    let r = c["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert!(r["lastHeartbeatTime"].is_string() && r["message"].as_str().unwrap().contains("no heartbeat since"), "{r}");
    // renew again
    admin.merge_patch(&format!("{leases}/cluster-heartbeat"), &json!({"spec": {"renewTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})).await.ok();
    assert_eq!(cond("True").await.1, "HeartbeatRenewed");
    // other status fields written by an agent survive the controller's writes
    admin.merge_patch(&format!("{CLUSTERS}/c1/status"), &json!({"status": {"kubernetesVersion": "v1.33.1"}})).await.ok();
    assert_eq!(cond("False").await.1, "HeartbeatMissed");
    assert_eq!(admin.get(&format!("{CLUSTERS}/c1")).await.json["status"]["kubernetesVersion"], "v1.33.1");

    // the namespace comes back if deleted while the Cluster exists
    admin.delete("/api/v1/namespaces/fed-exec-c1").await.ok();
    wait_for("exec namespace recreated", Duration::from_secs(15), async || {
        let n = admin.get_ok_opt("/api/v1/namespaces/fed-exec-c1").await?;
        (n["status"]["phase"] == "Active").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unjoin_removes_works_namespace_and_cluster() {
    let (_etcd, server) = start();
    let admin = server.client();
    let kc = server.kubeconfig();
    let kc = kc.to_str().unwrap();
    let err = fedctl(&["unjoin", "ghost", "--kubeconfig", kc]).failed().to_string();
    assert!(err.contains("not joined"), "{err}");

    let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "u1"}, "spec": {"id": "uid-u1"}});
    admin.post(CLUSTERS, &cl).await.ok();
    wait_for("exec namespace", Duration::from_secs(10), async || admin.get_ok_opt("/api/v1/namespaces/fed-exec-u1").await).await;
    let works = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-u1/works";
    // one Work held by the (absent) agent's finalizer, one plain
    let held = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "held", "finalizers": ["fedctl.io/exec-controller"]}, "spec": {"manifests": []}});
    admin.post(works, &held).await.ok();
    admin.post(works, &json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "plain"}, "spec": {"manifests": []}})).await.ok();
    // watch the Works to see the deletion policy they carried
    let mut w = admin.watch(&format!("{works}?watch=1")).await;

    let out = fedctl(&["unjoin", "u1", "--kubeconfig", kc, "--timeout", "30s"]).ok().to_string();
    assert!(out.contains("unjoined"), "{out}");
    admin.get(&format!("{CLUSTERS}/u1")).await.assert_status(404, "NotFound");
    admin.get("/api/v1/namespaces/fed-exec-u1").await.assert_status(404, "NotFound");
    admin.get(&format!("{works}/held")).await.assert_status(404, "NotFound");
    let events = w.drain_for(Duration::from_millis(300)).await;
    let deleted_held = events.iter().find(|e| e["type"] == "DELETED" && e["object"]["metadata"]["name"] == "held").expect("held deleted");
    assert_eq!(deleted_held["object"]["metadata"]["annotations"]["fedctl.io/workload-deletion"], "Orphan");

    // --delete-workloads waits for the agent; without one it times out saying what is left,
    // and running unjoin again without the flag leaves the workloads and finishes
    let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "u2"}, "spec": {"id": "uid-u2"}});
    admin.post(CLUSTERS, &cl).await.ok();
    wait_for("exec namespace", Duration::from_secs(10), async || admin.get_ok_opt("/api/v1/namespaces/fed-exec-u2").await).await;
    let works = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-u2/works";
    admin
        .post(works, &json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "held", "finalizers": ["fedctl.io/exec-controller"]}, "spec": {"manifests": []}}))
        .await
        .ok();
    let err = fedctl(&["unjoin", "u2", "--delete-workloads", "--kubeconfig", kc, "--timeout", "2s"]).failed().to_string();
    assert!(err.contains("Work(s) held by finalizers (held)") && err.contains("without --delete-workloads"), "{err}");
    let w = admin.get(&format!("{works}/held")).await;
    assert_eq!(w.ok()["metadata"]["annotations"]["fedctl.io/workload-deletion"], "Delete");
    assert!(w.json["metadata"]["deletionTimestamp"].is_string());
    fedctl(&["unjoin", "u2", "--kubeconfig", kc, "--timeout", "30s"]).ok();
    admin.get(&format!("{CLUSTERS}/u2")).await.assert_status(404, "NotFound");
    admin.get("/api/v1/namespaces/fed-exec-u2").await.assert_status(404, "NotFound");
}

/// Small extension for optional GETs in tests.
trait GetOpt {
    async fn get_ok_opt(&self, path: &str) -> Option<Value>;
}

impl GetOpt for ApiClient {
    async fn get_ok_opt(&self, path: &str) -> Option<Value> {
        let r = self.get(path).await;
        (r.status == 200).then_some(r.json)
    }
}
