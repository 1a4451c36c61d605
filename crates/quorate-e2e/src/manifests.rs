//! The YAML a user would `kubectl apply` in the scenarios: `Etcd`s, their Secrets, and the pods
//! that play client.

/// What an `Etcd` of a scenario looks like; sized for a 2-core node.
#[derive(Clone, Debug)]
pub struct EtcdShape<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// Namespace.
    pub namespace: &'a str,
    /// `spec.replicas`.
    pub replicas: u32,
    /// Backups to a `Local` store in this host directory (the store Secret's `hostPath`), a
    /// delta snapshot every 10 s; none when `None`.
    pub local_bucket: Option<&'a str>,
    /// Peer TLS from the Secrets of [`peer_tls_secrets`].
    pub peer_tls: bool,
    /// Client TLS from the Secrets of [`crate::tls::UserTls`] (made by the scenario), client
    /// certificates required.
    pub client_tls: bool,
    /// Ask for a reconcile (`gardener.cloud/operation: reconcile`): what applies a spec change
    /// when the operator runs without auto-reconcile, as druid's default does.
    pub reconcile: bool,
    /// `quorate.io/etcd-version`, when the shape chooses one.
    pub etcd_version: Option<&'a str>,
    /// The etcd container's CPU request (a pod template change when it changes).
    pub cpu: &'a str,
    /// The agents serve HTTPS (`spec.backup.tls`) with the Secrets `<name>-backup-ca`,
    /// `-backup-server` and `-backup-client` (made by the scenario, e.g. with
    /// [`crate::tls::backup_tls_secrets`]), requiring client certificates.
    pub backup_tls: bool,
    /// Encrypt the backups with the keys of this Secret (`quorate.io/backup-encryption-secret`),
    /// made with the `Etcd`: one key `k1`, active.
    pub backup_encryption_secret: Option<&'a str>,
    /// An annotation `e2e.quorate.io/revision` with this value on the member pods
    /// (`spec.annotations`): a pod template change no pod can take in place.
    pub pod_revision: Option<&'a str>,
}

/// The backup encryption key of [`EtcdShape::backup_encryption_secret`] (hex).
pub const BACKUP_KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The CPU request of [`EtcdShape`]s that do not choose one.
pub const DEFAULT_CPU: &str = "50m";

/// The delta snapshot period of [`EtcdShape::local_bucket`] clusters.
pub const DELTA_PERIOD_SECONDS: u64 = 10;

impl<'a> EtcdShape<'a> {
    /// `replicas` members named `name` in `namespace`, and nothing else: no backups, no TLS,
    /// no reconcile request, the default etcd version and CPU request. A scenario sets what it
    /// needs on top (`EtcdShape { local_bucket: …, ..EtcdShape::new(…) }`).
    pub fn new(name: &'a str, namespace: &'a str, replicas: u32) -> Self {
        EtcdShape {
            name,
            namespace,
            replicas,
            local_bucket: None,
            peer_tls: false,
            client_tls: false,
            reconcile: false,
            etcd_version: None,
            cpu: DEFAULT_CPU,
            backup_tls: false,
            backup_encryption_secret: None,
            pod_revision: None,
        }
    }
}

