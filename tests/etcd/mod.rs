//! etcd's own tests: what only etcd has (its key layout, `etcdctl elect` on the same prefix,
//! gRPC calls whose answers are lost, a member list), beyond the store-independent list.

mod access;
mod ambiguous;
mod election;
mod holder_records;
mod holders;
