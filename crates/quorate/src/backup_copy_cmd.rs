//! `quorate backups copy`: the snapshots core `backup_copy` selects, streamed byte for byte
//! from one bucket into another (what druid's EtcdCopyBackupsTask does).

use std::time::{Duration, Instant};

use quorate_backup::store::{SnapStore, StoredSnapshot};
use quorate_core::backup_copy::{CopyLimits, snapshots_to_copy};
use quorate_core::gc::SnapshotInfo;

type Error = Box<dyn std::error::Error>;

/// How often the source is listed again while waiting for a final snapshot.
const FINAL_POLL: Duration = Duration::from_secs(2);

/// Copies from `source` to `target` what `limits` select and `target` lacks, after waiting up
/// to `wait_for_final` for a final full snapshot in the source.
pub async fn copy(
    source: &SnapStore,
    target: &SnapStore,
    limits: CopyLimits,
    wait_for_final: Option<Duration>,
) -> Result<(), Error> {
    target.check().await?;
    let listed = match wait_for_final {
        Some(limit) => final_listing(source, limit).await?,
        None => source.list().await?,
    };
    let present: Vec<String> = target
        .list()
        .await?
        .into_iter()
        .map(|s| s.name.file_name())
        .collect();
    let infos: Vec<SnapshotInfo> = listed.iter().map(StoredSnapshot::info).collect();
    let chosen = snapshots_to_copy(&infos, limits, jiff::Timestamp::now(), |i| {
        present.contains(&listed[i].name.file_name())
    });
    println!(
        "copying {} of {} snapshot(s) from {} to {}",
        chosen.len(),
        listed.len(),
        source.describe(),
        target.describe()
    );
    let started = Instant::now();
    let mut bytes = 0;
    for i in chosen {
        let copied = source.copy_to(&listed[i], target).await?;
        bytes += copied.size;
        println!(
            "  {} ({})",
            copied.path,
            quorate_local::table::human_size(copied.size)
        );
    }
    println!(
        "copied {} in {:.1} s",
        quorate_local::table::human_size(bytes),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The source's listing once it holds a final full snapshot (a hibernation's), or an error
/// after `limit`.
async fn final_listing(source: &SnapStore, limit: Duration) -> Result<Vec<StoredSnapshot>, Error> {
    let started = Instant::now();
    loop {
        let listed = source.list().await?;
        if listed.iter().any(|s| s.name.is_final) {
            return Ok(listed);
        }
        if started.elapsed() >= limit {
            return Err(format!(
                "{} holds no final full snapshot after waiting {limit:?}; copy without \
                 --wait-for-final-snapshot to copy what is there",
                source.describe()
            )
            .into());
        }
        tokio::time::sleep(FINAL_POLL).await;
    }
}
