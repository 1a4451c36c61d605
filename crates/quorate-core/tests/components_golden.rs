//! Golden files of the Kubernetes components every example `Etcd` turns into: each object is
//! rendered with a fixed uid, namespace and context and compared with
//! `tests/golden/<example>/<kind>-<name>.yaml`, so a change to any builder shows up as a
//! reviewable diff. `UPDATE_GOLDEN=1 cargo test -p quorate-core --test components_golden`
//! rewrites the files (and removes those no longer rendered).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use quorate_core::components::{ComponentContext, desired_components};

const UID: &str = "3f8e7a10-2c4b-4d5e-9f60-7182a3b4c5d6";
const NAMESPACE: &str = "golden";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn examples() -> Vec<PathBuf> {
    let dir = root().join("../../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn context() -> ComponentContext {
    ComponentContext::new("quorate:golden", "alpine:golden")
}

/// File name of an object: lower-case kind and name, `:` (the Role's) as `-`.
fn file_name(kind: &str, name: &str) -> String {
    format!("{}-{}.yaml", kind.to_lowercase(), name.replace(':', "-"))
}

/// Every golden file of one example, by file name.
fn render(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let source = path.file_name().unwrap().to_string_lossy();
    let mut etcd =
        quorate_api::parse_etcd_manifest(&text, &source).unwrap_or_else(|e| panic!("{e}"));
    quorate_api::validate(&etcd).unwrap_or_else(|e| panic!("{source}:\n{e}"));
    etcd.metadata.uid = Some(UID.to_string());
    etcd.metadata.namespace = Some(NAMESPACE.to_string());
    let desired = desired_components(&etcd, &context()).unwrap();
    let mut files = BTreeMap::new();
    for object in desired.in_sync_order() {
        let manifest = object.to_manifest().unwrap();
        let yaml = serde_saphyr::to_string(&manifest).unwrap();
        let previous = files.insert(file_name(object.kind(), object.name()), yaml);
        assert!(previous.is_none(), "two objects named {}", object.name());
    }
    files
}

#[test]
fn components_match_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut problems = Vec::new();
    for example in examples() {
        let stem = example.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = root().join("tests/golden").join(&stem);
        let rendered = render(&example);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let existing: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        for stale in existing.iter().filter(|f| !rendered.contains_key(*f)) {
            if update {
                std::fs::remove_file(dir.join(stale)).unwrap();
            } else {
                problems.push(format!("{stem}/{stale} is no longer rendered"));
            }
        }
        for (file, yaml) in &rendered {
            let path = dir.join(file);
            if update {
                std::fs::write(&path, yaml).unwrap();
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(golden) if golden == *yaml => {}
                Ok(golden) => problems.push(format!(
                    "{stem}/{file} differs:\n{}",
                    first_difference(&golden, yaml)
                )),
                Err(_) => problems.push(format!("{stem}/{file} is missing")),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\nIf the change is intended, run UPDATE_GOLDEN=1 cargo test -p quorate-core \
         --test components_golden and review the diff.",
        problems.join("\n")
    );
}

/// The first line that differs, with its number, for a readable failure.
fn first_difference(golden: &str, rendered: &str) -> String {
    let (g, r): (Vec<_>, Vec<_>) = (golden.lines().collect(), rendered.lines().collect());
    for i in 0..g.len().max(r.len()) {
        let (a, b) = (g.get(i).copied(), r.get(i).copied());
        if a != b {
            return format!(
                "  line {}:\n  golden:   {}\n  rendered: {}",
                i + 1,
                a.unwrap_or("<end>"),
                b.unwrap_or("<end>")
            );
        }
    }
    String::new()
}
