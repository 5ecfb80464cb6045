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
    /// The keys of a program that is a plain path of object keys, which
    /// [`JqFilter::run_text`] follows in the text without reading the rest of it.
    keys: Option<Box<[String]>>,
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
            keys: key_path(program),
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
    /// run error. A plain path of object keys reads only the value it addresses.
    pub fn run_text(&self, input: &str) -> Result<Value, JqError> {
        if let Some(keys) = &self.keys
            && let Some(value) = key_path_on_text(input, keys)
        {
            return Ok(value);
        }
        self.run_text_fully(input)
    }

    /// [`JqFilter::run_text`] reading the whole text.
    fn run_text_fully(&self, input: &str) -> Result<Value, JqError> {
        let input = val_of_text(input).map_err(|e| JqError::Run {
            program: self.program.clone(),
            message: format!("the input is not JSON: {e}"),
        })?;
        self.run_val(input)
    }

    /// [`JqFilter::run`] on an object shared by several runs in a row (a watch event goes
    /// to each binding of the watch in turn, on one thread): the object is made into jaq's
    /// values once for all of them. The last object run on a thread stays converted (and
    /// alive) until the next one. A plain path of object keys follows its keys through the
    /// object instead, and converts only the value it addresses.
    pub fn run_shared(&self, input: &Arc<Value>) -> Result<Value, JqError> {
        if let Some(keys) = &self.keys
            && let Some(found) = key_path_on_value(input, keys)
        {
            // What the full run makes of the addressed value: its numbers as jq prints them.
            return Ok(found.map_or(Value::Null, |v| from_val(&to_val(v))));
        }
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

/// The keys of a program that is a plain path of object keys (`.a`, `.a.b.c`,
/// `."x-y".z`), in order; `None` for any other program.
fn key_path(program: &str) -> Option<Box<[String]>> {
    // Words the jq grammar gives a meaning of their own after a dot are left to jaq.
    const KEYWORDS: [&str; 16] = [
        "and", "or", "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach", "try",
        "catch", "label", "import", "include",
    ];
    let mut rest = program.trim_matches([' ', '\t', '\n', '\r']).as_bytes();
    let mut keys = Vec::new();
    while let Some((b'.', after_dot)) = rest.split_first() {
        let len = match after_dot.first()? {
            b'"' => {
                let close = after_dot[1..].iter().position(|&b| b == b'"')? + 1;
                let key = &after_dot[1..close];
                if key.iter().any(|&b| b == b'\\' || b < 0x20) {
                    return None;
                }
                keys.push(std::str::from_utf8(key).ok()?.to_string());
                close + 1
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let len = after_dot
                    .iter()
                    .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
                    .unwrap_or(after_dot.len());
                let key = std::str::from_utf8(&after_dot[..len]).ok()?;
                if KEYWORDS.contains(&key) || key.starts_with("__") {
                    return None;
                }
                keys.push(key.to_string());
                len
            }
            _ => return None,
        };
        rest = &after_dot[len..];
    }
    (rest.is_empty() && !keys.is_empty()).then(|| keys.into_boxed_slice())
}

/// A plain key path's result on an object's JSON text, as the full run gives it: only the
/// addressed value is read into jaq's values, the rest of the text is checked and
/// skipped. `None` when the full run has to decide: a value on the way that is neither an
/// object nor null, a key on the way written with escapes or given twice, or text the
/// scanner does not vouch for (invalid, deeply nested, numbers with exponents or of more
/// than 300 characters, escaped surrogates), so that errors keep their exact wording.
fn key_path_on_text(text: &str, keys: &[String]) -> Option<Value> {
    let mut scan = Scan {
        text: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let found = scan.lookup(keys)?;
    scan.space();
    if scan.at != scan.text.len() {
        return None;
    }
    match found {
        Found::Null => Some(Value::Null),
        Found::Span(start, end) => {
            let val = val_of_text(text.get(start..end)?).ok()?;
            Some(from_val(&val))
        }
    }
}

/// A plain key path's result on a parsed object, as the full run gives it: the addressed
/// value (`None` for null: an absent key, or a null on the way). `None` of the outer
/// option when a value on the way is neither an object nor null, where the full run
/// decides (its error names the value).
fn key_path_on_value<'v>(value: &'v Value, keys: &[String]) -> Option<Option<&'v Value>> {
    let mut at = value;
    for key in keys {
        at = match at {
            Value::Object(map) => match map.get(key.as_str()) {
                Some(next) => next,
                None => return Some(None),
            },
            Value::Null => return Some(None),
            _ => return None,
        };
    }
    Some(Some(at).filter(|v| !v.is_null()))
}

