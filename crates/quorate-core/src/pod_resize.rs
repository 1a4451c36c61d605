//! In-place resize. A rolling update whose pod template changed only in the containers'
//! `resources` (a resources edit, a VPA recommendation) needs no new pod on Kubernetes ≥ 1.33:
//! the kubelet resizes the running containers (`pods/resize`), etcd keeps serving, with no
//! election and no catch-up. Any other change, or a resize the kubelet reports it cannot carry
//! out, still replaces the pod.

use serde_json::Value;

/// One container's wanted resources, as the new pod template has them.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerResources {
    /// The container's name.
    pub name: String,
    /// Its `resources` object (`{}` when the template sets none).
    pub resources: Value,
}

/// The new template's container resources when the pod templates of two ControllerRevisions
/// (their `data`: `{"spec": {"template": …}}`) differ in nothing but the regular containers'
/// `resources`; `None` when the change needs a new pod (or a revision is not readable).
pub fn resources_only_change(old: &Value, new: &Value) -> Option<Vec<ContainerResources>> {
    let (mut old, mut new) = (
        old.pointer("/spec/template")?.clone(),
        new.pointer("/spec/template")?.clone(),
    );
    take_resources(&mut old)?;
    let wanted = take_resources(&mut new)?;
    (old == new).then_some(wanted)
}

/// Removes every regular container's `resources` from `template`, returning them.
fn take_resources(template: &mut Value) -> Option<Vec<ContainerResources>> {
    template
        .pointer_mut("/spec/containers")?
        .as_array_mut()?
        .iter_mut()
        .map(|container| {
            let container = container.as_object_mut()?;
            Some(ContainerResources {
                name: container.get("name")?.as_str()?.to_string(),
                resources: container
                    .remove("resources")
                    .unwrap_or_else(|| Value::Object(Default::default())),
            })
        })
        .collect()
}

/// The body of a strategic merge patch of `pods/resize` that sets every container's resources
/// to `wanted` exactly: a request or limit the pod has (`current`, by container) and the
/// template no longer sets is removed (`null`), not kept by the merge.
pub fn resize_patch(wanted: &[ContainerResources], current: &[ContainerResources]) -> Value {
    let containers: Vec<Value> = wanted
        .iter()
        .map(|w| {
            let mut resources = w.resources.clone();
            let had = current.iter().find(|c| c.name == w.name);
            for part in ["requests", "limits"] {
                let old = had
                    .and_then(|c| c.resources.get(part))
                    .and_then(Value::as_object);
                let Some(old) = old else { continue };
                let Some(object) = resources.as_object_mut() else {
                    continue;
                };
                let entry = object
                    .entry(part)
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(new) = entry.as_object_mut() {
                    for key in old.keys() {
                        new.entry(key.clone()).or_insert(Value::Null);
                    }
                }
            }
            serde_json::json!({ "name": w.name, "resources": resources })
        })
        .collect();
    serde_json::json!({ "spec": { "containers": containers } })
}

/// What the pod and its kubelet report about an in-place resize.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResizeView {
    /// Every container's spec already has the wanted resources (the resize was requested).
    pub requested: bool,
    /// The kubelet has seen the pod's current spec (`status.observedGeneration` is at least
    /// `metadata.generation`).
    pub observed: bool,
    /// `PodResizePending`, if present: its reason (`Infeasible` or `Deferred`) and message.
    pub pending: Option<(String, String)>,
    /// `PodResizeInProgress`, if present: its reason (`Error` when actuating failed) and
    /// message.
    pub in_progress: Option<(String, String)>,
}

/// The next step of an in-place resize.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResizeStep {
    /// Send the resize.
    Request,
    /// The kubelet is at it, or the node has no room yet; says which.
    Wait(String),
    /// The containers run with the new resources: the pod counts as updated.
    Done,
    /// The kubelet reports it cannot resize in place: replace the pod instead; says why.
    Replace(String),
}

