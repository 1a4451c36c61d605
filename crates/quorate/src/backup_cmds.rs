//! `quorate backups list` and `quorate restore`.

use crate::cli::BackupsCommand;
use quorate_api::tasks::{EtcdCopyBackupsTask, WaitForFinalSnapshotSpec};
use quorate_api::{BackupSpec, Etcd, StoreSpec};
use quorate_backup::restore::{EtcdTools, MemberIdentity, RestoreTarget};
use quorate_backup::store::{SnapStore, StoreOptions};
use quorate_backup::store_restore::{StoreRestoreOptions, open_store, restore_from_store};
use quorate_local::commands::{self, LocalContext};
use std::path::{Path, PathBuf};

type Error = Box<dyn std::error::Error>;

/// The store of `etcd`'s backups as a local cluster at `ctx` would open it, with overrides.
/// The owner claim is not checked: an explicit restore or listing is the request to read
/// whoever's bucket it is.
fn open_cluster_store(
    ctx: &LocalContext,
    etcd: &Etcd,
    secret_dir: Option<PathBuf>,
    local_root: Option<PathBuf>,
) -> Result<SnapStore, Error> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let store = etcd.spec.backup.store.as_ref().ok_or_else(|| {
        format!("the Etcd {name} has no spec.backup.store; there is no bucket to read")
    })?;
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
            None => quorate_local::bucket::local_backup_root(etcd, &dir)?,
        },
        secret_dir,
        encryption_keys,
    };
    Ok(open_store(&etcd.spec.backup, &options)?)
}

/// An `EtcdCopyBackupsTask` from a manifest file or JSON text, validated as the webhook does.
fn read_copy_task(file: Option<&Path>, json: Option<&str>) -> Result<EtcdCopyBackupsTask, Error> {
    let (text, origin) = match (file, json) {
        (Some(file), _) => (
            std::fs::read_to_string(file)
                .map_err(|e| format!("reading {}: {e}", file.display()))?,
            file.display().to_string(),
        ),
        (None, Some(json)) => (json.to_string(), "--task-json".to_string()),
        (None, None) => return Err("give --task FILE".into()),
    };
    let not_a_task = |e: &dyn std::fmt::Display| {
        format!("{origin} is not an EtcdCopyBackupsTask (druid.gardener.cloud/v1alpha1): {e}")
    };
    let value: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| not_a_task(&e))?;
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    if kind != "EtcdCopyBackupsTask" {
        return Err(not_a_task(&format!("its kind is {kind:?}")).into());
    }
    let task: EtcdCopyBackupsTask = serde_json::from_value(value).map_err(|e| not_a_task(&e))?;
    quorate_api::validate::validate_copy_task(&task)
        .map_err(|e| format!("{origin} is invalid:\n{e}"))?;
    Ok(task)
}

/// One store of a copy task, with its credentials directory or `Local` root from the flags
/// (there is no cluster to take them from).
fn open_task_store(
    store: &StoreSpec,
    side: &str,
    secret_dir: Option<PathBuf>,
    local_root: Option<PathBuf>,
) -> Result<SnapStore, Error> {
    let (secret_flag, root_flag) = match side {
        "source" => ("--secret-dir", "--local-root"),
        _ => ("--to-secret-dir", "--to-local-root"),
    };
    let local = store.provider_kind() == Some(quorate_api::StorageProvider::Local);
    if local && local_root.is_none() {
        return Err(format!(
            "the {side} store is Local: give the directory its container lives in with {root_flag}"
        )
        .into());
    }
    if store.secret_ref.is_some() && !local && secret_dir.is_none() {
        return Err(format!(
            "the {side} store names a Secret: give the directory holding its keys as files with {secret_flag}"
        )
        .into());
    }
    let backup = BackupSpec {
        store: Some(store.clone()),
        ..BackupSpec::default()
    };
    // A copy task moves objects as they are: encrypted ones stay encrypted with their key.
    let options = StoreOptions {
        local_root: local_root.unwrap_or_default(),
        secret_dir,
        encryption_keys: None,
    };
    Ok(open_store(&backup, &options)?)
}

/// `waitForFinalSnapshot` as a wait: none when disabled, without limit when its timeout is
/// unset or 0.
fn final_snapshot_wait(
    wait: Option<&WaitForFinalSnapshotSpec>,
) -> Result<Option<std::time::Duration>, Error> {
    let Some(wait) = wait.filter(|w| w.enabled) else {
        return Ok(None);
    };
    let limit = match wait.timeout.as_deref() {
        None => std::time::Duration::ZERO,
        Some(text) => quorate_api::parse_go_duration(text)?,
    };
    Ok(Some(if limit.is_zero() {
        std::time::Duration::MAX
    } else {
        limit
    }))
}

