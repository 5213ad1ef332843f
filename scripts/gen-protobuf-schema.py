#!/usr/bin/env python3
"""Generate src/api/protobuf_schema.rs: the table that drives the Kubernetes protobuf decoder.

What it reads (both crates must already be in the local cargo registry; `cargo fetch` puts them
there, since both are dev-dependencies of fedctl):

  * k8s-pb 0.9.0 (prost bindings of every Kubernetes .proto): for each message, every field's
    tag number, protobuf type (string/int32/int64/bool/bytes/message/map), whether it is
    repeated, and the nested message type.
  * k8s-openapi 0.29.0, all its Kubernetes trees (src/v1_33 ... src/v1_37, merged, since k8s-pb
    0.9 already has fields newer than 1.33): the exact JSON key of every field (from its serde
    Deserialize impl: `"hostIPC" => Field::Key_host_ipc`), whether the field is required
    (non-`Option` in Rust), the real Go/proto message name ("Generated from definition ..."),
    and the (apiVersion, kind) of every top-level resource (`impl crate::Resource`).

Fields are joined by name: prost's snake_case name and the JSON key agree once both are
lowercased with underscores removed (`host_ipc` ~ `hostIPC`).  A message field that matches no
JSON key but whose own fields all do is a Go struct embedded with `json:",inline"`
(Volume.volumeSource, Probe.handler, ...): it is marked Inline and flattened by the decoder.
Any other field without a JSON name makes the generator fail.

What it writes: src/api/protobuf_schema.rs, a static table sorted by message full name
(`k8s.io.api.core.v1.PodSpec`) with each message's fields [tag, JSON name, kind, nested message,
keep-zero flag], plus the (apiVersion, kind) -> root message table.  Messages covered: everything
reachable from every k8s-openapi resource under api/, apimachinery/ and kube_aggregator/, plus the
option types in EXTRA_ROOTS (DeleteOptions, ...).  apiextensions (CRDs) is left out on purpose:
its JSONSchemaProps* types have JSON shapes of their own the decoder does not implement.

The keep-zero flag: Go's protobuf marshaller writes every non-pointer field even when it holds
its zero value, while Go's JSON encoder drops zero values of `omitempty` fields.  To yield the
JSON kube-apiserver would produce, the decoder drops a zero string/number/bool unless the field
is required (no `omitempty`: non-Option in k8s-openapi) or a Go pointer (listed in
GO_POINTER_SCALARS below, where an explicit zero means something: `replicas: 0`,
`allowPrivilegeEscalation: false`, `storageClassName: ""`).  Neither crate records pointer-ness,
so that list is maintained by hand from the Go types; `--list-optional-scalars` prints every
candidate field so the list can be reviewed after a Kubernetes upgrade.

Rerun (from the repository root):

    python3 scripts/gen-protobuf-schema.py            # rewrites src/api/protobuf_schema.rs
    python3 scripts/gen-protobuf-schema.py --check    # exits 1 if the committed file is stale
    python3 scripts/gen-protobuf-schema.py --list-optional-scalars

Environment overrides: K8S_PB_SRC, K8S_OPENAPI_SRC (the crates' src/ directories),
CARGO_HOME.
"""

import glob
import os
import re
import sys
from collections import deque


# Messages whose JSON form is not an object of their fields; the decoder has a rule for each.
SPECIALS = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs": "StringList",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.api.resource.QuantityValue": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawExtension",
    "k8s.io.api.authentication.v1.ExtraValue": "StringList",
    "k8s.io.api.authentication.v1beta1.ExtraValue": "StringList",
    "k8s.io.api.authorization.v1.ExtraValue": "StringList",
    "k8s.io.api.authorization.v1beta1.ExtraValue": "StringList",
    "k8s.io.api.certificates.v1.ExtraValue": "StringList",
    "k8s.io.api.certificates.v1beta1.ExtraValue": "StringList",
}

# Non-resource messages a client may send as a request body.
EXTRA_ROOTS = [
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "k8s.io.apimachinery.pkg.apis.meta.v1.CreateOptions",
    "k8s.io.apimachinery.pkg.apis.meta.v1.UpdateOptions",
    "k8s.io.apimachinery.pkg.apis.meta.v1.PatchOptions",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Status",
    # No covered type embeds metav1.Duration today; listed so the decoder's rule for it has data.
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
]

