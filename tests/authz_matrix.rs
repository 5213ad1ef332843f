//! Security acceptance: who may touch what (anonymous, a foreign CA, an expired certificate, a bootstrap token, agent A against agent B, admin), TLS only, key files 0600, tokens never logged — real etcd, real `fedctl server`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::etcd::EtcdServer;
use common::server::{assert_same_dump, etcd_dump, ApiClient, Auth, FedServer};
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";

fn ca_pem(server: &FedServer) -> String {
    Kubeconfig::load(&server.kubeconfig()).unwrap().current_cluster().unwrap().ca_pem().unwrap().unwrap()
}

fn port(server: &FedServer) -> u16 {
    server.url().rsplit(':').next().unwrap().parse().unwrap()
}

/// The bootstrap token of `DATA_DIR/join-command`.
fn bootstrap_token(server: &FedServer) -> String {
    let text = std::fs::read_to_string(server.data_path().join("join-command")).expect("join-command");
    let words: Vec<&str> = text.split_whitespace().collect();
    words[words.iter().position(|w| *w == "--token").expect("--token") + 1].to_string()
}

/// A client authenticating with a client certificate (via a kubeconfig written to `dir`).
fn cert_client(server: &FedServer, dir: &Path, name: &str, cert: &str, key: &str) -> ApiClient {
    let kc = Kubeconfig::single("fed", &server.url(), &ca_pem(server), AuthInfo::client_cert(cert, key));
    let path = dir.join(format!("{name}.kubeconfig"));
    kc.write(&path).unwrap();
    ApiClient::new(&path, &server.url(), Auth::ClientCert)
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

/// An agent's client for `cluster`: a CSR made with the bootstrap token, approved and signed
/// by the server.
async fn agent(server: &FedServer, dir: &Path, token: &str, cluster: &str) -> ApiClient {
    let boot = server.token_client(token);
    let (csr, key) = fedctl::pki::generate_csr(&format!("system:fedctl:agent:{cluster}"), &["system:fedctl:agents"]).unwrap();
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "test-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(csr), "signerName": "fedctl.io/agent-client", "usages": ["digital signature", "client auth"]},
    });
    let created = boot.post(CSRS, &body).await;
    let path = format!("{CSRS}/{}", created.ok()["metadata"]["name"].as_str().unwrap());
    let cert = wait_for("certificate", Duration::from_secs(15), async || {
        let b64 = boot.get(&path).await.ok()["status"]["certificate"].as_str()?.to_string();
        Some(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap())
    })
    .await;
    cert_client(server, dir, cluster, &cert, &key)
}

/// One `GET path` over TLS presenting `cert`/`key`: `Ok(status)`, or `Err` when the TLS
/// handshake or the exchange fails (the server refused the certificate).
async fn raw_get_with_cert(server: &FedServer, cert: &str, key: &str, path: &str) -> Result<u16, String> {
    let tls: Arc<rustls::ClientConfig> = fedctl::pki::client_tls_config(&ca_pem(server), Some((cert, key))).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port(server))).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| format!("handshake: {e}"))?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    let res = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut raw)).await.map_err(|_| "no answer within 10 s".to_string())?;
    let text = String::from_utf8_lossy(&raw);
    match text.get(9..12).and_then(|c| c.parse().ok()) {
        Some(code) => Ok(code),
        None => Err(format!("read: {res:?}, got {text:?}")),
    }
}

