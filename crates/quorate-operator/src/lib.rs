//! `quorate operator`: etcd-druid's Etcd controller on Kubernetes. It renders every component
//! of an `Etcd` with the pure builders of `quorate-core`, applies them in druid's order, keeps
//! the status fresh from the member leases and the StatefulSet, and serves the validating
//! webhooks (the `Etcd` itself, and protection of the components it manages).

pub mod webhook;
