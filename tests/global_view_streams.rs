//! Streams through the global view's member path end to end: real etcd, a real `fedctl
//! server`, two fedsim members joined with `fedctl join` and running their agents, kubectl
//! 1.27 (SPDY/3.1) and 1.33 (WebSocket v5 for exec, attach and cp; SPDY tunnelled in a
//! WebSocket for port-forward).
//!
//! Through `--context global`, `--context cluster-member-a` and straight at the member's
//! fedsim: `exec` prints and exits with the command's code, takes stdin, and runs the
//! container's env (also over WebSocket v4, by hand); `cp` copies a file into the pod and
//! back byte for byte; `port-forward` carries bytes both ways; `attach` prints the
//! container's lines. A user of the view the
//! member does not authorize gets the member's 403 and nothing runs; an unknown pod is a
//! NotFound; a session holds one of the caller's watch slots while it lasts and is counted
//! in the per-member request metrics.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::member::{JoinOptions, Member};
use common::server::{free_port, FedServer};
use serde_json::{json, Value};

const V: &str = "/apis/search.fedctl.io/v1alpha1";
const NS: &str = "stream";
const POD: &str = "streamer";
const JANE_TOKEN: &str = "jane-token-0123456789abcdef";

fn kubectl(v: &str, kubeconfig: &Path, dir: &Path) -> Kubectl {
    let bin = find_kubectl(v).unwrap_or_else(|| panic!("kubectl {v} next to kubectl on PATH"));
    let cache = dir.join(format!("kubectl-{v}-{}", kubeconfig.file_name().unwrap().to_string_lossy()));
    std::fs::create_dir_all(&cache).unwrap();
    Kubectl::new(bin, v, kubeconfig, &cache)
}

async fn wait_for(what: &str, secs: u64, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Adds the static token user `jane` (in the view group) to the server and restarts it.
fn add_jane(server: &mut FedServer) {
    server.stop();
    let path = server.data_path().join("tokens");
    let mut text = std::fs::read_to_string(&path).expect("token file");
    text.push_str(&format!("\n{JANE_TOKEN},jane,uid-jane,\"{}\"\n", fedctl::search::VIEW_GROUP));
    std::fs::write(&path, text).unwrap();
    server.restart();
}

/// A copy of the admin kubeconfig whose `global` context acts as jane.
fn jane_kubeconfig(admin: &Kubectl, src: &Path, dir: &Path) -> std::path::PathBuf {
    let path = dir.join("jane.kubeconfig");
    std::fs::copy(src, &path).unwrap();
    let k = Kubectl::new(admin.bin.clone(), &admin.version, &path, dir);
    k.run(&["config", "set-credentials", "jane", &format!("--token={JANE_TOKEN}")]).ok();
    k.run(&["config", "set-context", "global", "--user=jane"]).ok();
    path
}

/// One way of reaching the pod: a kubectl and the context flags to use.
struct Target<'a> {
    k: &'a Kubectl,
    ctx: Vec<&'a str>,
    label: String,
}

impl Target<'_> {
    fn args<'b>(&'b self, rest: &[&'b str]) -> Vec<&'b str> {
        let mut a = self.ctx.clone();
        a.extend_from_slice(&["-n", NS]);
        a.extend_from_slice(rest);
        a
    }
}

/// Connects to the forwarded `port`, writes `payload` and reads it back (the pod echoes).
fn echo_through(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the forwarded port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let writer = {
        let mut w = s.try_clone().unwrap();
        let data = payload.to_vec();
        std::thread::spawn(move || w.write_all(&data).unwrap())
    };
    let mut got = vec![0u8; payload.len()];
    s.read_exact(&mut got).expect("the echo comes back");
    writer.join().unwrap();
    got
}

