//! jq filters (the `jqFilter` of kubernetes bindings and the object patcher's `JQPatch`),
//! compiled once with jaq and run on `serde_json` values.
//!
//! Values are converted between `serde_json::Value` and jaq's `Val` directly, node by
//! node, without going through JSON text: this is what the hot path (one run per watched
//! object event) costs most.

use std::fmt::Write as _;
use std::sync::Arc;

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::{Map, Num, Val};
use serde_json::Value;

type Data = data::JustLut<Val>;

thread_local! {
    /// The object [`JqFilter::run_shared`] converted last on this thread, and its value.
    static LAST_INPUT: std::cell::RefCell<Option<(Arc<Value>, Val)>> =
        const { std::cell::RefCell::new(None) };
}

/// A compiled jq program; `Send + Sync`, so share it with `Arc` instead of recompiling.
pub struct JqFilter {
    program: String,
    filter: jaq_core::Filter<Data>,
}

impl std::fmt::Debug for JqFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JqFilter")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

/// Why a jq program could not be compiled or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JqError {
    /// The program does not parse, or names an undefined filter or variable.
    #[error("invalid jq program `{program}`: {message}")]
    Compile {
        /// The program's text.
        program: String,
        /// What is wrong and where.
        message: String,
    },
    /// The program raised an error (or halted) on its input.
    #[error("jq program `{program}` failed: {message}")]
    Run {
        /// The program's text.
        program: String,
        /// The error the program raised.
        message: String,
    },
}

