//! `quorate restore` and the bucket of a local cluster: opening the store an `Etcd` names as
//! its agents would (credentials, encryption keys, the `Local` root), choosing the etcd
//! version and tools the restored data is for, making room in the target directory, and, for
//! `--up`, creating the cluster around the restored data and starting it. The restore itself
//! is `quorate-backup`'s pipeline ([`quorate_backup::store_restore::restore_from_store`]).

use std::path::{Path, PathBuf};

use quorate_api::Etcd;
use quorate_backup::restore::progress::ProgressSink;
use quorate_backup::restore::{
    EtcdTools, MemberIdentity, ReplayMethod, RestoreReport, RestoreTarget,
};
use quorate_backup::store::{SnapStore, StoreOptions};
use quorate_backup::store_restore::{
    StoreRestoreError, StoreRestoreOptions, open_store, restore_from_store,
};
use thiserror::Error;

use crate::LocalError;
use crate::commands::{self, LocalContext};

/// Why a local restore or bucket command could not run; nothing was changed unless it says so.
#[derive(Debug, Error)]
pub enum RestoreCmdError {
    /// The local cluster, its manifest or its files.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// The `Etcd` names no bucket.
    #[error("the Etcd {name} has no spec.backup.store; there is no bucket to read")]
    NoStore {
        /// The cluster.
        name: String,
    },
    /// The store, or the restore from it.
    #[error(transparent)]
    Store(#[from] StoreRestoreError),
    /// No `etcdctl` beside the etcd binary or on `PATH`.
    #[error("etcdctl is needed to restore a snapshot: apt-get install etcd-client")]
    NoEtcdctl,
    /// Neither `--data-dir` nor `--up`.
    #[error("say where to restore: --data-dir DIR, or --up to create the local cluster")]
    NoDestination,
    /// `--up` for a cluster that exists.
    #[error(
        "a local cluster named {name} exists already; `quorate down {name} --purge` it or rename the \
         manifest's metadata.name"
    )]
    ClusterExists {
        /// The cluster.
        name: String,
    },
    /// The target directory cannot be read.
    #[error("cannot read {dir}: {source}")]
    ReadDir {
        /// The directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// The target directory belongs to a running etcd.
    #[error(
        "{dir} is the data directory of a running etcd (it holds the database lock); stop that \
         member first, or restore into another directory. Nothing was changed"
    )]
    InUse {
        /// The directory.
        dir: String,
    },
    /// The target directory holds something and `--force` was not given.
    #[error(
        "{dir} is not empty ({entries} entries); a restore replaces what it holds. Pass --force \
         to move its content aside (to {dir}.invalid-<time>) and restore, or choose an empty \
         directory. Nothing was changed"
    )]
    NotEmpty {
        /// The directory.
        dir: String,
        /// How many entries it holds.
        entries: usize,
    },
    /// Moving the old content aside failed.
    #[error("moving {dir} aside: {source}")]
    MoveAside {
        /// The directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
    /// The restored directory could not be stamped as the cluster's.
    #[error(transparent)]
    Guard(#[from] quorate_etcd::data_dir::GuardError),
}

/// What `quorate restore` was asked to do (the command line, parsed).
#[derive(Clone, Debug)]
pub struct RestoreRequest {
    /// The `Etcd` manifest whose bucket is restored from.
    pub file: PathBuf,
    /// Restore into this directory...
    pub data_dir: Option<PathBuf>,
    /// ...or create the local cluster from the manifest around the restored data and start it.
    pub up: bool,
    /// How far to restore.
    pub target: RestoreTarget,
    /// The directory holding the store Secret's keys as files (instead of the cluster's).
    pub secret_dir: Option<PathBuf>,
    /// The directory a `Local` store's container lives in (instead of the cluster's).
    pub local_root: Option<PathBuf>,
    /// The directory holding the backup encryption keys.
    pub encryption_key_dir: Option<PathBuf>,
    /// With encryption keys: accept clear objects written before this instant (the migration
    /// window of a bucket that turned encryption on); any other clear object is refused.
    pub accept_plaintext_before: Option<jiff::Timestamp>,
    /// Move a non-empty target directory's content aside instead of refusing.
    pub force: bool,
    /// Keep the restored revision even when the bucket holds newer ones.
    pub keep_revision: bool,
    /// Do not compare the restored key space with the hash recorded at backup time.
    pub skip_verification: bool,
    /// How the deltas are replayed.
    pub replay_method: ReplayMethod,
}

/// The store of `etcd`'s backups as a local cluster at `ctx` would open it, with overrides.
/// The owner claim is not checked: an explicit restore or listing is the request to read
/// whoever's bucket it is.
pub fn open_cluster_store(
    ctx: &LocalContext,
    etcd: &Etcd,
    secret_dir: Option<PathBuf>,
    local_root: Option<PathBuf>,
) -> Result<SnapStore, RestoreCmdError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let store = etcd
        .spec
        .backup
        .store
        .as_ref()
        .ok_or_else(|| RestoreCmdError::NoStore { name: name.clone() })?;
    let dir = ctx.cluster(&name);
    let secret_dir = secret_dir.or_else(|| {
        store
            .secret_ref
            .as_ref()
            .and_then(|s| s.name.as_ref())
            .map(|s| dir.root().join("secrets").join(s))
    });
    // As the agents do: the keys of the Secret the annotation names, `secrets/<name>/`.
    let encryption_keys = quorate_api::annotations::backup_encryption_secret(etcd)
        .map(|secret| dir.root().join("secrets").join(secret));
    let options = StoreOptions {
        local_root: match local_root {
            Some(root) => root,
            None => crate::bucket::local_backup_root(etcd, &dir)?,
        },
        secret_dir,
        encryption_keys,
    };
    Ok(open_store(&etcd.spec.backup, &options)?)
}

