//! `fedctl-bench seed`: the design's scale — 1,000 members, 10M pods on 200k nodes over 4
//! zones — times `--scale`, measured end to end on one machine and printed as one table.
//!
//! Starts an etcd, a `fedctl server` whose global view is served by one `fedctl cache --zone`
//! process per zone (each follows only its zone's members; `--cache-endpoints`), and the members
//! ([`sim`]: virtual members of one fedsim, or one fedsim per member). Phases, each skippable:
//! 1. members (`--skip-members`): every member joined with `fedctl join` and its agent run in
//!    this process ([`super::agents`]); registration p50/p99, server RSS per member; idle
//!    etcd writes/s and server CPU per member; (`--skip-works`) templates on 3 members each
//!    and one Duplicated to all → Work applied p50/p99. Without it the members are
//!    registered directly (credential Secret and Cluster written by the bench);
//! 2. zones (`--skip-zones`): the cache processes started (`--cache-layout zones|shards`),
//!    RSS, bytes per object by kind, start → consistent view and the CPU it took;
//! 3. LISTs (`--skip-lists`): whole view and one zone through the server's MUX;
//! 4. watch (`--skip-watch`): global-view watchers under churn, events/s and p99 latency.
//!
//! A row that fails says why and the table goes on. Every process started is killed by its
//! pid when the run ends (or fails), and every temporary directory removed.

pub mod members;
pub mod sim;
pub mod zones;

use std::time::{Duration, Instant};

use super::procs::{client_from_kubeconfig, free_ports_below_ephemeral, register_member_at, sibling_binary, wait_ready, EtcdProcess, ServerProcess};

/// The design's counts at `--scale 1`.
const DESIGN_MEMBERS: f64 = 1000.0;
const DESIGN_NODES: f64 = 200_000.0;
const DESIGN_PODS: f64 = 10_000_000.0;
const DESIGN_TEMPLATES: f64 = 10_000.0;
const DESIGN_WATCHERS: f64 = 1000.0;
/// Member changes per second over the whole federation at `--scale 1` (the design's watch
/// ingest target is 50k events/s per core).
const DESIGN_CHURN: f64 = 50_000.0;

/// Flags of `fedctl-bench seed`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Multiplies the design's counts (1 = 1,000 members, 10M pods, 200k nodes; 10,000
    /// templates; 1,000 watchers; 50k churn events/s).
    #[arg(long, default_value_t = 0.01)]
    pub scale: f64,
    /// Zones (one `fedctl cache` process each).
    #[arg(long, default_value_t = 4)]
    pub zones: usize,
    /// How members are simulated.
    #[arg(long, value_enum, default_value = "auto")]
    pub fedsim_mode: sim::Mode,
    /// How the view is split over the cache processes: one per zone (`fedctl cache --zone`),
    /// or one shard each of as many as there are zones (`--shards i`: each lists every member).
    #[arg(long, value_enum, default_value = "zones")]
    pub cache_layout: zones::Layout,
    /// Members (default: 1,000 × scale, at least one per zone).
    #[arg(long)]
    pub members: Option<usize>,
    /// Global-view watchers (default: 1,000 × scale, at least 10).
    #[arg(long)]
    pub watchers: Option<usize>,
    /// Churn over all members, events/s (default: 50,000 × scale).
    #[arg(long)]
    pub churn: Option<f64>,
    /// Templates on 3 members each (default: 10,000 × scale, at least 1).
    #[arg(long)]
    pub templates: Option<usize>,
    /// Template creations per second.
    #[arg(long, default_value_t = 100.0)]
    pub template_rate: f64,
    /// `fedctl join` processes at once.
    #[arg(long, default_value_t = 8)]
    pub join_concurrency: usize,
    /// Start each agent's member informers with the agent, during the registrations (by
    /// default they are held until every member registered, then timed on their own).
    #[arg(long)]
    pub informers_with_joins: bool,
    /// `clusterStatusUpdateSeconds` of the agents: seconds between status reports (identity,
    /// discovery, and the node and pod summaries their informers keep); 0: the agent's
    /// default (its 10 s heartbeat).
    #[arg(long, default_value_t = 60)]
    pub cluster_status_update_seconds: u64,
    /// Length of the watch phase, seconds.
    #[arg(long, default_value_t = 10)]
    pub watch_seconds: u64,
    /// Length of the idle phase (heartbeats only), seconds.
    #[arg(long, default_value_t = 30)]
    pub idle_seconds: u64,
    /// Longest wait of each phase, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_seconds: u64,
    /// Seed of what fedsim generates.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the members phase (registration, heartbeats, Works): members are registered
    /// without agents.
    #[arg(long)]
    pub skip_members: bool,
    /// Skip the templates → Works part of the members phase.
    #[arg(long)]
    pub skip_works: bool,
    /// Skip the zone caches (and with them the LIST and watch phases).
    #[arg(long)]
    pub skip_zones: bool,
    /// Skip the LISTs through the MUX.
    #[arg(long)]
    pub skip_lists: bool,
    /// Skip the watch ingest phase.
    #[arg(long)]
    pub skip_watch: bool,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
}

