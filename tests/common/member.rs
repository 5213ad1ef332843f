//! A member cluster for end-to-end tests: a `fedsim` process joined to a `fedctl server` with `fedctl join`, and its `fedctl agent`.

use std::path::Path;
use std::time::Duration;

use super::procs::{client_from_kubeconfig, FedsimProcess};
use base64::Engine;
use fedctl::agent::config::AgentConfig;
use serde_json::{json, Value};

use super::agent::AgentProcess;
use super::cli::fedctl;
use super::server::FedServer;

/// How a member joins: `fedctl join` flags and the heartbeat written into its `agent.yaml`.
#[derive(Clone, Debug)]
pub struct JoinOptions<'a> {
    /// `--labels`, e.g. `env=prod,tier=gold` (empty: none).
    pub labels: &'a str,
    /// `--zone`.
    pub zone: &'a str,
    /// `--region`.
    pub region: &'a str,
    /// Heartbeat interval in seconds.
    pub heartbeat: u64,
}

/// `fedctl join NAME` with the join command the server printed at first start (server URL,
/// bootstrap token, CA hash), writing the agent's config to `config_dir`; then sets the
/// heartbeat interval in the `agent.yaml` it wrote. Panics when `join` fails.
pub fn join(fed: &FedServer, name: &str, member_kubeconfig: &Path, config_dir: &Path, o: &JoinOptions) {
    let path = fed.kubeconfig().parent().expect("data dir").join("join-command");
    let text = std::fs::read_to_string(&path).expect("join-command written at first start");
    let words: Vec<&str> = text.split_whitespace().collect();
    let arg = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap_or_else(|| panic!("{flag} in {text}")) + 1].to_string();
    let (server, token, hash) = (arg("--server"), arg("--token"), arg("--ca-cert-hash"));
    let mut args = vec![
        "join",
        name,
        "--server",
        &server,
        "--token",
        &token,
        "--ca-cert-hash",
        &hash,
        "--kubeconfig",
        member_kubeconfig.to_str().unwrap(),
        "--config-dir",
        config_dir.to_str().unwrap(),
        "--zone",
        o.zone,
        "--region",
        o.region,
    ];
    if !o.labels.is_empty() {
        args.extend(["--labels", o.labels]);
    }
    fedctl(&args).ok();
    let mut config = AgentConfig::load(config_dir).expect("agent.yaml");
    config.heartbeat_interval_seconds = o.heartbeat;
    config.write(config_dir).expect("write agent.yaml");
}

/// One joined member: its fedsim, its agent and an admin client for the fedsim. Fields drop
/// in order: the agent first.
pub struct Member {
    /// Cluster name.
    pub name: String,
    pub agent: AgentProcess,
    pub sim: FedsimProcess,
    /// Admin client of the fedsim and its base URL.
    pub http: reqwest::Client,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Member {
    /// Starts `fedsim --name NAME` with `fedsim_args`, joins it to `fed` and starts its agent.
    pub fn start(fed: &FedServer, name: &str, fedsim_args: &[&str], o: &JoinOptions) -> Member {
        let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), name, fedsim_args, Duration::from_secs(60)).expect("start fedsim");
        let dir = tempfile::Builder::new().prefix("fedctl-member-").tempdir().expect("temp dir");
        let config_dir = dir.path().join("agent");
        join(fed, name, &sim.kubeconfig, &config_dir, o);
        let agent = AgentProcess::start(&config_dir, &dir.path().join("agent.log"));
        let (http, url) = client_from_kubeconfig(&sim.kubeconfig).expect("member client");
        Member { name: name.to_string(), agent, sim, http, url: url.trim_end_matches('/').to_string(), _dir: dir }
    }

    /// GET on the member as its admin: `(status, body)`; `(0, Null)` when unreachable.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        match self.http.get(format!("{}{path}", self.url)).timeout(Duration::from_secs(10)).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                (code, r.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }
}

/// Registers fedsim `m` with the global view as its agent would, without running one: the
/// credential Secret `fed-exec-<name>/member-credential` (token, CA, server) and the Cluster
/// pointing at it. Errors (e.g. already registered) are ignored.
pub async fn register(server: &FedServer, m: &FedsimProcess) {
    register_in_zone(server, m, None).await
}

/// [`register`] with the Cluster's `spec.zone` set to `zone` (when given).
pub async fn register_in_zone(server: &FedServer, m: &FedsimProcess, zone: Option<&str>) {
    let kc = fedctl::pki::kubeconfig::Kubeconfig::load(&m.kubeconfig).unwrap();
    let token = kc.current_user().unwrap().resolved_token().unwrap().unwrap();
    let ca = kc.current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let api = server.client();
    let ns = format!("fed-exec-{}", m.name);
    api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await.ok();
    api.post(
        &format!("/api/v1/namespaces/{ns}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-credential"}, "data": {"token": b64(&token), "ca.crt": b64(&ca), "server": b64(&m.url)}}),
    )
    .await
    .ok();
    let mut cluster = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": m.name}, "spec": {"apiEndpoint": m.url, "secretRef": {"namespace": ns, "name": "member-credential"}, "syncMode": "Pull"}});
    if let Some(z) = zone {
        cluster["spec"]["zone"] = json!(z);
    }
    api.post("/apis/cluster.fedctl.io/v1alpha1/clusters", &cluster).await.ok();
}

/// Waits (up to 90 s) until the global view lists namespaces of every one of `members` and
/// the admin kubeconfig has a `cluster-<name>` context for each: their agents synced the
/// member credentials and the server picked them up. Panics on timeout.
pub async fn wait_in_view(server: &FedServer, members: &[&str]) {
    let api = server.client();
    let kubeconfig = server.kubeconfig();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let r = api.get("/apis/search.fedctl.io/v1alpha1/global/api/v1/namespaces").await;
        let seen: std::collections::BTreeSet<String> =
            r.json["items"].as_array().cloned().unwrap_or_default().iter().filter_map(|o| o.pointer("/metadata/annotations/fedctl.io~1cluster").and_then(Value::as_str).map(str::to_string)).collect();
        let contexts = std::fs::read_to_string(&kubeconfig).unwrap_or_default();
        if r.status == 200 && members.iter().all(|m| seen.contains(*m) && contexts.contains(&format!("cluster-{m}"))) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "members {members:?} not all in the global view within 90 s (seen {seen:?})");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
