//! Fuzzing `Etcd` manifests (`parse_etcd_manifest`, `parse_etcd_manifests`) and the validation
//! of what parses (`validate`): arbitrary text, and the fixtures and examples mutated as a
//! person or a tool might get them wrong — fields deleted, duplicated, swapped, retyped, given
//! unicode and huge numbers — in YAML and in JSON. Every input is answered promptly (no panic,
//! no hang); a refusal names the file and says what is wrong; what parses validates or is
//! refused field by field. Anchor/alias bombs and document storms are refused or bounded.

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use quorate_api::{ManifestError, parse_etcd_manifest, parse_etcd_manifests, validate};
use serde_json::{Map, Value, json};

const SOURCE: &str = "fuzz.yaml";

const FIXTURES: [&str; 5] = [
    include_str!("fixtures/druid-full.yaml"),
    include_str!("../../../examples/etcd-single.yaml"),
    include_str!("../../../examples/etcd-cluster.yaml"),
    include_str!("../../../examples/etcd-tls.yaml"),
    include_str!("../../../examples/etcd-backup-s3.yaml"),
];

/// Runs `f` on another thread and fails if it takes longer than `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

fn check_error(text: &str, e: &ManifestError) {
    let shown = e.to_string();
    assert!(
        shown.starts_with(SOURCE),
        "the error does not name the file: {shown}\ninput: {text:?}"
    );
    let rest = shown[SOURCE.len()..].trim_start_matches(|c: char| c == ':' || c.is_ascii_digit());
    assert!(
        rest.trim().len() > 3,
        "the error does not say what is wrong: {shown:?}\ninput: {text:?}"
    );
    if let ManifestError::Parse(p) = e {
        assert!(
            !p.message.trim().is_empty(),
            "empty message: {shown}\ninput: {text:?}"
        );
        if let Some(path) = &p.path {
            assert!(!path.is_empty());
        }
    }
}

/// The properties every input must have.
fn check(text: &str) {
    match parse_etcd_manifests(text, SOURCE) {
        Ok(etcds) => {
            assert!(!etcds.is_empty());
            for etcd in &etcds {
                assert!(
                    etcd.metadata
                        .namespace
                        .as_deref()
                        .is_some_and(|n| !n.is_empty())
                );
                if let Err(errors) = validate(etcd) {
                    assert!(!errors.errors.is_empty(), "an empty refusal");
                    for e in &errors.errors {
                        assert!(!e.path.is_empty(), "no path: {e:?}\ninput: {text:?}");
                        assert!(
                            !e.message.trim().is_empty(),
                            "no message: {e:?}\ninput: {text:?}"
                        );
                    }
                    assert!(!errors.to_string().is_empty());
                }
            }
            match parse_etcd_manifest(text, SOURCE) {
                Ok(one) => assert_eq!(etcds.len(), 1, "{one:?}"),
                Err(e) => {
                    check_error(text, &e);
                    assert!(matches!(e, ManifestError::MultipleEtcds { .. }), "{e}");
                }
            }
        }
        Err(e) => {
            check_error(text, &e);
            assert_eq!(parse_etcd_manifest(text, SOURCE).unwrap_err(), e);
        }
    }
}

fn check_in_time(text: String) {
    within(Duration::from_secs(10), "parse", move || check(&text));
}

// ---- structured mutation of fixtures --------------------------------------------------------

fn fixture_values() -> Vec<Value> {
    FIXTURES
        .iter()
        .map(|t| serde_saphyr::from_str::<Value>(t).expect("fixture parses"))
        .collect()
}

/// Every path to a node, as JSON pointers.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                pointers(
                    child,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn parent_and_key(pointer: &str) -> Option<(&str, String)> {
    let (parent, key) = pointer.rsplit_once('/')?;
    Some((parent, key.replace("~1", "/").replace("~0", "~")))
}

