//! `kubectl quorate` against a real kube-apiserver (quorate-testkit's, shared by the tests of
//! this binary, each in its own namespace): the commands parse as kubectl's flags, print every
//! `-o`, change exactly the annotations druid and quorate define, wait on conditions through a
//! watch, follow a defragmentation round on the member leases, and list a real S3 bucket (moto)
//! through the store Secret. The agents' part (publishing on the leases) is played by the test
//! with the agents' own types, as the operator's tests do.

use clap::Parser;
use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use quorate_api::Etcd;
use quorate_api::names::{LABEL_COMPONENT, LABEL_PART_OF, component};
use quorate_core::maintenance::defrag::{
    DEFRAG_ANNOTATION, DefragOutcome, DefragRecord, DefragRound, RoundReason,
};
use quorate_kubectl::{Io, KubectlError, Outcome, PluginCli};
use quorate_testkit::KubeApiServer;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const CLUSTER: &str = include_str!("../../../examples/etcd-cluster.yaml");

/// A namespace of the shared server, with the CRD installed.
struct Env {
    server: &'static KubeApiServer,
    client: Client,
    namespace: String,
}

async fn env(test: &str) -> Option<Env> {
    let (server, client, namespace) = quorate_testkit::etcd_test_namespace(test).await?;
    Some(Env {
        server,
        client,
        namespace,
    })
}

/// What one plugin run printed and returned.
struct Ran {
    result: Result<Outcome, KubectlError>,
    out: String,
    err: String,
}

impl Ran {
    fn ok(self) -> String {
        match self.result {
            Ok(Outcome::Success) => self.out,
            other => panic!("{other:?}\nstdout:\n{}\nstderr:\n{}", self.out, self.err),
        }
    }

    fn json(self) -> Value {
        let out = self.ok();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("-o json is not JSON ({e}):\n{out}"))
    }
}

impl Env {
    /// Runs `kubectl quorate ARGS` with `--kubeconfig` of the test server and `-n` of the test.
    async fn run(&self, args: &[&str]) -> Ran {
        let kubeconfig = self.server.kubeconfig().display().to_string();
        let mut argv = vec![
            "kubectl-quorate",
            "--kubeconfig",
            &kubeconfig,
            "-n",
            &self.namespace,
        ];
        argv.extend_from_slice(args);
        self.run_argv(&argv).await
    }

    async fn run_argv(&self, argv: &[&str]) -> Ran {
        let cli = PluginCli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = {
            let mut io = Io {
                out: &mut out,
                err: &mut err,
            };
            quorate_kubectl::run(cli.args, &mut io).await
        };
        Ran {
            result,
            out: String::from_utf8(out).unwrap(),
            err: String::from_utf8(err).unwrap(),
        }
    }

    fn etcds(&self) -> Api<Etcd> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the example cluster as `name`, with `labels`.
    async fn create_etcd(&self, name: &str, labels: &[(&str, &str)]) -> Etcd {
        let mut etcd: Etcd = serde_saphyr::from_str(CLUSTER).expect("example parses");
        etcd.metadata.name = Some(name.to_string());
        etcd.metadata.namespace = Some(self.namespace.clone());
        etcd.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        self.etcds()
            .create(&PostParams::default(), &etcd)
            .await
            .expect("create the Etcd")
    }

