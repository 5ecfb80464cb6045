//! Heap samples as `profile.proto` (what `go tool pprof` reads) and as the text Go serves
//! for `?debug=1`: the return addresses resolved to functions, files and lines, inlined
//! calls included, and the profiler's own frames left out.

use std::collections::HashMap;
use std::fmt::Write as _;

use pprof::protos;

use super::heap::{RATE, StackFigures};

/// Which figure a viewer shows first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// `/debug/pprof/heap`: what is held now.
    InuseSpace,
    /// `/debug/pprof/allocs`: what was allocated since sampling began.
    AllocSpace,
}

/// One resolved frame of a location, innermost first.
#[derive(Debug, Clone)]
struct Line {
    function: String,
    file: String,
    line: u32,
}

/// Locations and functions, each once, with the string table they index.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<protos::Function>,
    function_ids: HashMap<(i64, i64), u64>,
    locations: Vec<protos::Location>,
    location_ids: HashMap<usize, u64>,
    /// What each address resolved to.
    resolved: HashMap<usize, Vec<Line>>,
}

impl Tables {
    fn new() -> Tables {
        let mut t = Tables::default();
        t.string("");
        t
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(id) = self.string_ids.get(s) {
            return *id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// What a return address resolves to, innermost function first (`leaf`: the address
    /// of the sampled instruction itself, else a return address, looked up one byte
    /// earlier to land in the call).
    fn resolve(&mut self, ip: usize, leaf: bool) -> &[Line] {
        self.resolved.entry(ip).or_insert_with(|| {
            let lookup = if leaf { ip } else { ip.saturating_sub(1) };
            let mut lines = Vec::new();
            backtrace::resolve(lookup as *mut std::ffi::c_void, |sym| {
                lines.push(Line {
                    function: sym
                        .name()
                        .map(|n| format!("{n:#}"))
                        .unwrap_or_else(|| format!("{ip:#x}")),
                    file: sym
                        .filename()
                        .map(|f| f.display().to_string())
                        .unwrap_or_default(),
                    line: sym.lineno().unwrap_or(0),
                });
            });
            if lines.is_empty() {
                lines.push(Line {
                    function: format!("{ip:#x}"),
                    file: String::new(),
                    line: 0,
                });
            }
            lines
        })
    }

    /// The location of a resolved address.
    fn location(&mut self, ip: usize) -> u64 {
        if let Some(id) = self.location_ids.get(&ip) {
            return *id;
        }
        let lines = self.resolved.get(&ip).cloned().unwrap_or_default();
        let proto_lines = lines
            .iter()
            .map(|l| protos::Line {
                function_id: self.function(&l.function, &l.file),
                line: i64::from(l.line),
            })
            .collect();
        let id = self.locations.len() as u64 + 1;
        self.locations.push(protos::Location {
            id,
            address: ip as u64,
            line: proto_lines,
            ..protos::Location::default()
        });
        self.location_ids.insert(ip, id);
        id
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (self.string(name), self.string(file));
        if let Some(id) = self.function_ids.get(&key) {
            return *id;
        }
        let id = self.functions.len() as u64 + 1;
        self.functions.push(protos::Function {
            id,
            name: key.0,
            system_name: key.0,
            filename: key.1,
            ..protos::Function::default()
        });
        self.function_ids.insert(key, id);
        id
    }

    /// A stack's locations, outermost caller last, without the allocator's and the
    /// profiler's own frames.
    fn stack(&mut self, frames: &[usize]) -> Vec<u64> {
        // The last frame that is the allocator's: what called it is where the sample
        // belongs. A frame is judged by its outermost function (the allocator's code
        // inlined into a caller stays).
        let mut cut = 0;
        for (i, ip) in frames.iter().enumerate() {
            let lines = self.resolve(*ip, i == 0);
            if lines.last().is_some_and(|l| is_allocator(&l.function)) {
                cut = i + 1;
            }
        }
        frames[cut..].iter().map(|ip| self.location(*ip)).collect()
    }
}

/// The allocator's entry points and the profiler's own code.
fn is_allocator(function: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "__rustc::",
        "__rust_alloc",
        "__rust_realloc",
        "__rdl_",
        "alloc::alloc::",
        "bosun::profiling::heap::",
        "<bosun::profiling::heap::",
        "backtrace::",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p))
}

