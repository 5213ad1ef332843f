//! Unit tests of the fedsim object generator.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

use super::*;

fn cfg(nodes: usize, pods_per_node: usize, namespaces: usize) -> GenConfig {
    GenConfig { nodes, pods_per_node, namespaces, ..GenConfig::default() }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_else(|| panic!("{ptr} missing in {v}"))
}

fn in_cidr(ip: Ipv4Addr, (net, prefix): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX << (32 - u32::from(prefix));
    u32::from(ip) & mask == u32::from(net)
}

#[test]
fn format_time_matches_chrono() {
    for t in [0, EPOCH_UNIX, NOW_UNIX, 951_782_400, 4_107_542_399, 1_709_164_800] {
        let want = chrono::DateTime::from_timestamp(t, 0).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        assert_eq!(format_time(t), want);
    }
    assert_eq!(format_time(EPOCH_UNIX), "2025-05-01T00:00:00Z");
}

#[test]
fn suffixes_are_a_permutation() {
    let mut seen = HashSet::new();
    for ordinal in 0..200_000 {
        let sfx = suffix_for(42, ordinal);
        assert_eq!(sfx.len(), 5);
        assert!(sfx.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
        assert!(seen.insert(sfx), "suffix repeated at ordinal {ordinal}");
    }
    assert_ne!(suffix_for(1, 0), suffix_for(2, 0));
}

#[test]
fn namespace_names_are_realistic_unique_and_deterministic() {
    let c = cfg(1, 1, 200);
    let names = namespace_names(&c);
    assert_eq!(names.len(), 200);
    assert_eq!(&names[198..], ["kube-system", "default"]);
    let set: HashSet<_> = names.iter().collect();
    assert_eq!(set.len(), 200, "namespace names repeat");
    for n in &names {
        assert!(n.len() <= 63 && !n.is_empty(), "{n}");
        assert!(n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'), "{n}");
        assert!(!n.starts_with('-') && !n.ends_with('-'), "{n}");
    }
    assert!(names.iter().any(|n| n.starts_with("team-")));
    assert!(names.iter().any(|n| n.starts_with("ml-")));
    assert_eq!(names, namespace_names(&c));
    assert_ne!(names, namespace_names(&GenConfig { seed: 2, ..c.clone() }));
    // The cluster name does not change namespaces: federated clusters share them.
    assert_eq!(names, namespace_names(&GenConfig { cluster: "other".into(), ..c }));
    assert_eq!(namespace_names(&cfg(1, 1, 0)), ["kube-system", "default"]);
}

#[test]
fn namespace_weights_and_quotas() {
    let w = namespace_weights(200, 1.1);
    assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(w.windows(2).all(|p| p[0] >= p[1]));
    let u = namespace_weights(10, 0.0);
    assert!(u.iter().all(|x| (x - 0.1).abs() < 1e-12));
    assert!(namespace_weights(0, 1.0).is_empty());

    for total in [0, 1, 7, 1000, 49_999] {
        let q = namespace_quotas(total, &w);
        assert_eq!(q.iter().sum::<usize>(), total);
        for (qi, wi) in q.iter().zip(&w) {
            assert!((*qi as f64 - total as f64 * wi).abs() <= 1.0);
        }
    }

    let sampler = ZipfSampler::new(200, 1.1);
    let mut rng = StdRng::seed_from_u64(7);
    let mut counts = vec![0usize; 200];
    for _ in 0..100_000 {
        counts[sampler.sample(&mut rng)] += 1;
    }
    let top5: usize = counts[..5].iter().sum();
    let expected: f64 = w[..5].iter().sum();
    assert!((top5 as f64 / 100_000.0 - expected).abs() < 0.02);
}

#[test]
fn namespace_skew_concentrates_pods() {
    let skewed = PodGenerator::new(&GenConfig { namespace_skew: 1.1, ..cfg(500, 100, 200) });
    let uniform = PodGenerator::new(&GenConfig { namespace_skew: 0.0, ..cfg(500, 100, 200) });
    let top5_share = |g: &PodGenerator| {
        let mut per_ns: HashMap<&str, usize> = HashMap::new();
        for o in g.owners() {
            *per_ns.entry(o.namespace.as_str()).or_default() += o.initial_pods;
        }
        let mut counts: Vec<usize> = per_ns.into_values().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts[..5].iter().sum::<usize>() as f64 / g.initial_len() as f64
    };
    let s = top5_share(&skewed);
    // Zipf(1.1) over 200 ranks puts ~46 % of the weight on the top 5.
    assert!(s > 0.40 && s < 0.55, "top-5 share with s=1.1 is {s}");
    let u = top5_share(&uniform);
    // Uniform: 5/200 of the pods, plus the DaemonSet pods living in kube-system.
    assert!(u < 0.07, "top-5 share with s=0 is {u}");
}

#[test]
fn same_seed_same_bytes_other_seed_or_cluster_differs() {
    let c = cfg(12, 30, 15);
    let dump = |c: &GenConfig| {
        let g = PodGenerator::new(c);
        let mut out: Vec<String> = g.nodes().map(|n| compact(&n)).collect();
        out.extend(g.initial_pods().map(|p| compact(&p)));
        out
    };
    let a = dump(&c);
    assert_eq!(a.len(), 12 + 12 * 30);
    assert_eq!(a, dump(&c));
    let b = dump(&GenConfig { seed: c.seed + 1, ..c.clone() });
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| x != y), "a different seed must change every object");
    let d = dump(&GenConfig { cluster: "member-2".into(), ..c.clone() });
    assert!(a.iter().zip(&d).all(|(x, y)| x != y), "a different cluster must change every object");

    // Churn is deterministic for the same call sequence.
    let churn = || {
        let mut g = PodGenerator::new(&c);
        let p = g.initial_pod(17);
        let mut out = vec![compact(&g.modify(&p)), compact(&g.modify(&p))];
        out.push(compact(&g.new_pod().unwrap()));
        out
    };
    assert_eq!(churn(), churn());
}