# Kinds registered in every group-version by metav1.AddToGroupVersion: a body of one of these
# kinds may carry any apiVersion (e.g. `apps/v1` DeleteOptions).
ANY_VERSION_KINDS = ["DeleteOptions", "CreateOptions", "UpdateOptions", "PatchOptions"]

MODULE_TREES = ["api", "apimachinery", "kube_aggregator"]

# Optional scalar fields whose Go type is a pointer (explicit zero is kept), by message full name,
# keyed by JSON name.  Written from the Go types of k8s.io/api and apimachinery (1.33-1.35) for
# the GA (v1) groups; alpha/beta groups are not listed, so their zero-valued optional scalars are
# dropped.  When unsure, list the field: keeping a zero is harmless noise, dropping one loses an
# explicit `false`/`0`/`""`.  The generator fails on entries that name no field.
GO_POINTER_SCALARS = {
    # meta/v1
    "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta": ["deletionGracePeriodSeconds"],
    "k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference": ["controller", "blockOwnerDeletion"],
    "k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta": ["remainingItemCount"],
    "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions": [
        "gracePeriodSeconds", "orphanDependents", "propagationPolicy",
        "ignoreStoreReadErrorWithClusterBreakingPotential"],
    "k8s.io.apimachinery.pkg.apis.meta.v1.Preconditions": ["uid", "resourceVersion"],
    "k8s.io.apimachinery.pkg.apis.meta.v1.PatchOptions": ["force"],
    # core/v1: pod spec and containers
    "k8s.io.api.core.v1.PodSpec": [
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken",
        "shareProcessNamespace", "priority", "enableServiceLinks", "preemptionPolicy",
        "runtimeClassName", "setHostnameAsFQDN", "hostUsers", "hostnameOverride"],
    "k8s.io.api.core.v1.PodSecurityContext": [
        "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy",
        "supplementalGroupsPolicy", "seLinuxChangePolicy"],
    "k8s.io.api.core.v1.SecurityContext": [
        "privileged", "runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
        "allowPrivilegeEscalation", "procMount"],
    "k8s.io.api.core.v1.SeccompProfile": ["localhostProfile"],
    "k8s.io.api.core.v1.AppArmorProfile": ["localhostProfile"],
    "k8s.io.api.core.v1.WindowsSecurityContextOptions": [
        "gmsaCredentialSpecName", "gmsaCredentialSpec", "runAsUserName", "hostProcess"],
    "k8s.io.api.core.v1.Container": ["restartPolicy"],
    "k8s.io.api.core.v1.EphemeralContainerCommon": ["restartPolicy"],
    "k8s.io.api.core.v1.Lifecycle": ["stopSignal"],
    "k8s.io.api.core.v1.Probe": ["terminationGracePeriodSeconds"],
    "k8s.io.api.core.v1.GRPCAction": ["service"],
    "k8s.io.api.core.v1.ConfigMapKeySelector": ["optional"],
    "k8s.io.api.core.v1.SecretKeySelector": ["optional"],
    "k8s.io.api.core.v1.ConfigMapEnvSource": ["optional"],
    "k8s.io.api.core.v1.SecretEnvSource": ["optional"],
    "k8s.io.api.core.v1.FileKeySelector": ["optional"],
    "k8s.io.api.core.v1.PodDNSConfigOption": ["value"],
    "k8s.io.api.core.v1.TopologySpreadConstraint": [
        "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy"],
    "k8s.io.api.core.v1.Toleration": ["tolerationSeconds"],
    "k8s.io.api.core.v1.PodResourceClaim": ["resourceClaimName", "resourceClaimTemplateName"],
    "k8s.io.api.core.v1.PodResourceClaimStatus": ["resourceClaimName"],
    "k8s.io.api.core.v1.ContainerStatus": ["started", "stopSignal"],
    # core/v1: volumes
    "k8s.io.api.core.v1.HostPathVolumeSource": ["type"],
    "k8s.io.api.core.v1.SecretVolumeSource": ["defaultMode", "optional"],
    "k8s.io.api.core.v1.ConfigMapVolumeSource": ["defaultMode", "optional"],
    "k8s.io.api.core.v1.SecretProjection": ["optional"],
    "k8s.io.api.core.v1.ConfigMapProjection": ["optional"],
    "k8s.io.api.core.v1.KeyToPath": ["mode"],
    "k8s.io.api.core.v1.DownwardAPIVolumeSource": ["defaultMode"],
    "k8s.io.api.core.v1.DownwardAPIVolumeFile": ["mode"],
    "k8s.io.api.core.v1.ProjectedVolumeSource": ["defaultMode"],
    "k8s.io.api.core.v1.ServiceAccountTokenProjection": ["expirationSeconds"],
    "k8s.io.api.core.v1.ClusterTrustBundleProjection": ["name", "signerName", "optional"],
    "k8s.io.api.core.v1.PodCertificateProjection": ["maxExpirationSeconds"],
    "k8s.io.api.core.v1.CSIVolumeSource": ["readOnly", "fsType"],
    "k8s.io.api.core.v1.ISCSIVolumeSource": ["initiatorName"],
    "k8s.io.api.core.v1.ISCSIPersistentVolumeSource": ["initiatorName"],
    "k8s.io.api.core.v1.AzureDiskVolumeSource": ["cachingMode", "fsType", "readOnly", "kind"],
    "k8s.io.api.core.v1.FCVolumeSource": ["lun"],
    "k8s.io.api.core.v1.VolumeMount": ["recursiveReadOnly", "mountPropagation"],
    "k8s.io.api.core.v1.VolumeMountStatus": ["recursiveReadOnly"],
    "k8s.io.api.core.v1.PersistentVolumeClaimSpec": [
        "storageClassName", "volumeMode", "volumeAttributesClassName"],
    "k8s.io.api.core.v1.PersistentVolumeClaimStatus": ["currentVolumeAttributesClassName"],
    "k8s.io.api.core.v1.TypedLocalObjectReference": ["apiGroup"],
    "k8s.io.api.core.v1.TypedObjectReference": ["apiGroup", "namespace"],
    "k8s.io.api.core.v1.PersistentVolumeSpec": ["volumeMode", "volumeAttributesClassName"],
    "k8s.io.api.core.v1.LocalVolumeSource": ["fsType"],
    # core/v1: services, endpoints, nodes, events, misc
    "k8s.io.api.core.v1.ServiceSpec": [
        "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass",
        "internalTrafficPolicy", "trafficDistribution"],
    "k8s.io.api.core.v1.ServicePort": ["appProtocol"],
    "k8s.io.api.core.v1.ClientIPConfig": ["timeoutSeconds"],
    "k8s.io.api.core.v1.LoadBalancerIngress": ["ipMode"],
    "k8s.io.api.core.v1.PortStatus": ["error"],
    "k8s.io.api.core.v1.EndpointAddress": ["nodeName"],
    "k8s.io.api.core.v1.EndpointPort": ["appProtocol"],
    "k8s.io.api.core.v1.NodeRuntimeHandlerFeatures": ["recursiveReadOnlyMounts", "userNamespaces"],
    "k8s.io.api.core.v1.NodeFeatures": ["supplementalGroupsPolicy"],
    "k8s.io.api.core.v1.NodeSwapStatus": ["capacity"],
    "k8s.io.api.core.v1.ServiceAccount": ["automountServiceAccountToken"],
    "k8s.io.api.core.v1.Secret": ["immutable"],
    "k8s.io.api.core.v1.ConfigMap": ["immutable"],
    "k8s.io.api.core.v1.ReplicationControllerSpec": ["replicas"],
    # apps/v1
    "k8s.io.api.apps.v1.DeploymentSpec": [
        "replicas", "revisionHistoryLimit", "progressDeadlineSeconds"],
    "k8s.io.api.apps.v1.DeploymentStatus": ["collisionCount", "terminatingReplicas"],
    "k8s.io.api.apps.v1.StatefulSetSpec": ["replicas", "revisionHistoryLimit"],
    "k8s.io.api.apps.v1.StatefulSetStatus": ["collisionCount"],
    "k8s.io.api.apps.v1.RollingUpdateStatefulSetStrategy": ["partition"],
    "k8s.io.api.apps.v1.DaemonSetSpec": ["revisionHistoryLimit"],
    "k8s.io.api.apps.v1.DaemonSetStatus": ["collisionCount"],
    "k8s.io.api.apps.v1.ReplicaSetSpec": ["replicas"],
    "k8s.io.api.apps.v1.ReplicaSetStatus": ["terminatingReplicas"],
    # batch/v1
    "k8s.io.api.batch.v1.JobSpec": [
        "parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
        "backoffLimitPerIndex", "maxFailedIndexes", "manualSelector", "ttlSecondsAfterFinished",
        "completionMode", "suspend", "podReplacementPolicy", "managedBy"],
    "k8s.io.api.batch.v1.JobStatus": ["failedIndexes", "terminating", "ready"],
    "k8s.io.api.batch.v1.PodFailurePolicyOnExitCodesRequirement": ["containerName"],
    "k8s.io.api.batch.v1.SuccessPolicyRule": ["succeededIndexes", "succeededCount"],
    "k8s.io.api.batch.v1.CronJobSpec": [
        "timeZone", "startingDeadlineSeconds", "suspend", "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit"],
    # coordination/v1
    "k8s.io.api.coordination.v1.LeaseSpec": [
        "holderIdentity", "leaseDurationSeconds", "leaseTransitions", "strategy",
        "preferredHolder"],
    # certificates/v1
    "k8s.io.api.certificates.v1.CertificateSigningRequestSpec": ["expirationSeconds"],
    # autoscaling
    "k8s.io.api.autoscaling.v1.HorizontalPodAutoscalerSpec": [
        "minReplicas", "targetCPUUtilizationPercentage"],
    "k8s.io.api.autoscaling.v1.HorizontalPodAutoscalerStatus": [
        "observedGeneration", "currentCPUUtilizationPercentage"],
    "k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerSpec": ["minReplicas"],
    "k8s.io.api.autoscaling.v2.HorizontalPodAutoscalerStatus": ["observedGeneration"],
    "k8s.io.api.autoscaling.v2.HPAScalingRules": ["stabilizationWindowSeconds", "selectPolicy"],
    "k8s.io.api.autoscaling.v2.MetricTarget": ["averageUtilization"],
    "k8s.io.api.autoscaling.v2.MetricValueStatus": ["averageUtilization"],
    # policy/v1
    "k8s.io.api.policy.v1.PodDisruptionBudgetSpec": ["unhealthyPodEvictionPolicy"],
    # networking/v1
    "k8s.io.api.networking.v1.IngressSpec": ["ingressClassName"],
    "k8s.io.api.networking.v1.IngressClassParametersReference": ["apiGroup", "scope", "namespace"],
    "k8s.io.api.networking.v1.IngressPortStatus": ["error"],
    "k8s.io.api.networking.v1.NetworkPolicyPort": ["protocol", "endPort"],
    "k8s.io.api.networking.v1.HTTPIngressPath": ["pathType"],
    # discovery/v1
    "k8s.io.api.discovery.v1.Endpoint": ["hostname", "nodeName", "zone"],
    "k8s.io.api.discovery.v1.EndpointConditions": ["ready", "serving", "terminating"],
    "k8s.io.api.discovery.v1.EndpointPort": ["name", "protocol", "port", "appProtocol"],
    # scheduling/v1
    "k8s.io.api.scheduling.v1.PriorityClass": ["preemptionPolicy"],
    # storage/v1
    "k8s.io.api.storage.v1.StorageClass": [
        "reclaimPolicy", "allowVolumeExpansion", "volumeBindingMode"],
    "k8s.io.api.storage.v1.CSIDriverSpec": [
        "attachRequired", "podInfoOnMount", "storageCapacity", "fsGroupPolicy",
        "requiresRepublish", "seLinuxMount", "nodeAllocatableUpdatePeriodSeconds",
        "serviceAccountTokenInSecrets"],
    "k8s.io.api.storage.v1.TokenRequest": ["expirationSeconds"],
    "k8s.io.api.storage.v1.VolumeAttachmentSource": ["persistentVolumeName"],
    "k8s.io.api.storage.v1.VolumeNodeResources": ["count"],
    "k8s.io.api.storage.v1.VolumeError": ["errorCode"],
    # authentication / authorization
    "k8s.io.api.authentication.v1.TokenRequestSpec": ["expirationSeconds"],
    # admissionregistration/v1
    "k8s.io.api.admissionregistration.v1.ValidatingWebhook": [
        "failurePolicy", "matchPolicy", "sideEffects", "timeoutSeconds"],
    "k8s.io.api.admissionregistration.v1.MutatingWebhook": [
        "failurePolicy", "matchPolicy", "sideEffects", "timeoutSeconds", "reinvocationPolicy"],
    "k8s.io.api.admissionregistration.v1.ServiceReference": ["path", "port"],
    "k8s.io.api.admissionregistration.v1.Rule": ["scope"],
    "k8s.io.api.admissionregistration.v1.ValidatingAdmissionPolicySpec": ["failurePolicy"],
    "k8s.io.api.admissionregistration.v1.MatchResources": ["matchPolicy"],
    "k8s.io.api.admissionregistration.v1.ParamRef": ["parameterNotFoundAction"],
    "k8s.io.api.admissionregistration.v1.Validation": ["reason"],
    # flowcontrol/v1
    "k8s.io.api.flowcontrol.v1.ExemptPriorityLevelConfiguration": [
        "nominalConcurrencyShares", "lendablePercent"],
    "k8s.io.api.flowcontrol.v1.LimitedPriorityLevelConfiguration": [
        "nominalConcurrencyShares", "lendablePercent", "borrowingLimitPercent"],
    # resource/v1
    "k8s.io.api.resource.v1.Device": [
        "nodeName", "allNodes", "bindsToNode", "allowMultipleAllocations"],
    "k8s.io.api.resource.v1.DeviceAttribute": ["int", "bool", "string", "version"],
    "k8s.io.api.resource.v1.DeviceRequestAllocationResult": ["adminAccess", "shareID"],
    "k8s.io.api.resource.v1.AllocatedDeviceStatus": ["shareID"],
    "k8s.io.api.resource.v1.DeviceToleration": ["tolerationSeconds"],
    "k8s.io.api.resource.v1.ExactDeviceRequest": ["adminAccess"],
    "k8s.io.api.resource.v1.ResourceSliceSpec": ["nodeName", "allNodes", "perDeviceNodeSelection"],
    "k8s.io.api.resource.v1.DeviceClassSpec": ["extendedResourceName"],
    "k8s.io.api.resource.v1.DeviceConstraint": ["matchAttribute", "distinctAttribute"],
    # kube-aggregator
    "k8s.io.kube_aggregator.pkg.apis.apiregistration.v1.ServiceReference": ["port"],
}


