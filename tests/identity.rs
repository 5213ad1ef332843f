//! Identities on the federation API: ServiceAccount tokens from `kubectl create token` (RBAC decides, deleting the ServiceAccount revokes them), OIDC ID tokens of an issuer made in the test, and personal tokens from `fedctl token create --user` — real etcd, real `fedctl server`, real kubectl.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use common::cli::fedctl;
use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::server::FedServer;
use fedctl::pki::kubeconfig::{AuthInfo, Kubeconfig};

fn kubectl_bin() -> (String, PathBuf) {
    ["1.33", "1.27"].iter().find_map(|v| find_kubectl(v).map(|b| (v.to_string(), b))).expect("no kubectl.1.33 or kubectl.1.27 on PATH")
}

/// A kubeconfig for the server presenting `token` (and no client certificate).
fn token_kubeconfig(server: &FedServer, dir: &Path, name: &str, token: &str) -> PathBuf {
    let ca = Kubeconfig::load(&server.kubeconfig()).unwrap().current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let path = dir.join(format!("{name}.kubeconfig"));
    Kubeconfig::single("fed", &server.url(), &ca, AuthInfo::bearer_token(token)).write(&path).unwrap();
    path
}

fn kubectl(kubeconfig: &Path, dir: &Path, name: &str) -> Kubectl {
    let (version, bin) = kubectl_bin();
    let cache = dir.join(format!("cache-{name}"));
    std::fs::create_dir_all(&cache).unwrap();
    Kubectl::new(bin, &version, kubeconfig, &cache)
}

