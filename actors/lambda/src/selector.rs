//! `metav1.LabelSelector` (`matchLabels` + `matchExpressions`) and the decorator's
//! annotation selector, matched against an object's label or annotation map.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::types::AnnotationSelector;

/// A selector that cannot be used.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("invalid selector: {0}")]
pub struct SelectorError(pub String);

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, map: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => map.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => map.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => map.contains_key(k),
            Requirement::DoesNotExist(k) => !map.contains_key(k),
        }
    }
}

/// A parsed selector; the empty one matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, SelectorError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| SelectorError(format!("{what}: expected strings")))
            })
            .collect(),
        _ => Err(SelectorError(format!("{what}: expected a list of strings"))),
    }
}

fn parse(
    match_map: &Value,
    expressions: &Value,
    map_field: &str,
) -> Result<Selector, SelectorError> {
    let mut requirements = Vec::new();
    match match_map {
        Value::Null => {}
        Value::Object(m) => {
            for (k, v) in m {
                let v = v
                    .as_str()
                    .ok_or_else(|| SelectorError(format!("{map_field}.{k}: expected a string")))?;
                requirements.push(Requirement::In(k.clone(), vec![v.to_string()]));
            }
        }
        _ => return Err(SelectorError(format!("{map_field}: expected a map"))),
    }
    match expressions {
        Value::Null => {}
        Value::Array(items) => {
            for (i, e) in items.iter().enumerate() {
                let field = format!("matchExpressions[{i}]");
                let key = e["key"]
                    .as_str()
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| SelectorError(format!("{field}.key: must be set")))?
                    .to_string();
                let values = strings(&e["values"], &format!("{field}.values"))?;
                let op = e["operator"].as_str().unwrap_or_default();
                let r = match op {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(SelectorError(format!(
                            "{field}.values: must be non-empty for operator {op}"
                        )));
                    }
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        return Err(SelectorError(format!(
                            "{field}.values: must be empty for operator {op}"
                        )));
                    }
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    other => {
                        return Err(SelectorError(format!(
                            "{field}.operator: {other:?} is not In, NotIn, Exists or DoesNotExist"
                        )));
                    }
                };
                requirements.push(r);
            }
        }
        _ => return Err(SelectorError("matchExpressions: expected a list".into())),
    }
    Ok(Selector { requirements })
}

fn set_values(s: &str, term: &str) -> Result<Vec<String>, SelectorError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| SelectorError(format!("{term:?}: expected a list in parentheses")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_term(term: &str) -> Result<Requirement, SelectorError> {
    let bad = || SelectorError(format!("{term:?} is not a label requirement"));
    if term.is_empty() {
        return Err(bad());
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Requirement::NotIn(
            k.trim().to_string(),
            vec![v.trim().to_string()],
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::In(
            k.trim().to_string(),
            vec![v.trim().to_string()],
        ));
    }
    let mut words = term.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().to_string();
    let rest = words.next().unwrap_or_default().trim();
    if rest.is_empty() {
        return Ok(Requirement::Exists(key));
    }
    if let Some(values) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(key, set_values(values, term)?));
    }
    if let Some(values) = rest.strip_prefix("in") {
        return Ok(Requirement::In(key, set_values(values, term)?));
    }
    Err(bad())
}