def cargo_registry_dirs():
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    return sorted(glob.glob(os.path.join(home, "registry", "src", "*")))


def find_crate_src(env, crate):
    if os.environ.get(env):
        return os.environ[env]
    for reg in cargo_registry_dirs():
        path = os.path.join(reg, crate, "src")
        if os.path.isdir(path):
            return path
    sys.exit(f"cannot find {crate} in the cargo registry; run `cargo fetch` (or set {env})")


def norm(name):
    return name.replace("r#", "").replace("_", "").replace("-", "").lower()


# ---------------------------------------------------------------------------------------------
# k8s-pb


PROST_ATTR = re.compile(r'#\[prost\((.*)\)\]')


class PbField:
    def __init__(self, name, tag, kind, repeated, rust_type, map_value):
        self.name = name
        self.tag = tag
        self.kind = kind  # string int32 int64 bool bytes double message map
        self.repeated = repeated
        self.rust_type = rust_type
        self.map_value = map_value  # for maps: string | bytes | message
        self.target = None  # (module tuple, struct name) for message / map<.., message>


def parse_prost_attr(attr):
    tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
    m = re.match(r'btree_map = "string, (\w+)"', attr)
    if m:
        return tag, "map", False, m.group(1)
    first = attr.split(",")[0].strip()
    kind = first.split("=")[0].strip()
    if kind not in ("string", "int32", "int64", "bool", "bytes", "double", "message"):
        sys.exit(f"unsupported prost attribute: {attr}")
    return tag, kind, "repeated" in attr, None