#[test]
fn fifty_thousand_pods_are_unique_consistent_and_valid() {
    let c = cfg(500, 100, 200);
    let g = PodGenerator::new(&c);
    assert_eq!(g.initial_len(), 50_000);
    let mut names = HashSet::new();
    let mut uids = HashSet::new();
    let mut ips = HashSet::new();
    let mut container_ids = HashSet::new();
    let mut per_node = vec![0usize; c.nodes];
    let mut templates_seen = HashSet::new();
    for (i, pod) in g.initial_pods().enumerate() {
        let ns = s(&pod, "/metadata/namespace").to_string();
        let name = s(&pod, "/metadata/name").to_string();
        assert!(names.insert(format!("{ns}/{name}")), "duplicate pod {ns}/{name}");
        assert!(uids.insert(s(&pod, "/metadata/uid").to_string()));
        assert!(pod["metadata"].get("resourceVersion").is_none());

        let owner = g.owner_of(i);
        templates_seen.insert(owner.template);
        assert_eq!(ns, owner.namespace);
        assert_eq!(s(&pod, "/metadata/ownerReferences/0/uid"), owner.uid);
        assert_eq!(s(&pod, "/metadata/ownerReferences/0/kind"), owner.kind.as_str());
        assert_eq!(s(&pod, "/metadata/labels/app"), owner.app);
        assert!(uids.insert(owner.uid.clone()) || i != owner.first_pod, "owner uid collides");

        let node = g.node_of(i);
        per_node[node] += 1;
        assert_eq!(s(&pod, "/spec/nodeName"), c.node_name(node));
        let host_ip: Ipv4Addr = s(&pod, "/status/hostIP").parse().unwrap();
        assert_eq!(host_ip, c.node_internal_ip(node));
        let pod_ip: Ipv4Addr = s(&pod, "/status/podIP").parse().unwrap();
        assert_eq!(s(&pod, "/status/podIPs/0/ip"), pod_ip.to_string());
        if pod["spec"]["hostNetwork"] == true {
            assert_eq!(pod_ip, host_ip);
        } else {
            assert!(in_cidr(pod_ip, c.node_pod_cidr(node)), "{pod_ip} outside node {node}'s CIDR");
            assert!(ips.insert(pod_ip), "duplicate pod IP {pod_ip}");
        }

        assert_eq!(s(&pod, "/status/phase"), "Running");
        for cond in pod["status"]["conditions"].as_array().unwrap() {
            assert_eq!(cond["status"], "True", "{cond}");
        }
        for cs in pod["status"]["containerStatuses"].as_array().unwrap() {
            assert_eq!(cs["ready"], true);
            assert_eq!(cs["started"], true);
            assert_eq!(cs["restartCount"], 0);
            assert!(cs["state"]["running"]["startedAt"].is_string());
            assert!(container_ids.insert(cs["containerID"].as_str().unwrap().to_string()));
        }
        // managedFields follow the new identity of the pod.
        if let Some(mf) = pod["metadata"]["managedFields"].as_array() {
            let text = compact(&Value::Array(mf.clone()));
            assert!(text.contains(&format!("k:{{\\\"uid\\\":\\\"{}\\\"}}", owner.uid)), "{text}");
            assert!(text.contains(&format!("k:{{\\\"ip\\\":\\\"{pod_ip}\\\"}}")), "{text}");
            assert!(mf.iter().all(|e| e["time"].is_string()));
        }

        let typed: Pod = serde_json::from_value(pod).expect("generated pod is a valid v1 Pod");
        assert_eq!(typed.metadata.name.as_deref(), Some(name.as_str()));
    }
    assert!(per_node.iter().all(|&n| n == c.pods_per_node));
    assert_eq!(templates_seen.len(), 5, "all five templates in use");
}

