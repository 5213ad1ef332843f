//! Kind by kind: an input object and the object kube-apiserver 1.33 stores for it, derived
//! from the defaulting function named in each test.

use serde_json::{json, Value};

use super::apply;
use super::core::pull_policy;

/// Defaults `input` as `apiVersion`/`kind` and checks the result; then checks that
/// defaulting the result again changes nothing.
fn check(api_version: &str, kind: &str, input: Value, want: Value) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let mut got = input;
    apply(group, version, kind, &mut got);
    assert_eq!(got, want, "{kind}: got\n{}\nwant\n{}", serde_json::to_string_pretty(&got).unwrap(), serde_json::to_string_pretty(&want).unwrap());
    let mut again = got.clone();
    apply(group, version, kind, &mut again);
    assert_eq!(again, got, "{kind}: defaulting twice changed the object");
}

/// The defaulted pod spec of a template with one container `c` running `image`
/// (SetDefaults_PodSpec + SetDefaults_Container).
fn template_spec(image: &str, pull: &str) -> Value {
    json!({
        "containers": [{"name": "c", "image": image, "imagePullPolicy": pull, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "schedulerName": "default-scheduler",
    })
}

fn minimal_template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})
}

fn defaulted_template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": template_spec("nginx:1.27", "IfNotPresent")})
}

#[test]
fn image_pull_policy_follows_the_tag() {
    // SetDefaults_Container with parsers.ParseImageName: no tag and no digest → latest
    for (image, want) in [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("docker.io/library/nginx", "Always"),
        ("localhost:5000/team/app", "Always"),
        ("localhost:5000/team/app:latest", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        ("registry.example.com:443/a/b:v2", "IfNotPresent"),
        ("nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "IfNotPresent"),
        ("nginx:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "Always"),
        ("Nginx", "IfNotPresent"),
        ("", "IfNotPresent"),
    ] {
        assert_eq!(pull_policy(image), want, "{image}");
    }
}

#[test]
fn deployment() {
    // apps/v1 SetDefaults_Deployment + core/v1 SetDefaults_PodSpec, SetDefaults_Container
    check(
        "apps/v1",
        "Deployment",
        json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": minimal_template()}}),
        json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": defaulted_template(),
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        }}),
    );
    // set values are kept; Recreate gets no rollingUpdate
    check(
        "apps/v1",
        "Deployment",
        json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 2, "progressDeadlineSeconds": 60, "template": {"spec": {"containers": []}}}}),
        json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 2, "progressDeadlineSeconds": 60, "template": {"spec": {
            "containers": [], "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {}, "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"}}}}),
    );
}

