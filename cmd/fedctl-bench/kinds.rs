//! Memory per cached object of each kind the global view caches by default: objects shaped as
//! kube-apiserver 1.33 serves them (metadata with labels, annotations, ownerReferences and
//! managedFields, spec and status), unique per index, at the counts of a federation of
//! mid-size members, held by fedctl's cache store; one child process per kind.
//!
//! Each child (`fedctl-bench kinds --child <resource>`) reads its RSS, builds the objects of
//! its kind member by member and loads them into a [`KindStore`] (as the ingest's first LIST
//! does), reads its RSS again and reports growth / objects next to the objects' JSON size.

use std::time::Duration;

use serde_json::{json, Value};

use fedctl::cache::store::{KindStore, Obj};

/// Flags of `fedctl-bench kinds`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Member clusters (the objects of each kind are split evenly over them).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Multiplies every kind's count (1: per member 100 namespaces, 100 nodes, 800
    /// deployments, 2,400 replicasets, 50 statefulsets, 10 daemonsets, 300 jobs, 900 services,
    /// 1,000 endpointslices, 5,000 events).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Kinds to measure (plural resource names).
    #[arg(long, value_delimiter = ',', default_value = "namespaces,nodes,deployments,replicasets,statefulsets,daemonsets,jobs,services,endpointslices,events")]
    pub kinds: Vec<String>,
    /// Internal: measure one kind and print its figures as one JSON line.
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

/// Objects per member of `resource` at scale 1.
fn per_member(resource: &str) -> usize {
    match resource {
        "namespaces" | "nodes" => 100,
        "deployments" => 800,
        "replicasets" => 2400,
        "statefulsets" => 50,
        "daemonsets" => 10,
        "jobs" => 300,
        "services" => 900,
        "endpointslices" => 1000,
        "events" => 5000,
        _ => 0,
    }
}

fn group_version(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "deployments" | "replicasets" | "statefulsets" | "daemonsets" => ("apps", "v1"),
        "jobs" => ("batch", "v1"),
        "endpointslices" => ("discovery.k8s.io", "v1"),
        _ => ("", "v1"),
    }
}

