//! druid's finalizer on the `Etcd`: added before the first component is made, so none can be
//! left behind unnoticed; removed by the delete flow once none is left. Both writes carry the
//! `resourceVersion`, so the merge patch fails rather than drop someone else's finalizer
//! written meanwhile.

use kube::api::{Api, Patch, PatchParams};
use quorate_api::Etcd;
use quorate_api::annotations::ETCD_FINALIZER;

use crate::context::Context;
use crate::error::Error;
use crate::validated::ValidatedEtcd;

/// Adds the finalizer unless it is there.
pub async fn ensure(etcd: &ValidatedEtcd, ctx: &Context) -> Result<(), Error> {
    let finalizers = etcd.etcd().metadata.finalizers.clone().unwrap_or_default();
    if finalizers.iter().any(|f| f == ETCD_FINALIZER) {
        return Ok(());
    }
    let mut wanted = finalizers;
    wanted.push(ETCD_FINALIZER.to_string());
    let written = patch(etcd, ctx, wanted).await.map_err(Error::kube(
        "add the finalizer to",
        "Etcd",
        etcd.namespace(),
        etcd.name(),
    ))?;
    ctx.newer.record(
        written.metadata.uid.as_deref(),
        written.metadata.resource_version.as_deref(),
    );
    Ok(())
}

/// Removes the finalizer if it is there; an `Etcd` already gone is fine.
pub async fn remove(etcd: &ValidatedEtcd, ctx: &Context) -> Result<(), Error> {
    let finalizers = etcd.etcd().metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == ETCD_FINALIZER) {
        return Ok(());
    }
    let kept = finalizers
        .into_iter()
        .filter(|f| f != ETCD_FINALIZER)
        .collect();
    match patch(etcd, ctx, kept).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(
            "remove the finalizer from",
            "Etcd",
            etcd.namespace(),
            etcd.name(),
        )(e)),
    }
}

/// Writes `finalizers` as the `Etcd`'s whole list, if its version is still the one read.
async fn patch(
    etcd: &ValidatedEtcd,
    ctx: &Context,
    finalizers: Vec<String>,
) -> Result<Etcd, kube::Error> {
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": etcd.etcd().metadata.resource_version,
    }});
    let api: Api<Etcd> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    api.patch(etcd.name(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
}
