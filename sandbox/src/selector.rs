//! Label and field selectors, with kube-apiserver's grammar.
//!
//! Label selectors: comma-separated requirements `k`, `!k`, `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`. Field selectors: `path=v`, `path==v`,
//! `path!=v`, with `\,` `\=` `\\` escapes, over the fields the API server indexes.

use serde_json::{Map, Value};

/// A selector that could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// Syntax error at a position of the selector string.
    #[error("{message} at position {position} of {selector:?}")]
    Syntax {
        /// The whole selector.
        selector: String,
        /// Character offset of the problem.
        position: usize,
        /// What was expected.
        message: String,
    },
    /// A key or value that is not a valid label key or value.
    #[error("invalid label {what} {value:?}: {reason}")]
    Invalid {
        /// `key` or `value`.
        what: &'static str,
        /// The offending text.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A field that the API server does not support in field selectors.
    #[error("{0:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")]
    UnsupportedField(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Exists,
    NotExists,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Gt(i64),
    Lt(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

fn tokenize(s: &str) -> Result<Vec<(usize, Token)>, SelectorError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let token = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            ',' => Token::Comma,
            '(' => Token::Open,
            ')' => Token::Close,
            '>' => Token::Gt,
            '<' => Token::Lt,
            '=' if chars.get(i + 1) == Some(&'=') => {
                i += 1;
                Token::DoubleEq
            }
            '=' => Token::Eq,
            '!' if chars.get(i + 1) == Some(&'=') => {
                i += 1;
                Token::NotEq
            }
            '!' => Token::Not,
            _ => {
                while i < chars.len() && !chars[i].is_whitespace() && !",()<>=!".contains(chars[i])
                {
                    i += 1;
                }
                out.push((start, Token::Ident(chars[start..i].iter().collect())));
                continue;
            }
        };
        i += 1;
        out.push((start, token));
    }
    Ok(out)
}

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<(usize, Token)>,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos).map(|(_, t)| t)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).map(|(_, t)| t.clone());
        self.pos += 1;
        t
    }

    fn error(&self, message: impl Into<String>) -> SelectorError {
        let position = self
            .tokens
            .get(self.pos)
            .map(|(p, _)| *p)
            .unwrap_or(self.source.chars().count());
        SelectorError::Syntax {
            selector: self.source.to_string(),
            position,
            message: message.into(),
        }
    }

    fn ident(&mut self, what: &str) -> Result<String, SelectorError> {
        match self.peek() {
            Some(Token::Ident(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.error(format!("expected {what}"))),
        }
    }

    /// A value after `=`/`!=`: may be empty (followed by `,` or the end).
    fn value(&mut self) -> Result<String, SelectorError> {
        match self.peek() {
            None | Some(Token::Comma) => Ok(String::new()),
            _ => self.ident("a value"),
        }
    }

    fn set(&mut self) -> Result<Vec<String>, SelectorError> {
        if self.next() != Some(Token::Open) {
            self.pos -= 1;
            return Err(self.error("expected '(' to start a set of values"));
        }
        let mut values = Vec::new();
        loop {
            match self.peek() {
                Some(Token::Close) => {
                    self.pos += 1;
                    // `k in ()` and trailing commas give an empty value, as in kube-apiserver.
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                Some(Token::Comma) => {
                    self.pos += 1;
                    values.push(String::new());
                }
                Some(Token::Ident(_)) => {
                    let v = self.ident("a value")?;
                    check_value(&v)?;
                    values.push(v);
                    match self.peek() {
                        Some(Token::Comma) => self.pos += 1,
                        Some(Token::Close) => {}
                        _ => return Err(self.error("expected ',' or ')' in a set of values")),
                    }
                }
                _ => return Err(self.error("expected a value or ')'")),
            }
        }
    }

    fn integer(&mut self) -> Result<i64, SelectorError> {
        let v = self.ident("an integer")?;
        v.parse::<i64>().map_err(|_| {
            self.pos -= 1;
            self.error(format!(
                "for 'Gt', 'Lt' operators, the value must be an integer, not {v:?}"
            ))
        })
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            let key = self.ident("a label key after '!'")?;
            check_key(&key)?;
            return Ok(Requirement {
                key,
                op: Op::NotExists,
            });
        }
        let key = self.ident("a label key")?;
        check_key(&key)?;
        let op = match self.peek() {
            None | Some(Token::Comma) => Op::Exists,
            Some(Token::Eq | Token::DoubleEq) => {
                self.pos += 1;
                let v = self.value()?;
                check_value(&v)?;
                Op::Equals(v)
            }
            Some(Token::NotEq) => {
                self.pos += 1;
                let v = self.value()?;
                check_value(&v)?;
                Op::NotEquals(v)
            }
            Some(Token::Gt) => {
                self.pos += 1;
                Op::Gt(self.integer()?)
            }
            Some(Token::Lt) => {
                self.pos += 1;
                Op::Lt(self.integer()?)
            }
            Some(Token::Ident(word)) if word == "in" => {
                self.pos += 1;
                Op::In(self.set()?)
            }
            Some(Token::Ident(word)) if word == "notin" => {
                self.pos += 1;
                Op::NotIn(self.set()?)
            }
            _ => return Err(self.error("expected one of =, ==, !=, in, notin, >, < or ','")),
        };
        Ok(Requirement { key, op })
    }
}