def parse_pb_module(path):
    """Return {struct name: [PbField]} for one k8s-pb mod.rs."""
    structs = {}
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    current = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r'pub struct (\w+) \{(\})?', line)
        if m:
            current = m.group(1)
            structs[current] = []
            if m.group(2):
                current = None
            i += 1
            continue
        if line == "}":
            current = None
        am = PROST_ATTR.search(line)
        if am and current:
            tag, kind, repeated, map_value = parse_prost_attr(am.group(1))
            decl = ""
            i += 1
            while True:
                decl += lines[i].strip() + " "
                depth = decl.count("<") - decl.count(">")
                if decl.rstrip().endswith(",") and depth == 0:
                    break
                i += 1
            dm = re.match(r'pub ([\w#]+):\s*(.*),\s*$', decl.strip())
            if not dm:
                sys.exit(f"{path}: cannot parse field declaration {decl!r}")
            structs[current].append(PbField(dm.group(1), tag, kind, repeated, dm.group(2), map_value))
        i += 1
    return structs


def resolve_rust_path(module, rust_type):
    """The message a field refers to, as (module tuple, struct name)."""
    t = rust_type.replace(" ", "").replace(",>", ">")
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<",
                    "::prost::alloc::boxed::Box<"):
        while t.startswith(wrapper):
            t = t[len(wrapper):-1]
    if t.startswith("::prost::alloc::collections::BTreeMap<"):
        t = t[len("::prost::alloc::collections::BTreeMap<"):-1]
        t = t.split(",", 1)[1]
    parts = t.split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        mod.pop()
        parts.pop(0)
    return tuple(mod + parts[:-1]), parts[-1]


