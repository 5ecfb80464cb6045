//! Metrics that hooks export through `METRICS_PATH`: the operations a hook wrote, and the
//! registry they are applied to, rendered in the Prometheus text format at `/metrics/hooks`.
//!
//! ```text
//!   {"name":"m","action":"add","value":1,"labels":{…},"group":"g"}   one JSON object each
//!   {"name":"m","set":3}                                             add/set shortcuts
//!   {"name":"m","action":"observe","value":0.4,"buckets":[0.1,1]}    histogram
//!   {"group":"g","action":"expire"}                                  drop every series of g
//! ```
//!
//! Names are used as written (no prefix); the `hook` label (and `module` for module hooks) is
//! set by the operator. A batch with operations of a group replaces that group: its series
//! that the batch does not write again are dropped, the ones it writes keep their values
//! (a counter added to again goes on counting). Families render in the order they first
//! appeared, those with series outside any group after those without; series in the order
//! they first appeared.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Adds to a counter.
    Add,
    /// Sets a gauge.
    Set,
    /// Observes a value in a histogram.
    Observe,
    /// Drops every series of a group.
    Expire,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Add => "add",
            Action::Set => "set",
            Action::Observe => "observe",
            Action::Expire => "expire",
        }
    }
}

/// One operation from `METRICS_PATH`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricOp {
    /// Line of the file where the operation starts (from 1).
    pub line: usize,
    /// Metric name (empty for `expire`).
    pub name: String,
    /// What to do.
    pub action: Action,
    /// The value (0 for `expire`).
    pub value: f64,
    /// Labels as the hook wrote them.
    pub labels: BTreeMap<String, String>,
    /// Histogram buckets (upper bounds, ascending) for `observe`.
    pub buckets: Option<Vec<f64>>,
    /// The group the series belongs to.
    pub group: Option<String>,
}

/// A malformed operation: where and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct MetricsError {
    /// Line of the file (from 1).
    pub line: usize,
    /// What is wrong.
    pub problem: MetricProblem,
}

/// What is wrong with one operation of `METRICS_PATH`, naming the field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MetricProblem {
    /// The text is not a stream of JSON values.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// An operation that is not a JSON object.
    #[error("expected a JSON object, got {0}")]
    NotAnObject(Value),
    /// A field that must be a string.
    #[error("{field:?} must be a string, got {got}")]
    NotAString {
        /// The field.
        field: String,
        /// What it holds.
        got: Value,
    },
    /// A field that must be a number.
    #[error("{field:?} must be a number, got {got}")]
    NotANumber {
        /// The field.
        field: String,
        /// What it holds.
        got: Value,
    },
    /// A number that is infinite or NaN.
    #[error("{field:?} must be a finite number")]
    NotFinite {
        /// The field.
        field: String,
    },
    /// An `action` this format does not have.
    #[error("unknown action {0:?}; expected add, set, observe or expire")]
    UnknownAction(String),
    /// An action other than `expire` without its `value`.
    #[error("action {0:?} needs a \"value\"")]
    MissingValue(String),
    /// Both an `action` and an `add`/`set` shortcut.
    #[error("both \"action\":{action:?} and the {shortcut:?} shortcut; use one of them")]
    ActionAndShortcut {
        /// The action.
        action: String,
        /// The shortcut.
        shortcut: String,
    },
    /// Both shortcuts.
    #[error("both the \"add\" and \"set\" shortcuts; use one of them")]
    BothShortcuts,
    /// Neither an action nor a shortcut.
    #[error("no \"action\" (add, set, observe or expire) and no \"add\"/\"set\" shortcut")]
    NoAction,
    /// `expire` without its group.
    #[error("action \"expire\" needs a \"group\"")]
    ExpireWithoutGroup,
    /// An action on a series without its metric name.
    #[error("action {0:?} needs a \"name\"")]
    MissingName(&'static str),
    /// A name Prometheus does not accept.
    #[error("invalid metric name {0:?} (letters, digits, '_' and ':', not starting with a digit)")]
    InvalidName(String),
    /// A negative `add`.
    #[error("a counter cannot decrease: \"add\" of {0}")]
    Decrease(f64),
    /// `observe` with a group.
    #[error("action \"observe\" cannot be used with a \"group\"")]
    ObserveInGroup,
    /// A label name Prometheus does not accept.
    #[error(
        "invalid label name {0:?} (letters, digits and '_', not starting with a digit or \"__\")"
    )]
    InvalidLabelName(String),
    /// A label value that is not a string.
    #[error("label {label:?} must be a string, got {got}")]
    LabelNotAString {
        /// The label.
        label: String,
        /// What it holds.
        got: Value,
    },
    /// `labels` that are not an object.
    #[error("\"labels\" must be an object, got {0}")]
    LabelsNotAnObject(Value),
    /// `buckets: []`.
    #[error("\"buckets\" must not be empty")]
    NoBuckets,
    /// `buckets` that are not an array.
    #[error("\"buckets\" must be an array, got {0}")]
    BucketsNotAnArray(Value),
    /// An operation on a metric of another type (in the registry or earlier in the batch).
    #[error("metric {name:?} is a {known}; {action:?} needs a {needs}")]
    TypeClash {
        /// The metric.
        name: String,
        /// Its type.
        known: &'static str,
        /// The operation's action.
        action: &'static str,
        /// The type that action needs.
        needs: &'static str,
    },
}

