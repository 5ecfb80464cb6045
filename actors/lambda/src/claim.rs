//! ControllerRef rules: which candidate children a parent keeps, adopts or releases.

use serde_json::{Value, json};

use crate::keys::uid_of;

/// The owner a parent writes into its children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

impl Owner {
    /// The owner of `parent`.
    pub fn of(parent: &Value) -> Owner {
        Owner {
            api_version: parent["apiVersion"].as_str().unwrap_or_default().into(),
            kind: parent["kind"].as_str().unwrap_or_default().into(),
            name: parent["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            uid: uid_of(parent).into(),
        }
    }

    /// The controller reference: `controller: true, blockOwnerDeletion: true`.
    pub fn controller_ref(&self) -> Value {
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }
}

/// The ownerReference marked `controller: true`, if any.
pub(crate) fn controller_ref(object: &Value) -> Option<&Value> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
}

/// The uid of an object's controller, if it has one.
pub fn controller_uid(object: &Value) -> Option<&str> {
    controller_ref(object).and_then(|r| r["uid"].as_str())
}

/// What to do with a candidate child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Another controller owns it.
    Ignore,
    /// Ours and still matching.
    Keep,
    /// Ours but no longer matching: remove our ownerReference.
    Release,
    /// An orphan that matches: add our controller reference.
    Adopt,
}

/// ClaimObject: decides for one candidate. `matches` is whether the candidate's labels
/// match the parent's selector.
pub fn decide(parent_uid: &str, parent_deleting: bool, child: &Value, matches: bool) -> Claim {
    let child_deleting = !child["metadata"]["deletionTimestamp"].is_null();
    match controller_uid(child) {
        Some(uid) if uid != parent_uid => Claim::Ignore,
        Some(_) if matches => Claim::Keep,
        Some(_) if parent_deleting => Claim::Keep,
        Some(_) => Claim::Release,
        None if matches && !parent_deleting && !child_deleting => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// `object` with the controller reference of `owner` added, or replacing the reference
/// with the same uid.
pub(crate) fn adopt(object: &Value, owner: &Owner) -> Value {
    let mut out = object.clone();
    let refs = &mut out["metadata"]["ownerReferences"];
    let mut list: Vec<Value> = refs
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|r| r["uid"].as_str() != Some(owner.uid.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    list.push(owner.controller_ref());
    *refs = Value::Array(list);
    out
}

/// `object` without the ownerReference with `uid`.
pub fn release(object: &Value, uid: &str) -> Value {
    let mut out = object.clone();
    if let Some(list) = out["metadata"]["ownerReferences"].as_array_mut() {
        list.retain(|r| r["uid"].as_str() != Some(uid));
    }
    out
}

/// Whether `object` has an ownerReference with `uid`.
pub(crate) fn has_owner(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|l| l.iter().any(|r| r["uid"].as_str() == Some(uid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(owner: Option<&str>, deleting: bool) -> Value {
        let mut c = json!({"metadata": {"name": "c"}});
        if let Some(uid) = owner {
            c["metadata"]["ownerReferences"] = json!([{"uid": uid, "controller": true, "kind": "P", "name": "p", "apiVersion": "x/v1"}]);
        }
        if deleting {
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        c
    }

    #[test]
    fn claim_rules() {
        assert_eq!(
            decide("u1", false, &child(Some("u2"), false), true),
            Claim::Ignore
        );
        assert_eq!(
            decide("u1", false, &child(Some("u1"), false), true),
            Claim::Keep
        );
        assert_eq!(
            decide("u1", false, &child(Some("u1"), false), false),
            Claim::Release
        );
        assert_eq!(
            decide("u1", true, &child(Some("u1"), false), false),
            Claim::Keep
        );
        assert_eq!(decide("u1", false, &child(None, false), true), Claim::Adopt);
        assert_eq!(decide("u1", true, &child(None, false), true), Claim::Ignore);
        assert_eq!(decide("u1", false, &child(None, true), true), Claim::Ignore);
        assert_eq!(
            decide("u1", false, &child(None, false), false),
            Claim::Ignore
        );
    }

    #[test]
    fn adopt_and_release_touch_only_our_reference() {
        let owner = Owner {
            api_version: "x/v1".into(),
            kind: "P".into(),
            name: "p".into(),
            uid: "u1".into(),
        };
        let mut c = child(None, false);
        c["metadata"]["ownerReferences"] = json!([{"uid": "other", "kind": "Q"}]);
        let adopted = adopt(&c, &owner);
        assert_eq!(controller_uid(&adopted), Some("u1"));
        assert!(has_owner(&adopted, "other"));
        let released = release(&adopted, "u1");
        assert_eq!(controller_uid(&released), None);
        assert!(has_owner(&released, "other"));
    }
}