    /// Sets the Etcd's `Ready` condition as the operator reports quorum.
    async fn set_ready(&self, name: &str, status: &str) {
        let now = jiff::Timestamp::now().to_string();
        let patch = json!({"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": if status == "True" { "Quorate" } else { "QuorumLost" },
            "message": "as the test says", "lastTransitionTime": now, "lastUpdateTime": now,
        }]}});
        self.etcds()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch the Etcd's status");
    }

    async fn annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.etcds()
            .get(name)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
    }

    /// The member leases of `name` as the operator creates them and the agents renew them.
    async fn create_leases(&self, name: &str, members: u32) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        for i in 0..members {
            let role = if i == 0 { "Leader" } else { "Member" };
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("{name}-{i}"),
                    "labels": {LABEL_PART_OF: name, LABEL_COMPONENT: component::MEMBER_LEASE},
                    "annotations": {
                        "quorate.io/data-state": format!("{{\"data\":\"present\",\"revision\":{}}}", 40 + i),
                        "quorate.io/etcd-version": "3.6.7",
                    },
                },
                "spec": {
                    "holderIdentity": format!("{:x}:{:x}:{role}", 0x1000 + i, 0xc1u32),
                    "renewTime": "2026-11-28T10:00:00.000000Z",
                },
            }))
            .unwrap();
            leases.create(&PostParams::default(), &lease).await.unwrap();
        }
    }

    /// Publishes member `i`'s defragmentation record as its agent does.
    async fn publish_defrag(&self, name: &str, i: u32, request: &str, error: Option<&str>) {
        let at: jiff::Timestamp = "2026-11-28T10:00:00Z".parse().unwrap();
        let record = DefragRecord {
            round: Some(DefragRound {
                id: 7,
                reason: RoundReason::OnDemand,
                started_at: at,
                request: Some(request.to_string()),
                revision: 40,
            }),
            last: Some(DefragOutcome {
                round: 7,
                at,
                size_before: 64 << 20,
                size_after: 16 << 20,
                millis: 1200,
                skipped: false,
                error: error.map(str::to_string),
            }),
        };
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let patch =
            json!({"metadata": {"annotations": {DEFRAG_ANNOTATION: record.to_annotation()}}});
        leases
            .patch(
                &format!("{name}-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn get_prints_druids_columns_and_every_output_format() {
    let Some(env) = env("kubectl_get").await else {
        return;
    };
    env.create_etcd("etcd-a", &[("team", "a")]).await;
    env.create_etcd("etcd-b", &[("team", "b")]).await;
    env.set_ready("etcd-a", "True").await;

    let table = env.run(&["get", "etcd"]).await.ok();
    let header = table.lines().next().unwrap();
    for column in [
        "NAME",
        "READY",
        "QUORATE",
        "ALL MEMBERS READY",
        "BACKUP READY",
        "AGE",
    ] {
        assert!(header.contains(column), "{table}");
    }
    assert!(
        table.contains("etcd-a") && table.contains("etcd-b"),
        "{table}"
    );
    let wide = env.run(&["get", "etcd", "-o", "wide"]).await.ok();
    assert!(
        wide.lines().next().unwrap().len() > header.len(),
        "wide adds columns:\n{wide}"
    );

    let one = env
        .run(&["get", "etcd", "etcd-a", "-o", "json"])
        .await
        .json();
    assert_eq!(one["kind"], "Etcd");
    assert_eq!(one["metadata"]["name"], "etcd-a");
    assert_eq!(one["status"]["conditions"][0]["status"], "True");
    let list = env.run(&["get", "etcd", "-o", "json"]).await.json();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    let yaml = env.run(&["get", "etcd", "etcd-b", "-o", "yaml"]).await.ok();
    let parsed: Value = serde_saphyr::from_str(&yaml).expect("-o yaml parses");
    assert_eq!(parsed["metadata"]["name"], "etcd-b");

    let names = env.run(&["get", "etcd", "-o", "name"]).await.ok();
    assert_eq!(
        names,
        "etcd.druid.gardener.cloud/etcd-a\netcd.druid.gardener.cloud/etcd-b\n"
    );
    let path = env
        .run(&["get", "etcd", "-o", "jsonpath={.items[*].metadata.name}"])
        .await
        .ok();
    assert_eq!(path, "etcd-a etcd-b");
    let quorate = env
        .run(&[
            "get",
            "etcd",
            "etcd-a",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ])
        .await
        .ok();
    assert_eq!(quorate, "True");

    // -l selects, -A adds the namespace column and finds them across namespaces.
    let selected = env
        .run(&["get", "etcd", "-l", "team=b", "-o", "name"])
        .await
        .ok();
    assert_eq!(selected, "etcd.druid.gardener.cloud/etcd-b\n");
    let all = env.run(&["get", "etcd", "-A", "-l", "team"]).await.ok();
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert!(
        all.lines()
            .any(|l| l.starts_with(&env.namespace) && l.contains("etcd-a")),
        "{all}"
    );

    // Without -n: the kubeconfig context's namespace (none set: default), as kubectl.
    let kubeconfig = env.server.kubeconfig().display().to_string();
    let elsewhere = env
        .run_argv(&[
            "kubectl-quorate",
            "--kubeconfig",
            &kubeconfig,
            "get",
            "etcd",
            "-l",
            "team=a",
        ])
        .await;
    assert!(elsewhere.out.is_empty(), "{}", elsewhere.out);
    assert!(
        elsewhere
            .err
            .contains("No resources found in default namespace."),
        "{}",
        elsewhere.err
    );
    let missing = env.run(&["get", "etcd", "etcd-x"]).await;
    assert!(
        matches!(&missing.result, Err(KubectlError::NotFound { name, .. }) if name == "etcd-x"),
        "{:?}",
        missing.result
    );
}

#[test]
fn flags_parse_as_kubectls_and_bad_values_are_named() {
    let cli = PluginCli::try_parse_from([
        "kubectl-quorate",
        "get",
        "etcd",
        "--context",
        "kind-a",
        "-A",
        "-l",
        "x=y",
        "-o",
        "jsonpath={.items}",
    ])
    .unwrap();
    assert_eq!(cli.args.flags.context.as_deref(), Some("kind-a"));
    assert!(cli.args.flags.all_namespaces);
    assert_eq!(cli.args.flags.selector.as_deref(), Some("x=y"));
    let refused = PluginCli::try_parse_from(["kubectl-quorate", "get", "etcd", "-o", "xml"])
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("unknown output format \"xml\""),
        "{refused}"
    );
    let refused =
        PluginCli::try_parse_from(["kubectl-quorate", "wait", "etcd-main", "--for=delete"])
            .unwrap_err()
            .to_string();
    assert!(refused.contains("only conditions"), "{refused}");
    let refused =
        PluginCli::try_parse_from(["kubectl-quorate", "defrag", "etcd-main", "--timeout", "0s"])
            .unwrap_err()
            .to_string();
    assert!(refused.contains("is zero"), "{refused}");
}

#[tokio::test]
async fn suspend_resume_reconcile_and_protect_set_druids_annotations() {
    let Some(env) = env("kubectl_annotate").await else {
        return;
    };
    env.create_etcd("etcd-main", &[("team", "a")]).await;
    env.create_etcd("etcd-events", &[("team", "a")]).await;
    const SUSPEND: &str = "druid.gardener.cloud/suspend-etcd-spec-reconcile";
    const OPERATION: &str = "druid.gardener.cloud/operation";
    const UNPROTECTED: &str = "druid.gardener.cloud/disable-etcd-component-protection";

    let out = env.run(&["suspend", "etcd-main"]).await.ok();
    assert_eq!(out, "etcd.druid.gardener.cloud/etcd-main suspended\n");
    assert!(env.annotations("etcd-main").await.contains_key(SUSPEND));
    assert!(!env.annotations("etcd-events").await.contains_key(SUSPEND));

    // druidctl's rule: no reconcile request an operator would ignore.
    let refused = env.run(&["reconcile", "etcd-main"]).await;
    assert!(
        matches!(&refused.result, Err(KubectlError::Usage(m)) if m.contains("resume etcd-main")),
        "{:?}",
        refused.result
    );
    assert!(!env.annotations("etcd-main").await.contains_key(OPERATION));

    let resumed = env.run(&["resume", "etcd-main", "-o", "json"]).await.json();
    assert_eq!(resumed["metadata"]["name"], "etcd-main");
    assert!(resumed["metadata"]["annotations"].get(SUSPEND).is_none());
    assert!(!env.annotations("etcd-main").await.contains_key(SUSPEND));

    let out = env
        .run(&["reconcile", "etcd-main", "-o", "name"])
        .await
        .ok();
    assert_eq!(out, "etcd.druid.gardener.cloud/etcd-main\n");
    assert_eq!(
        env.annotations("etcd-main")
            .await
            .get(OPERATION)
            .map(String::as_str),
        Some("reconcile")
    );

    // Several at once by selector; nothing named and nothing selected is refused.
    let refused = env.run(&["protect", "off"]).await;
    assert!(
        matches!(&refused.result, Err(KubectlError::Usage(m)) if m.contains("-l SELECTOR or -A")),
        "{:?}",
        refused.result
    );
    let out = env.run(&["protect", "off", "-l", "team=a"]).await.ok();
    assert_eq!(
        out,
        "etcd.druid.gardener.cloud/etcd-events unprotected\netcd.druid.gardener.cloud/etcd-main unprotected\n"
    );
    for name in ["etcd-main", "etcd-events"] {
        assert_eq!(
            env.annotations(name)
                .await
                .get(UNPROTECTED)
                .map(String::as_str),
            Some("true")
        );
    }
    env.run(&["protect", "on", "etcd-events"]).await.ok();
    assert!(
        !env.annotations("etcd-events")
            .await
            .contains_key(UNPROTECTED)
    );
    assert!(env.annotations("etcd-main").await.contains_key(UNPROTECTED));
}

#[tokio::test]
async fn members_and_defrag_read_what_the_agents_publish_on_the_leases() {
    let Some(env) = env("kubectl_members").await else {
        return;
    };
    env.create_etcd("etcd-main", &[]).await;
    env.create_leases("etcd-main", 3).await;

    let members = env
        .run(&["members", "etcd-main", "-o", "json"])
        .await
        .json();
    let items = members["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{members}");
    assert_eq!(items[0]["name"], "etcd-main-0");
    assert_eq!(items[0]["id"], "1000");
    assert_eq!(items[0]["clusterId"], "c1");
    assert_eq!(items[0]["role"], "Leader");
    assert_eq!(items[2]["role"], "Member");
    assert_eq!(items[1]["etcdVersion"], "3.6.7");
    assert_eq!(
        items[1]["published"]["quorate.io/data-state"]["revision"],
        41
    );
    let table = env.run(&["members", "etcd-main"]).await.ok();
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("etcd-main-0")
            && l.contains("Leader")
            && l.contains("present (revision 40)")),
        "{table}"
    );
    let names = env.run(&["members", "etcd-main", "-o", "name"]).await.ok();
    assert_eq!(names.lines().count(), 3);
    assert!(names.starts_with("lease.coordination.k8s.io/etcd-main-0\n"));

    // Without agents nobody answers the request: the wait ends at its timeout and says so.
    let unanswered = env.run(&["defrag", "etcd-main", "--timeout", "1s"]).await;
    assert!(
        matches!(&unanswered.result, Err(KubectlError::Timeout { .. })),
        "{:?}",
        unanswered.result
    );
    let annotations = env.annotations("etcd-main").await;
    assert!(
        annotations
            .get("quorate.io/defragment")
            .is_some_and(|id| id.starts_with("defrag-")),
        "{annotations:?}"
    );
    // With the reconcile request that passes it on to the agents' configuration.
    assert_eq!(
        annotations
            .get("druid.gardener.cloud/operation")
            .map(String::as_str),
        Some("reconcile")
    );
    // On a suspended Etcd the operator would pass nothing on: refused, nothing set.
    env.run(&["suspend", "etcd-main"]).await.ok();
    let refused = env.run(&["defrag", "etcd-main"]).await;
    assert!(
        matches!(&refused.result, Err(KubectlError::Usage(m)) if m.contains("resume etcd-main")),
        "{:?}",
        refused.result
    );
    assert_eq!(
        env.annotations("etcd-main")
            .await
            .get("quorate.io/defragment"),
        annotations.get("quorate.io/defragment")
    );
    env.run(&["resume", "etcd-main"]).await.ok();

    // The agents' part: once the request is on the Etcd, every member publishes its outcome
    // for the round that took it up; one member's failure makes the command fail.
    let before = env
        .annotations("etcd-main")
        .await
        .get("quorate.io/defragment")
        .cloned();
    let agents = {
        let etcds = env.etcds();
        let (client, namespace) = (env.client.clone(), env.namespace.clone());
        let server = env.server;
        tokio::spawn(async move {
            let env = Env {
                server,
                client,
                namespace,
            };
            let requested = |etcd: &Etcd| {
                etcd.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("quorate.io/defragment"))
                    .cloned()
            };
            let newer = {
                let before = before.clone();
                move |etcd: Option<&Etcd>| {
                    etcd.is_some_and(|e| requested(e).is_some() && requested(e) != before)
                }
            };
            let etcd = kube::runtime::wait::await_condition(etcds, "etcd-main", newer)
                .await
                .unwrap()
                .unwrap();
            let request = requested(&etcd).unwrap();
            env.publish_defrag("etcd-main", 1, &request, None).await;
            env.publish_defrag("etcd-main", 2, &request, Some("context deadline exceeded"))
                .await;
            env.publish_defrag("etcd-main", 0, &request, None).await;
        })
    };
    let done = env
        .run(&["defrag", "etcd-main", "--timeout", "60s", "-o", "json"])
        .await;
    agents.await.unwrap();
    assert_eq!(
        done.result.as_ref().ok(),
        Some(&Outcome::Failed),
        "{:?}\n{}",
        done.result,
        done.err
    );
    let result: Value = serde_json::from_str(&done.out).expect("-o json parses");
    assert_eq!(result["kind"], "DefragmentationResult");
    assert_eq!(result["done"], true);
    let members = result["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{result}");
    assert_eq!(members[0]["result"], "defragmented");
    assert_eq!(members[0]["sizeAfter"], 16 << 20);
    assert_eq!(members[2]["result"], "failed: context deadline exceeded");
    assert!(
        done.err.contains("defragmentation requested (defrag-"),
        "{}",
        done.err
    );
}