fn uid(c: usize, i: usize, salt: u32) -> String {
    let h = (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ salt as u64;
    format!("{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}", h as u32, (h >> 32) as u16, (h >> 48) as u16 & 0xfff, i & 0xfff, h.rotate_left(17) & 0xffff_ffff_ffff)
}

fn ts(i: usize) -> String {
    let s = 1_764_000_000 + (i as i64 * 37) % 2_000_000;
    chrono::DateTime::from_timestamp(s, 0).expect("valid").format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn hash(i: usize) -> String {
    format!("{:x}", (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d) % 0xff_ffff_ffff)
}

fn mf(manager: &str, op: &str, api: &str, t: &str, fields: Value) -> Value {
    json!({"manager": manager, "operation": op, "apiVersion": api, "time": t, "fieldsType": "FieldsV1", "fieldsV1": fields})
}

const APPS: [&str; 12] = ["checkout", "cart", "catalog", "search", "payments", "auth", "gateway", "orders", "inventory", "shipping", "reviews", "recommender"];

fn pod_template(app: &str, i: usize) -> Value {
    json!({
        "metadata": {"labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": format!("{app}-{i}"), "app.kubernetes.io/part-of": "shop"}},
        "spec": {
            "containers": [{
                "name": app, "image": format!("registry.example.com/shop/{app}:1.{}.{}", i % 40, i % 7),
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app, "serviceAccount": app, "securityContext": {}, "schedulerName": "default-scheduler"
        }
    })
}

/// Object `i` of `resource` in member `c`.
fn object(resource: &str, c: usize, i: usize) -> Value {
    let app = APPS[i % APPS.len()];
    let ns = format!("team-{:03}", (i * 7 + c) % 100);
    let t = ts(i);
    let rv = (1000 + i * 3).to_string();
    let name = format!("{app}-{i}");
    let labels = json!({"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name, "app.kubernetes.io/part-of": "shop", "team": ns});
    match resource {
        "namespaces" => json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("team-{i:03}"), "uid": uid(c, i, 1), "resourceVersion": rv, "creationTimestamp": t,
                "labels": {"kubernetes.io/metadata.name": format!("team-{i:03}"), "team": format!("t{}", i % 20)},
                "managedFields": [mf("kubectl-create", "Update", "v1", &t, json!({"f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/metadata.name": {}, "f:team": {}}}}))]},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}
        }),
        "nodes" => {
            let n = format!("node-{c}-{i:04}");
            let conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
                .iter()
                .map(|ty| json!({"type": ty, "status": if *ty == "Ready" { "True" } else { "False" }, "lastHeartbeatTime": t, "lastTransitionTime": t, "reason": format!("Kubelet{ty}"), "message": "kubelet is posting ready status"}))
                .collect();
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n, "uid": uid(c, i, 2), "resourceVersion": rv, "creationTimestamp": t,
                    "labels": {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/zone": format!("zone-{}", i % 3), "topology.kubernetes.io/region": "region-1"},
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                    "managedFields": [mf("kubelet", "Update", "v1", &t, json!({"f:status": {"f:conditions": {}, "f:allocatable": {}, "f:capacity": {}, "f:nodeInfo": {}}}))]},
                "spec": {"podCIDR": format!("10.{c}.{}.0/24", i % 256), "podCIDRs": [format!("10.{c}.{}.0/24", i % 256)], "providerID": format!("aws:///zone-{}/i-{:017x}", i % 3, i)},
                "status": {
                    "capacity": {"cpu": "8", "memory": "32386544Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
                    "allocatable": {"cpu": "7910m", "memory": "31235568Ki", "pods": "110", "ephemeral-storage": "96625420948"},
                    "conditions": conditions,
                    "addresses": [{"type": "InternalIP", "address": format!("10.{c}.{}.{}", i / 256, i % 256)}, {"type": "Hostname", "address": n}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {"machineID": uid(c, i, 3), "systemUUID": uid(c, i, 4), "bootID": uid(c, i, 5), "kernelVersion": "6.1.0-18-cloud-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.33.1", "kubeProxyVersion": "v1.33.1", "operatingSystem": "linux", "architecture": "amd64"}
                }
            })
        }
        "deployments" | "statefulsets" | "daemonsets" => {
            let kind = match resource {
                "deployments" => "Deployment",
                "statefulsets" => "StatefulSet",
                _ => "DaemonSet",
            };
            let mut spec = json!({"selector": {"matchLabels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name}}, "template": pod_template(app, i), "revisionHistoryLimit": 10});
            let replicas = 1 + i % 5;
            match resource {
                "deployments" => {
                    spec["replicas"] = json!(replicas);
                    spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}});
                    spec["progressDeadlineSeconds"] = json!(600);
                }
                "statefulsets" => {
                    spec["replicas"] = json!(replicas);
                    spec["serviceName"] = json!(name);
                    spec["podManagementPolicy"] = json!("OrderedReady");
                    spec["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
                    spec["persistentVolumeClaimRetentionPolicy"] = json!({"whenDeleted": "Retain", "whenScaled": "Retain"});
                }
                _ => spec["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            }
            json!({
                "apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": name, "namespace": ns, "uid": uid(c, i, 6), "resourceVersion": rv, "generation": 1 + i % 4, "creationTimestamp": t, "labels": labels,
                    "annotations": {"deployment.kubernetes.io/revision": (1 + i % 4).to_string(), "meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns},
                    "managedFields": [
                        mf("helm", "Update", "apps/v1", &t, json!({"f:metadata": {"f:annotations": {}, "f:labels": {}}, "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}}}})),
                        mf("kube-controller-manager", "Update", "apps/v1", &t, json!({"f:status": {"f:availableReplicas": {}, "f:conditions": {}, "f:observedGeneration": {}, "f:readyReplicas": {}, "f:replicas": {}, "f:updatedReplicas": {}}}))]},
                "spec": spec,
                "status": {"observedGeneration": 1 + i % 4, "replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                    "conditions": [
                        {"type": "Available", "status": "True", "lastUpdateTime": t, "lastTransitionTime": t, "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."},
                        {"type": "Progressing", "status": "True", "lastUpdateTime": t, "lastTransitionTime": t, "reason": "NewReplicaSetAvailable", "message": format!("ReplicaSet \"{name}-{}\" has successfully progressed.", hash(i))}]}
            })
        }
        "replicasets" => {
            let owner = i / 3;
            let oname = format!("{}-{owner}", APPS[owner % APPS.len()]);
            let h = hash(i);
            let mut tpl = pod_template(app, owner);
            tpl["metadata"]["labels"]["pod-template-hash"] = json!(h);
            let replicas = if i % 3 == 2 { 1 + owner % 5 } else { 0 };
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("{oname}-{h}"), "namespace": ns, "uid": uid(c, i, 7), "resourceVersion": rv, "generation": 1, "creationTimestamp": t, "labels": {"app.kubernetes.io/name": app, "pod-template-hash": h},
                    "annotations": {"deployment.kubernetes.io/desired-replicas": replicas.to_string(), "deployment.kubernetes.io/max-replicas": (replicas + 1).to_string(), "deployment.kubernetes.io/revision": (1 + i % 3).to_string()},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": oname, "uid": uid(c, owner, 6), "controller": true, "blockOwnerDeletion": true}],
                    "managedFields": [mf("kube-controller-manager", "Update", "apps/v1", &t, json!({"f:metadata": {"f:annotations": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {}}, "f:status": {"f:replicas": {}}}))]},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app.kubernetes.io/name": app, "pod-template-hash": h}}, "template": tpl},
                "status": {"replicas": replicas, "fullyLabeledReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "observedGeneration": 1}
            })
        }
        "jobs" => json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("{app}-report-{}", 29_000_000 + i), "namespace": ns, "uid": uid(c, i, 8), "resourceVersion": rv, "generation": 1, "creationTimestamp": t,
                "labels": {"batch.kubernetes.io/controller-uid": uid(c, i, 8), "batch.kubernetes.io/job-name": format!("{app}-report-{}", 29_000_000 + i), "controller-uid": uid(c, i, 8), "job-name": format!("{app}-report-{}", 29_000_000 + i)},
                "annotations": {"batch.kubernetes.io/job-tracking": ""},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": format!("{app}-report"), "uid": uid(c, i % 50, 9), "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [mf("kube-controller-manager", "Update", "batch/v1", &t, json!({"f:metadata": {"f:ownerReferences": {}}, "f:spec": {}, "f:status": {"f:completionTime": {}, "f:conditions": {}, "f:succeeded": {}}}))]},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": false, "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": false,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid(c, i, 8)}},
                "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": uid(c, i, 8), "job-name": format!("{app}-report-{}", 29_000_000 + i)}},
                    "spec": {"containers": [{"name": "report", "image": format!("registry.example.com/shop/{app}-report:2.{}", i % 9), "args": ["--since", "24h"], "resources": {}, "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                        "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler"}}},
            "status": {"startTime": t, "completionTime": t, "succeeded": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {},
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": t, "lastTransitionTime": t, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"},
                    {"type": "Complete", "status": "True", "lastProbeTime": t, "lastTransitionTime": t, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"}]}
        }),
        "services" => json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "uid": uid(c, i, 10), "resourceVersion": rv, "creationTimestamp": t, "labels": labels,
                "annotations": {"meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns},
                "managedFields": [mf("helm", "Update", "v1", &t, json!({"f:metadata": {"f:annotations": {}, "f:labels": {}}, "f:spec": {"f:ports": {}, "f:selector": {}, "f:type": {}}}))]},
            "spec": {"type": "ClusterIP", "clusterIP": format!("10.96.{}.{}", i / 256 % 256, i % 256), "clusterIPs": [format!("10.96.{}.{}", i / 256 % 256, i % 256)],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
                "selector": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name}},
            "status": {"loadBalancer": {}}
        }),
        "endpointslices" => {
            let n = 1 + i % 5;
            let endpoints: Vec<Value> = (0..n)
                .map(|k| {
                    json!({
                        "addresses": [format!("10.{c}.{}.{}", (i + k) / 256 % 256, (i * 5 + k) % 256)],
                        "conditions": {"ready": true, "serving": true, "terminating": false},
                        "nodeName": format!("node-{c}-{:04}", (i + k) % 100), "zone": format!("zone-{}", k % 3),
                        "targetRef": {"kind": "Pod", "namespace": ns, "name": format!("{name}-{}-{:05x}", hash(i), i * 31 + k), "uid": uid(c, i * 8 + k, 12)}
                    })
                })
                .collect();
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                "metadata": {"name": format!("{name}-{}", &hash(i)[..5.min(hash(i).len())]), "generateName": format!("{name}-"), "namespace": ns, "uid": uid(c, i, 11), "resourceVersion": rv, "generation": 1 + i % 6, "creationTimestamp": t,
                    "labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io", "kubernetes.io/service-name": name, "app.kubernetes.io/name": app},
                    "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": t},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": uid(c, i, 10), "controller": true, "blockOwnerDeletion": true}],
                    "managedFields": [mf("kube-controller-manager", "Update", "discovery.k8s.io/v1", &t, json!({"f:addressType": {}, "f:endpoints": {}, "f:metadata": {"f:annotations": {}, "f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:ports": {}}))]},
                "endpoints": endpoints,
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            })
        }
        "events" => {
            let pod = format!("{app}-{}-{:05x}", hash(i / 4), i);
            let (reason, msg, ty) = match i % 5 {
                0 => ("Scheduled", format!("Successfully assigned {ns}/{pod} to node-{c}-{:04}", i % 100), "Normal"),
                1 => ("Pulled", format!("Container image \"registry.example.com/shop/{app}:1.{}.{}\" already present on machine", i % 40, i % 7), "Normal"),
                2 => ("Created", format!("Created container: {app}"), "Normal"),
                3 => ("Started", format!("Started container {app}"), "Normal"),
                _ => ("Unhealthy", "Readiness probe failed: Get \"http://10.1.2.3:8080/ready\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)".to_string(), "Warning"),
            };
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("{pod}.{:016x}", (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)), "namespace": ns, "uid": uid(c, i, 13), "resourceVersion": rv, "creationTimestamp": t,
                    "managedFields": [mf("kubelet", "Update", "v1", &t, json!({"f:count": {}, "f:firstTimestamp": {}, "f:involvedObject": {}, "f:lastTimestamp": {}, "f:message": {}, "f:reason": {}, "f:reportingComponent": {}, "f:reportingInstance": {}, "f:source": {"f:component": {}, "f:host": {}}, "f:type": {}}))]},
                "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod, "uid": uid(c, i / 4, 14), "apiVersion": "v1", "resourceVersion": (900 + i).to_string(), "fieldPath": format!("spec.containers{{{app}}}")},
                "reason": reason, "message": msg, "type": ty, "count": 1 + i % 3,
                "source": {"component": "kubelet", "host": format!("node-{c}-{:04}", i % 100)},
                "firstTimestamp": t, "lastTimestamp": t, "eventTime": null,
                "reportingComponent": "kubelet", "reportingInstance": format!("node-{c}-{:04}", i % 100)
            })
        }
        _ => Value::Null,
    }
}

