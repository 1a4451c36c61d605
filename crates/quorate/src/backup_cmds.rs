//! `quorate backups list` and `quorate restore`.

use crate::cli::BackupsCommand;
use quorate_api::tasks::{EtcdCopyBackupsTask, WaitForFinalSnapshotSpec};
use quorate_api::{BackupSpec, Etcd, StoreSpec};
use quorate_backup::store::{SnapStore, StoreOptions, StoredSnapshot};
use quorate_backup::store_restore::open_store;
use quorate_local::commands::{self, LocalContext};
use quorate_local::restore::{RestoreRequest, open_cluster_store};
use std::path::{Path, PathBuf};

type Error = Box<dyn std::error::Error>;

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
    let mut rows = vec![StoredSnapshot::TABLE_HEADER.map(String::from).to_vec()];
    rows.extend(listed.iter().map(StoredSnapshot::table_row));
    print!("{}", quorate_local::table::format_columns(&rows));
    if listed.is_empty() {
        println!("(no snapshots)");
    }
    Ok(())
}

/// Runs `quorate restore` ([`quorate_local::restore`]) with a progress bar, and prints what it
/// did.
pub async fn restore(ctx: &LocalContext, request: RestoreRequest) -> Result<(), Error> {
    let progress = crate::progress::RestoreBar::start();
    let restored =
        quorate_local::restore::restore(ctx, &request, Some(progress.sink()), &mut |line| {
            progress.say(&line)
        })
        .await;
    drop(progress);
    let restored = restored?;
    let report = &restored.report;
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
    if let Some(new) = &restored.new_cluster {
        quorate_local::restore::start_restored(ctx, new).await?;
        print!("{}", commands::table(ctx, Some(&new.name), true)?);
    }
    Ok(())
}

/// The restore target the flags name (the latest state without either).
pub fn restore_target(
    to_revision: Option<i64>,
    to_time: Option<jiff::Timestamp>,
) -> quorate_backup::restore::RestoreTarget {
    use quorate_backup::restore::RestoreTarget;
    match (to_revision, to_time) {
        (Some(rev), _) => RestoreTarget::ToRevision(rev),
        (None, Some(t)) => RestoreTarget::ToTime(t),
        (None, None) => RestoreTarget::Latest,
    }
}

/// `quorate snapshot`: saves a full snapshot of one member into `output`, with progress.
pub async fn snapshot(
    endpoint: &str,
    output: &Path,
    tls: Option<quorate_etcd::EtcdTls>,
) -> Result<(), Error> {
    let client = quorate_etcd::MemberClient::connect(
        endpoint,
        tls.as_ref(),
        quorate_etcd::EtcdTimeouts::default(),
    )
    .await?;
    let started = std::time::Instant::now();
    let part = output.with_file_name(format!(
        "{}.part",
        output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let progress =
        crate::progress::FileProgress::start("saving snapshot", vec![part, output.to_path_buf()]);
    let saved = quorate_backup::snapshotter::save_to_file(&client, output).await;
    drop(progress);
    let saved = saved?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "saved {} ({} bytes, revision {}) in {seconds:.2}s, {:.1} MB/s",
        saved.path.display(),
        saved.size,
        saved.revision,
        saved.size as f64 / 1e6 / seconds.max(1e-9)
    );
    Ok(())
}