#[tokio::test]
async fn wait_resolves_on_the_etcds_condition() {
    let Some(env) = env("kubectl_wait").await else {
        return;
    };
    env.create_etcd("etcd-main", &[]).await;
    let early = env
        .run(&[
            "wait",
            "etcd-main",
            "--for=condition=Ready",
            "--timeout",
            "1s",
        ])
        .await;
    assert!(
        matches!(&early.result, Err(KubectlError::Timeout { what, .. }) if what.contains("Ready=True")),
        "{:?}",
        early.result
    );
    env.set_ready("etcd-main", "False").await;
    let met = env
        .run(&[
            "wait",
            "etcd-main",
            "--for=condition=ready=false",
            "--timeout",
            "30s",
        ])
        .await
        .ok();
    assert_eq!(met, "etcd.druid.gardener.cloud/etcd-main condition met\n");

    // A wait that starts before the condition holds ends when the status changes.
    let waiting = {
        let kubeconfig = env.server.kubeconfig().display().to_string();
        let namespace = env.namespace.clone();
        tokio::spawn(async move {
            let cli = PluginCli::try_parse_from([
                "kubectl-quorate",
                "--kubeconfig",
                &kubeconfig,
                "-n",
                &namespace,
                "wait",
                "etcd-main",
                "--for",
                "condition=Ready",
                "--timeout",
                "60s",
                "-o",
                "json",
            ])
            .unwrap();
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let mut io = Io {
                out: &mut out,
                err: &mut err,
            };
            let result = quorate_kubectl::run(cli.args, &mut io).await;
            (
                result.map_err(|e| e.to_string()),
                String::from_utf8(out).unwrap(),
            )
        })
    };
    env.set_ready("etcd-main", "True").await;
    let (result, out) = waiting.await.unwrap();
    assert_eq!(result, Ok(Outcome::Success));
    let etcd: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(etcd["status"]["conditions"][0]["status"], "True");
}