/// The table: one row per figure, in the order measured; a failed row says why.
#[derive(Default)]
pub struct Table {
    rows: Vec<(String, String)>,
}

impl Table {
    /// Adds a figure.
    pub fn row(&mut self, what: &str, value: impl Into<String>) {
        let value = value.into();
        eprintln!("  {what}: {value}");
        self.rows.push((what.to_string(), value));
    }

    /// Adds a row that could not be measured, with why.
    pub fn fail(&mut self, what: &str, why: impl std::fmt::Display) {
        self.row(what, format!("**failed**: {why}"));
    }

    /// Adds a row for a skipped phase.
    fn skipped(&mut self, what: &str, flag: &str) {
        self.row(what, format!("skipped ({flag})"));
    }

    fn print(&self) {
        println!("| figure | value |");
        println!("|---|---|");
        for (w, v) in &self.rows {
            println!("| {} | {} |", w.replace('|', "\\|"), v.replace('|', "\\|"));
        }
    }
}

/// Runs the benchmark and prints its table. Errors only when nothing can be measured (etcd,
/// the server or the members did not start). On SIGINT or SIGTERM the run is dropped, which
/// kills every process it started and removes its temporary directories.
pub async fn run(a: Args) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    tokio::select! {
        r = measure(a) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted (SIGINT); every process started was stopped".into()),
        _ = term.recv() => Err("terminated (SIGTERM); every process started was stopped".into()),
    }
}

