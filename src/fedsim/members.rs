//! Many simulated members in one process: each with its own listener, CA, admin kubeconfig and kube-system uid, over one runtime and the generator's shared templates.
//!
//! Every member is a full [`super::Sim`] (API, controllers, churn, admin endpoints) whose
//! generated objects are virtual ([`super::overlay`]), so a member costs its plan (~8 bytes
//! per pod), its changes and a few fixed structures. When all members listen,
//! `members.json` is written (write to a temporary name, then rename) into the kubeconfig
//! directory: `[{"name", "zone", "server", "kubeconfig", "nodes", "pods"}]`.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Config, FedsimError};

/// Members started at the same time (their populations are planned on blocking threads).
const PARALLEL_STARTS: usize = 4;

/// One member as listed in a members file (`--config`): every field but `name` defaults to
/// the command line's value.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberSpec {
    /// Cluster name.
    pub name: String,
    /// `topology.kubernetes.io/zone` of its nodes.
    pub zone: Option<String>,
    /// `topology.kubernetes.io/region` of its nodes.
    pub region: Option<String>,
    /// Number of nodes.
    pub nodes: Option<usize>,
    /// Pods per node in the initial population.
    pub pods_per_node: Option<usize>,
    /// Number of namespaces.
    pub namespaces: Option<usize>,
    /// Zipf exponent of pods per namespace.
    #[serde(alias = "namespaceSkew")]
    pub skew: Option<f64>,
    /// Churn events per second.
    pub churn: Option<f64>,
    /// Seed of everything generated.
    pub seed: Option<u64>,
}

/// A members file: a list of [`MemberSpec`], bare or under `members:` (YAML or JSON).
#[derive(Deserialize)]
#[serde(untagged)]
enum MembersFile {
    Wrapped { members: Vec<MemberSpec> },
    Bare(Vec<MemberSpec>),
}

/// Errors of reading a members file.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    /// The file could not be read.
    #[error("members file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The file is not a valid members list.
    #[error("members file {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// Configurations of `n` members named `<prefix>0001`…: member `i` (0-based) gets zone
/// `zones[i % zones.len()]` (the template's zone when `zones` is empty); everything else
/// comes from `template`.
pub fn numbered(n: usize, prefix: &str, zones: &[String], template: &Config) -> Vec<Config> {
    (0..n)
        .map(|i| {
            let mut c = template.clone();
            c.name = format!("{prefix}{:04}", i + 1);
            if !zones.is_empty() {
                c.zone = zones[i % zones.len()].clone();
            }
            c
        })
        .collect()
}

/// Configurations of the members listed in `path` (see [`MemberSpec`]).
pub fn from_file(path: &Path, template: &Config) -> Result<Vec<Config>, MembersError> {
    let text = std::fs::read_to_string(path).map_err(|e| MembersError::Read { path: path.to_path_buf(), source: e })?;
    let parsed: MembersFile = serde_yaml::from_str(&text).map_err(|e| MembersError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
    let specs = match parsed {
        MembersFile::Wrapped { members } | MembersFile::Bare(members) => members,
    };
    let mut seen = std::collections::HashSet::new();
    for s in &specs {
        if s.name.is_empty() || !seen.insert(s.name.clone()) {
            return Err(MembersError::Parse { path: path.to_path_buf(), message: format!("member names must be non-empty and unique (\"{}\")", s.name) });
        }
    }
    Ok(specs
        .into_iter()
        .map(|s| {
            let mut c = template.clone();
            c.name = s.name;
            c.zone = s.zone.unwrap_or(c.zone);
            c.region = s.region.unwrap_or(c.region);
            c.nodes = s.nodes.unwrap_or(c.nodes);
            c.pods_per_node = s.pods_per_node.unwrap_or(c.pods_per_node);
            c.namespaces = s.namespaces.unwrap_or(c.namespaces);
            c.namespace_skew = s.skew.unwrap_or(c.namespace_skew);
            c.churn = s.churn.unwrap_or(c.churn);
            c.seed = s.seed.unwrap_or(c.seed);
            c
        })
        .collect())
}

/// One line of `members.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemberEntry {
    /// Cluster name.
    pub name: String,
    /// Zone of its nodes.
    pub zone: String,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// Path of its admin kubeconfig, `<dir>/<name>.kubeconfig`.
    pub kubeconfig: PathBuf,
    /// Nodes at start.
    pub nodes: usize,
    /// Pods at start (`nodes × pods_per_node`).
    pub pods: usize,
}