#[tokio::test]
async fn recover_shows_the_state_and_requests_only_with_yes() {
    let Some(env) = env("kubectl_recover").await else {
        return;
    };
    env.create_etcd("etcd-main", &[]).await;
    env.create_leases("etcd-main", 3).await;
    env.set_ready("etcd-main", "True").await;
    let healthy = env
        .run(&["recover", "etcd-main", "--yes", "-o", "json"])
        .await
        .json();
    assert_eq!(healthy["action"], "none");
    assert!(
        !env.annotations("etcd-main")
            .await
            .contains_key("quorate.io/recover")
    );

    env.set_ready("etcd-main", "False").await;
    let dry = env.run(&["recover", "etcd-main"]).await.ok();
    assert!(dry.contains("has no quorum"), "{dry}");
    assert!(
        dry.contains("kubectl quorate recover etcd-main --yes"),
        "{dry}"
    );
    assert!(
        !env.annotations("etcd-main")
            .await
            .contains_key("quorate.io/recover")
    );
    let plan = env
        .run(&["recover", "etcd-main", "-o", "json"])
        .await
        .json();
    assert_eq!(plan["action"], "dryRun");
    assert_eq!(plan["members"].as_array().unwrap().len(), 3);

    let requested = env
        .run(&["recover", "etcd-main", "--yes", "-o", "json"])
        .await
        .json();
    assert_eq!(requested["action"], "requested");
    let id = requested["request"].as_str().unwrap().to_string();
    assert!(id.starts_with("recover-"), "{id}");
    let annotations = env.annotations("etcd-main").await;
    assert_eq!(annotations.get("quorate.io/recover"), Some(&id));
    assert_eq!(
        annotations
            .get("druid.gardener.cloud/operation")
            .map(String::as_str),
        Some("reconcile")
    );
}