#[test]
fn pod_names_follow_owner_conventions() {
    let g = PodGenerator::new(&cfg(30, 40, 10));
    let mut seen_kinds = HashSet::new();
    for (i, pod) in g.initial_pods().enumerate() {
        let o = g.owner_of(i);
        seen_kinds.insert(o.kind);
        let name = s(&pod, "/metadata/name");
        let rest = name.strip_prefix(&format!("{}-", o.name)).unwrap_or_else(|| panic!("{name} vs {}", o.name));
        match o.kind {
            OwnerKind::StatefulSet => assert_eq!(rest, (i - o.first_pod).to_string()),
            _ => {
                assert_eq!(rest.len(), 5, "{name}");
                assert!(rest.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)));
            }
        }
        if o.kind == OwnerKind::ReplicaSet {
            let hash = s(&pod, "/metadata/labels/pod-template-hash");
            assert!(o.name.ends_with(&format!("-{hash}")), "{} / {hash}", o.name);
            assert_eq!(o.name, format!("{}-{hash}", o.app));
        }
        assert_eq!(s(&pod, "/metadata/generateName"), format!("{}-", o.name));
    }
    assert_eq!(seen_kinds.len(), 4);
}

#[test]
fn pods_of_one_owner_share_labels_and_spec() {
    let g = PodGenerator::new(&cfg(40, 30, 8));
    let normalised_spec = |p: &Value| {
        let mut spec = p["spec"].clone();
        for key in ["nodeName", "hostname", "affinity"] {
            spec.as_object_mut().unwrap().shift_remove(key);
        }
        // The projected token volume is named per pod by admission, as in real clusters.
        compact(&spec).split("kube-api-access-").map(|s| s.get(5..).unwrap_or("")).collect::<String>()
    };
    let mut checked = 0;
    for o in g.owners().filter(|o| o.initial_pods >= 2) {
        let a = g.initial_pod(o.first_pod);
        let b = g.initial_pod(o.first_pod + 1);
        let mut la = a["metadata"]["labels"].clone();
        let mut lb = b["metadata"]["labels"].clone();
        la.as_object_mut().unwrap().shift_remove("statefulset.kubernetes.io/pod-name");
        lb.as_object_mut().unwrap().shift_remove("statefulset.kubernetes.io/pod-name");
        assert_eq!(la, lb, "labels differ within {}", o.name);
        assert_eq!(a["metadata"]["ownerReferences"], b["metadata"]["ownerReferences"]);
        assert_eq!(normalised_spec(&a), normalised_spec(&b), "spec differs within {}", o.name);
        assert_ne!(a["metadata"]["uid"], b["metadata"]["uid"]);
        checked += 1;
    }
    assert!(checked > 10);
}

