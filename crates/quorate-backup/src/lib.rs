//! Backups of etcd clusters in the object-store layout of etcd-backup-restore v2: full snapshots
//! of the database and delta snapshots of the watch events between them, written so that a
//! bucket written by etcd-backup-restore restores with quorate and the other way round.

pub mod compress;
pub mod credentials;
pub mod delta;
pub mod encryption;
pub mod layout;
pub mod restore;
pub mod snapshotter;
pub mod store;
pub mod store_restore;
pub mod trailer;
