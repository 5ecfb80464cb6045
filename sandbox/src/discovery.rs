//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}`, and the
//! `APIResourceList` of each group/version.

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::resources::ResourceInfo;

/// The Kubernetes version the sandbox reports.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": concat!("v1.33.0-bosun.", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first; others last,
/// alphabetically.
pub(crate) fn version_priority(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u32, u8, u32)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let major: u32 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, level, num.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Groups (other than core) with their versions, preferred first, in first-seen order.
pub fn groups(resources: &[ResourceInfo]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => {
                versions.push(r.version.clone())
            }
            Some(_) => {}
            None => out.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    for (_, versions) in &mut out {
        versions.sort_by(|a, b| version_priority(a, b));
    }
    out
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub(crate) fn group_list(resources: &[ResourceInfo]) -> Value {
    let groups: Vec<Value> = groups(resources)
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or None for an unknown group.
pub fn group(resources: &[ResourceInfo], group: &str) -> Option<Value> {
    let (_, versions) = groups(resources).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_doc(group, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a resource: all of them, but namespaces are not deleted as a collection.
pub fn verbs(r: &ResourceInfo) -> Vec<&'static str> {
    VERBS
        .iter()
        .copied()
        .filter(|v| !(*v == "deletecollection" && r.group.is_empty() && r.plural == "namespaces"))
        .collect()
}

/// `/api/v1` or `/apis/{group}/{version}`, or None when nothing is served there.
pub(crate) fn resource_list(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let served: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in served {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(r),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        list.push(entry);
        if r.status_subresource {
            list.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        if r.scale.is_some() {
            list.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "foo", "v1beta2", "v2", "v10"];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            vec!["v10", "v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]
        );
    }
}