impl JqFilter {
    /// Compiles `program` with jq's standard library; the error says what is wrong where
    /// (line and column), so a hook author can fix the binding.
    pub fn compile(program: &str) -> Result<JqFilter, JqError> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs::<Data>()
            .chain(jaq_std::funs::<Data>())
            .chain(jaq_json::funs::<Data>());
        let arena = Arena::default();
        let file = File {
            code: program,
            path: (),
        };
        let compile_error = |message: String| JqError::Compile {
            program: program.to_string(),
            message,
        };
        let modules = Loader::new(defs)
            .load(&arena, file)
            .map_err(|errs| compile_error(load_errors(program, errs)))?;
        let filter = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errs| compile_error(compile_errors(program, errs)))?;
        Ok(JqFilter {
            program: program.to_string(),
            filter,
        })
    }

    /// The program's source text.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// All outputs of the program on `input`, in order.
    pub fn run_all(&self, input: &Value) -> Result<Vec<Value>, JqError> {
        let mut out = Vec::new();
        self.each_val(to_val(input), |v| out.push(v))?;
        Ok(out)
    }

    /// shell-operator's result rule: 0 outputs → null, 1 → the value, >1 → array of them.
    pub fn run(&self, input: &Value) -> Result<Value, JqError> {
        self.run_val(to_val(input))
    }

    /// [`JqFilter::run`] on an object's JSON text (a watch's copy of it): read straight
    /// into jaq's values, without a `serde_json` tree between. Text that is not JSON is a
    /// run error.
    pub fn run_text(&self, input: &str) -> Result<Value, JqError> {
        let input = val_of_text(input).map_err(|e| JqError::Run {
            program: self.program.clone(),
            message: format!("the input is not JSON: {e}"),
        })?;
        self.run_val(input)
    }

    /// [`JqFilter::run`] on an object shared by several runs in a row (a watch event goes
    /// to each binding of the watch in turn, on one thread): the object is made into jaq's
    /// values once for all of them. The last object run on a thread stays converted (and
    /// alive) until the next one.
    pub fn run_shared(&self, input: &Arc<Value>) -> Result<Value, JqError> {
        let val = LAST_INPUT.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some((object, val)) if Arc::ptr_eq(object, input) => val.clone(),
                _ => {
                    let val = to_val(input);
                    *last = Some((Arc::clone(input), val.clone()));
                    val
                }
            }
        });
        self.run_val(val)
    }

    /// shell-operator's result rule on `input`.
    fn run_val(&self, input: Val) -> Result<Value, JqError> {
        let mut outputs = Vec::new();
        self.each_val(input, |v| outputs.push(v))?;
        Ok(match outputs.len() {
            0 => Value::Null,
            1 => outputs.pop().unwrap_or(Value::Null),
            _ => Value::Array(outputs),
        })
    }

    fn each_val(&self, input: Val, mut emit: impl FnMut(Value)) -> Result<(), JqError> {
        let ctx = Ctx::<Data>::new(&self.filter.lut, Vars::new([]));
        for out in self.filter.id.run((ctx, input)) {
            match out {
                Ok(v) => emit(from_val(&v)),
                Err(exn) => {
                    let message = match exn.get_err() {
                        Ok(e) => error_text(e.into_val()),
                        Err(exn) => match exn.get_halt() {
                            Ok(code) => format!("halted with exit code {code}"),
                            Err(_) => "internal control flow escaped the program".to_string(),
                        },
                    };
                    return Err(JqError::Run {
                        program: self.program.clone(),
                        message,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The text of an error value: strings as they are (like `jq` prints them), others as JSON.
fn error_text(v: Val) -> String {
    match &v {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        _ => v.to_string(),
    }
}

/// A `serde_json` value as a jaq value.
pub(crate) fn to_val(v: &Value) -> Val {
    match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Val::Num(Num::from_integral(i))
            } else if let Some(u) = n.as_u64() {
                Val::Num(Num::from_integral(u))
            } else {
                Val::Num(Num::Float(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => text(s),
        Value::Array(a) => a.iter().map(to_val).collect(),
        Value::Object(o) => {
            let mut m = Map::with_capacity_and_hasher(o.len(), Default::default());
            for (k, v) in o {
                m.insert(text(k), to_val(v));
            }
            Val::obj(m)
        }
    }
}

/// JSON text as a jaq value, read directly (numbers as [`to_val`] reads them).
pub(crate) fn val_of_text(text: &str) -> Result<Val, serde_json::Error> {
    use serde::Deserialize as _;
    let mut de = serde_json::Deserializer::from_str(text);
    let v = JaqVal::deserialize(&mut de)?;
    de.end()?;
    Ok(v.0)
}

/// A jaq value read by serde.
struct JaqVal(Val);

impl<'de> serde::Deserialize<'de> for JaqVal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JaqVal, D::Error> {
        d.deserialize_any(JaqValVisitor).map(JaqVal)
    }
}

struct JaqValVisitor;

impl<'de> serde::de::Visitor<'de> for JaqValVisitor {
    type Value = Val;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Val, E> {
        Ok(Val::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Val, E> {
        Ok(Val::Num(Num::from_integral(i)))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Val, E> {
        Ok(match i64::try_from(u) {
            Ok(i) => Val::Num(Num::from_integral(i)),
            Err(_) => Val::Num(Num::from_integral(u)),
        })
    }

    fn visit_f64<E>(self, f: f64) -> Result<Val, E> {
        Ok(Val::Num(Num::Float(f)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Val, E> {
        Ok(text(s))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Val, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(JaqVal(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(items.into_iter().collect())
    }

    /// Keys in sorted order, as [`to_val`] gives them from a `serde_json` map (`.[]` on
    /// an object yields its values in that order); a watch's text has them sorted already.
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Val, A::Error> {
        let mut entries: Vec<(Val, Val)> = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(JaqVal(key)) = map.next_key()? {
            let JaqVal(v) = map.next_value()?;
            entries.push((key, v));
        }
        fn bytes(k: &Val) -> &[u8] {
            match k {
                Val::TStr(b) | Val::BStr(b) => &b[..],
                _ => &[],
            }
        }
        if !entries.is_sorted_by(|(a, _), (b, _)| bytes(a) <= bytes(b)) {
            entries.sort_by(|(a, _), (b, _)| bytes(a).cmp(bytes(b)));
        }
        let mut m = Map::with_capacity_and_hasher(entries.len(), Default::default());
        m.extend(entries);
        Ok(Val::obj(m))
    }
}

/// A jaq string: one exact-size copy (`Val::from(String)` adds an owner allocation).
fn text(s: &str) -> Val {
    Val::utf8_str(s.as_bytes().to_vec())
}

/// A jaq value as a `serde_json` value, printing numbers the way jq does: integral floats
/// become integers, NaN becomes null and infinities the largest finite doubles.
pub(crate) fn from_val(v: &Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => from_num(n),
        Val::TStr(b) | Val::BStr(b) => Value::String(bytes_text(b)),
        Val::Arr(a) => Value::Array(a.iter().map(from_val).collect()),
        Val::Obj(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Val::TStr(b) | Val::BStr(b) => bytes_text(b),
                        other => other.to_string(),
                    };
                    (key, from_val(v))
                })
                .collect(),
        ),
    }
}

fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn from_num(n: &Num) -> Value {
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::BigInt(b) => {
            let text = b.to_string();
            if let Ok(i) = text.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = text.parse::<u64>() {
                Value::from(u)
            } else {
                from_float(text.parse::<f64>().unwrap_or(f64::NAN))
            }
        }
        Num::Float(f) => from_float(*f),
        Num::Dec(s) => from_float(s.parse::<f64>().unwrap_or(f64::NAN)),
    }
}

fn from_float(f: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if f.is_nan() {
        Value::Null
    } else if f.is_infinite() {
        Value::from(if f > 0.0 { f64::MAX } else { f64::MIN })
    } else if f.fract() == 0.0 && f.abs() < EXACT {
        Value::from(f as i64)
    } else {
        Value::from(f)
    }
}

/// Byte offset of `part` inside `whole`, when `part` is a slice of it.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start <= whole.len()).then_some(start)
}

/// "line L, column C" of a slice of the program (or of its end).
fn position(program: &str, part: &str) -> String {
    let mut offset = offset_in(program, part).unwrap_or(program.len());
    while !program.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &program[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit_once('\n')
        .map_or(before, |(_, l)| l)
        .chars()
        .count()
        + 1;
    format!("line {line}, column {column}")
}

/// A short quote of what was found at an error position.
fn found(part: &str) -> String {
    let t: String = part.chars().take(20).collect();
    if t.is_empty() {
        "end of program".to_string()
    } else if t.len() < part.len() {
        format!("`{t}…`")
    } else {
        format!("`{t}`")
    }
}

fn load_errors(program: &str, errs: jaq_core::load::Errors<&str, ()>) -> String {
    use jaq_core::load::{Error, lex};
    let mut msg = String::new();
    for (_, err) in errs {
        match err {
            Error::Io(es) => {
                for (path, e) in es {
                    push(&mut msg, format!("cannot load module `{path}`: {e}"));
                }
            }
            Error::Lex(es) => {
                for (expected, at) in es {
                    let what = match expected {
                        lex::Expect::Delim(d) => format!("a closing delimiter for `{d}`"),
                        e => e.as_str().to_string(),
                    };
                    push(
                        &mut msg,
                        format!(
                            "expected {what} at {}, found {}",
                            position(program, at),
                            found(at)
                        ),
                    );
                }
            }
            Error::Parse(es) => {
                for (expected, at) in es {
                    push(
                        &mut msg,
                        format!(
                            "expected {} at {}, found {}",
                            expected.as_str(),
                            position(program, at),
                            found(at)
                        ),
                    );
                }
            }
        }
    }
    msg
}

fn compile_errors(program: &str, errs: jaq_core::compile::Errors<&str, ()>) -> String {
    use jaq_core::compile::Undefined;
    let mut msg = String::new();
    for (_, es) in errs {
        for (name, undefined) in es {
            let what = match undefined {
                Undefined::Filter(arity) => format!("filter `{name}/{arity}`"),
                u => format!("{} `{name}`", u.as_str()),
            };
            push(
                &mut msg,
                format!("undefined {what} at {}", position(program, name)),
            );
        }
    }
    msg
}

fn push(msg: &mut String, item: String) {
    if !msg.is_empty() {
        msg.push_str("; ");
    }
    let _ = write!(msg, "{item}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filter run on an object's text gives what it gives on the parsed object: numbers
    /// of every kind, escapes, keys, nesting, several outputs and none.
    #[test]
    fn a_filter_on_text_gives_what_it_gives_on_the_value() {
        let objects = [
            r#"{"metadata":{"name":"a\"b","labels":{"x/y":"1"}},"n":[1,-2,3.5,18446744073709551615,9007199254740993,1e300,0.1],"t":true,"u":null,"s":"é\u00e9\n"}"#,
            r#"[]"#,
            r#"{}"#,
            r#""text""#,
        ];
        for program in [
            ".",
            ".metadata.name",
            ".n[]",
            ".n | add",
            "empty",
            "keys",
            ".[]?",
            "tojson",
        ] {
            let filter = JqFilter::compile(program).expect("compiles");
            for text in objects {
                let value: Value = serde_json::from_str(text).expect("JSON");
                assert_eq!(
                    filter.run_text(text),
                    filter.run(&value),
                    "{program} on {text}"
                );
            }
        }
        let filter = JqFilter::compile(".").expect("compiles");
        assert!(filter.run_text("{not json").is_err());
    }
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx", "tier": "web"}},
            "spec": {"replicas": 3, "paused": false, "ratio": 0.5},
            "items": [1, "two", {"three": 3}],
        })
    }

    #[test]
    fn filter_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<JqFilter>();
    }

    #[test]
    fn labels() {
        let f = JqFilter::compile(".metadata.labels").expect("compile");
        assert_eq!(f.program(), ".metadata.labels");
        assert_eq!(
            f.run(&deployment()).expect("run"),
            json!({"app": "nginx", "tier": "web"})
        );
    }

    #[test]
    fn projection() {
        let f =
            JqFilter::compile("{name: .metadata.name, replicas: .spec.replicas}").expect("compile");
        assert_eq!(
            f.run(&deployment()).expect("run"),
            json!({"name": "nginx", "replicas": 3})
        );
    }

    #[test]
    fn no_output_is_null() {
        let f = JqFilter::compile("select(.spec.replicas > 5)").expect("compile");
        assert_eq!(f.run_all(&deployment()).expect("run"), Vec::<Value>::new());
        assert_eq!(f.run(&deployment()).expect("run"), Value::Null);
    }

    #[test]
    fn many_outputs_are_an_array() {
        let f = JqFilter::compile(".items[]").expect("compile");
        assert_eq!(
            f.run(&deployment()).expect("run"),
            json!([1, "two", {"three": 3}])
        );
        assert_eq!(f.run_all(&deployment()).expect("run").len(), 3);
    }

    #[test]
    fn values_round_trip() {
        let f = JqFilter::compile(".").expect("compile");
        let v = json!({"a": [null, true, -1, 18446744073709551615u64, 1.25, "ü"], "b": {}});
        assert_eq!(f.run(&v).expect("run"), v);
    }

    #[test]
    fn numbers_print_like_jq() {
        let f = JqFilter::compile("[.spec.replicas / 3, .spec.ratio * 2, nan, infinite]")
            .expect("compile");
        assert_eq!(
            f.run(&deployment()).expect("run"),
            json!([1, 1, null, f64::MAX])
        );
    }

    #[test]
    fn std_library_is_available() {
        let f = JqFilter::compile(".metadata.labels | to_entries | map(.key) | join(\",\")")
            .expect("compile");
        assert_eq!(f.run(&deployment()).expect("run"), json!("app,tier"));
    }

    #[test]
    fn syntax_error_names_the_position() {
        let err = JqFilter::compile(".metadata |").expect_err("must fail");
        let JqError::Compile { program, message } = &err else {
            panic!("unexpected {err:?}");
        };
        assert_eq!(program, ".metadata |");
        assert!(message.contains("line 1, column 12"), "{message}");
        assert!(err.to_string().contains(".metadata |"), "{err}");

        let err = JqFilter::compile("{a: (.b").expect_err("must fail");
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn undefined_filter_is_named() {
        let err = JqFilter::compile(".a | nosuchfilter(1)").expect_err("must fail");
        let msg = err.to_string();
        assert!(msg.contains("nosuchfilter/1"), "{msg}");
        assert!(msg.contains("column 6"), "{msg}");
    }

    #[test]
    fn runtime_errors() {
        let f = JqFilter::compile("error(\"x\")").expect("compile");
        assert_eq!(
            f.run(&deployment()),
            Err(JqError::Run {
                program: "error(\"x\")".into(),
                message: "x".into()
            })
        );
        let f = JqFilter::compile(".metadata.name + 1").expect("compile");
        let err = f.run(&deployment()).expect_err("must fail");
        assert!(err.to_string().contains("\"nginx\""), "{err}");
    }

    #[test]
    fn updates_create_absent_values_like_jq() {
        let run = |program: &str, input: Value| {
            JqFilter::compile(program)
                .expect("compile")
                .run(&input)
                .expect("run")
        };
        assert_eq!(
            run(".metadata.labels.x = \"y\"", json!({"metadata": {}})),
            json!({"metadata": {"labels": {"x": "y"}}})
        );
        assert_eq!(run(".a.b |= 1", Value::Null), json!({"a": {"b": 1}}));
        assert_eq!(run(".a += 1", json!({})), json!({"a": 1}));
        assert_eq!(run(".[1] = 1", Value::Null), json!([null, 1]));
        assert_eq!(run(".[2] = 1", json!([0])), json!([0, null, 1]));
        assert_eq!(
            run(".a[1].b = 1", json!({})),
            json!({"a": [null, {"b": 1}]})
        );
        // jq leaves `{}` here; deleting under an absent key leaves a null behind.
        assert_eq!(run("del(.a.b)", json!({})), json!({"a": null}));
        assert_eq!(
            run("del(.a.b)", json!({"a": {"b": 1, "c": 2}})),
            json!({"a": {"c": 2}})
        );
        assert_eq!(run("del(.a)", Value::Null), Value::Null);
        assert_eq!(
            run("setpath([\"a\", \"b\"]; 1)", Value::Null),
            json!({"a": {"b": 1}})
        );
        assert_eq!(run(".x.y", Value::Null), Value::Null);
    }

    #[test]
    fn halt_is_an_error_not_an_exit() {
        let f = JqFilter::compile("halt_error").expect("compile");
        assert!(f.run(&json!("bye")).is_err());
    }
}
