//! etcd v3 backend of [`super::Storage`] (etcd-client over gRPC).