#[test]
fn pod_sizes_stay_close_to_templates() {
    let g = PodGenerator::new(&cfg(120, 50, 30));
    let mut sizes: HashMap<PodTemplate, Vec<usize>> = HashMap::new();
    for (i, pod) in g.initial_pods().enumerate() {
        sizes.entry(g.owner_of(i).template).or_default().push(compact(&pod).len());
    }
    for t in PodTemplate::ALL {
        let original: Value = serde_json::from_str(t.source()).unwrap();
        let want = compact(&original).len() as f64;
        let v = sizes.get_mut(&t).unwrap_or_else(|| panic!("no pods from {}", t.file_name()));
        v.sort_unstable();
        let median = v[v.len() / 2] as f64;
        let ratio = median / want;
        assert!((0.85..=1.15).contains(&ratio), "{}: median {median} vs template {want} ({ratio:.3})", t.file_name());
        // Pods of a template keep its managedFields when it has them.
        let tpl_has_mf = original["metadata"].get("managedFields").is_some();
        let i = g.owners().find(|o| o.template == t).unwrap().first_pod;
        assert_eq!(g.initial_pod(i)["metadata"].get("managedFields").is_some(), tpl_has_mf);
    }
}

#[test]
fn nodes_are_unique_realistic_and_valid() {
    let c = GenConfig { zone: "eu-west-1b".into(), region: "eu-west-1".into(), ..cfg(2000, 110, 10) };
    let mut seen: HashMap<&str, HashSet<String>> = HashMap::new();
    let mut cidrs = HashSet::new();
    for i in 0..c.nodes {
        let n = node(&c, i);
        assert!(n["metadata"].get("resourceVersion").is_none());
        let name = s(&n, "/metadata/name");
        assert_eq!(name, c.node_name(i));
        assert_eq!(s(&n, "/metadata/labels/kubernetes.io~1hostname"), name);
        assert_eq!(s(&n, "/metadata/labels/topology.kubernetes.io~1zone"), "eu-west-1b");
        assert_eq!(s(&n, "/metadata/labels/topology.kubernetes.io~1region"), "eu-west-1");
        assert_eq!(s(&n, "/metadata/labels/node-role.kubernetes.io~1worker"), "");
        assert!(n.pointer("/metadata/labels/node-role.kubernetes.io~1control-plane").is_none());
        assert!(n["spec"].get("taints").is_none());
        assert_eq!(s(&n, "/status/capacity/cpu"), "32");
        assert_eq!(s(&n, "/status/capacity/pods"), "110");
        assert_eq!(s(&n, "/status/nodeInfo/kubeletVersion"), KUBELET_VERSION);
        assert_eq!(s(&n, "/status/addresses/0/type"), "InternalIP");
        let ip: Ipv4Addr = s(&n, "/status/addresses/0/address").parse().unwrap();
        assert_eq!(ip.octets()[0], 10);
        let ready = n["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True");
        assert!(ready["lastHeartbeatTime"].as_str().unwrap() <= format_time(NOW_UNIX).as_str());
        assert!(!n["status"]["images"].as_array().unwrap().is_empty());
        let cidr = s(&n, "/spec/podCIDR").to_string();
        let mf = compact(&n["metadata"]["managedFields"]);
        assert!(mf.contains(&format!("v:\\\"{cidr}\\\"")), "{mf}");
        assert!(mf.contains("f:topology.kubernetes.io/zone") && !mf.contains("minikube"), "{mf}");
        assert!(cidrs.insert(cidr));
        for (key, ptr) in [
            ("name", "/metadata/name"),
            ("uid", "/metadata/uid"),
            ("ip", "/status/addresses/0/address"),
            ("bootID", "/status/nodeInfo/bootID"),
            ("machineID", "/status/nodeInfo/machineID"),
            ("systemUUID", "/status/nodeInfo/systemUUID"),
        ] {
            assert!(seen.entry(key).or_default().insert(s(&n, ptr).to_string()), "duplicate {key} at node {i}");
        }
        let typed: Node = serde_json::from_value(n).expect("generated node is a valid v1 Node");
        assert_eq!(typed.metadata.name.as_deref(), Some(c.node_name(i).as_str()));
    }
    assert_eq!(node(&c, 5), node(&c, 5));
    assert_ne!(node(&c, 5), node(&GenConfig { seed: 9, ..c.clone() }, 5));
}