/// Histogram buckets when an `observe` gives none (Prometheus' defaults).
pub(crate) const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    !s.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn line_at(text: &str, offset: usize) -> usize {
    1 + text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
}

/// Parses `METRICS_PATH`: a stream of JSON objects (usually one per line). Any malformed
/// operation rejects the whole file.
pub fn parse(text: &str) -> Result<Vec<MetricOp>, MetricsError> {
    let mut ops = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut end = 0;
    loop {
        let start = end
            + text[end..]
                .find(|c: char| !c.is_whitespace())
                .unwrap_or(text.len() - end);
        match stream.next() {
            None => break,
            Some(Err(e)) => {
                return Err(MetricsError {
                    line: e.line().max(1),
                    problem: MetricProblem::NotJson(e.to_string()),
                });
            }
            Some(Ok(v)) => {
                let line = line_at(text, start);
                ops.push(operation(&v).map_err(|problem| MetricsError { line, problem })?);
                if let Some(op) = ops.last_mut() {
                    op.line = line;
                }
            }
        }
        end = stream.byte_offset();
    }
    Ok(ops)
}

fn number(v: &Value, field: &str) -> Result<f64, MetricProblem> {
    let n = v.as_f64().ok_or_else(|| MetricProblem::NotANumber {
        field: field.to_string(),
        got: v.clone(),
    })?;
    if !n.is_finite() {
        return Err(MetricProblem::NotFinite {
            field: field.to_string(),
        });
    }
    Ok(n)
}

