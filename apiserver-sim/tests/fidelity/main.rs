//! What a client of kube-apiserver relies on beyond the verbs, driven through
//! kube-rs and `kubectl`: aggregated discovery, metadata-only requests, the
//! built-in resources of a fresh cluster, the shapes of answers, protobuf
//! bodies and CRD schemas.

mod built_ins;
mod crd_schema;
mod defaulting;
mod discovery;
mod events;
mod metadata;
mod newcomer;
mod openapi;
mod protobuf;
mod rbac;
mod shapes;
mod support;