def load_pb(src):
    messages = {}  # (module tuple, struct) -> [PbField]
    for tree in MODULE_TREES:
        for path in sorted(glob.glob(os.path.join(src, tree, "**", "mod.rs"), recursive=True)):
            module = tuple(os.path.relpath(os.path.dirname(path), src).split(os.sep))
            for name, fields in parse_pb_module(path).items():
                for f in fields:
                    if f.kind == "message" or (f.kind == "map" and f.map_value == "message"):
                        f.target = resolve_rust_path(module, f.rust_type)
                messages[(module, name)] = fields
    return messages


# ---------------------------------------------------------------------------------------------
# k8s-openapi


class OaStruct:
    def __init__(self, definition, name):
        self.definition = definition
        self.name = name
        self.field_types = {}  # rust field -> type
        self.keys = {}  # json key -> rust field
        self.required = set()  # json keys that are not Option<_> in some version
        self.api_version = None
        self.kind = None


def parse_oa_file(path):
    text = open(path, encoding="utf-8").read()
    dm = re.match(r'// Generated from definition ([\w.\-]+)', text)
    sm = re.search(r'^pub struct (\w+) \{\n(.*?)^\}', text, re.S | re.M)
    if not dm or not sm:
        return None
    st = OaStruct(dm.group(1), sm.group(1))
    for fm in re.finditer(r'^    pub (\w+): (.*),$', sm.group(2), re.M):
        st.field_types[fm.group(1)] = fm.group(2)
    for km in re.finditer(r'"([^"]+)" => Field::Key_(\w+),', text):
        st.keys[km.group(1)] = km.group(2)
    for key, rust in st.keys.items():
        if rust in st.field_types and not st.field_types[rust].startswith("Option<"):
            st.required.add(key)
    rm = re.search(r'impl crate::Resource for \w+ \{\s*const API_VERSION: &\'static str = "([^"]*)";'
                   r'.*?const KIND: &\'static str = "([^"]*)";', text, re.S)
    if rm:
        st.api_version, st.kind = rm.group(1), rm.group(2)
    return st


