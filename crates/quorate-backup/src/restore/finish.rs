//! The pipeline's last step before the swap: checking the restored data against the hash etcd
//! recorded at backup time ([`super::verify`]). The appliers' [`super::apply::Applier::finish`]
//! and the restore of a full snapshot alone call it where their data is complete.

use std::path::{Path, PathBuf};

use super::verify::{self, Verification};
use super::{RestoreError, RestoreOptions};

/// Compares database file `db`, replayed up to `revision`, with etcd's hash recorded there.
/// The direct replay's file is checked before `snapshot restore` reads it: with a revision
/// bump, etcd's tool carries out the compaction the bump schedules, which drops history the
/// recorded hash covers.
pub(crate) async fn verify_file(
    db: PathBuf,
    revision: i64,
    options: &RestoreOptions,
) -> Result<Verification, RestoreError> {
    if options.skip_verification {
        return Ok(Verification::Skipped);
    }
    let record = options.hash_record.clone();
    let checked =
        tokio::task::spawn_blocking(move || verify::check(&db, revision, record.as_ref()))
            .await
            .expect("the hash task does not panic")
            .map_err(|e| RestoreError::Verify {
                message: e.to_string(),
            })?;
    checked.map_err(RestoreError::KeySpaceMismatch)
}

/// The database a data directory built by `snapshot restore` holds.
pub(crate) fn member_db(data_dir: &Path) -> PathBuf {
    data_dir.join("member").join("snap").join("db")
}
