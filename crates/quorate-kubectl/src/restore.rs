//! `kubectl quorate restore NAME --to-time T | --to-revision N`: the point-in-time procedure of
//! docs/operations/point-in-time-restore-kubernetes.md with this Etcd's names filled in. The
//! operator restores only the newest state (after a total loss), so a point in time comes
//! back as a new Etcd beside the old one; the plugin prints each step's exact command and, with
//! `--secret-dir`, carries out step 2 (the store Secret's keys as files).

use crate::{Io, KubectlError, Target};
use std::path::Path;

/// The point to restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// An instant.
    Time(jiff::Timestamp),
    /// A revision.
    Revision(i64),
}

impl Point {
    fn flag(self) -> String {
        match self {
            Point::Time(t) => format!("--to-time {t}"),
            Point::Revision(r) => format!("--to-revision {r}"),
        }
    }
}

/// Prints the steps for Etcd `name` (and writes the store Secret's keys into `secret_dir`).
pub async fn guide(
    target: &Target,
    name: &str,
    point: Point,
    new_name: Option<&str>,
    secret_dir: Option<&Path>,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let etcd = target.etcd(name).await?;
    let ns = &target.namespace;
    let Some(store) = etcd.spec.backup.store.clone() else {
        return Err(KubectlError::Store {
            etcd: format!("{ns}/{name}"),
            message: "it has no spec.backup.store, so there is no bucket to restore from".into(),
        });
    };
    let new_name = new_name.map_or_else(|| format!("{name}-pitr"), str::to_string);
    let secret = crate::backups::store_secret(target, &etcd).await?;
    let store_dir = secret_dir.map_or_else(|| "store".to_string(), |d| d.display().to_string());
    let encryption = etcd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(quorate_api::annotations::BACKUP_ENCRYPTION_SECRET))
        .cloned();
    let key_flag = if encryption.is_some() {
        " --encryption-key-dir keys"
    } else {
        ""
    };
    let out = &mut *io.out;
    writeln!(
        out,
        "Point-in-time restore of etcd {ns}/{name} ({}) as a new Etcd {ns}/{new_name}",
        point.flag()
    )?;
    writeln!(
        out,
        "(docs/operations/point-in-time-restore-kubernetes.md; the old Etcd and its bucket stay untouched)\n"
    )?;
    writeln!(
        out,
        "1. Stop the damage: stop or scale down the clients that write to {name}. Leave {name} \
         running: its backups go on."
    )?;
    match (&secret, secret_dir) {
        (Some((sns, sname, data)), Some(dir)) => {
            crate::backups::write_secret_files(dir, data)?;
            writeln!(
                out,
                "2. Done: the keys of the store Secret {sns}/{sname} are in {} (one file per key, \
                 mode 0600).",
                dir.display()
            )?;
        }
        (Some((sns, sname, _)), None) => writeln!(
            out,
            "2. Credentials as files: `kubectl quorate restore {name} -n {ns} {} --secret-dir \
             store` writes the keys of the store Secret {sns}/{sname} into store/.",
            point.flag()
        )?,
        (None, _) => writeln!(
            out,
            "2. Credentials: the store names no Secret (ambient credentials); nothing to copy."
        )?,
    }
    if let Some(keys) = &encryption {
        writeln!(
            out,
            "   The bucket is encrypted: write the keys of Secret {ns}/{keys} into keys/ as in \
             docs/operations/emergency-decryption.md step 1."
        )?;
    }
    writeln!(
        out,
        "3. Find the point: `kubectl quorate backups list {name} -n {ns}` (or `kubectl get etcd \
         {name} -n {ns} -o yaml > etcd.yaml && quorate backups list -f etcd.yaml --secret-dir \
         {store_dir}`)."
    )?;
    writeln!(
        out,
        "4. Restore it into a directory and look at it (nothing is written to the bucket):\n\n   \
         kubectl get etcd {name} -n {ns} -o yaml > etcd.yaml\n   \
         quorate restore -f etcd.yaml --secret-dir {store_dir}{key_flag} {} --data-dir /tmp/pitr\n   \
         etcd --data-dir /tmp/pitr --force-new-cluster --name {name}-0 \
         --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
         --listen-peer-urls http://127.0.0.1:23800\n   \
         etcdctl --endpoints=http://127.0.0.1:23790 get --prefix / --keys-only | head\n",
        point.flag()
    )?;
    let mut new_etcd = serde_json::json!({
        "apiVersion": "druid.gardener.cloud/v1alpha1",
        "kind": "Etcd",
        "metadata": { "name": new_name, "namespace": ns },
        "spec": serde_json::to_value(&etcd.spec).map_err(|e| KubectlError::Render(e.to_string()))?,
    });
    new_etcd["spec"]["backup"]["store"]["prefix"] =
        serde_json::Value::String(format!("{}-{new_name}", store.prefix));
    let manifest =
        serde_saphyr::to_string(&new_etcd).map_err(|e| KubectlError::Render(e.to_string()))?;
    let scheme = if etcd.spec.etcd.client_url_tls.is_some() {
        "https"
    } else {
        "http"
    };
    writeln!(
        out,
        "5. Serve it as a new Etcd with a new backup prefix: save this as {new_name}.yaml, then \
         `kubectl apply -f {new_name}.yaml && kubectl quorate wait {new_name} -n {ns} \
         --for=condition=Ready --timeout 10m`:\n"
    )?;
    for line in manifest.lines() {
        writeln!(out, "   {line}")?;
    }
    writeln!(
        out,
        "\n   Copy the checked key space into it (from where both are reachable, e.g. a \
         port-forward to {new_name}-client):\n\n   \
         etcdctl --endpoints=http://127.0.0.1:23790 make-mirror \
         --dest-endpoints={scheme}://{new_name}-client.{ns}.svc:2379 [--dest-cacert … --dest-cert … --dest-key …]\n\n   \
         Stop it once it reports the number of keys you expect."
    )?;
    writeln!(
        out,
        "6. Move the clients to {new_name}-client.{ns}.svc; hibernate the old one when no longer \
         needed: `kubectl patch etcd {name} -n {ns} --type merge -p '{{\"spec\":{{\"replicas\":0}}}}'`."
    )?;
    Ok(())
}