/// `kubectl auth whoami -o json`: user name and groups.
fn whoami(k: &Kubectl) -> (String, Vec<String>) {
    let v = k.run(&["auth", "whoami", "-o", "json"]).json();
    let info = &v["status"]["userInfo"];
    let groups = info["groups"].as_array().map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_string)).collect()).unwrap_or_default();
    (info["username"].as_str().unwrap_or("").to_string(), groups)
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn claims_of(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn unauthorized(stderr: &str) -> bool {
    stderr.contains("Unauthorized")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start(&etcd.endpoint());
    let tmp = tempfile::tempdir().unwrap();
    let admin = kubectl(&server.kubeconfig(), tmp.path(), "admin");
    admin.run(&["create", "namespace", "team-a"]).ok();
    admin.run(&["create", "serviceaccount", "bot", "-n", "team-a"]).ok();
    let sa_uid = admin.run(&["get", "serviceaccount", "bot", "-n", "team-a", "-o", "jsonpath={.metadata.uid}"]).ok().to_string();

    let token = admin.run(&["create", "token", "bot", "-n", "team-a"]).ok().trim().to_string();
    let c = claims_of(&token);
    assert_eq!(c["iss"], "https://kubernetes.default.svc", "{c}");
    assert_eq!(c["sub"], "system:serviceaccount:team-a:bot");
    assert_eq!(c["aud"], json!(["https://kubernetes.default.svc"]));
    assert_eq!(c["kubernetes.io"]["namespace"], "team-a");
    assert_eq!(c["kubernetes.io"]["serviceaccount"], json!({"name": "bot", "uid": sa_uid}));
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 3600);
    assert_eq!(c["nbf"], c["iat"]);
    assert!(c["jti"].as_str().is_some_and(|j| !j.is_empty()));

    let bot_kc = token_kubeconfig(&server, tmp.path(), "bot", &token);
    let bot = kubectl(&bot_kc, tmp.path(), "bot");
    let denied = bot.run(&["get", "pods", "-n", "team-a"]).failed().to_string();
    assert!(denied.contains("Forbidden") && denied.contains("system:serviceaccount:team-a:bot") && denied.contains("cannot list resource \"pods\""), "{denied}");
    let (user, groups) = whoami(&bot);
    assert_eq!(user, "system:serviceaccount:team-a:bot");
    assert_eq!(groups, ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"]);
    let me = bot.run(&["auth", "whoami", "-o", "json"]).json();
    assert_eq!(me["status"]["userInfo"]["uid"], sa_uid, "{me}");

    admin.run(&["create", "rolebinding", "bot-view", "--clusterrole=view", "--serviceaccount=team-a:bot", "-n", "team-a"]).ok();
    wait_until("the view binding to apply to the ServiceAccount", Duration::from_secs(20), || bot.run(&["get", "pods", "-n", "team-a"]).code == Some(0));
    // view in team-a only
    assert!(bot.run(&["get", "pods", "-n", "default"]).failed().contains("Forbidden"));

    // the TokenRequest as kube-apiserver validates it
    let api = server.client();
    let tr = |spec: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let path = "/api/v1/namespaces/team-a/serviceaccounts/bot/token";
    let r = api.post(path, &tr(json!({"expirationSeconds": 599}))).await;
    let s = r.assert_status(422, "Invalid");
    assert!(s["message"].as_str().unwrap().contains("may not specify a duration less than 10 minutes"), "{s}");
    r.assert_status(422, "Invalid");
    api.post(path, &tr(json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}))).await.assert_status(400, "BadRequest");
    api.post("/api/v1/namespaces/team-a/serviceaccounts/nobody/token", &tr(json!({}))).await.assert_status(404, "NotFound");
    let other_aud = api.post(path, &tr(json!({"audiences": ["vault"], "expirationSeconds": 600}))).await.ok().clone();
    assert_eq!(other_aud["spec"]["audiences"], json!(["vault"]));
    assert_eq!(other_aud["spec"]["expirationSeconds"], 600);
    assert!(other_aud["status"]["expirationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    let vault_token = other_aud["status"]["token"].as_str().unwrap().to_string();
    // a token for another audience does not authenticate to the API …
    server.token_client(&vault_token).get("/api/v1/namespaces/team-a/pods").await.assert_status(401, "Unauthorized");
    // … but a TokenReview for that audience accepts it
    let review = |token: &str, audiences: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}});
    let rv = api.post("/apis/authentication.k8s.io/v1/tokenreviews", &review(&vault_token, json!(["vault"]))).await.ok().clone();
    assert_eq!(rv["status"]["authenticated"], true, "{rv}");
    assert_eq!(rv["status"]["user"]["username"], "system:serviceaccount:team-a:bot");
    assert_eq!(rv["status"]["user"]["uid"], sa_uid);
    assert_eq!(rv["status"]["audiences"], json!(["vault"]));
    assert!(rv["spec"].get("token").is_none(), "the token is not echoed");
    let rv = api.post("/apis/authentication.k8s.io/v1/tokenreviews", &review(&token, json!([]))).await.ok().clone();
    assert_eq!(rv["status"]["authenticated"], true, "{rv}");
    assert_eq!(rv["status"]["audiences"], json!(["https://kubernetes.default.svc"]));

    // issuer discovery: the published key verifies the token
    let doc = api.get("/.well-known/openid-configuration").await.ok().clone();
    assert_eq!(doc["issuer"], "https://kubernetes.default.svc");
    assert_eq!(doc["jwks_uri"], "https://kubernetes.default.svc/openid/v1/jwks");
    assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256"]));
    let jwks = api.get("/openid/v1/jwks").await.ok().clone();
    let set: jsonwebtoken::jwk::JwkSet = serde_json::from_value(jwks.clone()).unwrap();
    let header = jsonwebtoken::decode_header(&token).unwrap();
    let jwk = set.find(header.kid.as_deref().unwrap()).expect("the token's kid is published");
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    v.set_audience(&["https://kubernetes.default.svc"]);
    jsonwebtoken::decode::<Value>(&token, &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(), &v).expect("verifies with the published JWKS");

    // the key survives a restart: the token still works
    server.stop();
    server.restart();
    assert_eq!(server.client().get("/openid/v1/jwks").await.ok(), &jwks);
    bot.run(&["get", "pods", "-n", "team-a"]).ok();
    // and a replica (which shares the first server's tls/, as the CA) accepts it too
    let replica = FedServer::start_replica(&server, &[]);
    let at_replica = kubectl(&token_kubeconfig(&replica, tmp.path(), "bot-replica", &token), tmp.path(), "bot-replica");
    assert_eq!(whoami(&at_replica).0, "system:serviceaccount:team-a:bot");
    let replica_token = kubectl(&replica.kubeconfig(), tmp.path(), "replica-admin").run(&["create", "token", "bot", "-n", "team-a"]).ok().trim().to_string();
    server.token_client(&replica_token).get("/api/v1/namespaces/team-a/pods").await.ok();

    // deleting the ServiceAccount revokes its tokens, and a new one of the same name has another uid
    admin.run(&["delete", "serviceaccount", "bot", "-n", "team-a"]).ok();
    wait_until("the token to stop authenticating", Duration::from_secs(10), || unauthorized(&bot.run(&["get", "pods", "-n", "team-a"]).stderr));
    admin.run(&["create", "serviceaccount", "bot", "-n", "team-a"]).ok();
    assert!(unauthorized(bot.run(&["get", "pods", "-n", "team-a"]).failed()));
    let rv = server.client().post("/apis/authentication.k8s.io/v1/tokenreviews", &review(&token, json!([]))).await.ok().clone();
    assert_eq!(rv["status"]["authenticated"], false, "{rv}");
}

