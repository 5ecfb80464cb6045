//! The manifest type's deletion groups (`deletionGroups`, `deletionGroupsDuringUpdate`):
//! which managed objects are deleted in which step, and whether a step strips finalizers.
//! Pure: the parse and the plan; the manifest type deletes and waits.

use serde_json::Value;

use crate::status::DeployError;

fn config_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidProviderConfiguration", message)
}

/// Objects of one type, by name and namespace (empty lists: all of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub api_version: String,
    pub kind: String,
    pub names: Vec<String>,
    pub namespaces: Vec<String>,
}

/// What a group selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// Namespaced objects.
    Namespaced,
    /// Cluster-scoped objects other than CRDs.
    ClusterScoped,
    /// CustomResourceDefinitions.
    Crds,
    /// Nothing (a placeholder).
    Empty,
    /// Objects of the listed types.
    Custom(Vec<Resources>),
}

/// One deletion group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub select: Select,
    /// Remove the finalizers of the group's objects after deleting them.
    pub force: bool,
    /// `deleteAllResources` (custom groups): every object of the listed types in the
    /// target, not only those the item manages.
    pub delete_all: bool,
    /// `targetName` (with `deleteAllResources`): the group deletes in this Target, not in
    /// the item's; it selects only objects found there.
    pub target_name: Option<String>,
}

/// An object as a group sees it.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The Target the object is in (`None`: the item's).
    pub target: Option<&'a str>,
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    /// Empty for cluster-scoped objects.
    pub namespace: &'a str,
}

impl Group {
    /// Whether the group selects `c`.
    pub fn selects(&self, c: &Candidate<'_>) -> bool {
        if c.target != self.target_name.as_deref() {
            return false;
        }
        let crd = c.kind == "CustomResourceDefinition";
        match &self.select {
            Select::Namespaced => !c.namespace.is_empty(),
            Select::ClusterScoped => c.namespace.is_empty() && !crd,
            Select::Crds => crd,
            Select::Empty => false,
            Select::Custom(list) => list.iter().any(|r| {
                r.api_version == c.api_version
                    && r.kind == c.kind
                    && (r.names.is_empty() || r.names.iter().any(|n| n == c.name))
                    && (r.namespaces.is_empty() || r.namespaces.iter().any(|n| n == c.namespace))
            }),
        }
    }
}

/// The default order: namespaced objects, then cluster-scoped ones, then CRDs.
pub(crate) fn default_groups() -> Vec<Group> {
    [Select::Namespaced, Select::ClusterScoped, Select::Crds]
        .into_iter()
        .map(|select| Group {
            select,
            force: false,
            delete_all: false,
            target_name: None,
        })
        .collect()
}

fn strings(v: &Value, field: &str) -> Result<Vec<String>, DeployError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str().map(str::to_string).ok_or_else(|| {
                    config_error(format!("{field}[{i}]: expected a string, got {s}"))
                })
            })
            .collect(),
        other => Err(config_error(format!(
            "{field}: expected a list of strings, got {other}"
        ))),
    }
}

fn force_of(v: &Value, field: &str) -> Result<bool, DeployError> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        other => Err(config_error(format!(
            "{field}: expected true or false, got {other}"
        ))),
    }
}