/// Reads an object's string map (labels or annotations); other values are skipped.
pub fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl Selector {
    /// A `metav1.LabelSelector`; `null` and `{}` match everything.
    pub fn labels(v: &Value) -> Result<Selector, SelectorError> {
        match v {
            Value::Null => Ok(Selector::default()),
            Value::Object(_) => parse(&v["matchLabels"], &v["matchExpressions"], "matchLabels"),
            _ => Err(SelectorError("expected a label selector object".into())),
        }
    }

    /// A decorator's `annotationSelector`; none matches everything.
    pub fn annotations(s: Option<&AnnotationSelector>) -> Result<Selector, SelectorError> {
        let Some(s) = s else {
            return Ok(Selector::default());
        };
        let map = serde_json::to_value(&s.match_annotations).unwrap_or(Value::Null);
        parse(
            &map,
            s.match_expressions.as_ref().unwrap_or(&Value::Null),
            "matchAnnotations",
        )
    }

    /// A selector string as `kubectl -l` takes it: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
    /// `a notin (x,y)`, `a`, `!a`, joined by commas; empty matches everything.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            // A term ends at the first comma outside parentheses.
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        ',' if depth == 0 => return true,
                        _ => {}
                    }
                    false
                })
                .map(|(i, _)| i)
                .unwrap_or(rest.len());
            let term = rest[..end].trim();
            rest = rest.get(end + 1..).unwrap_or("").trim();
            requirements.push(parse_term(term)?);
        }
        Ok(Selector { requirements })
    }

    /// `key=value` for each pair (the selector `generateSelector` makes).
    pub fn from_map(pairs: &BTreeMap<String, String>) -> Selector {
        Selector {
            requirements: pairs
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        }
    }

    /// Whether the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `map` satisfies every requirement.
    pub fn matches_map(&self, map: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(map))
    }

    /// Whether an object's labels match.
    pub fn matches_labels(&self, object: &Value) -> bool {
        self.is_empty() || self.matches_map(&string_map(&object["metadata"]["labels"]))
    }

    /// Whether an object's annotations match.
    pub fn matches_annotations(&self, object: &Value) -> bool {
        self.is_empty() || self.matches_map(&string_map(&object["metadata"]["annotations"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn match_labels_and_expressions_all_apply() {
        let s = Selector::labels(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "old", "operator": "DoesNotExist"}
            ]
        }))
        .expect("valid");
        assert!(s.matches_labels(&obj(json!({"app": "web", "tier": "a"}))));
        assert!(!s.matches_labels(&obj(json!({"app": "web", "tier": "c"}))));
        assert!(!s.matches_labels(&obj(json!({"app": "web", "tier": "a", "old": "1"}))));
        assert!(!s.matches_labels(&obj(json!(null))));
    }

    #[test]
    fn null_and_empty_select_everything() {
        assert!(Selector::labels(&Value::Null).expect("null").is_empty());
        assert!(
            Selector::labels(&json!({}))
                .expect("{}")
                .matches_labels(&obj(json!(null)))
        );
    }

    #[test]
    fn bad_operators_are_named() {
        let err = Selector::labels(&json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}))
            .expect_err("bad op");
        assert_eq!(
            err.to_string(),
            "invalid selector: matchExpressions[0].operator: \"Gt\" is not In, NotIn, Exists or DoesNotExist"
        );
    }

    #[test]
    fn selector_strings_parse_like_kubectl() {
        let s = Selector::parse("app=web, tier in (a,b),!old,env!=prod,team").expect("valid");
        assert!(s.matches_labels(&obj(json!({"app": "web", "tier": "b", "team": "x"}))));
        assert!(!s.matches_labels(&obj(
            json!({"app": "web", "tier": "b", "team": "x", "env": "prod"})
        )));
        assert!(!s.matches_labels(&obj(json!({"app": "web", "tier": "c", "team": "x"}))));
        assert!(Selector::parse("").expect("empty").is_empty());
        assert!(Selector::parse("a in b").is_err());
    }

    #[test]
    fn annotation_selectors_match_annotations() {
        let sel = AnnotationSelector {
            match_annotations: Some([("x".to_string(), "1".to_string())].into()),
            match_expressions: None,
        };
        let s = Selector::annotations(Some(&sel)).expect("valid");
        assert!(s.matches_annotations(&json!({"metadata": {"annotations": {"x": "1"}}})));
        assert!(!s.matches_annotations(&json!({"metadata": {"labels": {"x": "1"}}})));
    }
}