impl EtcdShape<'_> {
    /// The `Etcd` (and, with backups, its store Secret) as YAML.
    pub fn yaml(&self) -> String {
        let EtcdShape {
            name,
            namespace,
            replicas,
            ..
        } = self;
        let mut annotations = String::new();
        if self.reconcile {
            annotations.push_str("    gardener.cloud/operation: reconcile\n");
        }
        if let Some(version) = self.etcd_version {
            annotations.push_str(&format!("    quorate.io/etcd-version: \"{version}\"\n"));
        }
        let keys = match self.backup_encryption_secret {
            Some(secret) => {
                annotations.push_str(&format!(
                    "    quorate.io/backup-encryption-secret: {secret}\n"
                ));
                format!(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {secret}\n  namespace: \
                     {namespace}\ntype: Opaque\nstringData:\n  k1: {BACKUP_KEY_HEX}\n  active: k1\n---\n"
                )
            }
            None => String::new(),
        };
        if !annotations.is_empty() {
            annotations.insert_str(0, "  annotations:\n");
        }
        let cpu = self.cpu;
        let pod_annotations = match self.pod_revision {
            Some(r) => format!("  annotations:\n    e2e.quorate.io/revision: \"{r}\"\n"),
            None => String::new(),
        };
        let peer_tls = if self.peer_tls {
            format!(
                "    peerUrlTls:\n      tlsCASecretRef:\n        name: {name}-peer-ca\n        \
                 dataKey: ca.crt\n      serverTLSSecretRef:\n        name: {name}-peer-server\n"
            )
        } else {
            String::new()
        };
        let client_tls = if self.client_tls {
            format!(
                "    clientUrlTls:\n      tlsCASecretRef:\n        name: {name}-ca\n        \
                 dataKey: ca.crt\n      serverTLSSecretRef:\n        name: {name}-server\n      \
                 clientTLSSecretRef:\n        name: {name}-client-tls\n"
            )
        } else {
            String::new()
        };
        let backup_tls = if self.backup_tls {
            format!(
                "    tls:\n      tlsCASecretRef:\n        name: {name}-backup-ca\n        dataKey: ca.crt\n      \
                 serverTLSSecretRef:\n        name: {name}-backup-server\n      clientTLSSecretRef:\n        \
                 name: {name}-backup-client\n"
            )
        } else {
            String::new()
        };
        let (secret, backup) = match self.local_bucket {
            Some(dir) => (
                format!(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}-backup\n  namespace: \
                     {namespace}\ntype: Opaque\nstringData:\n  hostPath: {dir}\n---\n"
                ),
                format!(
                    r#"  backup:
    port: 8080
{backup_tls}    store:
      provider: Local
      container: backups
      prefix: {name}
      secretRef:
        name: {name}-backup
    fullSnapshotSchedule: "0 */1 * * *"
    deltaSnapshotPeriod: {DELTA_PERIOD_SECONDS}s
    garbageCollectionPolicy: LimitBased
    maxBackupsLimitBasedGC: 3
"#
                ),
            ),
            // druid's CRD requires the field; empty means no backups.
            None => (String::new(), "  backup: {}\n".to_string()),
        };
        format!(
            r#"{keys}{secret}apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: {name}
  namespace: {namespace}
{annotations}spec:
  replicas: {replicas}
{pod_annotations}  labels:
    app: {name}
  etcd:
    clientPort: 2379
    serverPort: 2380
{client_tls}{peer_tls}    resources:
      requests: {{cpu: {cpu}, memory: 64Mi}}
{backup}  storageCapacity: 1Gi
"#
        )
    }
}

impl EtcdShape<'_> {
    /// [`EtcdShape::yaml`] with one member per node and node-bound volumes, as on a cluster
    /// with local disks: the pods require different nodes (`spec.schedulingConstraints`, pod
    /// anti-affinity on `kubernetes.io/hostname`) and claim their volumes from the harness's
    /// [`crate::provisioner::NODE_LOCAL_CLASS`] (`spec.storageClass`), so a member stays with
    /// its node.
    pub fn yaml_one_per_node(&self) -> String {
        let name = self.name;
        let class = crate::provisioner::NODE_LOCAL_CLASS;
        format!(
            r#"{}  storageClass: {class}
  schedulingConstraints:
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app: {name}
"#,
            self.yaml()
        )
    }
}

/// Label of the scenarios' client pods (`e2e.quorate.io/role: client`): a drain leaves them
/// where they are (`kubectl drain --pod-selector`), so the client that watches a drain is not
/// itself drained.
pub const CLIENT_ROLE_LABEL: &str = "e2e.quorate.io/role";

/// The client URL of `etcd` through its `<name>-client` Service.
pub fn client_url(etcd: &str, namespace: &str) -> String {
    format!("http://{etcd}-client.{namespace}.svc:2379")
}

/// A pod that writes `key` through the `<name>-client` Service (init container) and reads it
/// back (main container), with the etcdctl of the quorate image.
pub fn client_pod(image: &str, etcd: &str, namespace: &str, key: &str, value: &str) -> String {
    let endpoint = client_url(etcd, namespace);
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {etcd}-client-check
  namespace: {namespace}
spec:
  restartPolicy: Never
  securityContext: {{runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}}
  initContainers:
  - name: put
    image: {image}
    command: [etcdctl, --endpoints={endpoint}, --dial-timeout=5s, --command-timeout=15s, put, "{key}", "{value}"]
  containers:
  - name: get
    image: {image}
    command: [etcdctl, --endpoints={endpoint}, --dial-timeout=5s, --command-timeout=15s, get, "{key}", --print-value-only]
"#
    )
}