/// One operation from one JSON value.
fn operation(v: &Value) -> Result<MetricOp, MetricProblem> {
    let obj = v
        .as_object()
        .ok_or_else(|| MetricProblem::NotAnObject(v.clone()))?;
    let string = |field: &str| match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(MetricProblem::NotAString {
            field: field.to_string(),
            got: other.clone(),
        }),
    };
    let name = string("name")?.unwrap_or_default();
    let group = string("group")?.filter(|g| !g.is_empty());
    let given = |f: &str| obj.get(f).is_some_and(|v| !v.is_null());
    let shortcuts: Vec<&str> = ["add", "set"].into_iter().filter(|f| given(f)).collect();
    let (action, value) = match (string("action")?, shortcuts.as_slice()) {
        (Some(a), []) => {
            let action = match a.as_str() {
                "add" => Action::Add,
                "set" => Action::Set,
                "observe" => Action::Observe,
                "expire" => Action::Expire,
                other => return Err(MetricProblem::UnknownAction(other.to_string())),
            };
            let value = match (action, obj.get("value")) {
                (Action::Expire, _) => 0.0,
                (_, None | Some(Value::Null)) => {
                    return Err(MetricProblem::MissingValue(a));
                }
                (_, Some(v)) => number(v, "value")?,
            };
            (action, value)
        }
        (Some(a), [s, ..]) => {
            return Err(MetricProblem::ActionAndShortcut {
                action: a,
                shortcut: s.to_string(),
            });
        }
        (None, [s]) => {
            let action = if *s == "add" {
                Action::Add
            } else {
                Action::Set
            };
            (action, number(&obj[*s], s)?)
        }
        (None, [_, _, ..]) => {
            return Err(MetricProblem::BothShortcuts);
        }
        (None, []) => {
            return Err(MetricProblem::NoAction);
        }
    };
    if action == Action::Expire {
        if group.is_none() {
            return Err(MetricProblem::ExpireWithoutGroup);
        }
    } else if name.is_empty() {
        return Err(MetricProblem::MissingName(action.as_str()));
    } else if !valid_metric_name(&name) {
        return Err(MetricProblem::InvalidName(name));
    }
    if action == Action::Add && value < 0.0 {
        return Err(MetricProblem::Decrease(value));
    }
    if action == Action::Observe && group.is_some() {
        return Err(MetricProblem::ObserveInGroup);
    }
    let mut labels = BTreeMap::new();
    match obj.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                if !valid_label_name(k) {
                    return Err(MetricProblem::InvalidLabelName(k.clone()));
                }
                let v = v.as_str().ok_or_else(|| MetricProblem::LabelNotAString {
                    label: k.clone(),
                    got: v.clone(),
                })?;
                labels.insert(k.clone(), v.to_string());
            }
        }
        Some(other) => return Err(MetricProblem::LabelsNotAnObject(other.clone())),
    }
    let buckets = match obj.get("buckets") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut b = items
                .iter()
                .map(|v| number(v, "buckets"))
                .collect::<Result<Vec<f64>, _>>()?;
            if b.is_empty() {
                return Err(MetricProblem::NoBuckets);
            }
            b.sort_by(f64::total_cmp);
            b.dedup();
            Some(b)
        }
        Some(other) => return Err(MetricProblem::BucketsNotAnArray(other.clone())),
    };
    Ok(MetricOp {
        line: 0,
        name,
        action,
        value,
        labels,
        buckets,
        group,
    })
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Counter,
    Gauge,
    Histogram(Vec<f64>),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        }
    }

    fn of(op: &MetricOp) -> Kind {
        match op.action {
            Action::Add => Kind::Counter,
            Action::Set | Action::Expire => Kind::Gauge,
            Action::Observe => Kind::Histogram(
                op.buckets
                    .clone()
                    .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
            ),
        }
    }

    fn same_type(&self, other: &Kind) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct Series {
    labels: Labels,
    group: Option<String>,
    value: f64,
    /// Per-bucket counts (not cumulative), for histograms.
    buckets: Vec<u64>,
    count: u64,
}

#[derive(Debug)]
struct Family {
    kind: Kind,
    order: u64,
    series: BTreeMap<u64, Series>,
    index: HashMap<Labels, u64>,
}

#[derive(Debug, Default)]
struct Registry {
    families: HashMap<String, Family>,
    next: u64,
}

/// The hooks' metrics, shared by every actor that runs hooks and by `/metrics/hooks`.
#[derive(Clone, Debug, Default)]
pub struct HookMetrics(Arc<Mutex<Registry>>);