fn check_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason: &str| SelectorError::Invalid {
        what: "key",
        value: key.to_string(),
        reason: reason.into(),
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 {
            return Err(invalid(
                "prefix must be a DNS subdomain of at most 253 characters",
            ));
        }
        if !p.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        }) {
            return Err(invalid("prefix must be a lowercase DNS subdomain"));
        }
    }
    if name.is_empty() || name.len() > 63 {
        return Err(invalid("name part must be 1 to 63 characters"));
    }
    if !qualified_chars(name) {
        return Err(invalid(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), SelectorError> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 || !qualified_chars(value) {
        return Err(SelectorError::Invalid {
            what: "value",
            value: value.to_string(),
            reason: "must be 63 characters or less, consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character".into(),
        });
    }
    Ok(())
}

fn qualified_chars(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let tokens = tokenize(s)?;
        let mut p = Parser {
            source: s,
            tokens,
            pos: 0,
        };
        let mut requirements = Vec::new();
        if p.peek().is_none() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(p.requirement()?);
            match p.next() {
                None => break,
                Some(Token::Comma) => {
                    if p.peek().is_none() {
                        return Err(p.error("expected a requirement after ','"));
                    }
                }
                Some(_) => {
                    p.pos -= 1;
                    return Err(p.error("expected ',' between requirements"));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`,
    /// `matchExpressions`).
    pub fn from_object(sel: &Value) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if let Some(m) = sel["matchLabels"].as_object() {
            for (k, v) in m {
                requirements.push(Requirement {
                    key: k.clone(),
                    op: Op::Equals(v.as_str().unwrap_or_default().into()),
                });
            }
        }
        for e in sel["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            let op = match e["operator"].as_str().unwrap_or_default() {
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::NotExists,
                other => {
                    return Err(SelectorError::Syntax {
                        selector: e.to_string(),
                        position: 0,
                        message: format!(
                            "unknown operator {other:?}, expected In, NotIn, Exists or DoesNotExist"
                        ),
                    });
                }
            };
            requirements.push(Requirement { key, op });
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels matches.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                Op::Exists => value.is_some(),
                Op::NotExists => value.is_none(),
                Op::Equals(v) => value == Some(v.as_str()),
                Op::NotEquals(v) => value != Some(v.as_str()),
                Op::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
                Op::NotIn(vs) => value.is_none_or(|x| vs.iter().all(|v| v != x)),
                Op::Gt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// The fields kube-apiserver selects objects of a kind on, beyond `metadata.name` and
/// `metadata.namespace`, by group and kind.
const KIND_FIELDS: &[(&str, &str, &[&str])] = &[
    (
        "",
        "Pod",
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
    ),
    (
        "",
        "Event",
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    ),
    ("", "Secret", &["type"]),
    ("", "Namespace", &["status.phase"]),
    ("", "Node", &["spec.unschedulable"]),
    ("batch", "Job", &["status.successful"]),
    ("apps", "ReplicaSet", &["status.replicas"]),
];

/// The fields kube-apiserver selects objects of a kind on, beyond `metadata.name` and
/// `metadata.namespace`; `None` when the kind is not known here (every field some kind is
/// selected on is accepted then).
pub(crate) fn kind_fields(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (group, kind) {
        ("events.k8s.io", _) | ("", "PersistentVolumeClaim") | ("", "PersistentVolume") => None,
        _ => Some(
            KIND_FIELDS
                .iter()
                .find(|(g, k, _)| *g == group && *k == kind)
                .map_or(&[][..], |(_, _, fields)| *fields),
        ),
    }
}

/// Whether some kind is selected on `path` (what a field selector may name before its kind
/// is known).
fn selectable(path: &str) -> bool {
    KIND_FIELDS
        .iter()
        .any(|(_, _, fields)| fields.contains(&path))
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldRequirement {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Splits on an unescaped separator, keeping escapes for the next step.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        let last = parts.len() - 1;
        if escaped {
            parts[last].push('\\');
            parts[last].push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts[last].push(c);
        }
    }
    if escaped {
        let last = parts.len() - 1;
        parts[last].push('\\');
    }
    parts
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence \\{e}")),
                None => return Err("trailing backslash".into()),
            }
        } else if c == '=' || c == ',' {
            // As kube-apiserver's `fields.UnescapeValue`: `metadata.name===x` is refused.
            return Err(format!(
                "invalid field selector value {s:?}: unescaped {c:?}"
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector { requirements });
        }
        let syntax = |message: String| SelectorError::Syntax {
            selector: s.to_string(),
            position: 0,
            message,
        };
        for part in split_unescaped(s, ',') {
            let (path, value, equal) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, v, true)
            } else {
                return Err(syntax(format!(
                    "invalid selector {part:?}: expected path=value, path==value or path!=value"
                )));
            };
            let path = path.trim().to_string();
            if path != "metadata.name" && path != "metadata.namespace" && !selectable(&path) {
                return Err(SelectorError::UnsupportedField(path));
            }
            let value = unescape(value.trim()).map_err(syntax)?;
            requirements.push(FieldRequirement { path, value, equal });
        }
        Ok(FieldSelector { requirements })
    }

    /// The fields it selects on.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.requirements.iter().map(|r| r.path.as_str())
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let mut v = obj;
            for seg in r.path.split('.') {
                v = &v[seg];
            }
            let actual = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == r.value) == r.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn label_operators() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        let yes = [
            "",
            "app",
            "!missing",
            "app=web",
            "app==web",
            "app!=db",
            "missing!=x",
            "app in (web, db)",
            "tier notin (back)",
            "missing notin (x)",
            "n>4",
            "n<6",
            "app=web,tier=front",
            " app = web , tier in (front) ",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(Some(&l)),
                "{s} should match"
            );
        }
        let no = [
            "missing",
            "!app",
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web)",
            "n>5",
            "n<5",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(Some(&l)),
                "{s} should not match"
            );
        }
        assert!(
            LabelSelector::parse("app=")
                .unwrap()
                .matches(Some(&labels(json!({"app": ""}))))
        );
    }

    #[test]
    fn label_errors_name_the_position() {
        for s in [
            "a in (", "a in b", "=x", "a,", "a b", "n>x", "a=b c", "-bad=x", "a=-x",
        ] {
            let err = LabelSelector::parse(s).unwrap_err();
            assert!(!err.to_string().is_empty(), "{s}");
        }
        let err = LabelSelector::parse("a in (").unwrap_err();
        assert!(err.to_string().contains("position"), "{err}");
    }

    #[test]
    fn label_selector_object() {
        let sel = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}, {"key": "x", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert!(sel.matches(Some(&labels(json!({"app": "web", "tier": "front"})))));
        assert!(!sel.matches(Some(&labels(
            json!({"app": "web", "tier": "front", "x": "1"})
        ))));
    }

    #[test]
    fn field_selectors() {
        let obj =
            json!({"metadata": {"name": "a,b", "namespace": "ns"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=a\\,b")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns,status.phase!=Failed")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=ns")
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=bar").unwrap_err(),
            SelectorError::UnsupportedField("spec.foo".into())
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