/// The etcd binaries a restore for `etcd` uses: the version the manifest's cluster will run,
/// and the `etcdctl` beside it or on `PATH`.
fn restore_tools(ctx: &LocalContext, etcd: &Etcd) -> Result<EtcdTools, RestoreCmdError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let version_err = |reason: String| LocalError::EtcdVersion {
        name: name.clone(),
        reason,
    };
    // The restored data is for the version the manifest's cluster will run.
    let requested = quorate_api::etcd_version::requested(etcd).map_err(version_err)?;
    let version = requested.unwrap_or(quorate_api::EtcdVersion::DEFAULT);
    let etcd_bin =
        ctx.etcd_binaries()
            .etcd(version)
            .map_err(|missing| LocalError::EtcdMissing {
                path: missing.to_string(),
            })?;
    let etcdctl = etcd_bin
        .parent()
        .map(|d| d.join("etcdctl"))
        .filter(|p| p.is_file())
        .or_else(|| quorate_etcd::binaries::find_on_path("etcdctl"))
        .ok_or(RestoreCmdError::NoEtcdctl)?;
    Ok(EtcdTools::new(&etcd_bin, etcdctl))
}

/// Refuses to restore into a directory a running etcd uses, always, and into one that holds
/// anything unless `force`; with `force` the old content is moved aside (never deleted) and
/// where it went is returned.
fn make_room(dir: &Path, force: bool) -> Result<Option<PathBuf>, RestoreCmdError> {
    let shown = dir.display().to_string();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries.count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(RestoreCmdError::ReadDir { dir: shown, source }),
    };
    if entries == 0 {
        return Ok(None);
    }
    if quorate_etcd::data_dir::in_use(dir) {
        return Err(RestoreCmdError::InUse { dir: shown });
    }
    if !force {
        return Err(RestoreCmdError::NotEmpty {
            dir: shown,
            entries,
        });
    }
    quorate_etcd::data_dir::move_aside(dir, jiff::Timestamp::now().as_second())
        .map(Some)
        .map_err(|source| RestoreCmdError::MoveAside { dir: shown, source })
}

/// What [`restore`] did.
#[derive(Debug)]
pub struct Restored {
    /// The restore's report.
    pub report: RestoreReport,
    /// With `--up`: the new local cluster around the restored data, not started yet
    /// ([`start_restored`]).
    pub new_cluster: Option<NewCluster>,
}