/// What a key path addresses in a text.
enum Found {
    /// The path ends in null: a key is absent, or null is met on the way.
    Null,
    /// The byte range of the addressed value.
    Span(usize, usize),
}

/// A checking scanner of JSON text that is stricter than `serde_json`'s reader: whatever
/// it accepts, that reader accepts too. Every method returns `None` on text it rejects.
struct Scan<'t> {
    text: &'t [u8],
    at: usize,
    depth: usize,
}

impl Scan<'_> {
    /// Nesting beyond which the scanner gives up (`serde_json` refuses 128 levels).
    const MAX_DEPTH: usize = 100;
    /// Number length beyond which the scanner gives up (an integral part this long may
    /// overflow a double, which `serde_json` refuses).
    const MAX_NUMBER: usize = 300;

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= Self::MAX_DEPTH).then_some(())
    }

    /// Follows `keys` from the value at the cursor, checking and skipping the rest.
    fn lookup(&mut self, keys: &[String]) -> Option<Found> {
        self.space();
        let Some((key, rest)) = keys.split_first() else {
            let start = self.at;
            self.value()?;
            return Some(Found::Span(start, self.at));
        };
        match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                Some(Found::Null)
            }
            b'{' => {
                self.enter()?;
                self.at += 1;
                self.space();
                let mut found = None;
                if self.peek()? == b'}' {
                    self.at += 1;
                } else {
                    loop {
                        self.space();
                        let start = self.at + 1;
                        let escaped = self.string()?;
                        let name = self.text.get(start..self.at - 1)?;
                        self.space();
                        self.expect(b':')?;
                        if escaped {
                            return None;
                        }
                        if name == key.as_bytes() {
                            if found.is_some() {
                                return None;
                            }
                            found = Some(self.lookup(rest)?);
                        } else {
                            self.space();
                            self.value()?;
                        }
                        self.space();
                        match self.next()? {
                            b',' => {}
                            b'}' => break,
                            _ => return None,
                        }
                    }
                }
                self.depth -= 1;
                Some(found.unwrap_or(Found::Null))
            }
            _ => None,
        }
    }

    /// Checks and skips the value at the cursor.
    fn value(&mut self) -> Option<()> {
        self.space();
        match self.peek()? {
            b'{' => self.container(b'}', true),
            b'[' => self.container(b']', false),
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// An object (`keyed`) or an array, from its opening bracket to `close`.
    fn container(&mut self, close: u8, keyed: bool) -> Option<()> {
        self.enter()?;
        self.at += 1;
        self.space();
        if self.peek()? == close {
            self.at += 1;
        } else {
            loop {
                if keyed {
                    self.space();
                    self.string()?;
                    self.space();
                    self.expect(b':')?;
                }
                self.value()?;
                self.space();
                match self.next()? {
                    b',' => {}
                    b if b == close => break,
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A string, from its opening quote; whether it has escapes.
    fn string(&mut self) -> Option<bool> {
        self.expect(b'"')?;
        let mut escaped = false;
        loop {
            match self.next()? {
                b'"' => return Some(escaped),
                b'\\' => {
                    escaped = true;
                    match self.next()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.text.get(self.at..self.at + 4)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            let code =
                                u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                            if (0xD800..=0xDFFF).contains(&code) {
                                return None;
                            }
                            self.at += 4;
                        }
                        _ => return None,
                    }
                }
                0x00..=0x1F => return None,
                _ => {}
            }
        }
    }

    /// A number without exponent.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.peek()? == b'-' {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return None;
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E' | b'0'..=b'9')) {
            return None;
        }
        (self.at - start <= Self::MAX_NUMBER).then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
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

    /// Texts for the key path shortcut: nesting, absent keys, nulls and other values on
    /// the way, arrays, escapes, numbers of every form, duplicate keys, odd spacing,
    /// invalid text and nesting as deep as `serde_json` allows and deeper.
    fn key_path_texts() -> Vec<String> {
        let mut texts: Vec<String> = [
            r#"{"metadata":{"name":"a\"b","labels":{"x/y":"1","app":"web"}},"spec":{"replicas":3}}"#,
            r#"{"metadata":{"labels":null}}"#,
            r#"{"metadata":null}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":1}"#,
            r#"{"metadata":"text"}"#,
            r#"{"metadata":[{"labels":1}]}"#,
            r#"{"metadata":{"labels":[1,{"a":[]},[[]],"x"]}}"#,
            r#"{"a":{"b":{"c":[null,true,false]}},"x-y":{"z":"\"\\\/\b\f\n\r\t\u00e9\u0000"}}"#,
            r#"{"a":{"b":{"c":{"d":1}}},"x-y":{"z":"é ü 😀"}}"#,
            r#"{"a":{"b":{"c":"\ud83d\ude00"}}}"#,
            r#"{"a":{"b":"\ud800"}}"#,
            r#"{"a":{"b":1},"z":"\ud800"}"#,
            r#"{"a":{"b":{"c":[1,-2,3.5,0,-0,-0.0,1.0,0.1,18446744073709551615,18446744073709551616,9007199254740993,-9223372036854775809,123456789012345678901234567890]}}}"#,
            r#"{"a":{"b":{"c":[1e300,1E5,2e-3,1.5E+2,-1e-400]}}}"#,
            r#"{"a":{"b":1},"z":1e400}"#,
            r#"{"a":{"b":1e400}}"#,
            r#"{"a":{"b":1},"z":[1.5,-0.25,1e5]}"#,
            r#"{"a":{"b":1},"z":01}"#,
            r#"{"a":{"b":1},"z":1.}"#,
            r#"{"a":{"b":1},"z":-}"#,
            r#"{"a":{"b":1},"a":{"b":2}}"#,
            r#"{"a":{"b":1,"b":2}}"#,
            r#"{"a":{"b":1},"b":2,"b":3}"#,
            r#"{"z":1,"a":{"c":2,"b":1}}"#,
            r#"{"l\u0061bels":1,"a":{"b":2}}"#,
            r#"{"a":{"\u0062":1}}"#,
            r#"{"a":{"b\n":1,"b":2}}"#,
            " \t\n{ \"a\" :\r{ \"b\" : [ 1 , 2 ] } , \"c\" : { } } \n",
            r#"{"a":{"b":1}} x"#,
            r#"{"a":{"b":1},}"#,
            r#"{"a":{"b":1}"#,
            r#"{"a":{"b":tru}}"#,
            r#"{"a" {"b":1}}"#,
            "{\"a\":{\"b\":\"tab\there\"}}",
            r#"{"a":{"b":"unterminated}}"#,
            r#"{"a":{"b":"\x"}}"#,
            r#"{"a":{"b":"\u12"}}"#,
            r#"{"a":{"b":"\u+123"}}"#,
            r#"{"x-y":{"z":null}}"#,
            r#"{"and":1,"a":{"b":{}}}"#,
            "null",
            " null ",
            "nul",
            "{}",
            "[]",
            "[1]",
            r#""text""#,
            "1",
            "true",
            "",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        for depth in [50, 99, 100, 101, 126, 127, 128, 200] {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            texts.push(format!(r#"{{"a":{{"b":1}},"z":{deep}}}"#));
            texts.push(format!(r#"{{"a":{{"b":{deep}}}}}"#));
        }
        texts
    }

    /// Programs for the key path shortcut: plain paths, quoted keys, odd spacing, and an
    /// escaped key the shortcut leaves to jaq.
    const KEY_PATH_PROGRAMS: [&str; 15] = [
        ".a",
        ".a.b",
        ".a.b.c",
        ".a.b.c.d",
        ".b",
        ".z",
        ".metadata",
        ".metadata.labels",
        ".metadata.name",
        " .metadata.labels\n",
        ".\"x-y\"",
        ".\"x-y\".z",
        ".a.\"b\"",
        ".\"l\\u0061bels\"",
        ".labels",
    ];

    /// The key path shortcut gives what the full run gives, result and error alike, and
    /// is taken on ordinary objects.
    #[test]
    fn a_key_path_on_text_gives_what_the_full_run_gives() {
        let texts = key_path_texts();
        let mut taken = 0;
        for program in KEY_PATH_PROGRAMS {
            let filter = JqFilter::compile(program).expect("compiles");
            for text in &texts {
                let full = filter.run_text_fully(text);
                assert_eq!(filter.run_text(text), full, "{program} on {text}");
                if let Some(keys) = &filter.keys
                    && let Some(shortcut) = key_path_on_text(text, keys)
                {
                    assert_eq!(Ok(shortcut), full, "{program} on {text}");
                    taken += 1;
                }
            }
        }
        assert!(taken > 100, "the shortcut was taken {taken} times");
        let filter = JqFilter::compile(".metadata.labels").expect("compiles");
        let keys = filter.keys.as_deref().expect("a key path");
        for text in [&texts[0], &texts[1], &texts[2], &texts[3], &texts[7]] {
            assert!(key_path_on_text(text, keys).is_some(), "{text}");
        }
    }

    /// On a parsed object (a watch event's), the key path shortcut gives what the full run
    /// gives, result and error alike.
    #[test]
    fn a_key_path_on_an_object_gives_what_the_full_run_gives() {
        let objects: Vec<Value> = key_path_texts()
            .iter()
            .filter_map(|t| serde_json::from_str(t).ok())
            .collect();
        assert!(objects.len() > 30, "{} objects", objects.len());
        let mut taken = 0;
        for program in KEY_PATH_PROGRAMS {
            let filter = JqFilter::compile(program).expect("compiles");
            for object in &objects {
                let full = filter.run(object);
                let shared = Arc::new(object.clone());
                assert_eq!(filter.run_shared(&shared), full, "{program} on {object}");
                if let Some(keys) = &filter.keys
                    && key_path_on_value(object, keys).is_some()
                {
                    taken += 1;
                }
            }
        }
        assert!(taken > 200, "the shortcut was taken {taken} times");
        // Numbers come out as the full run prints them.
        let filter = JqFilter::compile(".a").expect("compiles");
        let object = Arc::new(serde_json::json!({"a": [1.0, 2.5, 18446744073709551615u64]}));
        assert_eq!(
            filter.run_shared(&object),
            Ok(serde_json::json!([1, 2.5, 18446744073709551615u64]))
        );
    }

    /// The shortcut steps aside wherever the full run must decide or could disagree.
    #[test]
    fn a_key_path_steps_aside_where_the_full_run_decides() {
        let keys = |p: &str| key_path(p).expect("a key path");
        let ab = keys(".a.b");
        for text in [
            r#"{"a":1}"#,
            r#"{"a":"s"}"#,
            r#"{"a":[{"b":1}]}"#,
            "[]",
            r#"{"a":{"b":1},"a":{"b":2}}"#,
            r#"{"a":{"\u0062":1}}"#,
            r#"{"a":{"b":1},"z":1e5}"#,
            r#"{"a":{"b":1},"z":"\ud800"}"#,
            r#"{"a":{"b":1}} x"#,
            r#"{"a":{"b":1}"#,
        ] {
            assert_eq!(key_path_on_text(text, &ab), None, "{text}");
        }
        assert_eq!(
            key_path_on_text(r#"{"a":{"b":{"c":[1,"x"]}},"z":0}"#, &ab),
            Some(serde_json::json!({"c": [1, "x"]}))
        );
        assert_eq!(key_path_on_text(r#"{"a":null}"#, &ab), Some(Value::Null));
        assert_eq!(key_path_on_text("null", &ab), Some(Value::Null));
        assert_eq!(key_path_on_text(r#"{"c":1}"#, &ab), Some(Value::Null));
    }

    /// Only programs made of `.key` and `."key"` steps are plain key paths.
    #[test]
    fn plain_key_paths_are_recognised() {
        let keys = |p: &str| key_path(p).map(|k| k.to_vec());
        assert_eq!(keys(".a"), Some(vec!["a".to_string()]));
        assert_eq!(
            keys(" .metadata.labels "),
            Some(vec!["metadata".to_string(), "labels".to_string()])
        );
        assert_eq!(
            keys(".\"x-y\".z_1"),
            Some(vec!["x-y".to_string(), "z_1".to_string()])
        );
        for program in [
            ".",
            "..",
            ".a[0]",
            ".a?",
            ".a | .b",
            ".a .b",
            ".a,.b",
            ".[\"a\"]",
            ".[]",
            ".\"a\\(1)\"",
            ".\"a\\n\"",
            ".and",
            ".__loc__",
            ".1",
            "a",
            ".a.",
            ".a-b",
            "",
        ] {
            assert_eq!(keys(program), None, "{program}");
        }
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
