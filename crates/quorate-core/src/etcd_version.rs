//! Which etcd version a cluster runs after a change of its `Etcd`: what it asks for
//! (`quorate.io/etcd-version`) against what its members run now (the version in the
//! configuration they were last given, the record of an existing cluster).

use quorate_api::EtcdVersion;

/// The version to run. A new cluster (`running: None`) gets the requested version or
/// [`EtcdVersion::DEFAULT`]; an existing one keeps its version unless a one-minor upgrade is
/// requested. `Err` says why the request is refused; nothing should change then.
pub fn decide(
    requested: Option<EtcdVersion>,
    running: Option<EtcdVersion>,
) -> Result<EtcdVersion, String> {
    match (requested, running) {
        (requested, None) => Ok(requested.unwrap_or(EtcdVersion::DEFAULT)),
        (None, Some(running)) => Ok(running),
        (Some(requested), Some(running)) => running
            .check_change(requested)
            .map(|()| requested)
            .map_err(|why| format!("the cluster runs etcd {running}: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V34: EtcdVersion = EtcdVersion::V3_4;
    const V35: EtcdVersion = EtcdVersion::V3_5;
    const V36: EtcdVersion = EtcdVersion::V3_6;

    #[test]
    fn a_new_cluster_gets_what_it_asks_for_or_the_default() {
        assert_eq!(decide(None, None), Ok(V36));
        assert_eq!(decide(Some(V34), None), Ok(V34));
        assert_eq!(decide(Some(V35), None), Ok(V35));
        assert_eq!(decide(Some(EtcdVersion::V3_7), None), Ok(EtcdVersion::V3_7));
    }

    #[test]
    fn an_existing_cluster_keeps_its_version_unless_asked_one_step_up() {
        assert_eq!(decide(None, Some(V34)), Ok(V34));
        assert_eq!(decide(Some(V35), Some(V34)), Ok(V35));
        assert_eq!(
            decide(None, Some(V35)),
            Ok(V35),
            "no silent upgrade to the default"
        );
        assert_eq!(decide(Some(V36), Some(V35)), Ok(V36));
        let refused = decide(Some(V34), Some(V35)).unwrap_err();
        assert!(
            refused.starts_with("the cluster runs etcd 3.5: downgrading"),
            "{refused}"
        );
    }
}