/// The `Etcd` a command names: a local cluster, or a manifest.
fn named_etcd(
    ctx: &LocalContext,
    name: Option<String>,
    file: Option<PathBuf>,
) -> Result<Etcd, Error> {
    match (name, file) {
        (Some(name), _) => Ok(commands::get(ctx, Some(&name))?.remove(0)),
        (None, Some(file)) => Ok(commands::read_manifest(&file)?),
        (None, None) => Err("name a local cluster or give its manifest with -f".into()),
    }
}

/// Runs `quorate backups ...`.
pub async fn backups(ctx: &LocalContext, command: BackupsCommand) -> Result<(), Error> {
    let (name, file, secret_dir, local_root) = match command {
        BackupsCommand::List {
            name,
            file,
            secret_dir,
            local_root,
        } => (name, file, secret_dir, local_root),
        BackupsCommand::Copy {
            name,
            file,
            to,
            max_backups,
            max_backup_age,
            wait_for_final_snapshot,
            task,
            task_json,
            secret_dir,
            local_root,
            to_secret_dir,
            to_local_root,
        } => {
            if task.is_some() || task_json.is_some() {
                let task = read_copy_task(task.as_deref(), task_json.as_deref())?;
                let spec = &task.spec;
                let source = open_task_store(&spec.source_store, "source", secret_dir, local_root)?;
                let target =
                    open_task_store(&spec.target_store, "target", to_secret_dir, to_local_root)?;
                let limits = quorate_core::backup_copy::CopyLimits {
                    max_backups: spec.max_backups,
                    max_backup_age_days: spec.max_backup_age,
                };
                let wait = final_snapshot_wait(spec.wait_for_final_snapshot.as_ref())?;
                return crate::backup_copy_cmd::copy(&source, &target, limits, wait).await;
            }
            let to = to.ok_or("give the target with --to (an Etcd manifest) or use --task")?;
            let source =
                open_cluster_store(ctx, &named_etcd(ctx, name, file)?, secret_dir, local_root)?;
            let target_etcd = commands::read_manifest(&to)?;
            let target = open_cluster_store(ctx, &target_etcd, to_secret_dir, to_local_root)?;
            let limits = quorate_core::backup_copy::CopyLimits {
                max_backups,
                max_backup_age_days: max_backup_age,
            };
            return crate::backup_copy_cmd::copy(&source, &target, limits, wait_for_final_snapshot)
                .await;
        }
    };
    let etcd = named_etcd(ctx, name, file)?;
    let store = open_cluster_store(ctx, &etcd, secret_dir, local_root)?;
    let listed = store.list().await?;
    println!("{}", store.describe());
    let mut rows = vec![
        ["KIND", "START", "LAST", "SIZE", "CREATED", "OBJECT"]
            .map(String::from)
            .to_vec(),
    ];
    for s in &listed {
        let created = jiff::Timestamp::from_second(s.name.created_unix)
            .map(|t| t.to_string())
            .unwrap_or_default();
        rows.push(vec![
            format!(
                "{}{}",
                s.name.kind.as_str(),
                if s.name.is_final { " (final)" } else { "" }
            ),
            s.name.start_revision.to_string(),
            s.name.last_revision.to_string(),
            quorate_local::table::human_size(s.size),
            created,
            s.path.clone(),
        ]);
    }
    print!("{}", quorate_local::table::format_columns(&rows));
    if listed.is_empty() {
        println!("(no snapshots)");
    }
    Ok(())
}

/// Arguments of `quorate restore`.
pub struct RestoreArgs {
    pub file: PathBuf,
    pub data_dir: Option<PathBuf>,
    pub up: bool,
    pub target: RestoreTarget,
    pub secret_dir: Option<PathBuf>,
    pub local_root: Option<PathBuf>,
    pub encryption_key_dir: Option<PathBuf>,
    pub accept_plaintext_before: Option<jiff::Timestamp>,
    pub force: bool,
    pub keep_revision: bool,
    pub skip_verification: bool,
    pub replay_method: quorate_backup::restore::ReplayMethod,
}

/// Refuses to restore into a directory a running etcd uses, always, and into one that holds
/// anything unless `force`; with `force` the old content is moved aside (never deleted).
fn make_room(dir: &Path, force: bool) -> Result<(), Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries.count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display()).into()),
    };
    if entries == 0 {
        return Ok(());
    }
    if quorate_etcd::data_dir::in_use(dir) {
        return Err(format!(
            "{} is the data directory of a running etcd (it holds the database lock); stop that \
             member first, or restore into another directory. Nothing was changed",
            dir.display()
        )
        .into());
    }
    if !force {
        return Err(format!(
            "{} is not empty ({entries} entries); a restore replaces what it holds. Pass --force \
             to move its content aside (to {}.invalid-<time>) and restore, or choose an empty \
             directory. Nothing was changed",
            dir.display(),
            dir.display()
        )
        .into());
    }
    let aside = quorate_etcd::data_dir::move_aside(dir, jiff::Timestamp::now().as_second())
        .map_err(|e| format!("moving {} aside: {e}", dir.display()))?;
    println!(
        "moved the old content of {} to {}",
        dir.display(),
        aside.display()
    );
    Ok(())
}