/// The samples as `profile.proto`.
pub fn heap_profile(
    samples: &[StackFigures],
    default: Default,
    time_nanos: i64,
) -> protos::Profile {
    let mut t = Tables::new();
    let value_type = |t: &mut Tables, ty: &str, unit: &str| protos::ValueType {
        ty: t.string(ty),
        unit: t.string(unit),
    };
    let sample_type = vec![
        value_type(&mut t, "alloc_objects", "count"),
        value_type(&mut t, "alloc_space", "bytes"),
        value_type(&mut t, "inuse_objects", "count"),
        value_type(&mut t, "inuse_space", "bytes"),
    ];
    let period_type = value_type(&mut t, "space", "bytes");
    let default_sample_type = t.string(match default {
        Default::InuseSpace => "inuse_space",
        Default::AllocSpace => "alloc_space",
    });
    let sample = samples
        .iter()
        .map(|s| protos::Sample {
            location_id: t.stack(&s.frames),
            value: vec![
                s.alloc_objects,
                s.alloc_bytes,
                s.inuse_objects,
                s.inuse_bytes,
            ],
            label: Vec::new(),
        })
        .collect();
    protos::Profile {
        sample_type,
        sample,
        location: std::mem::take(&mut t.locations),
        function: std::mem::take(&mut t.functions),
        string_table: std::mem::take(&mut t.strings),
        time_nanos,
        period_type: Some(period_type),
        period: RATE as i64,
        default_sample_type,
        ..protos::Profile::default()
    }
}

/// The samples as Go's legacy text (`?debug=1`): totals, then each stack by what it holds,
/// with its resolved frames.
pub fn heap_text(samples: &[StackFigures]) -> String {
    let mut t = Tables::new();
    let mut sorted: Vec<&StackFigures> = samples.iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse((s.inuse_bytes, s.alloc_bytes)));
    let sum = |f: fn(&StackFigures) -> i64| samples.iter().map(f).sum::<i64>();
    let mut out = format!(
        "heap profile: {}: {} [{}: {}] @ heap/{RATE}\n",
        sum(|s| s.inuse_objects),
        sum(|s| s.inuse_bytes),
        sum(|s| s.alloc_objects),
        sum(|s| s.alloc_bytes),
    );
    for s in sorted {
        let stack = t.stack(&s.frames);
        let addresses: Vec<String> = stack
            .iter()
            .map(|id| format!("{:#x}", t.locations[*id as usize - 1].address))
            .collect();
        let _ = writeln!(
            out,
            "{}: {} [{}: {}] @ {}",
            s.inuse_objects,
            s.inuse_bytes,
            s.alloc_objects,
            s.alloc_bytes,
            addresses.join(" ")
        );
        for id in &stack {
            let address = t.locations[*id as usize - 1].address;
            for l in t.resolved.get(&(address as usize)).into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "#\t{address:#x}\t{}\t{}:{}",
                    l.function, l.file, l.line
                );
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> Vec<usize> {
        let mut frames = Vec::new();
        backtrace::trace(|f| {
            frames.push(f.ip() as usize);
            true
        });
        frames
    }

    #[test]
    fn a_stack_resolves_to_its_functions_and_the_profile_names_go_s_sample_types() {
        let frames = here();
        let samples = [StackFigures {
            frames,
            alloc_objects: 3,
            alloc_bytes: 300,
            inuse_objects: 1,
            inuse_bytes: 100,
        }];
        let p = heap_profile(&samples, Default::InuseSpace, 1);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|v| (s(v.ty), s(v.unit))).collect();
        assert_eq!(
            types,
            [
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes")
            ]
        );
        assert_eq!(s(p.default_sample_type), "inuse_space");
        assert_eq!(p.period, RATE as i64);
        let names: Vec<&str> = p.function.iter().map(|f| s(f.name)).collect();
        assert!(
            names
                .iter()
                .any(|n| n.contains("a_stack_resolves_to_its_functions")),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|n| n.starts_with("backtrace::")),
            "{names:?}"
        );
        let text = heap_text(&samples);
        assert!(
            text.starts_with("heap profile: 1: 100 [3: 300] @ heap/524288\n"),
            "{text}"
        );
        assert!(text.contains("a_stack_resolves_to_its_functions"), "{text}");
    }

    #[test]
    fn allocator_frames_are_recognised() {
        assert!(is_allocator("__rust_alloc"));
        assert!(is_allocator("__rustc::__rust_alloc_zeroed"));
        assert!(is_allocator("alloc::alloc::exchange_malloc"));
        assert!(!is_allocator("alloc::vec::Vec<T>::push"));
        assert!(!is_allocator("bosun::lambda::start"));
    }
}
