//! Fuzzing both validating webhooks (the `Etcd` one and component protection) through their
//! axum router, as the API server calls them: arbitrary bodies, arbitrary JSON, and valid
//! AdmissionReviews mutated field by field (deleted, retyped, unicode, huge numbers). Every
//! request is answered promptly with HTTP 200 and an AdmissionReview (never a panic or an HTTP
//! error the API server would report as "failed calling webhook"); every refusal carries a
//! message; a readable request's answer carries its uid.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use quorate_api::names::{LABEL_MANAGED_BY, LABEL_PART_OF, MANAGED_BY_VALUE};
use quorate_operator::{
    COMPONENT_PROTECTION_PATH, ETCD_VALIDATION_PATH, EtcdFacts, EtcdLookup, LookupError,
    ProtectionConfig, webhook_router,
};
use serde_json::{Map, Value, json};
use tower::ServiceExt;

const EXAMPLE: &str = include_str!("../../../examples/etcd-cluster.yaml");
const OPERATOR: &str = "system:serviceaccount:quorate-system:quorate-operator";

/// Every `Etcd` exists; whether protection is off depends on its name.
struct Table;

impl EtcdLookup for Table {
    async fn etcd_facts(&self, _namespace: &str, name: &str) -> Result<EtcdFacts, LookupError> {
        Ok(match name.len() % 3 {
            0 => EtcdFacts::Missing,
            1 => EtcdFacts::Deleting,
            _ => EtcdFacts::Present {
                protection_disabled: name.len().is_multiple_of(2),
            },
        })
    }
}

fn router() -> Router {
    webhook_router(
        ProtectionConfig {
            operator_user: OPERATOR.to_string(),
            exempt_users: vec!["exempt".to_string()],
        },
        Table,
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `body` to `path`, checks the properties every answer has and returns the response.
async fn call(path: &str, body: Vec<u8>) -> Value {
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), router().oneshot(request))
        .await
        .expect("the webhook answers within 10 s")
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(answer.into_body(), 16 << 20)
        .await
        .unwrap();
    let review: Value = serde_json::from_slice(&bytes).expect("the answer is JSON");
    assert_eq!(review["kind"], "AdmissionReview", "{review}");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{review}");
    let response = review["response"].clone();
    let allowed = response["allowed"].as_bool().expect("allowed is a bool");
    if !allowed {
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.trim().len() > 10,
            "a refusal without a message: {review}"
        );
    }
    if let Some(uid) = sent["request"]["uid"].as_str()
        && response["uid"] != ""
    {
        assert_eq!(response["uid"], uid, "{review}");
    }
    response
}

fn etcd_object() -> Value {
    serde_json::to_value(quorate_api::parse_etcd_manifest(EXAMPLE, "example").unwrap()).unwrap()
}

fn etcd_review(operation: &str) -> Value {
    let object = etcd_object();
    let old = if operation == "CREATE" {
        Value::Null
    } else {
        object.clone()
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "druid.gardener.cloud", "version": "v1alpha1", "kind": "Etcd"},
            "resource": {"group": "druid.gardener.cloud", "version": "v1alpha1", "resource": "etcds"},
            "name": "etcd-main",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": if operation == "DELETE" { Value::Null } else { object },
            "oldObject": old,
            "dryRun": false
        }
    })
}

fn component_review(operation: &str, user: &str) -> Value {
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "etcd-main-config",
            "namespace": "default",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_PART_OF: "etcd-main"}
        },
        "data": {"etcd.conf.yaml": "name: x"}
    });
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "etcd-main-config",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": user},
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": object,
        }
    })
}

fn valid_review() -> impl Strategy<Value = (&'static str, Value)> {
    prop_oneof![
        proptest::sample::select(vec!["CREATE", "UPDATE", "DELETE", "CONNECT"])
            .prop_map(|op| (ETCD_VALIDATION_PATH, etcd_review(op))),
        (
            proptest::sample::select(vec!["CREATE", "UPDATE", "DELETE"]),
            proptest::sample::select(vec!["admin", OPERATOR, "exempt", ""]),
        )
            .prop_map(|(op, user)| (COMPONENT_PROTECTION_PATH, component_review(op, user))),
    ]
}