def version_dirs(src):
    """k8s-openapi's per-Kubernetes-version trees, oldest first (v1_33 ... v1_37)."""
    dirs = [d for d in os.listdir(src) if re.fullmatch(r"v1_\d+", d)]
    return [os.path.join(src, d) for d in sorted(dirs, key=lambda d: int(d[3:]))]


def load_openapi(src):
    """Union over all Kubernetes versions k8s-openapi ships (v1_33 ... v1_37).

    A field is known if any version has it; it counts as required if any version has it
    non-Option (later versions sometimes relax `value: i32` to `Option<i32>`)."""
    structs = {}  # (module tuple, lowercased struct name) -> OaStruct
    for root in version_dirs(src):
        for tree in MODULE_TREES:
            for path in sorted(glob.glob(os.path.join(root, tree, "**", "*.rs"), recursive=True)):
                if os.path.basename(path) == "mod.rs":
                    continue
                st = parse_oa_file(path)
                if not st:
                    continue
                module = tuple(os.path.relpath(os.path.dirname(path), root).split(os.sep))
                old = structs.get((module, st.name.lower()))
                if old:
                    merged_types = dict(old.field_types)
                    merged_types.update(st.field_types)
                    merged_keys = dict(old.keys)
                    merged_keys.update(st.keys)
                    st.field_types, st.keys = merged_types, merged_keys
                    st.required |= old.required
                    st.api_version = st.api_version or old.api_version
                    st.kind = st.kind or old.kind
                structs[(module, st.name.lower())] = st
    return structs


