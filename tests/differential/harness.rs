//! The differential harness: a case is data (setup steps and one compared request), run
//! against a sandbox and against the real control plane; answers are normalised (what
//! differs by nature is removed) and compared.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{self, Sandbox};

/// `Accept` of a `Table` request.
pub const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
pub const JSON: &str = "application/json";
pub const MERGE: &str = "application/merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";
pub const YAML: &str = "application/yaml";

/// One HTTP request of a case. Paths and bodies may name saved values as `{var}`.
#[derive(Clone, Debug)]
pub struct Step {
    pub method: &'static str,
    pub path: String,
    pub content_type: &'static str,
    pub accept: &'static str,
    pub body: String,
    /// Values to keep from the answer: (variable, JSON pointer).
    pub save: Vec<(&'static str, &'static str)>,
    /// Poll (GET `path`) until the answer's status is this (setup only).
    pub wait_status: Option<u16>,
    /// Poll (GET `path`) until the pointer holds the value (setup only).
    pub wait_value: Option<(&'static str, Value)>,
}

fn step(method: &'static str, path: &str, content_type: &'static str, body: String) -> Step {
    Step {
        method,
        path: path.to_string(),
        content_type,
        accept: "",
        body,
        save: Vec::new(),
        wait_status: None,
        wait_value: None,
    }
}

pub fn get(path: &str) -> Step {
    step("GET", path, "", String::new())
}
pub fn post(path: &str, body: Value) -> Step {
    step("POST", path, JSON, body.to_string())
}
pub fn post_yaml(path: &str, body: &str) -> Step {
    step("POST", path, YAML, body.to_string())
}
pub fn put(path: &str, body: Value) -> Step {
    step("PUT", path, JSON, body.to_string())
}
pub fn patch(path: &str, content_type: &'static str, body: Value) -> Step {
    step("PATCH", path, content_type, body.to_string())
}
pub fn delete(path: &str) -> Step {
    step("DELETE", path, "", String::new())
}
pub fn delete_with(path: &str, body: Value) -> Step {
    step("DELETE", path, JSON, body.to_string())
}
/// Waits until GET `path` answers `status`.
pub fn wait_status(path: &str, status: u16) -> Step {
    Step {
        wait_status: Some(status),
        ..get(path)
    }
}
/// Waits until GET `path` answers an object whose `pointer` holds `value`.
pub fn wait_value(path: &str, pointer: &'static str, value: Value) -> Step {
    Step {
        wait_value: Some((pointer, value)),
        ..get(path)
    }
}

impl Step {
    pub fn save(mut self, var: &'static str, pointer: &'static str) -> Step {
        self.save.push((var, pointer));
        self
    }
    pub fn accept(mut self, accept: &'static str) -> Step {
        self.accept = accept;
        self
    }
}

/// What of the answer is compared.
#[derive(Clone, Debug)]
pub enum View {
    /// Status code and the whole normalised body.
    Whole,
    /// Status code and only these JSON pointers of the body.
    Fields(Vec<&'static str>),
    /// Status code and the `reason`/`code`/`details` of a Status (not its message).
    Reason,
    /// The sequence of watch events (type, normalised object).
    Events,
    /// Status code and each resource the sandbox lists in a discovery document (kind,
    /// scope, verbs, short names), beside the real server's entry for it.
    Discovery,
    /// Status code and the names of the resources a discovery document lists.
    DiscoveryNames,
}

/// One compared request, with the requests that set it up.
#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    pub setup: Vec<Step>,
    pub request: Step,
    pub view: View,
    /// A named expected difference and why; the case must differ then.
    pub expected: Option<&'static str>,
}

pub fn case(name: impl Into<String>, setup: Vec<Step>, request: Step) -> Case {
    Case {
        name: name.into(),
        setup,
        request,
        view: View::Whole,
        expected: None,
    }
}

impl Case {
    pub fn view(mut self, view: View) -> Case {
        self.view = view;
        self
    }
    pub fn fields(self, pointers: &[&'static str]) -> Case {
        self.view(View::Fields(pointers.to_vec()))
    }
    pub fn reason(self) -> Case {
        self.view(View::Reason)
    }
    /// An expected difference, with its reason (documented in docs/sandbox.md).
    pub fn differs(mut self, why: &'static str) -> Case {
        self.expected = Some(why);
        self
    }
}

/// One server's answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

fn substitute(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

fn send(server: &Sandbox, s: &Step, vars: &HashMap<String, String>) -> Answer {
    let path = substitute(&s.path, vars);
    let body = substitute(&s.body, vars);
    let headers = [("Content-Type", s.content_type), ("Accept", s.accept)];
    let (status, body) =
        common::http_full(server.addr(), s.method, &path, &headers, body.as_bytes());
    Answer { status, body }
}

fn pointer_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Runs the setup of a case on one server; returns its variables, or what went wrong.
fn run_setup(server: &Sandbox, case: &Case) -> Result<HashMap<String, String>, String> {
    let mut vars = HashMap::new();
    for s in &case.setup {
        if s.wait_status.is_some() || s.wait_value.is_some() {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let a = send(server, s, &vars);
                let body: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
                let done = match (&s.wait_status, &s.wait_value) {
                    (Some(code), _) => a.status == *code,
                    (_, Some((p, v))) => body.pointer(p) == Some(v),
                    _ => true,
                };
                if done {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "waiting on {} {}: still {} {}",
                        s.method,
                        s.path,
                        a.status,
                        String::from_utf8_lossy(&a.body)
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        let a = send(server, s, &vars);
        let body: Value = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
        for (var, p) in &s.save {
            match body.pointer(p) {
                Some(v) => {
                    vars.insert(var.to_string(), pointer_text(v));
                }
                None => {
                    return Err(format!(
                        "setup {} {} answered {} without {p}: {}",
                        s.method, s.path, a.status, body
                    ));
                }
            }
        }
    }
    Ok(vars)
}

/// What a server answered, normalised for comparison.
fn normalised(case: &Case, a: &Answer) -> Value {
    match &case.view {
        View::Events => {
            let text = String::from_utf8_lossy(&a.body);
            let events: Vec<Value> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .filter(|l| {
                    let e: Value = serde_json::from_str(l).unwrap_or(Value::Null);
                    !server_owned(&e["object"])
                })
                .map(|l| {
                    let mut e: Value = serde_json::from_str(l).unwrap_or(json!({"unparsed": l}));
                    normalise(&mut e["object"]);
                    e
                })
                .collect();
            json!({"code": a.status, "events": events})
        }
        view => {
            let mut body: Value = serde_json::from_slice(&a.body).unwrap_or_else(
                |_| json!({"text": String::from_utf8_lossy(&a.body).trim().to_string()}),
            );
            normalise(&mut body);
            let shown =
                match view {
                    View::Fields(pointers) => {
                        let mut out = serde_json::Map::new();
                        for p in pointers {
                            out.insert(
                                p.to_string(),
                                body.pointer(p).cloned().unwrap_or(Value::Null),
                            );
                        }
                        Value::Object(out)
                    }
                    View::Reason => json!({
                        "kind": body["kind"], "reason": body["reason"], "code": body["code"],
                        "details": body["details"],
                    }),
                    View::Discovery => discovery_view(&body),
                    View::DiscoveryNames => {
                        json!(
                            discovery_view(&body)["resources"]
                                .as_object()
                                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                        )
                    }
                    _ => body,
                };
            json!({"code": a.status, "body": shown})
        }
    }
}

fn discovery_view(body: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for r in body["resources"].as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap_or_default().to_string();
        let mut verbs: Vec<String> = r["verbs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        verbs.sort();
        out.insert(
            name,
            json!({"kind": r["kind"], "namespaced": r["namespaced"], "verbs": verbs,
                "shortNames": r["shortNames"], "group": r["group"], "version": r["version"]}),
        );
    }
    json!({"groupVersion": body["groupVersion"], "resources": out})
}

/// Removes what differs by nature: identities, versions, times, generated name suffixes,
/// the real server's own objects in lists.
pub fn normalise(v: &mut Value) {
    let Some(map) = v.as_object_mut() else {
        return;
    };
    sort_causes(map);
    if map.get("kind").and_then(Value::as_str) == Some("Status")
        && let Some(message) = map.get_mut("message")
        && let Some(text) = message.as_str()
    {
        *message = json!(mask_ids(text));
    }
    if let Some(details) = map.get_mut("details").and_then(Value::as_object_mut)
        && details.contains_key("uid")
    {
        details.insert("uid".into(), json!("<uid>"));
    }
    if let Some(items) = map.get_mut("items").and_then(Value::as_array_mut) {
        items.retain(|o| !server_owned(o));
        for o in items.iter_mut() {
            normalise(o);
        }
    }
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        for (key, mark) in [
            ("uid", "<uid>"),
            ("resourceVersion", "<rv>"),
            ("creationTimestamp", "<time>"),
            ("deletionTimestamp", "<time>"),
            ("continue", "<continue>"),
        ] {
            if meta
                .get(key)
                .is_some_and(|x| !x.is_null() && x.as_str() != Some(""))
            {
                meta.insert(key.into(), json!(mark));
            }
        }
        meta.remove("selfLink");
        if let (Some(prefix), Some(name)) = (
            meta.get("generateName")
                .and_then(Value::as_str)
                .map(String::from),
            meta.get("name").and_then(Value::as_str),
        ) && name.starts_with(&prefix)
            && name.len() > prefix.len()
        {
            let generated = name.to_string();
            meta.insert("name".into(), json!(format!("{prefix}<suffix>")));
            // A label that repeats the name (a namespace's) is generated too.
            for value in meta
                .get_mut("labels")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|l| l.values_mut())
            {
                if value.as_str() == Some(generated.as_str()) {
                    *value = json!(format!("{prefix}<suffix>"));
                }
            }
        }
        if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in mf.iter_mut() {
                if let Some(e) = entry.as_object_mut() {
                    e.remove("time");
                }
            }
            // Both servers order the entries by operation, time (to the second), manager
            // and subresource; two writes of one case fall in one second on one server
            // and in two on the other, so the order is compared without the time.
            let text = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_string();
            mf.sort_by_key(|e| {
                (
                    text(e, "operation"),
                    text(e, "manager"),
                    text(e, "subresource"),
                )
            });
        }
    }
    // Status objects of a Table, a Scale or a watch event carry objects too.
    if let Some(rows) = map.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            normalise(&mut row["object"]);
            if let Some(cells) = row["cells"].as_array_mut() {
                for c in cells {
                    if let Some(s) = c.as_str()
                        && is_age(s)
                    {
                        *c = json!("<age>");
                    }
                }
            }
        }
    }
    if let Some(status) = map.get_mut("status").and_then(Value::as_object_mut) {
        for cond in status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(c) = cond.as_object_mut()
                && c.contains_key("lastTransitionTime")
            {
                c.insert("lastTransitionTime".into(), json!("<time>"));
            }
        }
    }
    for (key, value) in map.iter_mut() {
        if key != "metadata" && key != "items" && key != "rows" {
            normalise_nested(value);
        }
    }
}