#[test]
fn churn_modifications_and_new_pods() {
    let c = cfg(20, 30, 10);
    let mut g = PodGenerator::new(&c);
    let initial: HashSet<String> = g.initial_pods().map(|p| format!("{}/{}", s(&p, "/metadata/namespace"), s(&p, "/metadata/name"))).collect();
    let pod = g.initial_pod(42);

    let not_ready = g.modify_with(&pod, Churn::ReadinessFlip);
    let ready_of = |p: &Value| p["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready_of(&not_ready)["status"], "False");
    assert_eq!(ready_of(&not_ready)["reason"], "ContainersNotReady");
    assert_eq!(s(&not_ready, "/status/phase"), "Running");
    assert!(not_ready["status"]["containerStatuses"].as_array().unwrap().iter().any(|c| c["ready"] == false));
    let ready_again = g.modify_with(&not_ready, Churn::ReadinessFlip);
    assert_eq!(ready_of(&ready_again)["status"], "True");
    assert!(ready_of(&ready_again).get("reason").is_none());
    assert!(ready_again["status"]["containerStatuses"].as_array().unwrap().iter().all(|c| c["ready"] == true));

    let relabelled = g.modify_with(&pod, Churn::LabelChange);
    let first = s(&relabelled, &format!("/metadata/labels/{}", CHURN_LABEL.replace('/', "~1"))).to_string();
    let relabelled2 = g.modify_with(&relabelled, Churn::LabelChange);
    let second = s(&relabelled2, &format!("/metadata/labels/{}", CHURN_LABEL.replace('/', "~1"))).to_string();
    assert_ne!(first, second);
    if pod["metadata"].get("managedFields").is_some() {
        let mf = relabelled2["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.iter().filter(|e| e["manager"] == CHURN_MANAGER).count(), 1);
    }

    let restarted = g.modify_with(&pod, Churn::Restart);
    let css = restarted["status"]["containerStatuses"].as_array().unwrap();
    let bumped: Vec<_> = css.iter().filter(|c| c["restartCount"] == 1).collect();
    assert_eq!(bumped.len(), 1);
    assert!(bumped[0]["lastState"]["terminated"]["exitCode"].is_number());
    assert_ne!(bumped[0]["containerID"], bumped[0]["lastState"]["terminated"]["containerID"]);

    for p in [&not_ready, &ready_again, &relabelled2, &restarted] {
        assert_eq!(p["metadata"]["uid"], pod["metadata"]["uid"]);
        let _: Pod = serde_json::from_value(p.clone()).unwrap();
    }
    for _ in 0..50 {
        let _: Pod = serde_json::from_value(g.modify(&pod)).unwrap();
    }

    let mut created = HashSet::new();
    for _ in 0..2000 {
        let p = g.new_pod().unwrap();
        let key = format!("{}/{}", s(&p, "/metadata/namespace"), s(&p, "/metadata/name"));
        assert!(!initial.contains(&key) && created.insert(key.clone()), "churn reused pod name {key}");
        assert!(s(&p, "/metadata/creationTimestamp") > format_time(NOW_UNIX).as_str());
        let _: Pod = serde_json::from_value(p).unwrap();
    }
    assert!(PodGenerator::new(&cfg(0, 30, 10)).new_pod().is_none());
}