/// Reads `spec.config.<name>` (`None`: not set, the default order applies).
pub fn parse(v: &Value, name: &str) -> Result<Option<Vec<Group>>, DeployError> {
    let f = format!("spec.config.{name}");
    let list = match v {
        Value::Null => return Ok(None),
        Value::Array(a) => a,
        other => return Err(config_error(format!("{f}: expected a list, got {other}"))),
    };
    let mut groups = Vec::new();
    for (i, g) in list.iter().enumerate() {
        let field = format!("{f}[{i}]");
        let (pre, custom) = (&g["predefinedResourceGroup"], &g["customResourceGroup"]);
        match (pre.is_null(), custom.is_null()) {
            (false, false) | (true, true) => {
                return Err(config_error(format!(
                    "{field}: set exactly one of predefinedResourceGroup and customResourceGroup"
                )));
            }
            (false, true) => {
                let select = match pre["type"].as_str() {
                    Some("namespaced-resources") => Select::Namespaced,
                    Some("cluster-scoped-resources") => Select::ClusterScoped,
                    Some("crds") => Select::Crds,
                    Some("empty") => Select::Empty,
                    other => {
                        return Err(config_error(format!(
                            "{field}.predefinedResourceGroup.type: expected namespaced-resources, cluster-scoped-resources, crds or empty, got {other:?}"
                        )));
                    }
                };
                groups.push(Group {
                    select,
                    delete_all: false,
                    target_name: None,
                    force: force_of(
                        &pre["forceDelete"],
                        &format!("{field}.predefinedResourceGroup.forceDelete"),
                    )?,
                });
            }
            (true, false) => {
                let cf = format!("{field}.customResourceGroup");
                let delete_all = force_of(
                    &custom["deleteAllResources"],
                    &format!("{cf}.deleteAllResources"),
                )?;
                let target_name = match &custom["targetName"] {
                    Value::Null => None,
                    Value::String(t) if !t.is_empty() && delete_all => Some(t.clone()),
                    Value::String(t) if !t.is_empty() => {
                        return Err(config_error(format!(
                            "{cf}.targetName: only allowed with deleteAllResources"
                        )));
                    }
                    other => {
                        return Err(config_error(format!(
                            "{cf}.targetName: expected the name of a Target in the item's namespace, got {other}"
                        )));
                    }
                };
                let resources = match &custom["resources"] {
                    Value::Array(a) if !a.is_empty() => a,
                    other => {
                        return Err(config_error(format!(
                            "{cf}.resources: expected a non-empty list, got {other}"
                        )));
                    }
                };
                let mut list = Vec::new();
                for (j, r) in resources.iter().enumerate() {
                    let rf = format!("{cf}.resources[{j}]");
                    let s = |k: &str| -> Result<String, DeployError> {
                        r[k].as_str()
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .ok_or_else(|| config_error(format!("{rf}.{k}: missing")))
                    };
                    list.push(Resources {
                        api_version: s("apiVersion")?,
                        kind: s("kind")?,
                        names: strings(&r["names"], &format!("{rf}.names"))?,
                        namespaces: strings(&r["namespaces"], &format!("{rf}.namespaces"))?,
                    });
                }
                groups.push(Group {
                    select: Select::Custom(list),
                    force: force_of(&custom["forceDelete"], &format!("{cf}.forceDelete"))?,
                    delete_all,
                    target_name,
                });
            }
        }
    }
    Ok(Some(groups))
}

/// One step of a deletion: the candidates' indices, whether to strip finalizers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub indices: Vec<usize>,
    pub force: bool,
}