fn self_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024
}

fn child(a: &Args, resource: &str) -> Result<Value, String> {
    let (g, v) = group_version(resource);
    let info = fedctl::api::registry::Registry::member().lookup(g, v, resource).ok_or_else(|| format!("unknown kind {resource}"))?;
    let per = ((per_member(resource) as f64) * a.scale).round() as usize;
    if per == 0 {
        return Err(format!("no count for {resource}"));
    }
    let clusters: Vec<std::sync::Arc<str>> = (0..a.members).map(|c| std::sync::Arc::from(format!("member-{c}").as_str())).collect();
    let store = KindStore::sharded(info, 102_400, Duration::from_secs(75), 4);
    let rss0 = self_rss();
    let mut json_bytes = 0u64;
    for (c, cluster) in clusters.iter().enumerate() {
        let mut batch = Vec::with_capacity(per);
        for i in 0..per {
            let o = object(resource, c, i);
            json_bytes += serde_json::to_vec(&o).map_err(|e| e.to_string())?.len() as u64;
            batch.push(Obj::from_member(cluster, o).map_err(|e| e.to_string())?);
        }
        store.sync(1, cluster, (per + 2) as u64, batch);
    }
    let objects = store.len();
    let growth = self_rss().saturating_sub(rss0);
    std::hint::black_box(&store);
    Ok(json!({"resource": resource, "objects": objects, "json_bytes_per_object": json_bytes / objects.max(1) as u64, "rss_bytes_per_object": growth / objects.max(1) as u64}))
}

/// Runs the benchmark (parent: one child per kind, then a Markdown table).
pub async fn run(a: Args) -> Result<(), String> {
    if let Some(kind) = a.child.clone() {
        println!("{}", child(&a, &kind)?);
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("| kind | objects | JSON per object | memory per object (RSS growth / objects) | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for kind in &a.kinds {
        let out = std::process::Command::new(&exe)
            .args(["kinds", "--members", &a.members.to_string(), "--scale", &a.scale.to_string(), "--child", kind])
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("spawn child: {e}"))?;
        if !out.status.success() {
            return Err(format!("child for {kind} failed"));
        }
        let v: Value = serde_json::from_slice(out.stdout.trim_ascii()).map_err(|e| format!("child output: {e}"))?;
        let (j, r) = (v["json_bytes_per_object"].as_u64().unwrap_or(0), v["rss_bytes_per_object"].as_u64().unwrap_or(0));
        println!("| {kind} | {} | {j} B | {r} B | {:.2} |", v["objects"], r as f64 / j.max(1) as f64);
    }
    Ok(())
}