#[tokio::test]
async fn backups_list_reads_the_bucket_through_the_store_secret() {
    let Some(moto) = quorate_testkit::moto::MotoServer::start("kubectl-bucket") else {
        return;
    };
    let Some(env) = env("kubectl_backups").await else {
        return;
    };
    let keys = [
        ("accessKeyID", "kubectl-access"),
        ("secretAccessKey", "kubectl-secret"),
        ("region", "us-east-1"),
        ("endpoint", moto.endpoint.as_str()),
        ("s3ForcePathStyle", "true"),
    ];
    // Two snapshots written with the agents' store code.
    let dir = tempfile::tempdir().unwrap();
    for (k, v) in keys {
        std::fs::write(dir.path().join(k), v).unwrap();
    }
    let spec = quorate_api::StoreSpec {
        container: Some(moto.bucket.clone()),
        endpoint_override: None,
        prefix: "etcd-main".to_string(),
        provider: Some("aws".to_string()),
        secret_ref: Some(k8s_openapi::api::core::v1::SecretReference {
            name: Some("etcd-backup".to_string()),
            namespace: None,
        }),
    };
    let store = quorate_backup::store::SnapStore::open(
        &spec,
        &quorate_backup::store::StoreOptions {
            local_root: dir.path().to_path_buf(),
            secret_dir: Some(dir.path().to_path_buf()),
            encryption_keys: None,
        },
    )
    .unwrap();
    use quorate_backup::layout::SnapshotName;
    let body = |b: &'static [u8]| {
        futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(b))])
    };
    store
        .upload(&SnapshotName::full(10, 1_764_320_000, None), body(b"full"))
        .await
        .unwrap();
    store
        .upload(
            &SnapshotName::incr(11, 25, 1_764_320_060, None),
            body(b"delta"),
        )
        .await
        .unwrap();

    let mut etcd = env.create_etcd("etcd-main", &[]).await;
    // Without the Secret: a clear error naming it.
    etcd.spec.backup.store = Some(spec.clone());
    let patch = json!({"spec": {"backup": {"store": spec}}});
    env.etcds()
        .patch("etcd-main", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let missing = env.run(&["backups", "list", "etcd-main"]).await;
    assert!(
        matches!(&missing.result, Err(KubectlError::Usage(m)) if m.contains("etcd-backup") && m.contains("does not exist")),
        "{:?}",
        missing.result
    );
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("etcd-backup".into()),
            ..Default::default()
        },
        data: Some(
            keys.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let listed = env
        .run(&["backups", "list", "etcd-main", "-o", "json"])
        .await
        .json();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{listed}");
    assert_eq!(items[0]["kind"], "Full");
    assert_eq!(items[0]["lastRevision"], 10);
    assert_eq!(items[1]["kind"], "Incr");
    assert_eq!(
        (
            items[1]["startRevision"].clone(),
            items[1]["lastRevision"].clone()
        ),
        (json!(11), json!(25))
    );
    let table = env.run(&["backups", "list", "etcd-main"]).await.ok();
    assert!(table.starts_with("KIND"), "{table}");
    assert_eq!(table.lines().count(), 3, "{table}");
    let names = env
        .run(&[
            "backups",
            "list",
            "etcd-main",
            "-o",
            "jsonpath={.items[*].lastRevision}",
        ])
        .await
        .ok();
    assert_eq!(names, "10 25");

    // The guided restore names this Etcd, its Secret and the point, and writes the keys.
    let keys_dir = dir.path().join("restore-store");
    let guide = env
        .run(&[
            "restore",
            "etcd-main",
            "--to-time",
            "2026-11-28T09:00:00Z",
            "--secret-dir",
            keys_dir.to_str().unwrap(),
        ])
        .await
        .ok();
    assert!(
        guide.contains("--to-time 2026-11-28T09:00:00Z --data-dir /tmp/pitr"),
        "{guide}"
    );
    assert!(guide.contains("name: etcd-main-pitr"), "{guide}");
    assert!(
        guide.contains("prefix: etcd-main-etcd-main-pitr"),
        "{guide}"
    );
    assert_eq!(
        std::fs::read_to_string(keys_dir.join("accessKeyID")).unwrap(),
        "kubectl-access"
    );
}