async fn measure(a: Args) -> Result<(), String> {
    let f = a.scale.max(1e-6);
    let zones = a.zones.max(1);
    let n = a.members.unwrap_or(((DESIGN_MEMBERS * f).round() as usize).max(zones));
    let nodes = ((DESIGN_NODES * f) / n as f64).ceil().max(1.0) as usize;
    let pods_per_node = (DESIGN_PODS / DESIGN_NODES) as usize;
    let templates = a.templates.unwrap_or(((DESIGN_TEMPLATES * f).round() as usize).max(1));
    let watchers = a.watchers.unwrap_or(((DESIGN_WATCHERS * f).round() as usize).max(10));
    let churn = a.churn.unwrap_or(DESIGN_CHURN * f);
    let timeout = Duration::from_secs(a.timeout_seconds.max(10));
    let started = Instant::now();
    let mut t = Table::default();
    eprintln!(
        "fedctl-bench seed: scale={f} members={n} zones={zones} nodes/member={nodes} pods/node={pods_per_node} templates={templates} watchers={watchers} churn={churn:.0}/s agents' clusterStatusUpdateSeconds={} build={}",
        a.cluster_status_update_seconds,
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );

    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    // (below the ephemeral range: the members' listeners and connections come after)
    let ports: Vec<u16> = free_ports_below_ephemeral(zones);
    let endpoints = ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let shard_count = zones.to_string();
    let mut flags = vec!["--cache-endpoints", &endpoints, "--cache-shards", &shard_count];
    if a.skip_members {
        // members without agents send no heartbeats
        flags.extend(["--cluster-grace-period", "24h"]);
    }
    let server = ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, &flags).map_err(|e| format!("start fedctl server: {e}"))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    wait_ready(&http, &base, Duration::from_secs(30)).await?;

    let spec = sim::Spec { members: n, zones, nodes, pods_per_node, seed: a.seed, timeout };
    let t_members = Instant::now();
    let members = sim::launch(a.fedsim_mode, &spec).await?;
    let load = t_members.elapsed();
    members_rows(&mut t, &members, load).await;

    // members: registration, idle, Works
    let agents = if a.skip_members {
        t.skipped("registration, heartbeats, Works", "--skip-members");
        for m in &members.list {
            if let Err(e) = register_member_at(&http, &base, &m.name, &m.server, &m.kubeconfig, Some(&m.zone)).await {
                t.fail(&format!("register {}", m.name), e);
            }
        }
        None
    } else {
        let agents =
            members::register(&mut t, &server, &members, a.join_concurrency, (a.cluster_status_update_seconds > 0).then_some(a.cluster_status_update_seconds), a.informers_with_joins, timeout).await;
        if agents.is_some() {
            members::idle(&mut t, &server, &etcd, n, a.idle_seconds).await;
        }
        agents
    };

    // zones
    let caches = if a.skip_zones {
        t.skipped("zone caches, LISTs, watch", "--skip-zones");
        Vec::new()
    } else {
        zones::caches(&mut t, &server, &etcd.endpoint, &ports, &members, a.cache_layout, timeout).await
    };
    if !caches.is_empty() {
        if a.skip_lists {
            t.skipped("LISTs through the MUX", "--skip-lists");
        } else {
            zones::lists(&mut t, &server, &caches, &members).await;
        }
        if a.skip_watch {
            t.skipped("watch ingest", "--skip-watch");
        } else {
            zones::watch(&mut t, &server, &members, watchers, churn, a.watch_seconds).await;
        }
    }

    // Works, after the view (so that the agents' apply traffic does not overlap the LISTs)
    if agents.is_some() {
        if a.skip_works {
            t.skipped("templates → Works", "--skip-works");
        } else {
            members::works(&mut t, &server, &etcd, &members, templates, a.template_rate, timeout).await;
        }
    }

    let kib = |k: Option<u64>| k.map_or("—".to_string(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    t.row("server / etcd / fedsim RSS at the end", format!("{} / {} / {} ({} members)", kib(server.rss_kib()), kib(super::procs::rss_kib(etcd.pid())), kib(Some(members.rss_kib())), members.mode));
    let cache_rss: u64 = caches.iter().filter_map(|c| c.rss_kib()).sum();
    if !caches.is_empty() {
        t.row("zone caches' RSS at the end (all)", kib(Some(cache_rss)));
    }
    if let Some(ag) = agents.as_ref() {
        t.row("this process (the in-process agents, the bench's clients) RSS at the end", format!("{} for {} agents", kib(super::procs::rss_kib(std::process::id())), ag.len()));
    }
    t.row("run time", format!("{:.0} s", started.elapsed().as_secs_f64()));
    if let Some(ag) = agents {
        ag.stop().await;
    }
    drop(caches);
    drop(members);
    drop(server);
    drop(etcd);
    println!();
    println!("fedctl-bench seed --scale {f}: {n} members over {zones} zones, {nodes} nodes × {pods_per_node} pods each; {} build", if cfg!(debug_assertions) { "debug" } else { "release" });
    println!();
    t.print();
    Ok(())
}

/// Members, pods, nodes and other objects per zone (other objects: the member's keys that
/// are neither pods nor nodes, from `/fedsim/status`).
async fn members_rows(t: &mut Table, members: &sim::Members, load: Duration) {
    let mut per_zone: std::collections::BTreeMap<String, (usize, usize, usize, Option<usize>)> = Default::default();
    for m in &members.list {
        let others = super::procs::fedsim_admin(&m.kubeconfig, reqwest::Method::GET, "/fedsim/status").await.ok().and_then(|v| Some((v["keys"].as_u64()? as usize).saturating_sub(m.pods + m.nodes)));
        let e = per_zone.entry(m.zone.clone()).or_insert((0, 0, 0, Some(0)));
        e.0 += 1;
        e.1 += m.pods;
        e.2 += m.nodes;
        e.3 = e.3.zip(others).map(|(a, b)| a + b);
    }
    for (z, (ms, pods, nodes, others)) in &per_zone {
        t.row(&format!("zone {z}: members / pods / nodes / other objects"), format!("{ms} / {pods} / {nodes} / {}", others.map_or("— (no /fedsim/status)".into(), |o| o.to_string())));
    }
    t.row("members started (fedsim)", format!("{} {} in {:.1} s, fedsim RSS {:.0} MiB", members.list.len(), members.mode, load.as_secs_f64(), members.rss_kib() as f64 / 1024.0));
}