fn weird_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        any::<String>().prop_map(Value::String),
        proptest::sample::select(vec![
            "",
            " ",
            "8Gi",
            "-1",
            "1e400",
            "99999999999999999999999Ei",
            "0x10",
            "NaN",
            "\u{202e}etcd",
            "étcd",
            "😀",
            "a\u{0}b",
            "1h30m",
            "0 */1 * * *",
            "* * * * * *",
            "druid.gardener.cloud/v1alpha1",
            "Etcd",
            "List",
            "true",
            "null",
            "~",
            "https://[::1]:2380",
            "ALL",
            "gzip",
            "S3",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        "[a-z]{1,8}".prop_map(|s| Value::String(s.repeat(200))),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize),
    Replace(usize, Value),
    Insert(usize, String, Value),
    Swap(usize, usize),
    CopyOver(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => any::<usize>().prop_map(Mutation::Delete),
        3 => (any::<usize>(), weird_value()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        1 => (any::<usize>(), "[a-zA-Z]{1,12}|apiVersion|kind|spec|replicas|metadata", weird_value())
            .prop_map(|(i, k, v)| Mutation::Insert(i, k, v)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::CopyOver(a, b)),
    ]
}

fn apply(doc: &mut Value, m: &Mutation) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let pick = |i: usize| all[i % all.len()].clone();
    match m {
        Mutation::Delete(i) => {
            let p = pick(*i);
            if let Some((parent, key)) = parent_and_key(&p) {
                match doc.pointer_mut(parent) {
                    Some(Value::Object(o)) => {
                        o.remove(&key);
                    }
                    Some(Value::Array(a)) => {
                        if let Ok(i) = key.parse::<usize>()
                            && i < a.len()
                        {
                            a.remove(i);
                        }
                    }
                    _ => {}
                }
            }
        }
        Mutation::Replace(i, v) => {
            if let Some(slot) = doc.pointer_mut(&pick(*i)) {
                *slot = v.clone();
            }
        }
        Mutation::Insert(i, k, v) => match doc.pointer_mut(&pick(*i)) {
            Some(Value::Object(o)) => {
                o.insert(k.clone(), v.clone());
            }
            Some(Value::Array(a)) => a.push(v.clone()),
            _ => {}
        },
        Mutation::Swap(a, b) | Mutation::CopyOver(a, b) => {
            let (pa, pb) = (pick(*a), pick(*b));
            if pa.starts_with(&pb) || pb.starts_with(&pa) {
                return;
            }
            let va = doc.pointer(&pa).cloned();
            let vb = doc.pointer(&pb).cloned();
            if let (Some(va), Some(vb)) = (va, vb) {
                if matches!(m, Mutation::Swap(..)) {
                    *doc.pointer_mut(&pa).unwrap() = vb;
                }
                *doc.pointer_mut(&pb).unwrap() = va;
            }
        }
    }
}

fn mutated_document() -> impl Strategy<Value = Value> {
    (
        0..FIXTURES.len(),
        proptest::collection::vec(mutation(), 1..5),
    )
        .prop_map(|(i, ms)| {
            let mut doc = fixture_values().swap_remove(i);
            for m in &ms {
                apply(&mut doc, m);
            }
            doc
        })
}

// ---- text-level mutation --------------------------------------------------------------------

#[derive(Clone, Debug)]
enum LineEdit {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Insert(usize, String),
    Indent(usize, usize),
    Truncate(usize),
}

fn line_edit() -> impl Strategy<Value = LineEdit> {
    prop_oneof![
        any::<usize>().prop_map(LineEdit::Delete),
        any::<usize>().prop_map(LineEdit::Duplicate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| LineEdit::Swap(a, b)),
        (
            any::<usize>(),
            prop_oneof![
                Just("---".to_string()),
                Just("...".to_string()),
                Just("%YAML 1.2".to_string()),
                Just("  anchor: &a [1, 2, 3]".to_string()),
                Just("  alias: *a".to_string()),
                Just("  <<: {replicas: 1}".to_string()),
                Just("\t".to_string()),
                Just("  replicas: 99999999999999999999999".to_string()),
                Just("  replicas: 0x10".to_string()),
                Just("  quota: !!binary aGVsbG8=".to_string()),
                Just("kind: Etcd".to_string()),
                Just("apiVersion: v1".to_string()),
                ".{0,40}",
            ]
        )
            .prop_map(|(i, s)| LineEdit::Insert(i, s)),
        (any::<usize>(), 0usize..5).prop_map(|(i, n)| LineEdit::Indent(i, n)),
        any::<usize>().prop_map(LineEdit::Truncate),
    ]
}