/// A local cluster created around restored data.
#[derive(Clone, Debug)]
pub struct NewCluster {
    /// The cluster.
    pub name: String,
    /// Its first member, whose data directory was restored.
    pub member: String,
    /// That data directory.
    pub data_dir: PathBuf,
}

/// Runs `quorate restore`: restores the data directory `request` names (or, with `up`, that of
/// the first member of the local cluster it creates from the manifest) from the manifest's
/// bucket. `say` is told what is done on the way (a line each); `progress` how far the restore
/// is. A cluster created for the restore is removed again when the restore fails.
pub async fn restore(
    ctx: &LocalContext,
    request: &RestoreRequest,
    progress: Option<ProgressSink>,
    say: &mut dyn FnMut(String),
) -> Result<Restored, RestoreCmdError> {
    let etcd = commands::read_manifest(&request.file)?;
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let mut store = open_cluster_store(
        ctx,
        &etcd,
        request.secret_dir.clone(),
        request.local_root.clone(),
    )?;
    if let Some(dir) = request.encryption_key_dir.clone() {
        store = store.with_encryption_keys(dir);
    }
    if let Some(before) = request.accept_plaintext_before {
        store = store.accept_plaintext_before(before);
    }
    let member = quorate_api::names::member_name(&etcd, 0);
    let tools = restore_tools(ctx, &etcd)?;
    let (data_dir, identity) = match (&request.data_dir, request.up) {
        (Some(dir), false) => {
            if let Some(aside) = make_room(dir, request.force)? {
                say(format!(
                    "moved the old content of {} to {}",
                    dir.display(),
                    aside.display()
                ));
            }
            let peer = format!("http://127.0.0.1:{}", etcd.spec.etcd.server_port());
            (
                dir.clone(),
                identity(&member, &peer, &format!("{name}-restored")),
            )
        }
        (None, true) => {
            if ctx.cluster(&name).exists() {
                return Err(RestoreCmdError::ClusterExists { name });
            }
            commands::prepare(ctx, etcd.clone())?;
            let local = commands::local_member(ctx, &name, &member)?;
            (
                local.data_dir,
                identity(&member, &local.peer_url, &local.cluster_token),
            )
        }
        _ => return Err(RestoreCmdError::NoDestination),
    };
    say(format!(
        "restoring {} from {} ...",
        data_dir.display(),
        store.describe()
    ));
    let restored = restore_from_store(
        &store,
        request.target,
        identity,
        &data_dir,
        tools,
        StoreRestoreOptions {
            progress,
            keep_revision: request.keep_revision,
            replay_method: request.replay_method,
            skip_verification: request.skip_verification,
            limits: quorate_backup::store_restore::SizeLimits::for_cluster(
                etcd.quota_bytes(),
                etcd.spec.backup.delta_snapshot_memory_limit_bytes(),
            ),
        },
    )
    .await;
    let report = match restored {
        Ok(report) => report,
        Err(e) => {
            if request.up {
                // The cluster was created for this restore only; leave nothing half-made behind.
                let _ = std::fs::remove_dir_all(ctx.cluster(&name).root());
            }
            return Err(e.into());
        }
    };
    Ok(Restored {
        report,
        new_cluster: request.up.then_some(NewCluster {
            name,
            member,
            data_dir,
        }),
    })
}

/// Starts a local cluster created around restored data and waits until it is ready: the data
/// directory is stamped with the cluster's guard first, as its agent would.
pub async fn start_restored(ctx: &LocalContext, new: &NewCluster) -> Result<(), RestoreCmdError> {
    let local = commands::local_member(ctx, &new.name, &new.member)?;
    quorate_etcd::data_dir::check_guard(&new.data_dir, &local.cluster_token)?;
    let supervisor = commands::spawn_supervisor(ctx, &new.name)?;
    commands::wait_until_ready(
        ctx,
        &new.name,
        1,
        supervisor,
        std::time::Duration::from_secs(120),
    )
    .await?;
    Ok(())
}

fn identity(member: &str, peer: &str, token: &str) -> MemberIdentity {
    MemberIdentity {
        name: member.to_string(),
        peer_urls: vec![peer.to_string()],
        initial_cluster: format!("{member}={peer}"),
        cluster_token: token.to_string(),
    }
}
