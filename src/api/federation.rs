//! Names shared by the federation side and the agents: exec namespaces, labels, annotations, well-known objects and API paths.

/// API group/version of `Cluster`.
pub const CLUSTER_API_VERSION: &str = "cluster.fedctl.io/v1alpha1";
/// API group/version of `Work`.
pub const WORK_API_VERSION: &str = "work.fedctl.io/v1alpha1";
/// Prefix of a member's exec namespace: `fed-exec-<cluster>`.
pub const EXEC_NAMESPACE_PREFIX: &str = "fed-exec-";
/// Label on an exec namespace naming its cluster: `fedctl.io/cluster=<cluster>`.
pub const CLUSTER_LABEL: &str = "fedctl.io/cluster";
/// Name of the heartbeat Lease an agent renews in its exec namespace.
pub const HEARTBEAT_LEASE: &str = "cluster-heartbeat";
/// Name of the Secret holding the member credential an agent syncs into its exec namespace.
pub const MEMBER_CREDENTIAL_SECRET: &str = "member-credential";
/// Finalizer the cluster-controller keeps on every Cluster so that deleting one (unjoin)
/// first removes its Works and exec namespace.
pub const CLUSTER_FINALIZER: &str = "fedctl.io/cluster-controller";
/// Finalizer on every Work: the member's agent removes it once the Work's member objects are
/// deleted (or orphaned). The propagation controller creates Works with it already set, as
/// Karmada's binding controller creates them with `karmada.io/execution-controller`, so the
/// agent does not write each new Work once more to add it; a Work created without it (by a
/// client) gets it from the agent before anything is applied.
pub const WORK_FINALIZER: &str = "fedctl.io/exec-cleanup";
/// Annotation on a Cluster being unjoined, and on each of its Works being deleted, telling
/// the agent what to do with the member workloads those Works created:
/// [`DELETION_ORPHAN`] (default: leave them running) or [`DELETION_DELETE`] (delete them,
/// then release the Work's finalizer).
pub const WORKLOAD_DELETION_ANNOTATION: &str = "fedctl.io/workload-deletion";
/// [`WORKLOAD_DELETION_ANNOTATION`] value: keep the member workloads.
pub const DELETION_ORPHAN: &str = "Orphan";
/// [`WORKLOAD_DELETION_ANNOTATION`] value: delete the member workloads.
pub const DELETION_DELETE: &str = "Delete";
/// Namespace and name of the discovery ConfigMap readable without credentials (mirrors
/// kubeadm's `kube-public/cluster-info`); key `kubeconfig` holds a kubeconfig with the
/// federation's URL and CA and no credentials.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
/// See [`CLUSTER_INFO_NAMESPACE`].
pub const CLUSTER_INFO_NAME: &str = "cluster-info";
/// API path of the discovery ConfigMap.
pub const CLUSTER_INFO_PATH: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
/// Longest cluster name: `fed-exec-<name>` must stay a DNS-1123 label (≤ 63 characters).
pub const MAX_CLUSTER_NAME_LEN: usize = 63 - EXEC_NAMESPACE_PREFIX.len();

/// The exec namespace of `cluster`: `fed-exec-<cluster>`.
pub fn exec_namespace(cluster: &str) -> String {
    format!("{EXEC_NAMESPACE_PREFIX}{cluster}")
}

/// The cluster whose exec namespace `ns` is, if it is one.
pub fn cluster_of_exec_namespace(ns: &str) -> Option<&str> {
    ns.strip_prefix(EXEC_NAMESPACE_PREFIX).filter(|c| !c.is_empty())
}

/// Whether `name` can name a member cluster: a DNS-1123 label short enough for its exec
/// namespace to be one too.
pub fn valid_cluster_name(name: &str) -> bool {
    name.len() <= MAX_CLUSTER_NAME_LEN && crate::api::object::is_dns1123_label(name)
}

/// API path of the Cluster `name`.
pub fn cluster_path(name: &str) -> String {
    format!("/apis/{CLUSTER_API_VERSION}/clusters/{name}")
}

/// API path of the Works collection in `cluster`'s exec namespace.
pub fn works_path(cluster: &str) -> String {
    format!("/apis/{WORK_API_VERSION}/namespaces/{}/works", exec_namespace(cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(exec_namespace("east"), "fed-exec-east");
        assert_eq!(cluster_of_exec_namespace("fed-exec-east"), Some("east"));
        assert_eq!(cluster_of_exec_namespace("fed-exec-"), None);
        assert_eq!(cluster_of_exec_namespace("default"), None);
        assert!(valid_cluster_name("east-1"));
        assert!(!valid_cluster_name("East"));
        assert!(!valid_cluster_name(&"a".repeat(MAX_CLUSTER_NAME_LEN + 1)));
        assert!(valid_cluster_name(&"a".repeat(MAX_CLUSTER_NAME_LEN)));
        assert_eq!(cluster_path("east"), "/apis/cluster.fedctl.io/v1alpha1/clusters/east");
        assert_eq!(works_path("east"), "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-east/works");
    }
}
