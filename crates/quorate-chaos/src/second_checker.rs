//! The second, independent checker: `tools/history-check` (porcupine, written in Go against the
//! history file alone, sharing no code with [`crate::checker`]). A run writes its history file,
//! runs the program on it and keeps its one-line verdict; the run fails if it says "not
//! linearizable" or disagrees with quorate's own checker.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// What `history-check` concluded, from its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SecondVerdictKind {
    /// Exit 0: porcupine found a linearization and the revisions increase.
    Linearizable,
    /// Exit 1: porcupine found none, or revisions go back or repeat.
    NotLinearizable,
    /// Exit 3: porcupine did not decide within its timeout.
    Undecided,
    /// Any other exit: the program could not read the history or did not run.
    Failed,
}

/// The second checker's verdict on one history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SecondVerdict {
    /// The verdict.
    pub kind: SecondVerdictKind,
    /// Its one-line explanation (the program's output, or why it did not run).
    pub line: String,
    /// The visualisation of a failing history, if the program wrote one.
    pub html: Option<PathBuf>,
}

/// The default place `scripts/build-history-check.sh` installs the program.
pub fn default_binary() -> Option<PathBuf> {
    // Where scripts/build-history-check.sh installs it: `$QUORATE_CACHE/bin`, by default
    // `~/.cache/quorate/bin`.
    let cache = match std::env::var_os("QUORATE_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/quorate"),
    };
    let path = cache.join("bin/history-check");
    path.exists().then_some(path)
}

/// Runs `binary` on `history`; a failing history's visualisation goes beside it (`.html`).
pub fn run(binary: &Path, history: &Path) -> SecondVerdict {
    let html = history.with_extension("html");
    let output = Command::new(binary)
        .arg("--html")
        .arg(&html)
        .arg(history)
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            return SecondVerdict {
                kind: SecondVerdictKind::Failed,
                line: format!("cannot run {}: {e}", binary.display()),
                html: None,
            };
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut line = stdout.lines().last().unwrap_or_default().to_owned();
    let kind = match output.status.code() {
        Some(0) => SecondVerdictKind::Linearizable,
        Some(1) => SecondVerdictKind::NotLinearizable,
        Some(3) => SecondVerdictKind::Undecided,
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            line = format!(
                "{} ({}) {line} {}",
                binary.display(),
                output.status,
                stderr.trim()
            );
            SecondVerdictKind::Failed
        }
    };
    SecondVerdict {
        kind,
        line,
        html: html.exists().then_some(html),
    }
}

impl SecondVerdict {
    /// Whether this verdict and quorate's own (`own_passed`) agree that the history is fine.
    /// Quorate's checker judges more than linearizability (the watch, serializable reads), so
    /// agreement means: both pass, or both fail.
    pub fn agrees_with(&self, own_passed: bool) -> bool {
        match self.kind {
            SecondVerdictKind::Linearizable => own_passed,
            SecondVerdictKind::NotLinearizable => !own_passed,
            SecondVerdictKind::Undecided | SecondVerdictKind::Failed => false,
        }
    }
}