#[test]
fn replica_set_daemon_set_stateful_set() {
    // apps/v1 SetDefaults_ReplicaSet
    check("apps/v1", "ReplicaSet", json!({"spec": {"template": minimal_template()}}), json!({"spec": {"template": defaulted_template(), "replicas": 1}}));
    // apps/v1 SetDefaults_DaemonSet
    check(
        "apps/v1",
        "DaemonSet",
        json!({"spec": {"template": minimal_template()}}),
        json!({"spec": {"template": defaulted_template(), "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}, "revisionHistoryLimit": 10}}),
    );
    check(
        "apps/v1",
        "DaemonSet",
        json!({"spec": {"updateStrategy": {"type": "OnDelete"}, "template": minimal_template()}}),
        json!({"spec": {"updateStrategy": {"type": "OnDelete"}, "template": defaulted_template(), "revisionHistoryLimit": 10}}),
    );
    // apps/v1 SetDefaults_StatefulSet (StatefulSetAutoDeletePVC on) + the claim templates'
    // SetDefaults_PersistentVolumeClaim, SetDefaults_PersistentVolumeClaimSpec
    check(
        "apps/v1",
        "StatefulSet",
        json!({"spec": {"serviceName": "db", "template": minimal_template(), "volumeClaimTemplates": [
            {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
        json!({"spec": {
            "serviceName": "db",
            "template": defaulted_template(),
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"},
                "status": {"phase": "Pending"}}],
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "replicas": 1,
            "revisionHistoryLimit": 10,
        }}),
    );
    // an explicit RollingUpdate without rollingUpdate stays without it (partition is only
    // defaulted inside an existing rollingUpdate)
    check(
        "apps/v1",
        "StatefulSet",
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}, "replicas": 3, "podManagementPolicy": "Parallel", "template": minimal_template()}}),
        json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}, "replicas": 3, "podManagementPolicy": "Parallel", "template": defaulted_template(),
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"}, "revisionHistoryLimit": 10}}),
    );
}

#[test]
fn pod_spec_nested_defaults() {
    // core/v1 SetDefaults_PodSpec, _Container, _Probe, _HTTPGetAction, _ObjectFieldSelector,
    // _Volume, _SecretVolumeSource, _ConfigMapVolumeSource, _DownwardAPIVolumeSource,
    // _ProjectedVolumeSource, _ServiceAccountTokenProjection, _HostPathVolumeSource,
    // _PersistentVolumeClaimSpec (ephemeral), declarative ContainerPort.protocol and
    // GRPCAction.service
    let input = json!({"spec": {"template": {"spec": {
        "restartPolicy": "OnFailure",
        "containers": [{
            "name": "c", "image": "app",
            "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, {"name": "X", "value": "1"}],
            "livenessProbe": {"httpGet": {"port": 80}},
            "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5},
            "startupProbe": {"grpc": {"port": 9000}},
            "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/quit"}}},
        }],
        "initContainers": [{"name": "i", "image": "busybox:1.36", "imagePullPolicy": "Never"}],
        "volumes": [
            {"name": "scratch"},
            {"name": "s", "secret": {"secretName": "x"}},
            {"name": "m", "configMap": {"name": "y", "defaultMode": 256}},
            {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}, {"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}},
            {"name": "h", "hostPath": {"path": "/var/log"}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
        ],
    }}}});
    let want_spec = json!({
        "restartPolicy": "OnFailure",
        "containers": [{
            "name": "c", "image": "app",
            "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName", "apiVersion": "v1"}}}, {"name": "X", "value": "1"}],
            "livenessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
            "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "startupProbe": {"grpc": {"port": 9000, "service": ""}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
            "lifecycle": {"preStop": {"httpGet": {"port": 80, "path": "/quit", "scheme": "HTTP"}}},
            "imagePullPolicy": "Always",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }],
        "initContainers": [{"name": "i", "image": "busybox:1.36", "imagePullPolicy": "Never", "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "volumes": [
            {"name": "scratch", "emptyDir": {}},
            {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}},
            {"name": "m", "configMap": {"name": "y", "defaultMode": 256}},
            {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels", "apiVersion": "v1"}}], "defaultMode": 420}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}, {"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v1"}}]}}], "defaultMode": 420}},
            {"name": "h", "hostPath": {"path": "/var/log", "type": ""}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}}}},
        ],
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "schedulerName": "default-scheduler",
    });
    check("apps/v1", "ReplicaSet", input, json!({"spec": {"template": {"spec": want_spec}, "replicas": 1}}));
}

#[test]
fn pod_gets_pod_only_defaults() {
    // core/v1 SetDefaults_Pod: requests from limits, enableServiceLinks, host-network ports
    check(
        "v1",
        "Pod",
        json!({"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "app:1", "ports": [{"containerPort": 8080}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}}),
        json!({"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "app:1", "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}},
            "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "enableServiceLinks": true, "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {}, "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"}}),
    );
    // a template is not a Pod: no enableServiceLinks, no requests from limits
    check(
        "v1",
        "PodTemplate",
        json!({"template": {"spec": {"containers": [{"name": "c", "image": "app:1", "resources": {"limits": {"cpu": "1"}}}]}}}),
        json!({"template": {"spec": {"containers": [{"name": "c", "image": "app:1", "resources": {"limits": {"cpu": "1"}},
            "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {}, "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"}}}),
    );
}

#[test]
fn replication_controller() {
    // core/v1 SetDefaults_ReplicationController + declarative replicas 1
    check(
        "v1",
        "ReplicationController",
        json!({"metadata": {"name": "rc"}, "spec": {"template": minimal_template()}}),
        json!({"metadata": {"name": "rc", "labels": {"app": "web"}}, "spec": {"template": defaulted_template(), "replicas": 1, "selector": {"app": "web"}}}),
    );
}

#[test]
fn job_and_cron_job() {
    // batch/v1 SetDefaults_Job (JobPodReplacementPolicy, JobBackoffLimitPerIndex on) and the
    // Job strategy's manualSelector
    let tpl = json!({"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl:5.34"}]}});
    let mut dtpl_spec = template_spec("perl:5.34", "IfNotPresent");
    dtpl_spec["restartPolicy"] = json!("Never");
    let dtpl = json!({"metadata": {"labels": {"app": "pi"}}, "spec": dtpl_spec});
    check(
        "batch/v1",
        "Job",
        json!({"metadata": {"name": "pi"}, "spec": {"template": tpl}}),
        json!({"metadata": {"name": "pi", "labels": {"app": "pi"}}, "spec": {
            "template": dtpl,
            "completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": false, "manualSelector": false,
            "podReplacementPolicy": "TerminatingOrFailed",
        }}),
    );
    // completions alone: parallelism 1; backoffLimitPerIndex: backoffLimit MaxInt32; a
    // podFailurePolicy: podReplacementPolicy Failed and conditions' status True
    check(
        "batch/v1",
        "Job",
        json!({"metadata": {"labels": {"own": "x"}}, "spec": {"completions": 5, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}, "template": tpl}}),
        json!({"metadata": {"labels": {"own": "x"}}, "spec": {"completions": 5, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}, "template": dtpl,
            "parallelism": 1, "backoffLimit": 2147483647, "suspend": false, "manualSelector": false, "podReplacementPolicy": "Failed"}}),
    );
    // batch/v1 SetDefaults_CronJob; the job template gets only the pod defaults
    check(
        "batch/v1",
        "CronJob",
        json!({"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": tpl}}}}),
        json!({"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": dtpl}},
            "concurrencyPolicy": "Allow", "suspend": false, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1}}),
    );
}