/// Decides the next step from what the kubelet reports, never from how long it took.
pub fn resize_step(view: &ResizeView) -> ResizeStep {
    if !view.requested {
        return ResizeStep::Request;
    }
    if !view.observed {
        return ResizeStep::Wait("the kubelet has not seen the resize yet".into());
    }
    if let Some((reason, message)) = &view.pending {
        return if reason == "Infeasible" {
            ResizeStep::Replace(format!(
                "the kubelet cannot resize it in place (Infeasible: {message})"
            ))
        } else {
            ResizeStep::Wait(format!(
                "the node has no room for the new resources yet ({reason}: {message})"
            ))
        };
    }
    match &view.in_progress {
        Some((reason, message)) if reason == "Error" => ResizeStep::Replace(format!(
            "the kubelet failed to resize it in place ({message})"
        )),
        Some(_) => ResizeStep::Wait("the kubelet is resizing it".into()),
        None => ResizeStep::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revision(cpu: &str, image: &str) -> Value {
        json!({"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "e"}},
        "spec": {"containers": [
            {"name": "etcd", "image": image, "resources": {"requests": {"cpu": cpu}}},
            {"name": "backup-restore", "image": image}
        ]}}}})
    }

    #[test]
    fn a_change_of_resources_alone_is_done_in_place() {
        let wanted = resources_only_change(&revision("50m", "q:1"), &revision("60m", "q:1"))
            .expect("in place");
        assert_eq!(
            wanted,
            vec![
                ContainerResources {
                    name: "etcd".into(),
                    resources: json!({"requests": {"cpu": "60m"}})
                },
                ContainerResources {
                    name: "backup-restore".into(),
                    resources: json!({})
                },
            ]
        );
    }

    #[test]
    fn any_other_change_needs_a_new_pod() {
        assert_eq!(
            resources_only_change(&revision("50m", "q:1"), &revision("60m", "q:2")),
            None
        );
        let mut with_init = revision("60m", "q:1");
        with_init["spec"]["template"]["spec"]["initContainers"] = json!([{"name": "init"}]);
        assert_eq!(
            resources_only_change(&revision("50m", "q:1"), &with_init),
            None
        );
        assert_eq!(
            resources_only_change(&json!({}), &revision("60m", "q:1")),
            None
        );
    }

    #[test]
    fn the_patch_removes_what_the_template_no_longer_sets() {
        let wanted = [ContainerResources {
            name: "etcd".into(),
            resources: json!({"requests": {"cpu": "60m"}}),
        }];
        let current = [ContainerResources {
            name: "etcd".into(),
            resources: json!({"requests": {"cpu": "50m", "memory": "1Gi"}, "limits": {"cpu": "1"}}),
        }];
        assert_eq!(
            resize_patch(&wanted, &current),
            json!({"spec": {"containers": [{"name": "etcd", "resources": {
                "requests": {"cpu": "60m", "memory": null}, "limits": {"cpu": null}}}]}})
        );
    }

    #[test]
    fn the_kubelets_word_decides_each_step() {
        let mut view = ResizeView::default();
        assert_eq!(resize_step(&view), ResizeStep::Request);
        view.requested = true;
        assert!(matches!(resize_step(&view), ResizeStep::Wait(_)));
        view.observed = true;
        view.in_progress = Some(("".into(), "".into()));
        assert_eq!(
            resize_step(&view),
            ResizeStep::Wait("the kubelet is resizing it".into())
        );
        view.in_progress = Some(("Error".into(), "cgroup write failed".into()));
        assert!(matches!(resize_step(&view), ResizeStep::Replace(m) if m.contains("cgroup")));
        view.in_progress = None;
        view.pending = Some(("Deferred".into(), "node is full".into()));
        assert!(matches!(resize_step(&view), ResizeStep::Wait(m) if m.contains("node is full")));
        view.pending = Some(("Infeasible".into(), "too big".into()));
        assert!(matches!(resize_step(&view), ResizeStep::Replace(m) if m.contains("too big")));
        view.pending = None;
        assert_eq!(resize_step(&view), ResizeStep::Done);
    }
}