/// Runs `quorate restore`.
pub async fn restore(ctx: &LocalContext, args: RestoreArgs) -> Result<(), Error> {
    let etcd = commands::read_manifest(&args.file)?;
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let mut store =
        open_cluster_store(ctx, &etcd, args.secret_dir.clone(), args.local_root.clone())?;
    if let Some(dir) = args.encryption_key_dir.clone() {
        store = store.with_encryption_keys(dir);
    }
    if let Some(before) = args.accept_plaintext_before {
        store = store.accept_plaintext_before(before);
    }
    let member = quorate_api::names::member_name(&etcd, 0);
    // The restored data is for the version the manifest's cluster will run.
    let version =
        quorate_core::etcd_version::decide(quorate_api::etcd_version::requested(&etcd)?, None)?;
    let etcd_bin = ctx.etcd_binaries().etcd(version)?;
    let etcdctl = etcd_bin
        .parent()
        .map(|d| d.join("etcdctl"))
        .filter(|p| p.is_file())
        .or_else(|| quorate_etcd::binaries::find_on_path("etcdctl"))
        .ok_or("etcdctl is needed to restore a snapshot: apt-get install etcd-client")?;
    let tools = EtcdTools::new(&etcd_bin, etcdctl);
    let (data_dir, identity) = match (&args.data_dir, args.up) {
        (Some(dir), false) => {
            make_room(dir, args.force)?;
            let peer = format!("http://127.0.0.1:{}", etcd.spec.etcd.server_port());
            (
                dir.clone(),
                identity(&member, &peer, &format!("{name}-restored")),
            )
        }
        (None, true) => {
            if ctx.cluster(&name).exists() {
                return Err(format!(
                    "a local cluster named {name} exists already; `quorate down {name} --purge` it or rename the \
                     manifest's metadata.name"
                )
                .into());
            }
            commands::prepare(ctx, etcd.clone())?;
            let local = commands::local_member(ctx, &name, &member)?;
            (
                local.data_dir,
                identity(&member, &local.peer_url, &local.cluster_token),
            )
        }
        _ => {
            return Err(
                "say where to restore: --data-dir DIR, or --up to create the local cluster".into(),
            );
        }
    };
    println!(
        "restoring {} from {} ...",
        data_dir.display(),
        store.describe()
    );
    let progress = crate::progress::RestoreBar::start();
    let restored = restore_from_store(
        &store,
        args.target,
        identity,
        &data_dir,
        tools,
        StoreRestoreOptions {
            progress: Some(progress.sink()),
            keep_revision: args.keep_revision,
            replay_method: args.replay_method,
            skip_verification: args.skip_verification,
            limits: quorate_backup::store_restore::SizeLimits::for_cluster(
                etcd.quota_bytes(),
                etcd.spec.backup.delta_snapshot_memory_limit_bytes(),
            ),
        },
    )
    .await;
    drop(progress);
    let report = match restored {
        Ok(report) => report,
        Err(e) => {
            if args.up {
                // The cluster was created for this restore only; leave nothing half-made behind.
                let _ = std::fs::remove_dir_all(ctx.cluster(&name).root());
            }
            return Err(e.into());
        }
    };
    println!(
        "restored revision {} (full snapshot at {}, {} deltas, {} events at {:.0} events/s) in {:.1}s",
        report.restored_revision - report.revision_bumped_by as i64,
        report.full_revision,
        report.deltas_applied,
        report.events_applied,
        report.events_per_second,
        report.duration.as_secs_f64()
    );
    println!("{}", report.verification);
    if report.revision_bumped_by > 0 {
        println!(
            "raised the revision by {} to {} and marked it compacted: the bucket holds newer \
             revisions, so clients that saw them (Kubernetes watch caches) relist; \
             --keep-revision leaves it as the source had it",
            report.revision_bumped_by, report.restored_revision
        );
    }
    if args.up {
        guard(&data_dir, ctx, &name, &member)?;
        commands::spawn_supervisor(ctx, &name)?;
        commands::wait_until_ready(ctx, &name, 1, std::time::Duration::from_secs(120)).await?;
        print!("{}", commands::table(ctx, Some(&name), true)?);
    }
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

/// Stamps the restored data directory with the cluster's guard, as its agent would.
fn guard(data_dir: &Path, ctx: &LocalContext, name: &str, member: &str) -> Result<(), Error> {
    let local = commands::local_member(ctx, name, member)?;
    quorate_etcd::data_dir::check_guard(data_dir, &local.cluster_token)?;
    Ok(())
}