fn weird_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        Just(json!(1e308)),
        Just(json!(-0.5)),
        any::<String>().prop_map(Value::String),
        proptest::sample::select(vec![
            "",
            "CREATE",
            "UPDATE",
            "DELETE",
            "Etcd",
            "ConfigMap",
            "8Gi",
            "-1",
            "1e400",
            "\u{202e}x",
            "😀",
            "a\u{0}b",
            "druid.gardener.cloud/v1alpha1",
            "admission.k8s.io/v1",
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

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

/// Deletes (`None`) or replaces the node picked by `at`.
fn mutate(doc: &mut Value, at: usize, with: Option<Value>) {
    let mut all = Vec::new();
    pointers(doc, String::new(), &mut all);
    let p = all[at % all.len()].clone();
    match with {
        Some(v) => {
            if let Some(slot) = doc.pointer_mut(&p) {
                *slot = v;
            }
        }
        None => {
            if let Some((parent, key)) = p.rsplit_once('/') {
                let key = key.replace("~1", "/").replace("~0", "~");
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
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bodies_are_refused_inside_a_review(body in proptest::collection::vec(any::<u8>(), 0..300), etcd in any::<bool>()) {
        let path = if etcd { ETCD_VALIDATION_PATH } else { COMPONENT_PROTECTION_PATH };
        let response = runtime().block_on(call(path, body));
        prop_assert_eq!(&response["allowed"], false);
    }

    #[test]
    fn arbitrary_json_is_answered(value in weird_value(), etcd in any::<bool>()) {
        let path = if etcd { ETCD_VALIDATION_PATH } else { COMPONENT_PROTECTION_PATH };
        runtime().block_on(call(path, serde_json::to_vec(&value).unwrap()));
    }

    #[test]
    fn mutated_reviews_are_answered(
        (path, review) in valid_review(),
        edits in proptest::collection::vec((any::<usize>(), proptest::option::of(weird_value())), 1..5),
    ) {
        let mut review = review;
        for (at, with) in edits {
            mutate(&mut review, at, with);
        }
        runtime().block_on(call(path, serde_json::to_vec(&review).unwrap()));
    }
}

/// A review whose own `kind` is mangled (found by `mutated_reviews_are_answered`) still gets an
/// `admission.k8s.io/v1` `AdmissionReview` back, not its mangled kind echoed.
#[test]
fn a_review_with_a_mangled_kind_is_answered_as_an_admission_review() {
    runtime().block_on(async {
        let mut review = component_review("DELETE", OPERATOR);
        review["kind"] = json!("1e400");
        review["apiVersion"] = json!("v0");
        call(
            COMPONENT_PROTECTION_PATH,
            serde_json::to_vec(&review).unwrap(),
        )
        .await;
    });
}

#[test]
fn valid_reviews_are_answered_as_expected() {
    runtime().block_on(async {
        for op in ["CREATE", "UPDATE", "DELETE"] {
            let r = call(
                ETCD_VALIDATION_PATH,
                serde_json::to_vec(&etcd_review(op)).unwrap(),
            )
            .await;
            assert_eq!(r["allowed"], true, "{op}: {r}");
        }
        let r = call(
            COMPONENT_PROTECTION_PATH,
            serde_json::to_vec(&component_review("DELETE", OPERATOR)).unwrap(),
        )
        .await;
        assert_eq!(r["allowed"], true, "{r}");
        let mut bad = etcd_review("CREATE");
        bad["request"]["object"]["spec"]["replicas"] = json!("three");
        let r = call(ETCD_VALIDATION_PATH, serde_json::to_vec(&bad).unwrap()).await;
        assert_eq!(r["allowed"], false, "{r}");
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("spec.replicas"),
            "{r}"
        );
    });
}

#[test]
fn deeply_nested_and_large_bodies_are_answered() {
    runtime().block_on(async {
        for depth in [100, 100_000] {
            let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            call(ETCD_VALIDATION_PATH, body.into_bytes()).await;
            let mut review = etcd_review("CREATE");
            let mut nested = json!("x");
            for _ in 0..depth.min(120) {
                nested = json!({ "a": nested });
            }
            review["request"]["object"]["spec"]["etcd"]["unknown"] = nested;
            call(ETCD_VALIDATION_PATH, serde_json::to_vec(&review).unwrap()).await;
        }
        let mut review = etcd_review("CREATE");
        review["request"]["object"]["metadata"]["annotations"] =
            json!({ "big": "x".repeat(4 << 20) });
        call(ETCD_VALIDATION_PATH, serde_json::to_vec(&review).unwrap()).await;
    });
}

/// Found by fuzzing: a review above axum's default 2 MiB body limit (an UPDATE of a large
/// `Etcd` carries it twice) was answered with HTTP 413 instead of a review.
#[test]
fn large_admission_review_is_answered_not_http_413() {
    runtime().block_on(async {
        let mut review = etcd_review("UPDATE");
        let big = json!({ "big": "x".repeat(1536 << 10) });
        review["request"]["object"]["metadata"]["annotations"] = big.clone();
        review["request"]["oldObject"]["metadata"]["annotations"] = big;
        let body = serde_json::to_vec(&review).unwrap();
        assert!(body.len() > 3 << 20);
        let r = call(ETCD_VALIDATION_PATH, body).await;
        assert_eq!(r["allowed"], true, "{r}");
    });
}