# ---------------------------------------------------------------------------------------------
# join and emit


def snake_to_camel(name):
    head, *rest = name.replace("r#", "").split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def build(pb, oa):
    full_names = {}
    for key in pb:
        module, name = key
        st = oa.get((module, name.lower()))
        simple = st.definition.rsplit(".", 1)[1] if st else name
        full_names[key] = "k8s.io." + ".".join(module) + "." + simple

    by_full = {v: k for k, v in full_names.items()}
    roots = []
    kinds = []
    for key in pb:
        st = oa.get((key[0], key[1].lower()))
        if st and st.kind:
            roots.append(key)
            kinds.append((st.api_version, st.kind, full_names[key]))
    for name in EXTRA_ROOTS:
        roots.append(by_full[name])

    reachable = set()
    queue = deque(roots)
    while queue:
        key = queue.popleft()
        if key in reachable:
            continue
        if key not in pb:
            sys.exit(f"message {key} referenced but not found in k8s-pb")
        reachable.add(key)
        if full_names[key] in SPECIALS:
            continue
        for f in pb[key]:
            if f.target:
                queue.append(f.target)

    # Go structs embedded with `json:",inline"` are a nested message in protobuf but flattened
    # into the parent in JSON: a message field that matches no JSON key of its parent while all
    # of the nested message's fields do is such an embedding (Volume.volumeSource,
    # Probe.handler, ConfigMapKeySelector.localObjectReference, ...).  The embedded message
    # takes its JSON names from the parent's k8s-openapi struct.
    def own_oa(key):
        return oa.get((key[0], key[1].lower()))

    hosts = {}

    def effective_oa(key):
        return own_oa(key) or hosts.get(key)

    def embeddable(target, st):
        for f in pb[target]:
            if any(norm(k) == norm(f.name) for k in st.keys):
                continue
            if f.kind == "message" and embeddable(f.target, st):
                continue
            return False
        return True

    inline = set()  # (message key, tag)
    changed = True
    while changed:
        changed = False
        for key in reachable:
            st = effective_oa(key)
            if not st or full_names[key] in SPECIALS:
                continue
            for f in pb[key]:
                if (key, f.tag) in inline or f.kind != "message" or f.repeated:
                    continue
                if any(norm(k) == norm(f.name) for k in st.keys):
                    continue
                if embeddable(f.target, st):
                    inline.add((key, f.tag))
                    if not own_oa(f.target):
                        hosts.setdefault(f.target, st)
                    changed = True

    problems = []
    pointer_seen = set()
    messages = []
    optional_scalars = []
    for key in sorted(reachable, key=lambda k: full_names[k]):
        full = full_names[key]
        special = SPECIALS.get(full, "Plain")
        st = effective_oa(key)
        pointers = set(GO_POINTER_SCALARS.get(full, []))
        fields = []
        for f in sorted(pb[key], key=lambda f: f.tag):
            json_name, required = None, True
            if (key, f.tag) in inline:
                nested = full_names[f.target]
                fields.append((f.tag, "", "Inline", False, nested, True))
                continue
            if st and special == "Plain":
                matches = [k for k in st.keys if norm(k) == norm(f.name)]
                if len(matches) != 1:
                    problems.append(f"{full}.{f.name}: {len(matches)} JSON keys match")
                    continue
                json_name = matches[0]
                required = json_name in st.required
            else:
                json_name = snake_to_camel(f.name)
                if special == "Plain" and full not in EXTRA_ROOTS:
                    print(f"warning: {full} has no k8s-openapi struct; "
                          f"{f.name} -> {json_name}", file=sys.stderr)
            if f.kind == "double":
                # Only apiextensions' JSONSchemaProps has doubles; the decoder has no rule for them.
                problems.append(f"{full}.{f.name}: double fields are not supported")
                continue
            if f.kind == "map":
                kind = {"string": "MapString", "bytes": "MapBytes",
                        "message": "MapMessage"}[f.map_value]
            else:
                kind = {"string": "String", "int32": "Int32", "int64": "Int64", "bool": "Bool",
                        "bytes": "Bytes", "message": "Message"}[f.kind]
            scalar = f.kind in ("string", "int32", "int64", "bool", "bytes")
            keep_zero = required or json_name in pointers or not scalar or f.repeated
            if json_name in pointers:
                pointer_seen.add((full, json_name))
            if scalar and not f.repeated and not required and special == "Plain":
                optional_scalars.append((full, json_name, f.kind, json_name in pointers))
            nested = full_names[f.target] if f.target else None
            fields.append((f.tag, json_name, kind, f.repeated, nested, keep_zero))
        messages.append((full, special, fields))

    for full, names in GO_POINTER_SCALARS.items():
        for n in names:
            if full in by_full and by_full[full] in reachable and (full, n) not in pointer_seen:
                problems.append(f"GO_POINTER_SCALARS: {full}.{n} is not a field")
    if problems:
        sys.exit("schema generation failed:\n  " + "\n  ".join(problems))
    kinds.sort()
    return messages, kinds, optional_scalars


