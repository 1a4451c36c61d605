//! The CLI behaves as Unix tools and kubectl do: `quorate man` produces every page the pages
//! refer to, `-f -` reads the manifest from standard input, and the options every command
//! takes stand under their own help heading.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `quorate args` with `stdin` piped in.
fn quorate(args: &[&str], stdin: &str, state: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .env("QUORATE_STATE_DIR", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start quorate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait for quorate")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `name(1)` references of a roff page (hyphens are written `\-` in roff).
fn references(page: &str) -> BTreeSet<String> {
    let plain = page.replace("\\-", "-");
    let mut found = BTreeSet::new();
    let mut rest = plain.as_str();
    while let Some(at) = rest.find("(1)") {
        let before = &rest[..at];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |i| i + 1);
        if before[start..].starts_with("quorate") {
            found.insert(before[start..].to_string());
        }
        rest = &rest[at + 3..];
    }
    found
}

#[test]
fn man_writes_every_page_the_pages_refer_to() {
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().join("man1");
    let out = quorate(&["man", "--dir", dir.to_str().unwrap()], "", state.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pages: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("the man directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for page in [
        "quorate.1",
        "quorate-up.1",
        "quorate-backups.1",
        "quorate-backups-list.1",
    ] {
        assert!(pages.contains(page), "{page} missing from {pages:?}");
    }
    let mut referred = 0;
    for page in &pages {
        let roff = std::fs::read_to_string(dir.join(page)).expect("page");
        let name = page.trim_end_matches(".1");
        assert!(
            roff.contains(&format!(".TH {}", name.replace('-', "\\-")))
                || roff.contains(&format!(".TH {name}")),
            "{page} is not titled {name}: {roff:.200}"
        );
        for reference in references(&roff) {
            referred += 1;
            assert!(
                pages.contains(&format!("{reference}.1")),
                "{page} refers to {reference}(1), which was not written"
            );
        }
    }
    assert!(referred > 10, "the pages refer to their subcommands' pages");
    // One command's page, printed, is the page written for it.
    let list = quorate(&["man", "backups", "list"], "", state.path());
    assert!(list.status.success(), "{}", text(&list.stderr));
    assert_eq!(
        text(&list.stdout),
        std::fs::read_to_string(dir.join("quorate-backups-list.1")).unwrap()
    );
    let unknown = quorate(&["man", "backups", "nope"], "", state.path());
    assert!(!unknown.status.success());
    let err = text(&unknown.stderr);
    assert!(
        err.contains("no command `quorate backups nope`") && err.contains("list"),
        "{err}"
    );
}

#[test]
fn a_dash_filename_reads_the_manifest_from_standard_input() {
    let state = tempfile::tempdir().expect("tempdir");
    let root = state.path().join("buckets");
    std::fs::create_dir_all(root.join("bucket/main")).expect("bucket");
    let manifest = "apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\nmetadata:\n  \
                    name: piped\n  namespace: default\nspec:\n  replicas: 1\n  labels:\n    \
                    app: piped\n  etcd: {}\n  backup:\n    store:\n      provider: Local\n      \
                    container: bucket\n      prefix: main\n";
    let file = state.path().join("piped.yaml");
    std::fs::write(&file, manifest).expect("manifest");
    let root = root.to_str().unwrap();
    let from_file = quorate(
        &[
            "backups",
            "list",
            "-f",
            file.to_str().unwrap(),
            "--local-root",
            root,
        ],
        "",
        state.path(),
    );
    assert!(from_file.status.success(), "{}", text(&from_file.stderr));
    let from_stdin = quorate(
        &["backups", "list", "-f", "-", "--local-root", root],
        manifest,
        state.path(),
    );
    assert!(from_stdin.status.success(), "{}", text(&from_stdin.stderr));
    assert_eq!(text(&from_stdin.stdout), text(&from_file.stdout));
    // A bad manifest on standard input is reported as coming from there.
    let bad = quorate(
        &["up", "-f", "-"],
        &manifest.replace("replicas: 1", "replicas: -1"),
        state.path(),
    );
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("<stdin>") || text(&bad.stderr).contains("replicas"),
        "{}",
        text(&bad.stderr)
    );
    let empty = quorate(&["apply", "-f", "-"], "", state.path());
    assert!(!empty.status.success());
    assert!(
        text(&empty.stderr).contains("standard input is empty"),
        "{}",
        text(&empty.stderr)
    );
}

#[test]
fn global_options_stand_under_their_own_heading() {
    let state = tempfile::tempdir().expect("tempdir");
    for args in [
        &["--help"][..],
        &["up", "--help"],
        &["backups", "list", "--help"],
    ] {
        let out = quorate(args, "", state.path());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let help = text(&out.stdout);
        let (own, global) = help
            .split_once("Global options:")
            .unwrap_or_else(|| panic!("{args:?}: no Global options heading in\n{help}"));
        for flag in ["--state-dir", "--log-level", "--log-format"] {
            assert!(
                global.contains(flag),
                "{args:?}: {flag} not under Global options"
            );
            assert!(
                !own.contains(flag),
                "{args:?}: {flag} also among the command's own"
            );
        }
    }
}
