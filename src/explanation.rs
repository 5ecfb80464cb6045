//! What `bosun explain` and `/explain` answer, as data: the subject asked about and its
//! explanation (who made it, its history from the journals, what it waits for now). The
//! readers of each journal and of the running subsystems fill it (`debug/explain/`); the
//! host's [`SubsystemView`](crate::host::SubsystemView) lets each running subsystem add
//! its part.

use serde::Serialize;

/// What to explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// An object by kind, namespace (empty: cluster scope or not given) and name.
    Object {
        /// The kind as the user typed it (`ConfigMap`, `configmap`, `deployitems`).
        kind: String,
        /// The namespace (`-n`), empty when not given.
        namespace: String,
        /// The name.
        name: String,
    },
    /// A values path: `global.foo.bar` or `<module>.key`.
    Values {
        /// The dotted path as typed.
        path: String,
    },
}

impl Subject {
    /// Reads `KIND/NAME`, `KIND NAME` or `values PATH`, with the namespace of `-n`.
    pub fn parse(words: &[String], namespace: Option<&str>) -> Result<Subject, String> {
        let namespace = namespace.unwrap_or_default().to_string();
        match words {
            [what, path] if what == "values" => Ok(Subject::Values { path: path.clone() }),
            [one] => match one.split_once('/') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                    // `KIND/NS/NAME` is accepted too, as `bosun journal deployer --item`.
                    let (namespace, name) = match name.split_once('/') {
                        Some((ns, name)) => (ns.to_string(), name.to_string()),
                        None => (namespace, name.to_string()),
                    };
                    Ok(Subject::Object {
                        kind: kind.to_string(),
                        namespace,
                        name,
                    })
                }
                _ => Err(format!(
                    "{one:?}: expected KIND/NAME (e.g. ConfigMap/web), KIND NAME, or values PATH"
                )),
            },
            [kind, name] => Ok(Subject::Object {
                kind: kind.clone(),
                namespace,
                name: name.clone(),
            }),
            _ => Err("expected KIND/NAME (e.g. ConfigMap/web), KIND NAME, or values PATH".into()),
        }
    }

    /// How the subject is named in the explanation.
    pub fn describe(&self) -> String {
        match self {
            Subject::Object {
                kind,
                namespace,
                name,
            } if namespace.is_empty() => format!("{kind} {name}"),
            Subject::Object {
                kind,
                namespace,
                name,
            } => format!("{kind} {namespace}/{name}"),
            Subject::Values { path } => format!("values {path}"),
        }
    }

    /// Whether `kind` (as a journal writes it, e.g. `ConfigMap`) is the subject's kind as
    /// typed: case aside, and a plural `s` aside.
    pub fn kind_is(&self, kind: &str) -> bool {
        let Subject::Object { kind: typed, .. } = self else {
            return false;
        };
        let norm = |k: &str| {
            let k = k.to_ascii_lowercase();
            k.strip_suffix('s').map(str::to_string).unwrap_or(k)
        };
        norm(typed) == norm(kind)
    }

    /// Whether a journal's `namespace/name` (or bare `name`) is the subject's; without
    /// `-n` any namespace matches.
    pub fn names(&self, namespace: &str, name: &str) -> bool {
        let Subject::Object {
            namespace: ns,
            name: n,
            ..
        } = self
        else {
            return false;
        };
        n == name && (ns.is_empty() || ns == namespace)
    }
}

/// One change bosun made, from one journal.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Step {
    /// Which journal, by its subsystem's registered name.
    pub journal: &'static str,
    /// Its sequence number there: the order within a journal.
    pub seq: u64,
    /// When it was written (RFC 3339, milliseconds).
    pub time: String,
    /// What happened.
    pub what: String,
}

impl Step {
    /// `what`, said of the record `r` of `journal`.
    pub(crate) fn of<E>(journal: &'static str, r: &bosun_journal::Record<E>, what: String) -> Step {
        Step {
            journal,
            seq: r.seq,
            time: r.time_text(),
            what,
        }
    }
}

/// Why an object is the way it is.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// What was asked about.
    pub subject: String,
    /// Who makes or owns it: a controller and parent, an item, a module and hook.
    pub made_by: Vec<String>,
    /// Each change bosun made to it and why, per journal in its order.
    pub history: Vec<Step>,
    /// What it is now and what bosun waits for.
    pub now: Vec<String>,
    /// Journals that could not be read (missing or damaged), with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    /// Live, for an object a module's chart renders: how the object in the cluster differs
    /// from what the module's next upgrade would make of it (`module render --diff` of
    /// that object), when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
}

impl Explanation {
    /// An explanation of `subject` with nothing found yet.
    pub fn new(subject: &Subject) -> Explanation {
        Explanation {
            subject: subject.describe(),
            ..Default::default()
        }
    }

    /// Adds who makes or owns it (once).
    pub fn push_made_by(&mut self, who: String) {
        if !self.made_by.contains(&who) {
            self.made_by.push(who);
        }
    }

    /// Adds what it is now or waits for (once).
    pub fn push_now(&mut self, what: String) {
        if !self.now.contains(&what) {
            self.now.push(what);
        }
    }

    /// The explanation as text.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n", self.subject);
        if self.made_by.is_empty() && self.history.is_empty() && self.now.is_empty() {
            out.push_str("  nothing journaled about it: bosun has not made or changed it\n");
        }
        for who in &self.made_by {
            out.push_str(&format!("  made by: {who}\n"));
        }
        if !self.history.is_empty() {
            out.push_str("  history:\n");
        }
        for s in &self.history {
            out.push_str(&format!(
                "    {} #{} {} {}\n",
                s.journal, s.seq, s.time, s.what
            ));
        }
        for n in &self.now {
            out.push_str(&format!("  now: {n}\n"));
        }
        for u in &self.unreadable {
            out.push_str(&format!("  (not read: {u})\n"));
        }
        if let Some(drift) = &self.drift {
            out.push_str("  drift (live against what the module would apply):\n");
            for line in drift.lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn subjects_are_read_in_every_form_and_bad_ones_are_named() {
        assert_eq!(
            Subject::parse(&words("ConfigMap/web"), Some("apps")),
            Ok(Subject::Object {
                kind: "ConfigMap".into(),
                namespace: "apps".into(),
                name: "web".into()
            })
        );
        assert_eq!(
            Subject::parse(&words("deployitem/ns/app"), None),
            Ok(Subject::Object {
                kind: "deployitem".into(),
                namespace: "ns".into(),
                name: "app".into()
            })
        );
        assert_eq!(
            Subject::parse(&words("values global.foo"), None),
            Ok(Subject::Values {
                path: "global.foo".into()
            })
        );
        let err = Subject::parse(&words("web"), None).unwrap_err();
        assert!(err.contains("KIND/NAME"), "{err}");
        let s = Subject::parse(&words("configmaps web"), None).unwrap();
        assert!(s.kind_is("ConfigMap") && !s.kind_is("Secret"));
        assert!(s.names("any", "web"), "without -n any namespace matches");
    }
}