#[test]
fn service() {
    // core/v1 SetDefaults_Service: no clusterIP, ipFamilies or nodePorts (allocators)
    check(
        "v1",
        "Service",
        json!({"spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
        json!({"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}],
            "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack"}}),
    );
    check(
        "v1",
        "Service",
        json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443, "targetPort": 0}]}}),
        json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443, "targetPort": 443, "protocol": "TCP"}],
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
            "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": true, "ipFamilyPolicy": "SingleStack"}}),
    );
    // headless without selector: RequireDualStack; headless with one: SingleStack; a given
    // policy is kept
    check(
        "v1",
        "Service",
        json!({"spec": {"clusterIP": "None", "ports": [{"port": 5432}]}}),
        json!({"spec": {"clusterIP": "None", "ports": [{"port": 5432, "protocol": "TCP", "targetPort": 5432}], "sessionAffinity": "None", "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "RequireDualStack"}}),
    );
    check(
        "v1",
        "Service",
        json!({"spec": {"clusterIPs": ["None"], "selector": {"app": "db"}, "ipFamilyPolicy": "PreferDualStack"}}),
        json!({"spec": {"clusterIPs": ["None"], "selector": {"app": "db"}, "ipFamilyPolicy": "PreferDualStack", "sessionAffinity": "None", "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster"}}),
    );
    // ExternalName: neither traffic policy; None drops a sessionAffinityConfig
    check(
        "v1",
        "Service",
        json!({"spec": {"type": "ExternalName", "externalName": "db.example.com", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}}}),
        json!({"spec": {"type": "ExternalName", "externalName": "db.example.com", "sessionAffinity": "None"}}),
    );
}

#[test]
fn core_small_kinds() {
    // SetDefaults_Secret
    check("v1", "Secret", json!({"data": {}}), json!({"data": {}, "type": "Opaque"}));
    check("v1", "Secret", json!({"type": "kubernetes.io/tls"}), json!({"type": "kubernetes.io/tls"}));
    // SetDefaults_Endpoints
    check("v1", "Endpoints", json!({"subsets": [{"ports": [{"port": 80}]}]}), json!({"subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}]}));
    // SetDefaults_PersistentVolumeClaim(+Spec)
    check(
        "v1",
        "PersistentVolumeClaim",
        json!({"spec": {"accessModes": ["ReadWriteOnce"]}}),
        json!({"spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}),
    );
    // SetDefaults_PersistentVolume, SetDefaults_HostPathVolumeSource
    check(
        "v1",
        "PersistentVolume",
        json!({"spec": {"hostPath": {"path": "/d"}}}),
        json!({"spec": {"hostPath": {"path": "/d", "type": ""}, "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}),
    );
    // SetDefaults_LimitRangeItem
    check(
        "v1",
        "LimitRange",
        json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}, {"type": "Pod", "max": {"cpu": "4"}}]}}),
        json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}, "default": {"cpu": "2"}, "defaultRequest": {"cpu": "2", "memory": "64Mi"}},
            {"type": "Pod", "max": {"cpu": "4"}}]}}),
    );
    // only a min: no empty `default` appears
    check(
        "v1",
        "LimitRange",
        json!({"spec": {"limits": [{"type": "Container", "min": {"memory": "64Mi"}}]}}),
        json!({"spec": {"limits": [{"type": "Container", "min": {"memory": "64Mi"}, "defaultRequest": {"memory": "64Mi"}}]}}),
    );
    // SetDefaults_Namespace, SetDefaults_NamespaceStatus: the name label wins over a changed one
    check(
        "v1",
        "Namespace",
        json!({"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "other", "x": "y"}}}),
        json!({"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a", "x": "y"}}, "status": {"phase": "Active"}}),
    );
    check("v1", "Namespace", json!({"metadata": {"generateName": "t-"}}), json!({"metadata": {"generateName": "t-"}, "status": {"phase": "Active"}}));
    // ConfigMap's `data: {}` default is invisible in JSON
    check("v1", "ConfigMap", json!({"data": {"a": "b"}}), json!({"data": {"a": "b"}}));
}