/// [`canary_pod`] for an `Etcd` with client TLS: through `https://<etcd>-client`, trusting the
/// CA and presenting the certificate of the Secret `<etcd>-client-tls`, mounted at `/tls`.
pub fn tls_canary_pod(image: &str, etcd: &str, namespace: &str, write_timeout: &str) -> String {
    let plain = canary_pod(image, etcd, namespace, write_timeout);
    let https = client_url(etcd, namespace).replace("http://", "https://");
    plain.replace(&client_url(etcd, namespace), &https).replace(
        "--report-every=1s]",
        "--report-every=1s, --cacert=/tls/ca.crt, --cert=/tls/tls.crt, --key=/tls/tls.key]\n    \
             volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]",
    ) + &format!("  volumes: [{{name: tls, secret: {{secretName: {etcd}-client-tls}}}}]\n")
}

/// A pod that trusts the client CA of `etcd` but has no client certificate and tries to write
/// through `https://<etcd>-client`: it must fail (phase `Failed`).
pub fn certless_client_pod(image: &str, etcd: &str, namespace: &str) -> String {
    let https = client_url(etcd, namespace).replace("http://", "https://");
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {etcd}-no-cert
  namespace: {namespace}
spec:
  restartPolicy: Never
  securityContext: {{runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}}
  containers:
  - name: put
    image: {image}
    command: [etcdctl, --endpoints={https}, --cacert=/tls/ca.crt, --dial-timeout=5s, --command-timeout=10s, put, no-cert, written]
    volumeMounts: [{{name: tls, mountPath: /tls, readOnly: true}}]
  volumes: [{{name: tls, secret: {{secretName: {etcd}-ca}}}}]
"#
    )
}

/// The writer pod `<etcd>-canary`: `quorate canary` writing `canary/<n>` through the client
/// Service every 100 ms, each write retried for up to `write_timeout` before it counts as failed; its log
/// is one JSON line of running totals per second.
pub fn canary_pod(image: &str, etcd: &str, namespace: &str, write_timeout: &str) -> String {
    canary_pod_through(
        image,
        etcd,
        namespace,
        write_timeout,
        &client_url(etcd, namespace),
    )
}

/// [`canary_pod`] writing to each of the `members` members of `etcd` directly
/// (`http://<etcd>-<i>.<etcd>-peer.<namespace>.svc:2379`), as an etcd client given every member
/// does: an attempt without an answer within a second moves to the next member. Through the
/// client Service a connection to a lost node's member hangs until the node controller marks the
/// pod NotReady (about 50 s), whatever the cluster does; this canary measures the cluster.
pub fn canary_pod_all_members(
    image: &str,
    etcd: &str,
    namespace: &str,
    members: u32,
    write_timeout: &str,
) -> String {
    let endpoints: Vec<String> = (0..members)
        .map(|i| format!("http://{etcd}-{i}.{etcd}-peer.{namespace}.svc:2379"))
        .collect();
    canary_pod_through(image, etcd, namespace, write_timeout, &endpoints.join(","))
}

fn canary_pod_through(
    image: &str,
    etcd: &str,
    namespace: &str,
    write_timeout: &str,
    endpoint: &str,
) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {etcd}-canary
  namespace: {namespace}
  labels: {{{CLIENT_ROLE_LABEL}: client}}
spec:
  restartPolicy: Never
  securityContext: {{runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}}
  containers:
  - name: canary
    image: {image}
    command: [quorate, canary, "--endpoints={endpoint}", --prefix=canary/, --interval=100ms, --write-timeout={write_timeout}, --report-every=1s]
    # Each failed attempt and endpoint change in the log (they go to stderr; the totals stay
    # on stdout), so a failed write can be explained afterwards.
    env: [{{name: QUORATE_LOG, value: "info,quorate=debug,quorate_etcd=debug"}}]
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command_of(pod_yaml: &str) -> Vec<String> {
        let pod: serde_json::Value = serde_saphyr::from_str(pod_yaml).expect("the pod parses");
        serde_json::from_value(pod["spec"]["containers"][0]["command"].clone())
            .expect("a list of strings")
    }

    #[test]
    fn the_all_members_canary_gets_every_member_in_one_argument() {
        let command = command_of(&canary_pod_all_members("img:1", "etcd-a", "ns", 3, "5s"));
        assert_eq!(
            command[2],
            "--endpoints=http://etcd-a-0.etcd-a-peer.ns.svc:2379,\
             http://etcd-a-1.etcd-a-peer.ns.svc:2379,http://etcd-a-2.etcd-a-peer.ns.svc:2379"
        );
        assert_eq!(command[3], "--prefix=canary/");
    }

    #[test]
    fn the_tls_canary_writes_through_the_client_service_over_https() {
        let command = command_of(&tls_canary_pod("img:1", "etcd-a", "ns", "5s"));
        assert_eq!(command[2], "--endpoints=https://etcd-a-client.ns.svc:2379");
        assert!(command.contains(&"--cacert=/tls/ca.crt".to_string()));
    }
}
