//! Scenario 16: `kubectl quorate`, the plugin, as a user runs it: the `quorate` binary linked
//! as `kubectl-quorate` into a directory on kubectl's PATH, run by kubectl against the cluster
//! under test. It drives a defragmentation round, a suspend and resume, a recover (first with
//! quorum, when nothing is requested; then after a real quorum loss that quorate will not heal
//! by itself), a `backups list` of the Local bucket through the store Secret, and a `wait`;
//! every `-o json` it prints must parse and say what the cluster shows.
//!
//! The plugin binary: `QUORATE_E2E_PLUGIN`, else `kubectl-quorate` on the PATH, else the
//! release `quorate` `scripts/image.sh` builds for the image (`$CARGO_TARGET_DIR`, else
//! `~/.cache/quorate/target`), else `target/release/quorate` of the workspace.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use quorate_api::Etcd;
use quorate_api::annotations::SUSPEND_ETCD_SPEC_RECONCILE;
use quorate_e2e::members::{ListedMember, etcdctl, local_value, member_list, wait_for_voters};
use quorate_e2e::nodes::{UncordonOnDrop, cordon, node_of, uncordon};
use quorate_e2e::{E2eEnv, Scenario, condition_status, status_summary, wait_for};
use serde_json::Value;

use crate::READY_TIMEOUT;

/// The survivor's lease annotation recording a quorum recovery (core's
/// `membership::recovery::RECOVERY_ANNOTATION`; s7 reads it too).
const RECOVERY_ANNOTATION: &str = "quorate.io/recovery";

/// The binary to run as the plugin.
fn plugin_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("QUORATE_E2E_PLUGIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("kubectl-quorate");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    // Where scripts/image.sh builds the image's binary: $CARGO_TARGET_DIR, else
    // ~/.cache/quorate/target; then the workspace's own target directory.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let candidates: Vec<PathBuf> = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([home.join(".cache/quorate/target"), workspace.join("target")])
        .map(|target| target.join("release/quorate"))
        .collect();
    candidates
        .iter()
        .find(|c| c.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no plugin binary: set QUORATE_E2E_PLUGIN to a quorate binary, put \
                 kubectl-quorate on the PATH, or build one of {candidates:?} (cargo build \
                 --release -p quorate)"
            )
        })
}

/// kubectl with the plugin on its PATH.
struct Plugin {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    dir: tempfile_dir::Dir,
}