def rust_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def emit(messages, kinds):
    out = []
    w = out.append
    w("//! Generated table of Kubernetes protobuf messages: tags, JSON names, kinds (see protobuf.rs).")
    w("//")
    w("// @generated by scripts/gen-protobuf-schema.py from k8s-pb 0.9.0 and k8s-openapi 0.29.0")
    w("// (JSON names: union of its v1_33 ... v1_37 trees).")
    w("// Do not edit by hand: rerun `python3 scripts/gen-protobuf-schema.py`.")
    w("")
    w("use super::{FieldKind as K, FieldSchema, MessageSchema, Special as S};")
    w("")
    w("const fn f(tag: u32, json: &'static str, kind: K, repeated: bool, message: &'static str, keep_zero: bool) -> FieldSchema {")
    w("    FieldSchema { tag, json, kind, repeated, message, keep_zero }")
    w("}")
    w("")
    w(f"/// Every covered message, sorted by full protobuf name ({len(messages)} messages).")
    w("pub(super) static MESSAGES: &[MessageSchema] = &[")
    for full, special, fields in messages:
        if not fields:
            w(f"    MessageSchema {{ name: {rust_str(full)}, special: S::{special}, fields: &[] }},")
            continue
        w(f"    MessageSchema {{ name: {rust_str(full)}, special: S::{special}, fields: &[")
        for tag, json_name, kind, repeated, nested, keep_zero in fields:
            nested_s = rust_str(nested) if nested else '""'
            w(f"        f({tag}, {rust_str(json_name)}, K::{kind}, {str(repeated).lower()}, "
              f"{nested_s}, {str(keep_zero).lower()}),")
        w("    ] },")
    w("];")
    w("")
    w(f"/// (apiVersion, kind) -> root message, sorted ({len(kinds)} kinds).")
    w("pub(super) static KINDS: &[(&str, &str, &str)] = &[")
    for api_version, kind, full in kinds:
        w(f"    ({rust_str(api_version)}, {rust_str(kind)}, {rust_str(full)}),")
    w("];")
    w("")
    w("/// Kinds accepted under any apiVersion (metav1.AddToGroupVersion registers them everywhere).")
    w("pub(super) static ANY_VERSION_KINDS: &[(&str, &str)] = &[")
    for kind in ANY_VERSION_KINDS:
        w(f"    ({rust_str(kind)}, {rust_str('k8s.io.apimachinery.pkg.apis.meta.v1.' + kind)}),")
    w("];")
    return "\n".join(out) + "\n"


def main():
    pb = load_pb(find_crate_src("K8S_PB_SRC", "k8s-pb-0.9.0"))
    oa = load_openapi(find_crate_src("K8S_OPENAPI_SRC", "k8s-openapi-0.29.0"))
    messages, kinds, optional_scalars = build(pb, oa)
    if "--list-optional-scalars" in sys.argv:
        for full, name, kind, pointer in optional_scalars:
            print(f"{'POINTER ' if pointer else 'omitzero'} {kind:6} {full}.{name}")
        return
    text = emit(messages, kinds)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.path.join(repo, "src", "api", "protobuf_schema.rs")
    if "--check" in sys.argv:
        current = open(target, encoding="utf-8").read() if os.path.exists(target) else ""
        if current != text:
            sys.exit(f"{target} is stale: rerun scripts/gen-protobuf-schema.py")
        return
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {target}: {len(messages)} messages, {len(kinds)} kinds", file=sys.stderr)


if __name__ == "__main__":
    main()