/// kube-apiserver lists the causes of an `Invalid` Status in an order that changes from
/// one request to the next (its validator walks a map): causes are sorted, and a message
/// listing several (`… is invalid: [a, b]`) is written again in the sorted order.
fn sort_causes(map: &mut serde_json::Map<String, Value>) {
    if map.get("kind").and_then(Value::as_str) != Some("Status") {
        return;
    }
    let Some(causes) = map
        .get_mut("details")
        .and_then(|d| d.get_mut("causes"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    causes.sort_by_key(|c| c.to_string());
    let listed: Vec<String> = causes
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if let Some(message) = map.get_mut("message")
        && let Some(text) = message.as_str()
        && let Some((prefix, rest)) = text.split_once(" is invalid: [")
        && rest.ends_with(']')
    {
        let mut sorted = listed;
        sorted.sort();
        *message = json!(format!("{prefix} is invalid: [{}]", sorted.join(", ")));
    }
}

/// Objects inside other objects (a Table row, an event, a list in a Status) are
/// normalised too; plain values are left as they are.
fn normalise_nested(v: &mut Value) {
    match v {
        Value::Object(m) if m.contains_key("metadata") && m.contains_key("kind") => normalise(v),
        Value::Object(m) => {
            for value in m.values_mut() {
                normalise_nested(value);
            }
        }
        Value::Array(a) => {
            for value in a {
                normalise_nested(value);
            }
        }
        _ => {}
    }
}

/// A Status message with the uids and resourceVersions of records it quotes masked
/// (`… in record (4f1c…)`).
fn mask_ids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("in record (") {
        let start = i + "in record (".len();
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        match rest.find(')') {
            Some(end) => {
                out.push_str("<id>");
                rest = &rest[end..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// An age cell of a Table: `0s`, `12s`, `3m`…
fn is_age(s: &str) -> bool {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty()
        && digits.len() < s.len()
        && digits.chars().all(|c| c.is_ascii_digit())
        && s[digits.len()..].chars().all(|c| "smhd".contains(c))
}

/// The real server's own objects in a namespace: what its controllers put there.
fn server_owned(o: &Value) -> bool {
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    let kind = o["kind"].as_str().unwrap_or_default();
    name == "kube-root-ca.crt"
        || (name == "default" && (kind == "ServiceAccount" || kind.is_empty()))
        || (kind == "Namespace" || kind.is_empty())
            && ["kube-system", "kube-public", "kube-node-lease"].contains(&name)
}

/// One case's outcome.
pub struct Outcome {
    pub name: String,
    pub sandbox: Value,
    pub real: Value,
    pub expected: Option<&'static str>,
}

impl Outcome {
    pub fn differs(&self) -> bool {
        self.sandbox != self.real
    }
}

fn run_one(server: &Sandbox, case: &Case) -> Value {
    match run_setup(server, case) {
        Ok(vars) => {
            let answer = send(server, &case.request, &vars);
            normalised(case, &answer)
        }
        Err(e) => json!({"setup failed": e}),
    }
}

/// Runs every case on both servers (the two servers at once, each case in turn) and
/// panics with a readable report when a case differs that is not an expected difference,
/// or an expected difference no longer differs.
pub fn run(area: &str, cases: Vec<Case>) {
    let started = Instant::now();
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        assert!(names.insert(c.name.clone()), "two cases named {}", c.name);
    }
    let (sandbox, real) = std::thread::scope(|s| {
        let a = s.spawn(Sandbox::sandbox);
        let b = s.spawn(Sandbox::real);
        (
            a.join().expect("sandbox start"),
            b.join().expect("control plane start"),
        )
    });
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let sandbox = &sandbox;
        let real = &real;
        let cases = &cases;
        let a = s.spawn(move || {
            cases
                .iter()
                .map(|c| run_one(sandbox, c))
                .collect::<Vec<_>>()
        });
        let b = s.spawn(move || cases.iter().map(|c| run_one(real, c)).collect::<Vec<_>>());
        let (a, b) = (
            a.join().expect("sandbox cases"),
            b.join().expect("real cases"),
        );
        cases
            .iter()
            .zip(a.into_iter().zip(b))
            .map(|(c, (sandbox, mut real))| {
                if matches!(c.view, View::Discovery) {
                    // The resources the sandbox serves, as the real server lists them.
                    let served = &sandbox["body"]["resources"];
                    if let (Some(served), Some(all)) = (
                        served.as_object(),
                        real["body"]["resources"].as_object_mut(),
                    ) {
                        all.retain(|name, _| served.contains_key(name));
                    }
                }
                Outcome {
                    name: c.name.clone(),
                    sandbox,
                    real,
                    expected: c.expected,
                }
            })
            .collect()
    });
    let mut failures = Vec::new();
    let mut expected = 0;
    for o in &outcomes {
        match (o.differs(), o.expected) {
            (true, None) => failures.push(format!(
                "✗ {} differs:\n{}",
                o.name,
                diff(&o.sandbox, &o.real)
            )),
            (false, Some(why)) => failures.push(format!(
                "✗ {} is listed as an expected difference ({why}) but no longer differs: remove it from the list and from docs/sandbox.md",
                o.name
            )),
            (true, Some(_)) => expected += 1,
            (false, None) => {}
        }
    }
    if std::env::var_os("DIFF_SHOW_EXPECTED").is_some() {
        for o in outcomes
            .iter()
            .filter(|o| o.expected.is_some() && o.differs())
        {
            eprintln!("(expected) {}:\n{}", o.name, diff(&o.sandbox, &o.real));
        }
    }
    eprintln!(
        "{area}: {} cases, {} the same, {expected} expected differences, {} failures, {:.1}s",
        outcomes.len(),
        outcomes.len() - expected - failures.len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{area}: {} of {} cases failed (- sandbox, + kube-apiserver):\n\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n\n")
    );
}

/// A line diff of the two pretty-printed answers (- sandbox, + real).
pub fn diff(sandbox: &Value, real: &Value) -> String {
    let a = serde_json::to_string_pretty(sandbox).unwrap_or_default();
    let b = serde_json::to_string_pretty(real).unwrap_or_default();
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    // Longest common subsequence of lines.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+ {}", b[j]));
            j += 1;
        } else {
            out.push(format!("- {}", a[i]));
            i += 1;
        }
    }
    out.join("\n")
}
