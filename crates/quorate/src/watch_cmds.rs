//! The commands that keep printing until Ctrl-C: `get etcd -w` (a row again whenever a
//! cluster's object or status changes) and `logs -f` (what is appended to a log file).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use quorate_local::LocalError;
use quorate_local::commands::{self, LocalContext};
use tokio::sync::watch;

/// How often the state files are looked at.
const POLL: Duration = Duration::from_millis(300);

/// `get etcd [NAME] -w`: the table, then each cluster's row again when its object or status
/// changes, until `shutdown`.
pub async fn watch_table(
    ctx: &LocalContext,
    name: Option<&str>,
    wide: bool,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), LocalError> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut header_printed = false;
    loop {
        for item in commands::get(ctx, name)? {
            let key = item.metadata.name.clone().unwrap_or_default();
            let fingerprint = serde_json::to_string(&(
                &item.metadata.generation,
                &item.metadata.annotations,
                &item.status,
            ))
            .unwrap_or_default();
            if seen.get(&key) == Some(&fingerprint) {
                continue;
            }
            let table = quorate_local::table::render(
                std::slice::from_ref(&item),
                wide,
                jiff::Timestamp::now(),
            );
            let mut lines = table.lines();
            let header = lines.next().unwrap_or_default();
            if !header_printed {
                println!("{header}");
                header_printed = true;
            }
            for line in lines {
                println!("{line}");
            }
            seen.insert(key, fingerprint);
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
        }
    }
}

/// `logs`: prints `path` (its last `tail` lines when given), then with `follow` what is
/// appended, until `shutdown`. A file that shrank (rotated, truncated) is read from its start.
pub async fn print_log(
    path: &Path,
    tail: Option<usize>,
    follow: bool,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), LocalError> {
    let io = |source| LocalError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    };
    let mut stdout = std::io::stdout();
    let mut offset = match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let from = tail.map_or(0, |n| lines.len().saturating_sub(n));
            for line in &lines[from..] {
                let _ = writeln!(stdout, "{line}");
            }
            bytes.len() as u64
        }
        // Not written yet (a member that has not started): nothing to show, follow waits.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && follow => 0,
        Err(e) => return Err(io(e)),
    };
    if !follow {
        return Ok(());
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
        let Ok(mut file) = std::fs::File::open(path) else {
            continue;
        };
        let len = file.metadata().map_err(io)?.len();
        if len < offset {
            offset = 0;
        }
        if len == offset {
            continue;
        }
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut appended = Vec::new();
        file.read_to_end(&mut appended).map_err(io)?;
        offset += appended.len() as u64;
        let _ = stdout.write_all(&appended);
        let _ = stdout.flush();
    }
    Ok(())
}
