//! The monitoring bundle of `deploy/monitoring/` against the real thing: every metric its
//! dashboard and alert rules use is exported by a running agent (a local cluster with backups)
//! or operator (against a real kube-apiserver), the PrometheusRule holds the rules file's
//! groups, and promtool checks the rules and proves each alert with its unit tests.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Local, condition, eventually, path_str};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The quorate and etcd-backup-restore metric names a PromQL expression uses.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = ["quorate_", "etcdbr_"]
        .iter()
        .filter_map(|p| rest.find(p))
        .min()
    {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of the rules file and the dashboard.
fn expressions() -> Vec<String> {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/quorate.rules.yaml")).expect("rules YAML");
    let mut exprs: Vec<String> = rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .map(|r| r["expr"].as_str().expect("expr").to_string())
        .collect();
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/monitoring/grafana-dashboard.json")).expect("JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    exprs
}

/// The metric families a `/metrics` answer declares (`# TYPE <name> <type>`).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Whether series name `name` belongs to one of `families` (with the suffixes counters and
/// histograms add).
fn exported(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name)
        || ["_total", "_bucket", "_sum", "_count", "_created"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

/// promtool from `scripts/install-promtool.sh`, or on PATH; `None` (the checks are skipped)
/// only outside CI.
fn promtool() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let dir = std::env::var_os("QUORATE_PROMETHEUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/quorate/prometheus"));
    let found = [dir.join("promtool")]
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .map(|d| d.join("promtool")),
        )
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is missing; run scripts/install-promtool.sh"
        );
        println!("SKIPPED promtool checks: run scripts/install-promtool.sh");
    }
    found
}

#[test]
fn the_rules_check_and_every_alert_fires_only_when_it_should() {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/quorate.rules.yaml")).expect("rules");
    let custom: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/prometheusrule.yaml")).expect("YAML");
    assert_eq!(custom["kind"], "PrometheusRule");
    assert_eq!(
        custom["spec"]["groups"], rules["groups"],
        "prometheusrule.yaml must hold the groups of quorate.rules.yaml"
    );
    let Some(promtool) = promtool() else {
        return;
    };
    for args in [
        vec!["check", "rules", "deploy/monitoring/quorate.rules.yaml"],
        vec!["test", "rules", "deploy/monitoring/tests/quorate.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(&args)
            .current_dir(repo(""))
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert has its unit tests: one where it fires, one where it stays silent.
    let tests: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/monitoring/tests/quorate.test.yaml")).expect("tests");
    let cases: Vec<&serde_json::Value> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().expect("cases"))
        .collect();
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("alert");
            let of = |firing: bool| {
                cases.iter().any(|c| {
                    c["alertname"] == alert
                        && c["exp_alerts"]
                            .as_array()
                            .is_some_and(|a| a.is_empty() != firing)
                })
            };
            assert!(
                of(true) && of(false),
                "{alert} lacks a firing or a silent test"
            );
        }
    }
}

/// `GET http://<addr>/<path>` with a fresh connection; the body of a 200.
async fn get(addr: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The operator's `/metrics`, from `quorate operator` run against a real kube-apiserver;
/// `None` when no kube-apiserver is available outside CI.
async fn operator_metrics() -> Option<String> {
    let server =
        quorate_testkit::KubeApiServer::start_or_skip("the operator's metrics for the dashboard")
            .await?;
    // The CRDs, then an Etcd to reconcile so the per-cluster gauges have series (one after
    // the other: the Etcd needs its CRD established).
    for path in ["deploy/crds", "examples/etcd-cluster.yaml"] {
        let applied = server
            .kubectl()
            .args(["apply", "-f"])
            .arg(repo(path))
            .output()
            .expect("kubectl");
        assert!(
            applied.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }
    let addr = format!("127.0.0.1:{}", quorate_testkit::free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorate"));
    command
        .args(["operator", "--disable-webhooks", "--leader-election=false"])
        .arg(format!("--http-address={addr}"))
        .env("KUBECONFIG", server.kubeconfig())
        .env("QUORATE_LOG", "warn")
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .env_remove("IMAGEVECTOR_OVERWRITE");
    let _operator = quorate_testkit::ChildGuard::spawn(&mut command).expect("start the operator");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(metrics) = get(&addr, "/metrics").await
            && metrics.contains("quorate_operator_clusters{")
        {
            return Some(metrics);
        }
        assert!(
            Instant::now() < deadline,
            "the operator did not report the Etcd's conditions on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn every_metric_the_dashboard_and_alerts_use_is_exported() {
    let local = Local::new();
    let name = "watched";
    // With client TLS (certificates generated locally), so the certificate metrics are there.
    let path = local.manifest(
        "c.yaml",
        &support::canary::with_backups(name, 1).replace(
            "    heartbeatDuration: 1s\n",
            "    heartbeatDuration: 1s\n    clientUrlTls:\n      tlsCASecretRef: {name: ca}\n      \
             serverTLSSecretRef: {name: server}\n      clientTLSSecretRef: {name: client}\n",
        ),
    );
    local.ok(&["up", "-d", "-f", path_str(&path), "--timeout", "60s"]);
    eventually("BackupReady", Duration::from_secs(60), || {
        (condition(&local, name, "BackupReady")?.0 == "True").then_some(())
    });
    // etcd's own metrics: plain HTTP on --listen-metrics-urls, though clients need TLS.
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(local.cluster_dir(name).join("config.json")).unwrap(),
    )
    .unwrap();
    let metrics_port = config["members"][0]["metricsPort"]
        .as_u64()
        .expect("a metrics port") as u16;
    let (code, etcd) = support::http_get(metrics_port, "/metrics");
    assert_eq!(code, 200, "{etcd}");
    assert!(etcd.contains("etcd_server_has_leader 1"), "{etcd:.500}");
    let agent = local.agent_metrics(name, 0);
    let mut exporters = families(&agent);
    assert!(
        agent.contains(&format!(
            "quorate_member_up{{etcd=\"{name}\",member=\"{name}-0\"}} 1"
        )),
        "{agent}"
    );
    let runtime = support::runtime();
    let operator = runtime.block_on(operator_metrics());
    if let Some(operator) = &operator {
        exporters.extend(families(operator));
    }
    let mut missing = BTreeSet::new();
    for expr in expressions() {
        for metric in metric_names(&expr) {
            let from_operator = metric.starts_with("quorate_operator_");
            if from_operator && operator.is_none() {
                continue;
            }
            if !exported(&metric, &exporters) {
                missing.insert(metric);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "used by deploy/monitoring but exported by no agent or operator: {missing:?}\n\
         agent families: {exporters:?}"
    );
}