impl HookMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies the operations of one hook run (`module` for module hooks). Operations that
    /// do not fit the registry (a `set` on a counter, …) reject the whole batch.
    pub fn apply(
        &self,
        hook: &str,
        module: Option<&str>,
        ops: &[MetricOp],
    ) -> Result<(), MetricsError> {
        let labelled: Vec<(&MetricOp, Labels)> = ops
            .iter()
            .map(|op| {
                let mut labels = op.labels.clone();
                labels.insert("hook".into(), hook.to_string());
                if let Some(m) = module {
                    labels.insert("module".into(), m.to_string());
                }
                (op, labels.into_iter().collect())
            })
            .collect();
        let mut reg = self.lock();
        // Types first, so that a rejected batch changes nothing.
        let mut batch_kinds: HashMap<&str, Kind> = HashMap::new();
        for (op, _) in labelled
            .iter()
            .filter(|(op, _)| op.action != Action::Expire)
        {
            let kind = Kind::of(op);
            let known = reg
                .families
                .get(&op.name)
                .map(|f| &f.kind)
                .or(batch_kinds.get(op.name.as_str()));
            match known {
                Some(k) if !k.same_type(&kind) => {
                    return Err(MetricsError {
                        line: op.line,
                        problem: MetricProblem::TypeClash {
                            name: op.name.clone(),
                            known: k.name(),
                            action: op.action.as_str(),
                            needs: kind.name(),
                        },
                    });
                }
                Some(_) => {}
                None => {
                    batch_kinds.insert(&op.name, kind);
                }
            }
        }
        // Groups this batch replaces, and the series it writes in each.
        let mut expired: HashSet<&str> = HashSet::new();
        let mut kept: HashMap<&str, HashSet<(&str, &Labels)>> = HashMap::new();
        for (op, labels) in &labelled {
            let Some(g) = op.group.as_deref() else {
                continue;
            };
            if op.action == Action::Expire {
                expired.insert(g);
            } else {
                kept.entry(g)
                    .or_default()
                    .insert((op.name.as_str(), labels));
            }
        }
        if !expired.is_empty() || !kept.is_empty() {
            reg.families.retain(|name, family| {
                family.series.retain(|_, s| {
                    let Some(g) = s.group.as_deref() else {
                        return true;
                    };
                    if expired.contains(g) {
                        return false;
                    }
                    match kept.get(g) {
                        Some(set) => set.contains(&(name.as_str(), &s.labels)),
                        None => true,
                    }
                });
                let alive: HashSet<&u64> = family.series.keys().collect();
                family.index.retain(|_, seq| alive.contains(seq));
                !family.series.is_empty()
            });
        }
        for (op, labels) in labelled {
            if op.action == Action::Expire {
                continue;
            }
            let reg = &mut *reg;
            let next = &mut reg.next;
            let family = reg.families.entry(op.name.clone()).or_insert_with(|| {
                *next += 1;
                Family {
                    kind: Kind::of(op),
                    order: *next,
                    series: BTreeMap::new(),
                    index: HashMap::new(),
                }
            });
            let seq = match family.index.get(&labels) {
                Some(seq) => *seq,
                None => {
                    *next += 1;
                    let bucket_count = match &family.kind {
                        Kind::Histogram(b) => b.len(),
                        _ => 0,
                    };
                    family.series.insert(
                        *next,
                        Series {
                            labels: labels.clone(),
                            group: None,
                            value: 0.0,
                            buckets: vec![0; bucket_count],
                            count: 0,
                        },
                    );
                    family.index.insert(labels, *next);
                    *next
                }
            };
            let Some(series) = family.series.get_mut(&seq) else {
                continue;
            };
            series.group = op.group.clone();
            match &family.kind {
                Kind::Counter => series.value += op.value,
                Kind::Gauge => series.value = op.value,
                Kind::Histogram(bounds) => {
                    series.value += op.value;
                    series.count += 1;
                    if let Some(i) = bounds.iter().position(|b| op.value <= *b) {
                        series.buckets[i] += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// The Prometheus text format of every series.
    pub fn render(&self) -> String {
        let reg = self.lock();
        let mut families: Vec<(&String, &Family)> = reg.families.iter().collect();
        // Families that only hold grouped series first (the documentation's layout).
        families.sort_by_key(|(_, f)| (f.series.values().any(|s| s.group.is_none()), f.order));
        let mut out = String::new();
        for (name, family) in families {
            let _ = writeln!(out, "# HELP {name} {name}");
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.name());
            for s in family.series.values() {
                match &family.kind {
                    Kind::Counter | Kind::Gauge => {
                        let _ = writeln!(
                            out,
                            "{name}{} {}",
                            label_text(&s.labels, None),
                            number_text(s.value)
                        );
                    }
                    Kind::Histogram(bounds) => {
                        let mut cumulative = 0;
                        for (b, n) in bounds.iter().zip(&s.buckets) {
                            cumulative += n;
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {cumulative}",
                                label_text(&s.labels, Some(&number_text(*b)))
                            );
                        }
                        let _ = writeln!(
                            out,
                            "{name}_bucket{} {}",
                            label_text(&s.labels, Some("+Inf")),
                            s.count
                        );
                        let _ = writeln!(
                            out,
                            "{name}_sum{} {}",
                            label_text(&s.labels, None),
                            number_text(s.value)
                        );
                        let _ = writeln!(
                            out,
                            "{name}_count{} {}",
                            label_text(&s.labels, None),
                            s.count
                        );
                    }
                }
            }
        }
        out
    }
}

fn number_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn label_text(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Result<MetricOp, MetricsError> {
        parse(line).map(|mut v| v.remove(0))
    }

    fn problem(text: &str) -> (usize, String) {
        let e = parse(text).expect_err(text);
        (e.line, e.problem.to_string())
    }

    #[test]
    fn every_form_parses() {
        let op = one(r#"{"name":"m","action":"add","value":1,"labels":{"a":"b"}}"#).unwrap();
        assert_eq!(
            (op.action, op.value, op.name.as_str()),
            (Action::Add, 1.0, "m")
        );
        assert_eq!(op.labels, BTreeMap::from([("a".into(), "b".into())]));
        assert_eq!(op.group, None);
        let op = one(r#"{"name":"m","action":"set","value":33.5}"#).unwrap();
        assert_eq!((op.action, op.value), (Action::Set, 33.5));
        let op = one(r#"{"name":"m","action":"observe","value":42,"buckets":[50,1,2,1]}"#).unwrap();
        assert_eq!(op.action, Action::Observe);
        assert_eq!(
            op.buckets,
            Some(vec![1.0, 2.0, 50.0]),
            "sorted, deduplicated"
        );
        let op = one(r#"{"name":"m","add":2}"#).unwrap();
        assert_eq!((op.action, op.value), (Action::Add, 2.0));
        let op = one(r#"{"name":"m","set":-4}"#).unwrap();
        assert_eq!((op.action, op.value), (Action::Set, -4.0));
        let op = one(r#"{"group":"g","name":"m","action":"add","value":1}"#).unwrap();
        assert_eq!(op.group.as_deref(), Some("g"));
        let op = one(r#"{"group":"g","action":"expire"}"#).unwrap();
        assert_eq!(
            (op.action, op.group.as_deref()),
            (Action::Expire, Some("g"))
        );
        let op =
            one(r#"{"name":"m","action":"add","value":1,"labels":null,"extra":true}"#).unwrap();
        assert!(op.labels.is_empty(), "unknown fields are ignored");
    }

    #[test]
    fn lines_are_counted_across_blank_lines_and_multi_line_objects() {
        let text = "\n{\"name\":\"a\",\"add\":1}\n\n{\n \"name\": \"b\",\n \"set\": 2\n}\n{\"name\":\"c\",\"add\":1} {\"name\":\"d\",\"add\":1}\n";
        let ops = parse(text).unwrap();
        let lines: Vec<(usize, &str)> = ops.iter().map(|o| (o.line, o.name.as_str())).collect();
        assert_eq!(lines, [(2, "a"), (4, "b"), (8, "c"), (8, "d")]);
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  \n\n").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let ok = r#"{"name":"m","add":1}"#;
        let cases: Vec<(String, usize, &str)> = vec![
            (format!("{ok}\n{{\"name\":\"m\",\"add\":}}"), 2, "not JSON"),
            (format!("{ok}\n[1,2]"), 2, "expected a JSON object"),
            (
                format!("{ok}\n{ok}\n{{\"name\":\"m\"}}"),
                3,
                "no \"action\"",
            ),
            (
                r#"{"name":"m","action":"inc","value":1}"#.into(),
                1,
                "unknown action \"inc\"",
            ),
            (
                r#"{"name":"m","action":"add"}"#.into(),
                1,
                "needs a \"value\"",
            ),
            (
                r#"{"name":"m","action":"set","value":"3"}"#.into(),
                1,
                "\"value\" must be a number",
            ),
            (
                r#"{"name":"m","action":"add","value":1,"add":1}"#.into(),
                1,
                "both \"action\"",
            ),
            (
                r#"{"name":"m","add":1,"set":1}"#.into(),
                1,
                "both the \"add\" and \"set\"",
            ),
            (
                r#"{"action":"add","value":1}"#.into(),
                1,
                "needs a \"name\"",
            ),
            (r#"{"name":"1m","add":1}"#.into(), 1, "invalid metric name"),
            (r#"{"name":"m-x","add":1}"#.into(), 1, "invalid metric name"),
            (r#"{"name":"m","add":-1}"#.into(), 1, "cannot decrease"),
            (
                r#"{"name":"m","add":1,"labels":{"a":1}}"#.into(),
                1,
                "label \"a\" must be a string",
            ),
            (
                r#"{"name":"m","add":1,"labels":{"a-b":"x"}}"#.into(),
                1,
                "invalid label name",
            ),
            (
                r#"{"name":"m","add":1,"labels":{"__x":"x"}}"#.into(),
                1,
                "invalid label name",
            ),
            (
                r#"{"name":"m","add":1,"labels":["a"]}"#.into(),
                1,
                "\"labels\" must be an object",
            ),
            (r#"{"action":"expire"}"#.into(), 1, "needs a \"group\""),
            (
                r#"{"group":"g","name":"m","action":"observe","value":1}"#.into(),
                1,
                "cannot be used with a \"group\"",
            ),
            (
                r#"{"name":"m","action":"observe","value":1,"buckets":[]}"#.into(),
                1,
                "must not be empty",
            ),
            (
                r#"{"name":"m","action":"observe","value":1,"buckets":"1,2"}"#.into(),
                1,
                "must be an array",
            ),
            (
                r#"{"name":5,"add":1}"#.into(),
                1,
                "\"name\" must be a string",
            ),
        ];
        for (text, line, want) in cases {
            let (got_line, got) = problem(&text);
            assert_eq!(got_line, line, "{text}: {got}");
            assert!(
                got.contains(want),
                "{text}: {got:?} should contain {want:?}"
            );
        }
    }

    fn apply(m: &HookMetrics, hook: &str, text: &str) {
        m.apply(hook, None, &parse(text).unwrap()).unwrap();
    }

    #[test]
    fn counters_gauges_histograms_and_the_hook_label() {
        let m = HookMetrics::default();
        apply(
            &m,
            "a.sh",
            r#"{"name":"c","add":1,"labels":{"x":"1"}}
{"name":"c","add":2.5,"labels":{"x":"1"}}
{"name":"g","set":3}
{"name":"g","set":7,"labels":{"hook":"spoofed"}}
{"name":"h","action":"observe","value":0.5,"buckets":[1,5]}
{"name":"h","action":"observe","value":3}
{"name":"h","action":"observe","value":9}"#,
        );
        m.apply(
            "b.sh",
            Some("mod-a"),
            &parse(r#"{"name":"g","set":1,"labels":{"q":"a\"b"}}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(
            m.render(),
            r#"# HELP c c
# TYPE c counter
c{hook="a.sh",x="1"} 3.5
# HELP g g
# TYPE g gauge
g{hook="a.sh"} 7
g{hook="b.sh",module="mod-a",q="a\"b"} 1
# HELP h h
# TYPE h histogram
h_bucket{hook="a.sh",le="1"} 1
h_bucket{hook="a.sh",le="5"} 2
h_bucket{hook="a.sh",le="+Inf"} 3
h_sum{hook="a.sh"} 12.5
h_count{hook="a.sh"} 3
"#
        );
    }

    #[test]
    fn a_type_clash_rejects_the_whole_batch() {
        let m = HookMetrics::default();
        apply(&m, "a.sh", r#"{"name":"c","add":1}"#);
        let ops = parse("{\"name\":\"g\",\"set\":1}\n{\"name\":\"c\",\"set\":1}").unwrap();
        let e = m.apply("a.sh", None, &ops).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.problem.to_string().contains("\"c\" is a counter"), "{e}");
        let ops = parse("{\"name\":\"n\",\"set\":1}\n{\"name\":\"n\",\"add\":1}").unwrap();
        assert!(m.apply("a.sh", None, &ops).is_err(), "clash within a batch");
        assert_eq!(
            m.render(),
            "# HELP c c\n# TYPE c counter\nc{hook=\"a.sh\"} 1\n"
        );
    }

    #[test]
    fn expire_with_an_add_in_the_same_batch_starts_the_group_over() {
        let m = HookMetrics::default();
        apply(&m, "a.sh", r#"{"group":"g","name":"c","add":5}"#);
        apply(
            &m,
            "a.sh",
            "{\"group\":\"g\",\"action\":\"expire\"}\n{\"group\":\"g\",\"name\":\"c\",\"add\":1}",
        );
        assert_eq!(
            m.render(),
            "# HELP c c\n# TYPE c counter\nc{hook=\"a.sh\"} 1\n"
        );
        apply(&m, "b.sh", r#"{"group":"other","action":"expire"}"#);
        assert!(
            m.render().contains("c{hook=\"a.sh\"} 1"),
            "other groups stay"
        );
        apply(&m, "b.sh", r#"{"group":"g","action":"expire"}"#);
        assert_eq!(
            m.render(),
            "",
            "groups span hooks; empty families disappear"
        );
    }
}