fn lease(holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "cluster-heartbeat"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 40, "renewTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_denies_and_changes_nothing() {
    let etcd = EtcdServer::start_new();
    // long grace period: no readiness flips while the denied requests run
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cluster-grace-period", "10m"]);
    let token = bootstrap_token(&server);
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(&server, tmp.path(), &token, "member-a").await;
    let b = agent(&server, tmp.path(), &token, "member-b").await;
    let admin = server.client();
    let boot = server.token_client(&token);
    let anon = server.anonymous_client();

    for (c, name) in [(&a, "member-a"), (&b, "member-b")] {
        let cl = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"id": format!("uid-{name}")}});
        c.post(CLUSTERS, &cl).await.ok();
        let ns = format!("/api/v1/namespaces/fed-exec-{name}");
        wait_for("exec namespace", Duration::from_secs(15), async || admin.get(&ns).await.json["metadata"]["labels"]["fedctl.io/cluster"].as_str().map(|_| ())).await;
        c.post(&format!("/apis/coordination.k8s.io/v1/namespaces/fed-exec-{name}/leases"), &lease(name)).await.ok();
    }
    let works_b = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-b/works";
    let lease_b = "/apis/coordination.k8s.io/v1/namespaces/fed-exec-member-b/leases/cluster-heartbeat";
    let work = |name: &str| json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": name}, "spec": {"manifests": []}});
    admin.post(works_b, &work("wb")).await.ok();
    // the agents' own resources are theirs
    b.get(&format!("{works_b}/wb")).await.ok();
    b.get(lease_b).await.ok();
    // the bootstrap token may create (and read) CSRs
    let (csr, _) = fedctl::pki::generate_csr("system:fedctl:agent:member-c", &["system:fedctl:agents"]).unwrap();
    let csr_body = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"generateName": "boot-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(csr), "signerName": "fedctl.io/agent-client", "usages": ["digital signature", "client auth"]}});
    boot.post(CSRS, &csr_body).await.ok();

    // certificates the server must refuse: another CA's "admin", and its own CA's expired one
    let foreign = fedctl::pki::Ca::generate("intruder").unwrap();
    let (foreign_cert, foreign_key) = foreign.issue_client("admin", &["system:masters"], Duration::from_secs(3600)).unwrap();
    let tls = server.data_path().join("tls");
    let real = fedctl::pki::Ca::from_pem(&std::fs::read_to_string(tls.join("server-ca.crt")).unwrap(), &std::fs::read_to_string(tls.join("server-ca.key")).unwrap()).unwrap();
    let (expired_cert, expired_key) = real.issue_client("admin", &["system:masters"], Duration::ZERO).unwrap();
    // a control: the same CA's valid certificate is accepted
    let (valid_cert, valid_key) = real.issue_client("admin", &["system:masters"], Duration::from_secs(3600)).unwrap();
    assert_eq!(raw_get_with_cert(&server, &valid_cert, &valid_key, CLUSTERS).await, Ok(200));

    // let the controllers settle (readiness, exec namespaces) so the dump sees only our requests
    wait_for("both clusters have a Ready condition", Duration::from_secs(20), async || {
        let l = admin.get(CLUSTERS).await.json;
        let items = l["items"].as_array()?;
        (items.len() == 2 && items.iter().all(|c| c["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready")))).then_some(())
    })
    .await;
    let mut before = etcd_dump(&etcd.endpoint()).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = etcd_dump(&etcd.endpoint()).await;
        if again == before {
            break;
        }
        before = again;
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // the expired certificate's notAfter has passed

    // anonymous: 401
    anon.get(works_b).await.assert_status(401, "Unauthorized");
    anon.post(works_b, &work("anon")).await.assert_status(401, "Unauthorized");
    anon.get(CSRS).await.assert_status(401, "Unauthorized");
    anon.request("PUT", lease_b, Some("application/json"), Some(serde_json::to_vec(&lease("anon")).unwrap())).await.assert_status(401, "Unauthorized");
    // a client certificate from a foreign CA, or expired: refused at the handshake or 401
    for (what, cert, key) in [("foreign CA", &foreign_cert, &foreign_key), ("expired", &expired_cert, &expired_key)] {
        for path in [CLUSTERS, "/api/v1/namespaces/kube-system/secrets", works_b] {
            match raw_get_with_cert(&server, cert, key, path).await {
                Err(_) | Ok(401) => {}
                Ok(code) => panic!("{what} certificate: GET {path} answered {code}"),
            }
        }
    }
    // the bootstrap token: CSRs only
    boot.get(CLUSTERS).await.assert_status(403, "Forbidden");
    boot.post(works_b, &work("boot")).await.assert_status(403, "Forbidden");
    boot.get(works_b).await.assert_status(403, "Forbidden");
    boot.get("/api/v1/namespaces/kube-system/secrets").await.assert_status(403, "Forbidden");
    boot.put(lease_b, &lease("boot")).await.assert_status(403, "Forbidden");
    boot.merge_patch(&format!("{CLUSTERS}/member-b/status"), &json!({"status": {"kubernetesVersion": "v0"}})).await.assert_status(403, "Forbidden");
    boot.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "boot"}})).await.assert_status(403, "Forbidden");
    // agent A against agent B's Works, Cluster status and Lease
    a.post(works_b, &work("from-a")).await.assert_status(403, "Forbidden");
    a.get(&format!("{works_b}/wb")).await.assert_status(403, "Forbidden");
    a.put(&format!("{works_b}/wb"), &work("wb")).await.assert_status(403, "Forbidden");
    a.merge_patch(&format!("{works_b}/wb/status"), &json!({"status": {"manifestStatuses": []}})).await.assert_status(403, "Forbidden");
    a.delete(&format!("{works_b}/wb")).await.assert_status(403, "Forbidden");
    a.request("DELETE", works_b, None, None).await.assert_status(403, "Forbidden");
    a.merge_patch(&format!("{CLUSTERS}/member-b/status"), &json!({"status": {"kubernetesVersion": "v0"}})).await.assert_status(403, "Forbidden");
    a.merge_patch(&format!("{CLUSTERS}/member-b"), &json!({"metadata": {"labels": {"x": "y"}}})).await.assert_status(403, "Forbidden");
    a.get(lease_b).await.assert_status(403, "Forbidden");
    a.put(lease_b, &lease("member-a")).await.assert_status(403, "Forbidden");
    a.delete(lease_b).await.assert_status(403, "Forbidden");
    a.post("/apis/coordination.k8s.io/v1/namespaces/fed-exec-member-b/leases", &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "other"}, "spec": {}}))
        .await
        .assert_status(403, "Forbidden");
    a.get("/api/v1/namespaces/fed-exec-member-b/secrets").await.assert_status(403, "Forbidden");
    // ... and B against A
    b.merge_patch(&format!("{CLUSTERS}/member-a/status"), &json!({"status": {"kubernetesVersion": "v0"}})).await.assert_status(403, "Forbidden");
    b.put("/apis/coordination.k8s.io/v1/namespaces/fed-exec-member-a/leases/cluster-heartbeat", &lease("member-b")).await.assert_status(403, "Forbidden");
    // a watch on B's Works is refused too (before any stream starts)
    a.get(&format!("{works_b}?watch=1")).await.assert_status(403, "Forbidden");

    let after = etcd_dump(&etcd.endpoint()).await;
    assert_same_dump(&before, &after, "denied requests");

    // admin may do all of it
    admin
        .put(lease_b, &{
            let mut l = admin.get(lease_b).await.ok().clone();
            l["spec"]["holderIdentity"] = json!("admin");
            l
        })
        .await
        .ok();
    admin.merge_patch(&format!("{CLUSTERS}/member-b/status"), &json!({"status": {"kubernetesVersion": "v1.33.0"}})).await.ok();
    admin.delete(&format!("{works_b}/wb")).await.ok();
    admin.get("/api/v1/namespaces/kube-system/secrets").await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_only_keys_private_and_tokens_never_logged() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let token = bootstrap_token(&server);
    let secret = token.split_once('.').expect("id.secret").1.to_string();
    // a second token made with the CLI, used, and a wrong one
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fedctl")).args(["token", "create", "--kubeconfig"]).arg(server.kubeconfig()).output().expect("fedctl token create");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made = String::from_utf8_lossy(&out.stdout).split_whitespace().find(|w| w.len() == 23 && w.as_bytes()[6] == b'.').expect("a token in the output").to_string();
    wait_for("the created token is accepted", Duration::from_secs(15), async || (server.token_client(&made).get(CSRS).await.status != 401).then_some(())).await;
    let tmp = tempfile::tempdir().unwrap();
    let a = agent(&server, tmp.path(), &made, "member-a").await;
    a.get(CLUSTERS).await.assert_status(403, "Forbidden");
    server.token_client(&token).get(CLUSTERS).await.assert_status(403, "Forbidden");
    let wrong = format!("{}.0123456789abcdef", token.split('.').next().unwrap());
    server.token_client(&wrong).get(CSRS).await.assert_status(401, "Unauthorized");

    // plain HTTP to the TLS port gets no HTTP answer (no plaintext fallback)
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port(&server))).await.unwrap();
    tcp.write_all(b"GET /api/v1/namespaces/kube-public/configmaps/cluster-info HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut raw)).await.expect("the server closes a plaintext connection");
    assert!(!raw.starts_with(b"HTTP/"), "plaintext request answered: {}", String::from_utf8_lossy(&raw));
    assert!(!String::from_utf8_lossy(&raw).contains("cluster-info"), "plaintext request served data");
    // ... nor does HTTP/2 cleartext (prior knowledge)
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port(&server))).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut raw)).await.expect("the server closes an h2c connection");
    // an HTTP/2 server's first frame is SETTINGS (type 4 at byte 3)
    assert!(!(raw.len() >= 9 && raw[3] == 4 && raw[4] == 0), "h2c connection answered with SETTINGS");
    // the TLS port still works
    server.client().get("/api/v1/namespaces/default").await.ok();

    // every private file in the data dir is readable by its owner only
    let mut checked = Vec::new();
    let mut stack = vec![server.data_path()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read(&p).unwrap_or_default();
            let holds_secret = name.ends_with(".key")
                || name.contains("kubeconfig")
                || name.contains("token")
                || name == "join-command"
                || String::from_utf8_lossy(&text).contains("PRIVATE KEY")
                || String::from_utf8_lossy(&text).contains(&secret);
            if holds_secret {
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", p.display());
                checked.push(name);
            }
        }
    }
    assert!(checked.iter().any(|n| n.ends_with(".key")), "no key files found: {checked:?}");
    assert!(checked.iter().any(|n| n == "join-command"), "{checked:?}");

    // no token (nor its secret half) in the server's log
    let made_secret = made.split_once('.').unwrap().1.to_string();
    let log = server.log();
    assert!(log.contains("fedctl server listening"), "the log was captured");
    for (what, s) in [("bootstrap token secret", &secret), ("created token secret", &made_secret), ("wrong token secret", &"0123456789abcdef".to_string())] {
        assert!(!log.contains(s.as_str()), "the server's log holds the {what}:\n{}", log.lines().filter(|l| l.contains(s.as_str())).collect::<Vec<_>>().join("\n"));
    }
}