/// An exec over WebSocket with subprotocol `v4.channel.k8s.io` (no close signal; what
/// clients before v5 speak), by hand: the negotiated protocol and the server's binary
/// messages as `(channel, data)` up to its close frame.
async fn ws_exec_v4(rb: reqwest::RequestBuilder) -> (String, Vec<(u8, Vec<u8>)>) {
    use tokio::io::AsyncReadExt;
    let resp = rb
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", "v4.channel.k8s.io")
        .send()
        .await
        .expect("upgrade request");
    assert_eq!(resp.status().as_u16(), 101, "{:?}", resp.headers());
    // the accept key of RFC 6455's example nonce
    assert_eq!(resp.headers()["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    let proto = resp.headers()["sec-websocket-protocol"].to_str().unwrap().to_string();
    let mut io = resp.upgrade().await.expect("upgraded");
    let mut msgs = Vec::new();
    let read = async {
        loop {
            let mut h = [0u8; 2];
            io.read_exact(&mut h).await.expect("frame head");
            let mut len = (h[1] & 0x7f) as u64;
            if len == 126 {
                len = io.read_u16().await.unwrap() as u64;
            } else if len == 127 {
                len = io.read_u64().await.unwrap();
            }
            assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
            let mut payload = vec![0u8; len as usize];
            io.read_exact(&mut payload).await.unwrap();
            match h[0] & 0x0f {
                2 => msgs.push((payload[0], payload[1..].to_vec())),
                8 => {
                    assert_eq!(&payload[..2], &1000u16.to_be_bytes(), "a normal close");
                    break;
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read).await.expect("the session ends");
    (proto, msgs)
}

fn exercise(t: &Target<'_>, scratch: &Path) {
    let l = &t.label;
    // exec: output, exit codes, stdin, env
    assert_eq!(t.k.run(&t.args(&["exec", POD, "--", "echo", "hi"])).ok(), "hi\n", "{l}");
    let r = t.k.run(&t.args(&["exec", POD, "--", "sh", "-c", "exit 3"]));
    assert_eq!(r.code, Some(3), "{l}: exit code of sh -c 'exit 3': {}", r.stderr);
    let input = format!("stdin of {l}\n");
    assert_eq!(t.k.run_with_stdin(&t.args(&["exec", "-i", POD, "--", "cat"]), Some(&input)).ok(), input, "{l}");
    assert!(t.k.run(&t.args(&["exec", POD, "-c", "main", "--", "env"])).ok().contains("GREETING=hello\n"), "{l}");
    let r = t.k.run(&t.args(&["exec", POD, "--", "no-such-program"]));
    assert_eq!(r.code, Some(126), "{l}: {}", r.stderr);
    assert!(r.stdout.contains("executable file not found"), "{l}: {}", r.stdout);
    let r = t.k.run(&t.args(&["exec", POD, "-c", "nope", "--", "true"]));
    assert!(r.failed().contains("container nope is not valid for pod streamer") || r.stderr.contains("container nope not found"), "{l}: {}", r.stderr);

    // cp into the pod and back out, byte-equal
    let tag = l.replace([' ', '.', '/'], "-");
    let local = scratch.join(format!("blob-{tag}"));
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&local, &payload).unwrap();
    let remote = format!("{POD}:/tmp/blob-{tag}");
    t.k.run(&t.args(&["cp", local.to_str().unwrap(), &remote])).ok();
    let back = scratch.join(format!("blob-{tag}.back"));
    t.k.run(&t.args(&["cp", &remote, back.to_str().unwrap()])).ok();
    assert!(std::fs::read(&back).expect("copied back") == payload, "{l}: kubectl cp round trip differs");
    assert_eq!(t.k.run(&t.args(&["exec", POD, "--", "ls", "/tmp"])).ok().lines().filter(|n| *n == format!("blob-{tag}")).count(), 1, "{l}");

    // port-forward: bytes both ways
    let port = free_port();
    let fwd = format!("{port}:8080");
    let mut pf = t.k.spawn(&t.args(&["port-forward", &format!("pod/{POD}"), &fwd]));
    assert!(pf.wait_for(Duration::from_secs(20), |o| o.contains("Forwarding from")), "{l}: port-forward did not start: {}", pf.stderr());
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    assert!(echo_through(port, &data) == data, "{l}: the forwarded bytes come back");
    assert!(echo_through(port, b"second connection\n") == b"second connection\n", "{l}");
    pf.stop();

    // attach: the container's lines
    let mut at = t.k.spawn(&t.args(&["attach", POD, "-c", "main"]));
    assert!(at.wait_for(Duration::from_secs(20), |o| o.contains("streamer main line 2\n")), "{l}: attach: {} / {}", at.stdout(), at.stderr());
    at.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_cp_port_forward_and_attach_through_the_global_view() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start_with_args(&etcd.endpoint(), &["--max-watches-per-user", "1"]);
    add_jane(&mut server);
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let sim = |seed: &'static str| vec!["--nodes", "1", "--pods-per-node", "1", "--namespaces", "2", "--seed", seed];
    let a = Member::start(&server, "member-a", &sim("1"), &opts);
    let _b = Member::start(&server, "member-b", &sim("2"), &opts);
    let api = server.client();
    let kubeconfig = server.kubeconfig();
    common::member::wait_in_view(&server, &["member-a", "member-b"]).await;
    let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": NS},
        "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "GREETING", "value": "hello"}]}, {"name": "side", "image": "busybox"}]},
    });
    let mut pod = pod;
    pod["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/default-container": "main"});
    let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces/{NS}/pods"), &pod).await;
    assert_eq!(r.status, 201, "{}", r.text);
    wait_for("the pod running and in the view", 60, async || {
        let r = api.get(&format!("{V}/global/api/v1/namespaces/{NS}/pods/{POD}")).await;
        r.status == 200 && r.json.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
    })
    .await;

    let scratch = server.scratch_dir();
    let ks: Vec<Kubectl> = ["1.27", "1.33"].iter().map(|v| kubectl(v, &kubeconfig, &scratch)).collect();
    let direct: Vec<Kubectl> = ["1.27", "1.33"].iter().map(|v| kubectl(v, &a.sim.kubeconfig, &scratch)).collect();
    for (k, d) in ks.iter().zip(&direct) {
        for ctx in ["global", "cluster-member-a"] {
            exercise(&Target { k, ctx: vec!["--context", ctx], label: format!("kubectl {} --context {ctx}", k.version) }, &scratch);
        }
        exercise(&Target { k: d, ctx: vec![], label: format!("kubectl {} on the member", d.version) }, &scratch);
    }

    // WebSocket v4 (no v5 close signal), straight at the member and through the view
    let q = "command=sh&command=-c&command=echo%20v4%3B%20exit%205&stdout=true&stderr=true";
    let path = format!("/api/v1/namespaces/{NS}/pods/{POD}/exec?{q}");
    for rb in [a.http.get(format!("{}{path}", a.url)), api.request_builder(reqwest::Method::GET, &format!("{V}/global{path}"))] {
        let (proto, msgs) = ws_exec_v4(rb).await;
        assert_eq!(proto, "v4.channel.k8s.io");
        assert_eq!(msgs[0], (1, b"v4\n".to_vec()), "{msgs:?}");
        let (ch, status) = msgs.last().unwrap();
        assert_eq!(*ch, 3, "the end status on the error channel");
        let status: Value = serde_json::from_slice(status).unwrap();
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0], json!({"reason": "ExitCode", "message": "5"}));
    }

    // sessions are counted per member like other proxied requests: WebSocket (GET) and
    // SPDY (POST) upgrades answered 101
    let metrics = api.get("/metrics").await.text;
    for method in ["GET", "POST"] {
        let series = format!("fedctl_global_view_member_requests_total{{cluster=\"member-a\",method=\"{method}\",code=\"101\"}}");
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }

    // a session holds one of the caller's watch slots (the server allows one per user)
    let k = &ks[1];
    let mut at = k.spawn(&["--context", "global", "-n", NS, "attach", POD]);
    assert!(at.wait_for(Duration::from_secs(20), |o| o.contains("line 1\n")), "attach: {}", at.stderr());
    let r = api.get(&format!("{V}/global/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=1")).await;
    assert_eq!(r.status, 429, "the attach session holds the only slot: {}", r.text);
    at.stop();
    wait_for("the slot released when the session ends", 20, async || api.get(&format!("{V}/global/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=1")).await.status == 200).await;

    // unknown pod: NotFound, from kubectl and from the member's exec endpoint itself
    for k in &ks {
        let r = k.run(&["--context", "global", "-n", NS, "exec", "no-such-pod", "--", "true"]);
        assert!(r.failed().contains("NotFound") || r.stderr.contains("not found"), "kubectl {}: {}", k.version, r.stderr);
    }
    let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces/{NS}/pods/no-such-pod/exec?command=true&stdout=true"), &json!({})).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json["reason"], "NotFound", "{}", r.text);
    // a stream request that is not an upgrade is a 400
    let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces/{NS}/pods/{POD}/exec?command=true&stdout=true"), &json!({})).await;
    assert_eq!(r.status, 400, "{}", r.text);

    // jane may use the view (and the federation lets her edit) but the member does not let
    // her exec: its 403, and nothing ran
    common::bind_cluster_role(&server, "jane", "edit", "create", "pods").await;
    let jane_kc = jane_kubeconfig(&ks[0], &kubeconfig, &scratch);
    for v in ["1.27", "1.33"] {
        let jane = kubectl(v, &jane_kc, &scratch);
        let r = jane.run(&["--context", "global", "-n", NS, "exec", POD, "--", "mkdir", "/tmp/jane-was-here"]);
        let err = r.failed().to_string();
        assert!(err.contains("Forbidden") || err.contains("forbidden"), "kubectl {v}: the member's 403: {err}");
        assert!(err.contains("User \"jane\" cannot create resource \"pods/exec\""), "kubectl {v}: {err}");
        let r = jane.run(&["--context", "global", "-n", NS, "port-forward", &format!("pod/{POD}"), &format!("{}:80", free_port())]);
        assert!(r.failed().contains("pods/portforward"), "kubectl {v}: {}", r.stderr);
    }
    let r = ks[1].run(&["--context", "global", "-n", NS, "exec", POD, "--", "test", "-d", "/tmp/jane-was-here"]);
    assert_eq!(r.code, Some(1), "jane's mkdir did not run: {}", r.stderr);
}