#[test]
fn autoscaling() {
    // autoscaling/v1 SetDefaults_HorizontalPodAutoscaler + conversion's CPU default
    let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
    check(
        "autoscaling/v1",
        "HorizontalPodAutoscaler",
        json!({"spec": {"scaleTargetRef": target, "maxReplicas": 5}}),
        json!({"spec": {"scaleTargetRef": target, "maxReplicas": 5, "minReplicas": 1, "targetCPUUtilizationPercentage": 80}}),
    );
    // autoscaling/v2 SetDefaults_HorizontalPodAutoscaler(+Behavior)
    check(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        json!({"spec": {"scaleTargetRef": target, "maxReplicas": 5}}),
        json!({"spec": {"scaleTargetRef": target, "maxReplicas": 5, "minReplicas": 1,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}}),
    );
    let memory = json!([{"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}}]);
    check(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        json!({"spec": {"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 5, "metrics": memory, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}),
        json!({"spec": {"scaleTargetRef": target, "minReplicas": 2, "maxReplicas": 5, "metrics": memory, "behavior": {
            "scaleDown": {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}], "stabilizationWindowSeconds": 60},
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        }}}),
    );
}

#[test]
fn rbac_networking_storage_scheduling_discovery() {
    // rbac/v1 SetDefaults_RoleBinding, SetDefaults_Subject
    check(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
        json!({"roleRef": {"kind": "Role", "name": "r", "apiGroup": "rbac.authorization.k8s.io"}, "subjects": [
            {"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"}, {"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"},
            {"kind": "ServiceAccount", "name": "s", "namespace": "n", "apiGroup": ""}]}),
    );
    check("rbac.authorization.k8s.io/v1", "ClusterRole", json!({"rules": []}), json!({"rules": []}));
    // networking/v1 SetDefaults_NetworkPolicy, SetDefaults_NetworkPolicyPort
    check(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        json!({"spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}),
        json!({"spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "protocol": "TCP"}]}], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}], "policyTypes": ["Ingress", "Egress"]}}),
    );
    check("networking.k8s.io/v1", "NetworkPolicy", json!({"spec": {"podSelector": {}}}), json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}));
    // networking/v1 SetDefaults_IngressClass
    check(
        "networking.k8s.io/v1",
        "IngressClass",
        json!({"spec": {"controller": "x/y", "parameters": {"kind": "P", "name": "p"}}}),
        json!({"spec": {"controller": "x/y", "parameters": {"kind": "P", "name": "p", "scope": "Cluster"}}}),
    );
    // storage/v1 SetDefaults_StorageClass, SetDefaults_CSIDriver
    check("storage.k8s.io/v1", "StorageClass", json!({"provisioner": "p"}), json!({"provisioner": "p", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}));
    check(
        "storage.k8s.io/v1",
        "CSIDriver",
        json!({"spec": {}}),
        json!({"spec": {"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false, "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"], "requiresRepublish": false, "seLinuxMount": false}}),
    );
    // scheduling/v1 SetDefaults_PriorityClass
    check("scheduling.k8s.io/v1", "PriorityClass", json!({"value": 1000}), json!({"value": 1000, "preemptionPolicy": "PreemptLowerPriority"}));
    // discovery/v1 SetDefaults_EndpointPort
    check(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        json!({"addressType": "IPv4", "ports": [{"port": 80}], "endpoints": []}),
        json!({"addressType": "IPv4", "ports": [{"port": 80, "name": "", "protocol": "TCP"}], "endpoints": []}),
    );
    // policy/v1 PodDisruptionBudget has no defaults
    check("policy/v1", "PodDisruptionBudget", json!({"spec": {"minAvailable": 1}}), json!({"spec": {"minAvailable": 1}}));
}

#[test]
fn webhooks_and_crds() {
    // admissionregistration/v1 SetDefaults_ValidatingWebhook, _MutatingWebhook, _Rule,
    // _ServiceReference
    let rule = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]});
    let rule_d = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"});
    check(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        json!({"webhooks": [{"name": "v.example.com", "clientConfig": {"service": {"namespace": "n", "name": "s"}}, "rules": [rule]}]}),
        json!({"webhooks": [{"name": "v.example.com", "clientConfig": {"service": {"namespace": "n", "name": "s", "port": 443}}, "rules": [rule_d],
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}, "timeoutSeconds": 10}]}),
    );
    check(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        json!({"webhooks": [{"name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1", "v1beta1"], "clientConfig": {"url": "https://x"}}]}),
        json!({"webhooks": [{"name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1", "v1beta1"], "clientConfig": {"url": "https://x"},
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}, "timeoutSeconds": 10, "reinvocationPolicy": "Never"}]}),
    );
    // admissionregistration/v1 SetObjectDefaults_ValidatingAdmissionPolicy(Binding):
    // SetDefaults_ValidatingAdmissionPolicySpec, SetDefaults_MatchResources, SetDefaults_Rule
    let named = json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]});
    let mut named_d = named.clone();
    named_d["scope"] = json!("*");
    check(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        json!({"spec": {"matchConstraints": {"resourceRules": [named]}, "validations": [{"expression": "object.spec.replicas <= 5"}]}}),
        json!({"spec": {"matchConstraints": {"resourceRules": [named_d], "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}},
            "validations": [{"expression": "object.spec.replicas <= 5"}], "failurePolicy": "Fail"}}),
    );
    check(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        json!({"spec": {"policyName": "p", "validationActions": ["Deny"]}}),
        json!({"spec": {"policyName": "p", "validationActions": ["Deny"]}}),
    );
    check(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        json!({"spec": {"policyName": "p", "validationActions": ["Deny"], "matchResources": {"excludeResourceRules": [named]}}}),
        json!({"spec": {"policyName": "p", "validationActions": ["Deny"], "matchResources": {"excludeResourceRules": [named_d],
            "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}}}}),
    );
    // kube-aggregator apiregistration/v1 SetDefaults_ServiceReference
    check(
        "apiregistration.k8s.io/v1",
        "APIService",
        json!({"spec": {"group": "metrics.k8s.io", "version": "v1beta1", "service": {"name": "metrics-server", "namespace": "kube-system"}}}),
        json!({"spec": {"group": "metrics.k8s.io", "version": "v1beta1", "service": {"name": "metrics-server", "namespace": "kube-system", "port": 443}}}),
    );
    // flowcontrol/v1 SetDefaults_FlowSchemaSpec, _LimitedPriorityLevelConfiguration,
    // _QueuingConfiguration, _ExemptPriorityLevelConfiguration
    check(
        "flowcontrol.apiserver.k8s.io/v1",
        "FlowSchema",
        json!({"spec": {"priorityLevelConfiguration": {"name": "p"}}}),
        json!({"spec": {"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1000}}),
    );
    check(
        "flowcontrol.apiserver.k8s.io/v1",
        "PriorityLevelConfiguration",
        json!({"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 16}}}}}),
        json!({"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 8, "queueLengthLimit": 50}},
            "nominalConcurrencyShares": 30, "lendablePercent": 0}}}),
    );
    check(
        "flowcontrol.apiserver.k8s.io/v1",
        "PriorityLevelConfiguration",
        json!({"spec": {"type": "Exempt", "exempt": {}}}),
        json!({"spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
    );
    // apiextensions/v1 SetDefaults_CustomResourceDefinitionSpec
    check(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        json!({"spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget", "plural": "widgets"}, "versions": []}}),
        json!({"spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"}, "versions": [],
            "conversion": {"strategy": "None"}}}),
    );
}

#[test]
fn other_kinds_and_odd_values_pass_through() {
    for (av, kind) in [("example.com/v1", "Widget"), ("cluster.fedctl.io/v1alpha1", "Cluster"), ("apps/v1beta1", "Deployment")] {
        let input = json!({"spec": {"template": {"spec": {}}}});
        check(av, kind, input.clone(), input);
    }
    // a field of the wrong JSON type is left for validation
    check("apps/v1", "Deployment", json!({"spec": "nope"}), json!({"spec": "nope"}));
    check(
        "v1",
        "Service",
        json!({"spec": {"ports": "x"}}),
        json!({"spec": {"ports": "x", "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack"}}),
    );
    let mut not_object = json!([1, 2]);
    apply("apps", "v1", "Deployment", &mut not_object);
    assert_eq!(not_object, json!([1, 2]));
}