/// The steps for `candidates`: each group takes what it selects of what earlier groups
/// left. Without groups the default order applies; with groups, an object no group
/// selects is **kept** (landscaper's `deletionmanager.go`: `type: empty`, or groups that
/// leave CRDs out, keep them and every custom resource of theirs).
pub fn plan(groups: &[Group], candidates: &[Candidate<'_>]) -> Vec<Step> {
    let mut taken = vec![false; candidates.len()];
    let mut steps = Vec::new();
    let mut take = |g: &Group, steps: &mut Vec<Step>| {
        let indices: Vec<usize> = (0..candidates.len())
            .filter(|&i| !taken[i] && g.selects(&candidates[i]))
            .collect();
        for &i in &indices {
            taken[i] = true;
        }
        if !indices.is_empty() {
            steps.push(Step {
                indices,
                force: g.force,
            });
        }
    };
    if groups.is_empty() {
        for g in default_groups() {
            take(&g, &mut steps);
        }
    } else {
        for g in groups {
            take(g, &mut steps);
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c<'a>(kind: &'a str, name: &'a str, namespace: &'a str) -> Candidate<'a> {
        Candidate {
            target: None,
            api_version: "v1",
            kind,
            name,
            namespace,
        }
    }

    #[test]
    fn groups_take_their_objects_in_order_and_keep_the_rest() {
        let groups = parse(
            &json!([
                {"customResourceGroup": {"resources": [{"apiVersion": "v1", "kind": "Secret", "names": ["s"]}], "forceDelete": true}},
                {"predefinedResourceGroup": {"type": "cluster-scoped-resources"}},
            ]),
            "deletionGroups",
        );
        let Ok(Some(groups)) = groups else {
            panic!("{groups:?}")
        };
        let objects = [
            c("ConfigMap", "a", "ns"),
            c("Namespace", "ns", ""),
            c("Secret", "s", "ns"),
            c("CustomResourceDefinition", "x", ""),
        ];
        assert_eq!(
            plan(&groups, &objects),
            vec![
                Step {
                    indices: vec![2],
                    force: true
                },
                Step {
                    indices: vec![1],
                    force: false
                },
            ],
            "what no group selects (the ConfigMap, the CRD) is kept"
        );
        assert_eq!(
            plan(&default_groups(), &objects),
            vec![
                Step {
                    indices: vec![0, 2],
                    force: false
                },
                Step {
                    indices: vec![1],
                    force: false
                },
                Step {
                    indices: vec![3],
                    force: false
                },
            ]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let msg = |v: Value| {
            parse(&v, "deletionGroups")
                .err()
                .map(|e| e.message)
                .unwrap_or_default()
        };
        assert!(msg(json!([{}])).contains("deletionGroups[0]: set exactly one"));
        assert!(
            msg(json!([{"predefinedResourceGroup": {"type": "pods"}}]))
                .contains("deletionGroups[0].predefinedResourceGroup.type")
        );
        assert!(
            msg(json!([{"customResourceGroup": {"resources": [{"kind": "Secret"}]}}]))
                .contains("customResourceGroup.resources[0].apiVersion: missing")
        );
        assert!(
            msg(json!([{"customResourceGroup": {"targetName": "other",
                "resources": [{"apiVersion": "v1", "kind": "Secret"}]}}]))
            .contains("customResourceGroup.targetName: only allowed with deleteAllResources")
        );
        let other = parse(
            &json!([{"customResourceGroup": {"deleteAllResources": true, "targetName": "other",
                "resources": [{"apiVersion": "v1", "kind": "Secret"}]}}]),
            "deletionGroups",
        );
        let Ok(Some(other)) = other else {
            panic!("{other:?}")
        };
        assert_eq!(other[0].target_name.as_deref(), Some("other"));
        let secret = |target| Candidate {
            target,
            api_version: "v1",
            kind: "Secret",
            name: "s",
            namespace: "app",
        };
        assert!(other[0].selects(&secret(Some("other"))));
        assert!(
            !other[0].selects(&secret(None)),
            "a group of another target leaves the item's target alone"
        );
        assert!(
            !default_groups()[0].selects(&secret(Some("other"))),
            "the default order deletes in the item's target only"
        );
        assert!(
            msg(json!([{"customResourceGroup": {"deleteAllResources": "yes",
                "resources": [{"apiVersion": "v1", "kind": "Secret"}]}}]))
            .contains("customResourceGroup.deleteAllResources: expected true or false")
        );
        let groups = parse(
            &json!([{"customResourceGroup": {"deleteAllResources": true,
                "resources": [{"apiVersion": "v1", "kind": "Secret", "namespaces": ["app"]}]}}]),
            "deletionGroups",
        )
        .ok()
        .flatten()
        .unwrap_or_default();
        assert!(groups.first().is_some_and(|g| g.delete_all));
        assert_eq!(parse(&Value::Null, "deletionGroups").ok(), Some(None));
    }
}