/// An OIDC issuer made in the test: an ES256 key and its JWKS file.
struct Issuer {
    key: jsonwebtoken::EncodingKey,
    jwk: Value,
}

impl Issuer {
    fn new(kid: &str) -> Issuer {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        let b = |x: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(x);
        Issuer {
            key: jsonwebtoken::EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            jwk: json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": b(&raw[1..33]), "y": b(&raw[33..])}),
        }
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        h.kid = Some(kid.to_string());
        jsonwebtoken::encode(&h, claims, &self.key).unwrap()
    }
}

const OIDC_ISSUER: &str = "https://issuer.fedctl.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_id_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let issuer = Issuer::new("test-key");
    let jwks = tmp.path().join("jwks.json");
    std::fs::write(&jwks, json!({"keys": [issuer.jwk]}).to_string()).unwrap();
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(
        &etcd.endpoint(),
        &[
            "--oidc-issuer-url",
            OIDC_ISSUER,
            "--oidc-client-id",
            "fedctl",
            "--oidc-jwks",
            jwks.to_str().unwrap(),
            "--oidc-signing-algs",
            "ES256",
            "--oidc-groups-claim",
            "groups",
            "--oidc-groups-prefix",
            "oidc:",
        ],
    );
    let now = chrono::Utc::now().timestamp();
    let claims = |patch: Value| {
        let mut c = json!({"iss": OIDC_ISSUER, "aud": "fedctl", "sub": "jane", "groups": ["team-a-devs", "qa"], "iat": now, "exp": now + 3600});
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let good = issuer.sign("test-key", &claims(json!({})));
    let jane_kc = token_kubeconfig(&server, tmp.path(), "jane", &good);
    let jane = kubectl(&jane_kc, tmp.path(), "jane");
    let (user, groups) = whoami(&jane);
    assert_eq!(user, format!("{OIDC_ISSUER}#jane"));
    assert_eq!(groups, ["oidc:team-a-devs", "oidc:qa", "system:authenticated"]);
    // RBAC decides on the prefixed names: nothing granted yet
    assert!(jane.run(&["get", "pods", "-n", "default"]).failed().contains("Forbidden"));

    let refused = [
        ("expired", issuer.sign("test-key", &claims(json!({"iat": now - 7200, "exp": now - 3600})))),
        ("not yet valid", issuer.sign("test-key", &claims(json!({"nbf": now + 3600})))),
        ("wrong audience", issuer.sign("test-key", &claims(json!({"aud": "someone-else"})))),
        ("wrong issuer", issuer.sign("test-key", &claims(json!({"iss": "https://other.fedctl.test"})))),
        ("another key under the known kid", Issuer::new("test-key").sign("test-key", &claims(json!({})))),
        ("another key under an unknown kid", Issuer::new("other").sign("other", &claims(json!({})))),
    ];
    for (what, token) in &refused {
        let r = server.token_client(token).get("/api/v1/namespaces/default/pods").await;
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        r.assert_status(401, "Unauthorized");
    }
    let k = kubectl(&token_kubeconfig(&server, tmp.path(), "expired", &refused[0].1), tmp.path(), "expired");
    assert!(unauthorized(k.run(&["auth", "whoami"]).failed()));
    // the good one still works, and TokenReview knows the issuer too
    server.token_client(&good).get("/api/v1/namespaces/default/pods").await.assert_status(403, "Forbidden");
    let rv = server.client().post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": good}})).await.ok().clone();
    assert_eq!(rv["status"]["authenticated"], true, "{rv}");
    assert_eq!(rv["status"]["user"]["username"], format!("{OIDC_ISSUER}#jane"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_tokens_for_people() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let tmp = tempfile::tempdir().unwrap();
    let admin_kc = server.kubeconfig();
    let admin = kubectl(&admin_kc, tmp.path(), "admin");
    admin.run(&["create", "namespace", "team-a"]).ok();

    let alice_kc = tmp.path().join("alice.kubeconfig");
    let out = fedctl(&["token", "create", "--user", "alice", "--groups", "team-a-devs", "--kubeconfig-out", alice_kc.to_str().unwrap(), "--kubeconfig", admin_kc.to_str().unwrap()]).ok().to_string();
    assert!(out.contains("kubeconfig written to") && !out.contains("fedctl_"), "the token is in the file only: {out}");
    let id = out.lines().find_map(|l| l.strip_prefix("id: ")).expect("id line").trim().to_string();
    let written = Kubeconfig::load(&alice_kc).unwrap();
    let bearer = written.current_user().unwrap().resolved_token().unwrap().unwrap();
    assert!(bearer.starts_with("fedctl_"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&alice_kc).unwrap().permissions().mode() & 0o777, 0o600);

    // kubectl with the written kubeconfig alone
    let alice = kubectl(&alice_kc, tmp.path(), "alice");
    let (user, groups) = whoami(&alice);
    assert_eq!((user.as_str(), groups), ("alice", vec!["team-a-devs".to_string(), "system:authenticated".to_string()]));
    assert!(alice.run(&["get", "pods", "-n", "team-a"]).failed().contains("Forbidden"));
    admin.run(&["create", "rolebinding", "devs-view", "--clusterrole=view", "--group=team-a-devs", "-n", "team-a"]).ok();
    wait_until("the group binding to apply", Duration::from_secs(20), || alice.run(&["get", "pods", "-n", "team-a"]).code == Some(0));

    // the Secret holds a hash, never the token's secret part
    let secret = admin.run(&["get", "secret", &format!("user-token-{id}"), "-n", "kube-system", "-o", "json"]).json();
    assert_eq!(secret["type"], "fedctl.io/user-token");
    let secret_part = bearer.rsplit('_').next().unwrap();
    let decoded: Vec<String> =
        secret["data"].as_object().unwrap().values().map(|v| String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap()).unwrap()).collect();
    assert!(decoded.iter().all(|v| !v.contains(secret_part)), "{decoded:?}");

    // --ui prints the bare token; `fedctl token delete` revokes it
    let ui = fedctl(&["token", "create", "--user", "bob", "--ui", "--ttl", "1h", "--kubeconfig", admin_kc.to_str().unwrap()]).ok().trim().to_string();
    assert!(ui.starts_with("fedctl_") && !ui.contains('\n'), "{ui}");
    let bob = server.token_client(&ui);
    bob.get("/api/v1/namespaces/team-a/pods").await.assert_status(403, "Forbidden");
    let bob_id = ui.strip_prefix("fedctl_").unwrap().split('_').next().unwrap().to_string();
    fedctl(&["token", "delete", &bob_id, "--kubeconfig", admin_kc.to_str().unwrap()]).ok();
    bob.get("/api/v1/namespaces/team-a/pods").await.assert_status(401, "Unauthorized");
    assert!(fedctl(&["token", "delete", &bob_id, "--kubeconfig", admin_kc.to_str().unwrap()]).failed().contains("no token"));

    // minting a token for someone needs `impersonate` on them: secrets' `edit` is not enough
    admin.run(&["create", "rolebinding", "devs-edit", "--clusterrole=edit", "--group=team-a-devs", "-n", "kube-system"]).ok();
    wait_until("alice may create secrets in kube-system", Duration::from_secs(20), || alice.run(&["auth", "can-i", "create", "secrets", "-n", "kube-system"]).code == Some(0));
    let refused = fedctl(&["token", "create", "--user", "root", "--groups", "system:masters", "--kubeconfig", alice_kc.to_str().unwrap()]).failed().to_string();
    assert!(refused.contains("cannot impersonate"), "{refused}");
    let secrets = admin.run(&["get", "secrets", "-n", "kube-system", "-o", "json"]).json();
    let tokens: Vec<&Value> = secrets["items"].as_array().unwrap().iter().filter(|s| s["type"] == "fedctl.io/user-token").collect();
    assert_eq!(tokens.len(), 1, "nothing written for the refused token: {tokens:?}");

    // deleting its Secret revokes alice's token
    admin.run(&["delete", "secret", &format!("user-token-{id}"), "-n", "kube-system"]).ok();
    assert!(unauthorized(alice.run(&["auth", "whoami"]).failed()));
    let rv =
        server.client().post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": bearer}})).await.ok().clone();
    assert_eq!(rv["status"]["authenticated"], false);
}
