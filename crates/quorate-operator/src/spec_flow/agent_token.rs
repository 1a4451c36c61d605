//! The Secret `<name>-agent-token` with the bearer token the cluster's agents require on
//! `/snapshot/full` and `/snapshot/delta`: made once with 32 random bytes (hex) and never
//! rewritten, so the token stays what the agents and clients already hold. It is owned by the
//! `Etcd` (deleted with it); the pods' Role may read exactly this Secret. Rotating the token is
//! deleting the Secret: the next pass makes a new one, which the agents read at the next
//! request.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use quorate_api::names::{AGENT_TOKEN_KEY, agent_token_secret_name, component};
use quorate_core::components::meta::EtcdIdentity;
use rand::RngCore;

use crate::context::Context;
use crate::error::Error;
use crate::validated::ValidatedEtcd;

/// Makes the token Secret unless it exists.
pub async fn ensure(etcd: &ValidatedEtcd, ctx: &Context) -> Result<(), Error> {
    let name = agent_token_secret_name(etcd.name());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), etcd.namespace());
    let failed = |action| Error::kube(action, "Secret", etcd.namespace(), &name);
    if api.get_opt(&name).await.map_err(failed("get"))?.is_some() {
        return Ok(());
    }
    let secret = token_secret(etcd.etcd())?;
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        // Made meanwhile by another pass: that one stands.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(failed("create")(e)),
    }
}

/// A new token Secret for `etcd` (owned by it, a fresh random token), as [`ensure`] creates it.
pub fn token_secret(etcd: &quorate_api::Etcd) -> Result<Secret, Error> {
    let name = agent_token_secret_name(etcd.metadata.name.as_deref().unwrap_or_default());
    let id = EtcdIdentity::of(etcd)?;
    Ok(Secret {
        metadata: id.object_meta(component::AGENT_TOKEN, &name),
        data: Some(
            [(
                AGENT_TOKEN_KEY.to_string(),
                ByteString(new_token().into_bytes()),
            )]
            .into(),
        ),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    })
}

/// 32 random bytes as hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_64_hex_digits_and_differ() {
        let (a, b) = (super::new_token(), super::new_token());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
