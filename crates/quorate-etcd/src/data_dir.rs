//! Checks of a member's data directory before etcd starts on it: is it this cluster's
//! (the wrong-volume guard), does it hold a member at all, and is its database readable. A bad
//! directory is moved aside, never deleted, so nothing is lost to a wrong guess. In the etcd
//! adapter because it reads etcd's own files (write-ahead log, bbolt database) and is needed by
//! the agent before etcd starts and by `quorate restore` after it wrote a directory.

use std::io::Read;
use std::path::{Path, PathBuf};

/// What the data directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataDirState {
    /// No member data (missing or empty directory).
    Empty,
    /// A member with a write-ahead log and a database whose header checks out.
    Valid,
    /// Member data that etcd cannot use; the text says what is wrong.
    Invalid(String),
    /// The directory cannot be read (permissions, I/O errors): whether it holds data is
    /// unknown, so nothing may be concluded from it and nothing is moved.
    Unreadable(String),
}

/// bbolt's magic number, at the start of both meta pages' meta section.
const BOLT_MAGIC: u32 = 0xED0C_DAED;
/// Size of a bbolt page header before the meta section.
const PAGE_HEADER: usize = 16;
/// Bytes of the meta section covered by its checksum.
const META_CHECKED: usize = 56;

/// Inspects `data_dir` (etcd's `--data-dir`).
pub fn inspect(data_dir: &Path) -> DataDirState {
    let unreadable = |path: &Path, e: std::io::Error| {
        DataDirState::Unreadable(format!("cannot read {}: {e}", path.display()))
    };
    let member = data_dir.join("member");
    for dir in [data_dir, member.as_path()] {
        match std::fs::read_dir(dir) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return DataDirState::Empty,
            Err(e) => return unreadable(dir, e),
        }
    }
    let wal = member.join("wal");
    let has_wal = match std::fs::read_dir(&wal) {
        Ok(mut entries) => {
            entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "wal")))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return unreadable(&wal, e),
    };
    if !has_wal {
        return DataDirState::Invalid(format!(
            "{} has no write-ahead log (member/wal/*.wal)",
            data_dir.display()
        ));
    }
    match crate::wal_file::header_only(&wal) {
        Ok(false) => {}
        Ok(true) => {
            return DataDirState::Invalid(format!(
                "{}'s write-ahead log holds only the header etcd writes when it creates it: etcd \
                 stopped before it wrote its first entries (the membership), so it holds no data \
                 and etcd cannot start on it (its member belongs to no configuration)",
                data_dir.display()
            ));
        }
        Err(e) => return unreadable(&wal, e),
    }
    let db = member.join("snap").join("db");
    match check_bolt(&db) {
        Ok(()) => DataDirState::Valid,
        Err(BoltCheck::Damaged(why)) => DataDirState::Invalid(format!("{}: {why}", db.display())),
        Err(BoltCheck::Io(e)) => unreadable(&db, e),
    }
}

/// Why a database file did not pass.
#[derive(Debug)]
enum BoltCheck {
    /// The file is missing or not an intact bbolt database.
    Damaged(String),
    /// The file could not be read: says nothing about its content.
    Io(std::io::Error),
}

/// Checks that at least one of the two bbolt meta pages is intact (magic, version, checksum).
fn check_bolt(db: &Path) -> Result<(), BoltCheck> {
    let mut file = match std::fs::File::open(db) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BoltCheck::Damaged("the database file is missing".into()));
        }
        Err(e) => return Err(BoltCheck::Io(e)),
    };
    let mut head = vec![0u8; 4096 * 2];
    let n = file.read(&mut head).map_err(BoltCheck::Io)?;
    head.truncate(n);
    let meta_ok = |page: &[u8]| -> bool {
        let Some(meta) = page.get(PAGE_HEADER..PAGE_HEADER + META_CHECKED + 8) else {
            return false;
        };
        let u32_at = |i: usize| u32::from_le_bytes(meta[i..i + 4].try_into().expect("4 bytes"));
        let checksum = u64::from_le_bytes(
            meta[META_CHECKED..META_CHECKED + 8]
                .try_into()
                .expect("8 bytes"),
        );
        u32_at(0) == BOLT_MAGIC && u32_at(4) == 2 && fnv1a64(&meta[..META_CHECKED]) == checksum
    };
    let page_size = head
        .get(PAGE_HEADER + 8..PAGE_HEADER + 12)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .filter(|s| (512..=65536).contains(s))
        .unwrap_or(4096);
    let first = meta_ok(&head);
    let second = head.get(page_size..).is_some_and(meta_ok);
    if first || second {
        Ok(())
    } else {
        Err(BoltCheck::Damaged(
            "not a valid bbolt database (both meta pages are damaged)".into(),
        ))
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The wrong-volume guard refused a data directory, or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The directory belongs to another cluster incarnation.
    #[error(
        "{} belongs to cluster incarnation {owner:?}, not {expected:?}: wrong volume; etcd is not started \
         on it. Move the directory away if it is really meant for this cluster",
        data_dir.display()
    )]
    WrongVolume {
        /// The data directory.
        data_dir: PathBuf,
        /// The incarnation the guard names.
        owner: String,
        /// The incarnation asked for.
        expected: String,
    },
    /// The guard file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The guard file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The wrong-volume guard: `safe_guard` beside the data directory names the cluster incarnation
