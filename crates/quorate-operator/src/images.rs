//! The images the operator puts into etcd pods, with druid's `IMAGEVECTOR_OVERWRITE`: a YAML
//! file (`images: [{name, repository, tag}]`) whose entries replace the built-in ones by name,
//! so an installation can point at its own registry without rebuilding the operator.

use serde::Deserialize;

/// Name of the member image (quorate + etcd) in the image vector.
pub const MEMBER_IMAGE: &str = "quorate";
/// Name of the init-container image (needs `sh` and `chown`) in the image vector.
pub const INIT_IMAGE: &str = "alpine";
/// Environment variable naming the override file (druid's).
pub const IMAGEVECTOR_OVERWRITE: &str = "IMAGEVECTOR_OVERWRITE";

/// The images in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    /// Runs `quorate agent`, which runs `etcd`.
    pub member: String,
    /// Prepares `Local` backup directories.
    pub init: String,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            member: format!("quorate:{}", env!("CARGO_PKG_VERSION")),
            init: "alpine:3.20".to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct ImageVector {
    images: Vec<ImageEntry>,
}

#[derive(Debug, Deserialize)]
struct ImageEntry {
    name: String,
    repository: String,
    #[serde(default)]
    tag: Option<String>,
}

/// A bad override file.
#[derive(Debug, thiserror::Error)]
#[error("{IMAGEVECTOR_OVERWRITE} file {path}: {message}")]
pub struct ImageVectorError {
    path: String,
    message: String,
}

impl Images {
    /// The built-in images with the entries of `yaml` (the override file's text) applied.
    /// Entries with other names are ignored, as druid ignores images it does not use.
    pub fn with_overrides(mut self, path: &str, yaml: &str) -> Result<Images, ImageVectorError> {
        let vector: ImageVector = serde_saphyr::from_str(yaml).map_err(|e| ImageVectorError {
            path: path.to_string(),
            message: format!("not an image vector (`images: [{{name, repository, tag}}]`): {e}"),
        })?;
        for entry in vector.images {
            let image = match entry.tag.filter(|t| !t.is_empty()) {
                Some(tag) if tag.starts_with("sha256:") => format!("{}@{tag}", entry.repository),
                Some(tag) => format!("{}:{tag}", entry.repository),
                None => entry.repository,
            };
            match entry.name.as_str() {
                MEMBER_IMAGE => self.member = image,
                INIT_IMAGE => self.init = image,
                _ => {}
            }
        }
        Ok(self)
    }

    /// The images, with the file named by `IMAGEVECTOR_OVERWRITE` applied when it is set.
    pub fn from_env() -> Result<Images, ImageVectorError> {
        let Ok(path) = std::env::var(IMAGEVECTOR_OVERWRITE) else {
            return Ok(Images::default());
        };
        let yaml = std::fs::read_to_string(&path).map_err(|e| ImageVectorError {
            path: path.clone(),
            message: format!("cannot be read: {e}"),
        })?;
        Images::default().with_overrides(&path, &yaml)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_images_by_name() {
        let yaml = "images:\n- name: quorate\n  repository: registry.local/quorate\n  tag: v9\n- name: alpine\n  repository: registry.local/alpine\n  tag: sha256:abc\n- name: etcd-wrapper\n  repository: ignored\n";
        let images = Images::default().with_overrides("f.yaml", yaml).unwrap();
        assert_eq!(images.member, "registry.local/quorate:v9");
        assert_eq!(images.init, "registry.local/alpine@sha256:abc");
    }

    #[test]
    fn a_bad_file_names_itself_and_the_expected_shape() {
        let e = Images::default()
            .with_overrides("/etc/iv.yaml", "images: 3")
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("/etc/iv.yaml"), "{text}");
        assert!(text.contains("images: [{name, repository, tag}]"), "{text}");
    }
}