/// A private directory for the plugin link, removed when dropped.
mod tempfile_dir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            let dir = std::env::temp_dir().join(format!(
                "quorate-e2e-plugin-{}-{}",
                std::process::id(),
                jiff::Timestamp::now().as_nanosecond()
            ));
            std::fs::create_dir_all(&dir).expect("plugin directory");
            Dir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Plugin {
    fn install(env: &E2eEnv, namespace: &str) -> Plugin {
        let dir = tempfile_dir::Dir::new();
        std::os::unix::fs::symlink(plugin_binary(), dir.path().join("kubectl-quorate"))
            .expect("link kubectl-quorate");
        Plugin {
            kubectl: env.kubectl.clone(),
            kubeconfig: env.kubeconfig.clone(),
            namespace: namespace.to_string(),
            dir,
        }
    }

    /// `kubectl quorate --kubeconfig … -n NS ARGS`: its standard output, after checking it
    /// succeeded.
    async fn run(&self, args: &[&str]) -> String {
        let mut paths = vec![self.dir.path().to_path_buf()];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        let started = Instant::now();
        let out = tokio::process::Command::new(&self.kubectl)
            .arg("quorate")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["-n", &self.namespace])
            .args(args)
            .env("PATH", std::env::join_paths(paths).expect("PATH"))
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output()
            .await
            .expect("run kubectl quorate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl quorate {args:?} failed ({}) after {:.1}s:\n{stderr}",
            out.status,
            started.elapsed().as_secs_f64()
        );
        if !stderr.trim().is_empty() {
            println!("kubectl quorate {args:?}: {}", stderr.trim_end());
        }
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    async fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args).await;
        serde_json::from_str(&out).unwrap_or_else(|e| {
            panic!("kubectl quorate {args:?} -o json is not JSON ({e}):\n{out}")
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_kubectl_plugin_defrag_suspend_resume_recover_backups() {
    let Some(env) =
        E2eEnv::from_env_or_skip("s16_kubectl_plugin_defrag_suspend_resume_recover_backups")
    else {
        return;
    };
    let mut s = Scenario::start(&env, "s16").await;
    let name = "etcd-kp";
    // One member per node on node-bound volumes: the recover below stops two members by
    // holding their pods off their nodes.
    s.create_one_per_node(name).await;
    let plugin = Plugin::install(&env, &s.namespace);
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &s.namespace);

    // get: the object as the API has it.
    let etcd = plugin.json(&["get", "etcd", name, "-o", "json"]).await;
    assert_eq!(etcd["metadata"]["name"], name);
    assert_eq!(etcd["status"]["ready"], true, "{etcd}");
    let table = plugin.run(&["get", "etcd", "-o", "wide"]).await;
    println!("{}", table.trim_end());
    assert!(table.lines().any(|l| l.starts_with(name)), "{table}");

    // members: three, one leader, each with its etcd member ID, as the agents publish them.
    let members = plugin.json(&["members", name, "-o", "json"]).await;
    let items = members["items"].as_array().expect("items");
    assert_eq!(items.len(), 3, "{members}");
    assert_eq!(
        items.iter().filter(|m| m["role"] == "Leader").count(),
        1,
        "{members}"
    );
    assert!(items.iter().all(|m| m["id"].is_string()), "{members}");
    println!(
        "{}",
        plugin
            .run(&["members", name, "-o", "wide"])
            .await
            .trim_end()
    );

    // defrag: the agents carry the round out, every member through it, none failed.
    let started = Instant::now();
    let round = plugin
        .json(&["defrag", name, "--timeout", "10m", "-o", "json"])
        .await;
    s.measure(
        "defragmentation round through the plugin",
        format!("{:.1}s", started.elapsed().as_secs_f64()),
    );
    assert_eq!(round["done"], true, "{round}");
    let through = round["members"].as_array().expect("members");
    assert_eq!(through.len(), 3, "{round}");
    assert!(
        through.iter().all(|m| m["error"].is_null()),
        "a member's defragmentation failed: {round}"
    );

    // suspend / resume: druid's annotation on and off, the cluster stays ready.
    let suspended = plugin.json(&["suspend", name, "-o", "json"]).await;
    assert!(
        suspended["metadata"]["annotations"][SUSPEND_ETCD_SPEC_RECONCILE].is_string(),
        "{suspended}"
    );
    let resumed = plugin.run(&["resume", name]).await;
    assert_eq!(
        resumed,
        format!("etcd.druid.gardener.cloud/{name} resumed\n")
    );
    let stored = etcds.get(name).await.expect("the Etcd");
    assert!(
        !stored
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(SUSPEND_ETCD_SPEC_RECONCILE)
    );

    // recover: with quorum there is nothing to recover, and nothing is requested, even with --yes.
    let plan = plugin.json(&["recover", name, "-o", "json"]).await;
    assert_eq!(plan["action"], "none", "{plan}");
    assert_eq!(plan["members"].as_array().map(Vec::len), Some(3), "{plan}");
    let stored = etcds.get(name).await.expect("the Etcd");
    assert!(
        !stored
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(quorate_api::annotations::RECOVER)
    );

    recover_after_a_real_quorum_loss(&mut s, &plugin, name).await;

    // backups list: the Local bucket through the store Secret's hostPath (the node's
    // filesystem is this machine's on the node kit).
    if env.node_is_local() {
        let listed = plugin.json(&["backups", "list", name, "-o", "json"]).await;
        let snapshots = listed["items"].as_array().expect("items");
        assert!(
            snapshots.iter().any(|s| s["kind"] == "Full"),
            "no full snapshot listed: {listed}"
        );
        s.record_number("snapshots listed", snapshots.len());
    } else {
        println!("backups list skipped: the node's filesystem is not this machine's");
    }

    // wait: the condition holds, so it returns at once with the object.
    let ready = plugin
        .json(&[
            "wait",
            name,
            "--for=condition=Ready",
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(ready["metadata"]["name"], name);
    s.pass().await;
}

/// Two members stop with their data kept: their nodes are cordoned and their pods deleted, so
/// the replacements wait for the volumes on those nodes. Their agents' last word is `present`,
/// so quorate waits (silence is not evidence) and says so; the plugin's dry run shows the loss
/// and `--yes` requests the recovery. The survivor becomes a one-member cluster with its data,
/// recording the request on its lease; once the nodes take pods again, the other two move their
/// data aside and rejoin as learners, and every write acknowledged before the loss is on all
/// three.
async fn recover_after_a_real_quorum_loss(s: &mut Scenario, plugin: &Plugin, name: &str) {
    let ns = s.namespace.clone();
    let survivor = format!("{name}-0");
    let (key, value) = ("e2e/s16", "acknowledged-before-the-loss");
    etcdctl(&s.cluster, &ns, &survivor, &["put", key, value])
        .await
        .ok();
    let before = member_list(&s.cluster, &ns, &survivor)
        .await
        .expect("member list");
    let pods: Api<Pod> = Api::namespaced(s.cluster.client.clone(), &ns);
    let stopped: Vec<String> = (1..3).map(|i| format!("{name}-{i}")).collect();
    let mut nodes = Vec::new();
    for member in &stopped {
        nodes.push(node_of(&pods, member).await.expect("a member's node"));
    }
    let _uncordon = UncordonOnDrop::new(&s.cluster, nodes.clone());
    for node in &nodes {
        cordon(&s.cluster, node).await;
    }
    for member in &stopped {
        s.cluster
            .kubectl(&["-n", &ns, "delete", "pod", member, "--wait=false"])
            .await
            .ok();
    }
    let etcds: Api<Etcd> = Api::namespaced(s.cluster.client.clone(), &ns);
    let lost = Instant::now();
    let plan = wait_for(
        "the dry run to show the loss and the members waiting",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let plan = plugin.json(&["recover", name, "-o", "json"]).await;
            let etcd = etcds.get(name).await.map_err(|e| e.to_string())?;
            if plan["action"] == "dryRun"
                && condition_status(etcd.status.as_ref(), "MembersWaiting") == "True"
            {
                Ok(plan)
            } else {
                Err(format!("{}; {}", plan["action"], status_summary(&etcd)))
            }
        },
    )
    .await;
    s.measure(
        "quorum lost → the dry run and MembersWaiting say so",
        format!("{:.1} s", lost.elapsed().as_secs_f64()),
    );
    assert_eq!(plan["members"].as_array().map(Vec::len), Some(3), "{plan}");

    let requested = plugin.json(&["recover", name, "--yes", "-o", "json"]).await;
    assert_eq!(requested["action"], "requested", "{requested}");
    let request = requested["request"]
        .as_str()
        .expect("the request ID")
        .to_string();
    let asked = Instant::now();
    let leases: Api<Lease> = Api::namespaced(s.cluster.client.clone(), &ns);
    let record = wait_for(
        "the survivor to record the recovery on its lease",
        READY_TIMEOUT,
        Duration::from_secs(1),
        || async {
            let lease = leases.get(&survivor).await.map_err(|e| e.to_string())?;
            let annotations = lease.metadata.annotations.unwrap_or_default();
            match annotations.get(RECOVERY_ANNOTATION) {
                Some(record) if record.contains(&request) => Ok(record.clone()),
                other => Err(format!("{RECOVERY_ANNOTATION}: {other:?}")),
            }
        },
    )
    .await;
    s.measure(
        "recover --yes → the survivor recovered",
        format!("{:.1} s", asked.elapsed().as_secs_f64()),
    );
    println!("  recovery: {record}");

    for node in &nodes {
        uncordon(&s.cluster, node).await;
    }
    let after = wait_for_voters(&s.cluster, &ns, &survivor, 3, READY_TIMEOUT).await;
    let ready = plugin
        .json(&[
            "wait",
            name,
            "--for=condition=AllMembersReady",
            "--timeout",
            "5m",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(ready["metadata"]["name"], name);
    s.measure(
        "recover --yes → 3 voters",
        format!("{:.1} s", asked.elapsed().as_secs_f64()),
    );
    let id_of = |list: &[ListedMember], member: &str| {
        list.iter()
            .find(|m| m.name == member)
            .map(|m| m.id)
            .unwrap_or_else(|| panic!("{member} is listed: {list:?}"))
    };
    assert_eq!(
        id_of(&after, &survivor),
        id_of(&before, &survivor),
        "the survivor kept its identity"
    );
    for member in &stopped {
        assert_ne!(
            id_of(&after, member),
            id_of(&before, member),
            "{member} was dropped and rejoined as a new member"
        );
        assert_eq!(
            local_value(&s.cluster, &ns, member, key).await,
            value,
            "{member} holds every write acknowledged before the loss"
        );
    }
}