/// (its token) the data belongs to. Written on first use; a mismatch means the volume belongs to
/// another cluster, and etcd must not start on it.
pub fn check_guard(data_dir: &Path, cluster_token: &str) -> Result<(), GuardError> {
    let guard = guard_path(data_dir);
    match std::fs::read_to_string(&guard) {
        Ok(owner) if owner.trim() == cluster_token => Ok(()),
        Ok(owner) => Err(GuardError::WrongVolume {
            data_dir: data_dir.to_path_buf(),
            owner: owner.trim().to_string(),
            expected: cluster_token.to_string(),
        }),
        Err(_) => {
            if let Some(parent) = guard.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(&guard, cluster_token).map_err(|source| GuardError::Write {
                path: guard,
                source,
            })
        }
    }
}

/// Whether a running etcd uses `data_dir`: etcd's database (bbolt) holds an exclusive lock on
/// `member/snap/db` while it runs, so a lock this process cannot take means a live member.
pub fn in_use(data_dir: &Path) -> bool {
    let Ok(db) = std::fs::File::open(data_dir.join("member").join("snap").join("db")) else {
        return false;
    };
    match db.try_lock() {
        Ok(()) => {
            let _ = db.unlock();
            false
        }
        Err(_) => true,
    }
}

fn guard_path(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("safe_guard")
}

/// Moves an unusable data directory aside (`<dir>.invalid-<unix time>`) and returns where.
pub fn move_aside(data_dir: &Path, now_unix: i64) -> std::io::Result<PathBuf> {
    let name = data_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let aside = data_dir.with_file_name(format!("{name}.invalid-{now_unix}"));
    std::fs::rename(data_dir, &aside)?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_missing_and_damaged_directories_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert_eq!(inspect(&data), DataDirState::Empty);
        std::fs::create_dir_all(data.join("member/wal")).unwrap();
        assert!(
            matches!(inspect(&data), DataDirState::Invalid(w) if w.contains("write-ahead log"))
        );
        std::fs::write(
            data.join("member/wal/0000000000000000-0000000000000000.wal"),
            b"x",
        )
        .unwrap();
        std::fs::create_dir_all(data.join("member/snap")).unwrap();
        std::fs::write(data.join("member/snap/db"), vec![0u8; 8192]).unwrap();
        assert!(matches!(inspect(&data), DataDirState::Invalid(w) if w.contains("meta pages")));
    }

    #[test]
    fn a_valid_bolt_header_passes() {
        let mut page = vec![0u8; 4096];
        page[PAGE_HEADER..PAGE_HEADER + 4].copy_from_slice(&BOLT_MAGIC.to_le_bytes());
        page[PAGE_HEADER + 4..PAGE_HEADER + 8].copy_from_slice(&2u32.to_le_bytes());
        page[PAGE_HEADER + 8..PAGE_HEADER + 12].copy_from_slice(&4096u32.to_le_bytes());
        let sum = fnv1a64(&page[PAGE_HEADER..PAGE_HEADER + META_CHECKED]);
        page[PAGE_HEADER + META_CHECKED..PAGE_HEADER + META_CHECKED + 8]
            .copy_from_slice(&sum.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, [page.clone(), vec![0u8; 4096]].concat()).unwrap();
        assert!(check_bolt(&db).is_ok(), "first meta page intact");
        page[PAGE_HEADER + 20] ^= 1;
        std::fs::write(&db, [page, vec![0u8; 4096]].concat()).unwrap();
        assert!(check_bolt(&db).is_err(), "checksum catches damage");
    }

    /// Issue 12: an unreadable directory is not an empty one (it would count as a member that
    /// lost its data and let another member restore over the cluster).
    #[test]
    fn an_unreadable_directory_is_not_empty() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("member/wal")).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o000)).unwrap();
        let state = inspect(&data);
        // root reads anything: then the directory is readable and holds damaged data.
        let privileged = std::fs::read_dir(&data).is_ok();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        if privileged {
            assert!(matches!(state, DataDirState::Invalid(_)), "{state:?}");
        } else {
            assert!(
                matches!(state, DataDirState::Unreadable(w) if w.contains("Permission denied"))
            );
        }
        let db_dir = data.join("member/snap");
        std::fs::create_dir_all(&db_dir).unwrap();
        std::fs::write(data.join("member/wal/0.wal"), b"x").unwrap();
        std::fs::create_dir(db_dir.join("db")).unwrap();
        assert!(
            matches!(inspect(&data), DataDirState::Unreadable(_)),
            "a database that cannot be read (here: a directory) is unknown, not damaged"
        );
    }

    #[test]
    fn the_guard_refuses_another_clusters_volume() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert!(matches!(check_guard(&data, "etcd-main-1234"), Ok(())));
        assert!(matches!(check_guard(&data, "etcd-main-1234"), Ok(())));
        let err = check_guard(&data, "etcd-main-9999")
            .unwrap_err()
            .to_string();
        assert!(err.contains("wrong volume"), "{err}");
    }
}