fn edit_lines(text: &str, edits: &[LineEdit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for e in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match e {
            LineEdit::Delete(i) => {
                lines.remove(i % n);
            }
            LineEdit::Duplicate(i) => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            LineEdit::Swap(a, b) => lines.swap(a % n, b % n),
            LineEdit::Insert(i, s) => lines.insert(i % (n + 1), s.clone()),
            LineEdit::Indent(i, k) => {
                let l = &mut lines[i % n];
                *l = format!("{}{}", " ".repeat(*k), l.trim_start());
            }
            LineEdit::Truncate(i) => {
                let l = &mut lines[i % n];
                let cut = l
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(i % (l.chars().count() + 1));
                if let Some(cut) = cut {
                    l.truncate(cut);
                }
            }
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_is_answered_clearly(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn yaml_like_text_is_answered_clearly(text in "((apiVersion|kind|metadata|spec|replicas|name|- |---|&a|\\*a|<<|: |\\{|\\}|\\[|\\]|,|\"|'|!!str|!!int|#|[a-z0-9]{1,5}| |\n)){0,60}") {
        check(&text);
    }

    #[test]
    fn mutated_fixtures_as_yaml_are_answered_clearly(doc in mutated_document()) {
        let text = serde_saphyr::to_string(&doc).expect("a JSON value renders as YAML");
        check_in_time(text);
    }

    #[test]
    fn mutated_fixtures_as_json_are_answered_clearly(doc in mutated_document(), pretty in any::<bool>(), wrap in 0u8..3) {
        let doc = match wrap {
            0 => doc,
            1 => json!([doc]),
            _ => json!({"apiVersion": "v1", "kind": "List", "items": [doc]}),
        };
        let text = if pretty { serde_json::to_string_pretty(&doc) } else { serde_json::to_string(&doc) }.unwrap();
        check_in_time(text);
    }

    #[test]
    fn fixtures_with_edited_lines_are_answered_clearly(i in 0..FIXTURES.len(), edits in proptest::collection::vec(line_edit(), 1..6)) {
        check_in_time(edit_lines(FIXTURES[i], &edits));
    }

    #[test]
    fn fixtures_cut_short_are_answered_clearly(i in 0..FIXTURES.len(), cut in any::<usize>()) {
        let text = FIXTURES[i];
        let mut cut = cut % (text.len() + 1);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        check(&text[..cut]);
    }
}

#[test]
fn fixtures_parse_and_validate() {
    for text in FIXTURES {
        check(text);
        parse_etcd_manifest(text, SOURCE).expect("fixture");
    }
}

/// A billion laughs: nine levels of ten aliases each.
#[test]
fn alias_bomb_is_refused_promptly_with_a_clear_error() {
    let mut text = String::from(
        "apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\nmetadata:\n  name: bomb\n  annotations:\n    a0: &a0 \"lol\"\n",
    );
    for level in 1..10 {
        let prev = format!("*a{}", level - 1);
        let list = vec![prev; 10].join(", ");
        text.push_str(&format!("    a{level}: &a{level} [{list}]\n"));
    }
    text.push_str(
        "spec:\n  replicas: 1\n  labels: {}\n  etcd: {}\n  backup: {}\n  selector: *a9\n",
    );
    let e = within(Duration::from_secs(10), "alias bomb", move || {
        parse_etcd_manifests(&text, SOURCE).unwrap_err()
    });
    let shown = e.to_string();
    assert!(shown.starts_with(SOURCE), "{shown}");
    assert!(shown.contains("exceeds the parser's limits"), "{shown}");
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    for depth in [100, 10_000] {
        let yaml = format!(
            "kind: Etcd\nspec: {}{}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let e = within(Duration::from_secs(10), "deep YAML", move || {
            parse_etcd_manifests(&yaml, SOURCE).unwrap_err()
        });
        check_error("deep YAML", &e);
        let block: String = (0..depth.min(2000))
            .map(|i| format!("{}a:\n", " ".repeat(i)))
            .collect();
        let e = within(Duration::from_secs(10), "deep block YAML", move || {
            parse_etcd_manifests(&block, SOURCE).unwrap_err()
        });
        check_error("deep block YAML", &e);
        let json = format!(
            "{{\"kind\": \"Etcd\", \"spec\": {}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let e = within(Duration::from_secs(10), "deep JSON", move || {
            parse_etcd_manifests(&json, SOURCE).unwrap_err()
        });
        check_error("deep JSON", &e);
    }
}

#[test]
fn many_documents_are_answered_promptly() {
    let etcd = FIXTURES[1];
    for text in [
        "---\n".repeat(50_000),
        format!("{}{}", "---\n# nothing\n".repeat(20_000), etcd),
        format!("{etcd}\n{}", "...\n".repeat(50_000)),
    ] {
        within(Duration::from_secs(20), "many documents", move || {
            let _ = parse_etcd_manifests(&text, SOURCE);
        });
    }
}

/// Found by fuzzing: a file of many `---` lines made one full-length copy of the file per
/// document, all at once (50,000 separators: gigabytes, and minutes of work).
#[test]
fn manifest_with_a_document_storm_is_refused_not_a_quadratic_allocation() {
    let text = "---\n".repeat(50_000);
    let e = within(Duration::from_secs(10), "document storm", move || {
        parse_etcd_manifests(&text, SOURCE).unwrap_err()
    });
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{SOURCE}: holds 50000 YAML documents")),
        "{shown}"
    );
    assert!(shown.contains("split the file"), "{shown}");
    // Up to the limit, every Etcd is still read.
    let etcd = FIXTURES[1].replace("name: etcd-single", "name: e");
    let many = vec![etcd.as_str(); 1024].join("\n---\n");
    let all = within(Duration::from_secs(60), "1024 documents", move || {
        parse_etcd_manifests(&many, SOURCE).unwrap()
    });
    assert_eq!(all.len(), 1024);
}