/// Starts every member of `configs` (virtual objects forced on; kubeconfigs written to
/// `dir/<name>.kubeconfig`; a data dir, when set, becomes `<data dir>/<name>`), writes
/// `dir/members.json` once all listen, and serves them all until `shutdown` resolves.
/// Prints `fedsim <name> listening on <url>` per member. Error: the first member that
/// could not start (the others are stopped).
pub async fn run(configs: Vec<Config>, dir: &Path, shutdown: impl std::future::Future<Output = ()>) -> Result<(), FedsimError> {
    std::fs::create_dir_all(dir).map_err(|e| FedsimError::DataDir { path: dir.to_path_buf(), source: e })?;
    let t0 = std::time::Instant::now();
    let configs: Vec<Config> = configs
        .into_iter()
        .map(|mut c| {
            c.virtual_objects = true;
            c.kubeconfig_out = Some(dir.join(format!("{}.kubeconfig", c.name)));
            c.data_dir = c.data_dir.map(|d| d.join(&c.name));
            c
        })
        .collect();
    let mut started: Vec<super::Started> = Vec::with_capacity(configs.len());
    let mut starts = futures::stream::iter(configs.into_iter().map(super::start)).buffered(PARALLEL_STARTS);
    while let Some(s) = starts.next().await {
        let s = s?;
        println!("fedsim {} listening on {}", s.sim.config.name, s.url);
        started.push(s);
    }
    let entries: Vec<MemberEntry> = started
        .iter()
        .map(|s| {
            let c = &s.sim.config;
            MemberEntry { name: c.name.clone(), zone: c.zone.clone(), server: s.url.clone(), kubeconfig: c.kubeconfig_out.clone().unwrap_or_default(), nodes: c.nodes, pods: c.nodes * c.pods_per_node }
        })
        .collect();
    let path = dir.join("members.json");
    let tmp = dir.join("members.json.tmp");
    let text = serde_json::to_vec_pretty(&entries).expect("serializable");
    std::fs::write(&tmp, text).map_err(|e| FedsimError::DataDir { path: tmp.clone(), source: e })?;
    std::fs::rename(&tmp, &path).map_err(|e| FedsimError::DataDir { path: path.clone(), source: e })?;
    tracing::info!(members = entries.len(), start_ms = t0.elapsed().as_millis() as u64, path = %path.display(), "all members listening");
    println!("fedsim: {} members listening; {}", entries.len(), path.display());

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serving: Vec<_> = started
        .into_iter()
        .map(|s| {
            let mut rx = stop_rx.clone();
            tokio::spawn(s.serve(async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }))
        })
        .collect();
    shutdown.await;
    let _ = stop_tx.send(true);
    for h in serving {
        let _ = h.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_members_cycle_through_the_zones() {
        let zones: Vec<String> = ["z1", "z2", "z3"].iter().map(|z| z.to_string()).collect();
        let cs = numbered(4, "m-", &zones, &Config::default());
        let got: Vec<(&str, &str)> = cs.iter().map(|c| (c.name.as_str(), c.zone.as_str())).collect();
        assert_eq!(got, [("m-0001", "z1"), ("m-0002", "z2"), ("m-0003", "z3"), ("m-0004", "z1")]);
    }

    #[test]
    fn members_file_fills_defaults_and_rejects_duplicates() {
        let dir = std::env::temp_dir().join(format!("fedsim-members-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.yaml");
        std::fs::write(&p, "members:\n- name: a\n  zone: z9\n  nodes: 3\n  podsPerNode: 7\n  skew: 0\n- name: b\n  churn: 5\n").unwrap();
        let cs = from_file(&p, &Config::default()).unwrap();
        assert_eq!((cs[0].zone.as_str(), cs[0].nodes, cs[0].pods_per_node, cs[0].namespace_skew), ("z9", 3, 7, 0.0));
        assert_eq!((cs[1].name.as_str(), cs[1].nodes, cs[1].churn), ("b", Config::default().nodes, 5.0));
        std::fs::write(&p, "[{\"name\": \"a\"}, {\"name\": \"a\"}]").unwrap();
        assert!(matches!(from_file(&p, &Config::default()), Err(MembersError::Parse { .. })));
        std::fs::write(&p, "[{\"name\": \"a\", \"nodez\": 1}]").unwrap();
        assert!(from_file(&p, &Config::default()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
