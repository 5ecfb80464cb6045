//! jq benchmark: throughput (objects/s) of three typical binding filters with
//! `JqFilter::run` (jaq, serde_json values in and out) against libjq through the Python
//! `jq` package, on the same generated Deployment-like objects. Also compares ways of
//! getting values in and out of jaq for the identity filter.
//!
//! `cargo bench --bench jq`; `BENCH_OBJECTS` (default 10,000) scales it.

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use bosun::jq::JqFilter;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;
use serde::Deserialize;
use serde_json::{Value, json};

const FILTERS: &[(&str, &str)] = &[
    ("labels", ".metadata.labels"),
    (
        "projection",
        "{name: .metadata.name, replicas: .spec.replicas, image: .spec.template.spec.containers[0].image, strategy: .spec.strategy.type}",
    ),
    ("select", "select(.spec.replicas > 1)"),
];

const ROUNDS: usize = 3;

/// A Deployment as an informer would deliver it (about 2 KB of JSON).
fn deployment(i: usize) -> Value {
    let name = format!("app-{i}");
    let tier = ["web", "api", "db"][i % 3];
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name, "namespace": format!("ns-{}", i % 20), "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "resourceVersion": (100_000 + i).to_string(), "generation": 1 + i % 5,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": name, "tier": tier, "heritage": "bosun"},
            "annotations": {"deployment.kubernetes.io/revision": (i % 7).to_string(),
                "checksum/config": format!("{:064x}", i * 7919)},
        },
        "spec": {
            "replicas": i % 4,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "main", "image": format!("registry.example.com/app:{}.{}", i % 10, i % 3),
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "MODE", "value": "production"}, {"name": "INDEX", "value": i.to_string()}],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                }], "restartPolicy": "Always", "terminationGracePeriodSeconds": 30},
            },
        },
        "status": {"observedGeneration": 1, "replicas": i % 4, "readyReplicas": i % 4, "updatedReplicas": i % 4,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]},
    })
}

/// Best of [`ROUNDS`] timings of `f` over all objects.
fn best(mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut outputs = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        outputs = f();
        best = best.min(start.elapsed());
    }
    (best, outputs)
}

fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// libjq through Python: objects/s per filter, or why it could not run.
fn libjq(lines: &std::path::Path, objects: usize) -> Result<Vec<f64>, String> {
    let has_jq = |py: &str| {
        Command::new(py)
            .args(["-c", "import jq"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_jq("python3") {
        let _ = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "jq",
            ])
            .status();
        if !has_jq("python3") {
            return Err(
                "the Python jq package is not installed and pip could not install it".into(),
            );
        }
    }
    let script = r#"
import sys, time, jq
path, rounds = sys.argv[1], int(sys.argv[2])
lines = open(path).read().splitlines()
for f in sys.argv[3:]:
    prog = jq.compile(f)
    best = None
    for _ in range(rounds):
        start = time.perf_counter()
        for line in lines:
            prog.input_text(line).all()
        t = time.perf_counter() - start
        best = t if best is None else min(best, t)
    print(best)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(lines)
        .arg(ROUNDS.to_string())
        .args(FILTERS.iter().map(|(_, f)| *f))
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "python3 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            l.trim()
                .parse::<f64>()
                .map(|secs| objects as f64 / secs)
                .map_err(|e| format!("unexpected output {l:?}: {e}"))
        })
        .collect()
}

type Data = data::JustLut<Val>;

/// A jaq filter compiled directly, for the conversion comparison.
fn raw_filter(code: &str) -> jaq_core::Filter<Data> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let funs = jaq_core::funs::<Data>()
        .chain(jaq_std::funs::<Data>())
        .chain(jaq_json::funs::<Data>());
    let arena = Arena::default();
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .unwrap_or_else(|_| panic!("cannot parse {code}"));
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .unwrap_or_else(|_| panic!("cannot compile {code}"))
}

fn run_raw(filter: &jaq_core::Filter<Data>, input: Val) -> Vec<Val> {
    let ctx = Ctx::<Data>::new(&filter.lut, Vars::new([]));
    filter.id.run((ctx, input)).filter_map(Result::ok).collect()
}

fn main() {
    let n = env("BENCH_OBJECTS", 10_000);
    let objects: Vec<Value> = (0..n).map(deployment).collect();
    let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
    let avg = texts.iter().map(String::len).sum::<usize>() / n.max(1);
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    for t in &texts {
        writeln!(file, "{t}").expect("write objects");
    }
    file.flush().expect("flush objects");
    println!("jq: {n} Deployment-like objects, {avg} bytes of JSON each, best of {ROUNDS} rounds");

    let mut jaq = Vec::new();
    for (label, program) in FILTERS {
        let filter = JqFilter::compile(program).expect("compile");
        let (d, outputs) = best(|| {
            objects
                .iter()
                .map(|o| filter.run(o).expect("run"))
                .filter(|v| !v.is_null())
                .count()
        });
        jaq.push(per_second(n, d));
        println!(
            "  jaq   {label:<10} {:>10.0} objects/s ({outputs} non-null results)",
            jaq[jaq.len() - 1]
        );
    }

    match libjq(file.path(), n) {
        Ok(lib) => {
            for (((label, _), jaq), lib) in FILTERS.iter().zip(&jaq).zip(&lib) {
                println!(
                    "  {label:<10} jaq {jaq:>10.0} objects/s   libjq {lib:>10.0} objects/s   jaq/libjq {:.2}x",
                    jaq / lib
                );
            }
        }
        Err(why) => println!("  libjq: not measured ({why}); jaq figures only"),
    }

    // Getting values in and out of jaq, identity filter, serde_json in and out.
    let id = JqFilter::compile(".").expect("compile");
    let (direct, _) = best(|| {
        objects
            .iter()
            .map(|o| id.run(o).map(|_| 1).unwrap_or(0))
            .sum()
    });
    let empty = JqFilter::compile("empty").expect("compile");
    let (into_jaq, _) = best(|| {
        objects
            .iter()
            .map(|o| empty.run(o).map(|_| 1).unwrap_or(0))
            .sum()
    });
    let (deser_only, _) = best(|| {
        objects
            .iter()
            .map(|o| Val::deserialize(o).map_or(0, |_| 1))
            .sum()
    });
    println!(
        "  into jaq only: direct {:.0} objects/s (`empty`), serde Deserialize {:.0}",
        per_second(n, into_jaq),
        per_second(n, deser_only)
    );
    let raw = raw_filter(".");
    let (deser, _) = best(|| {
        objects
            .iter()
            .map(|o| {
                let v = Val::deserialize(o).expect("deserialize");
                run_raw(&raw, v)
                    .iter()
                    .map(|out| serde_json::from_str::<Value>(&out.to_string()).map_or(0, |_| 1))
                    .sum::<usize>()
            })
            .sum()
    });
    let (text, _) = best(|| {
        objects
            .iter()
            .map(|o| {
                let bytes = serde_json::to_vec(o).expect("serialize");
                let v = jaq_json::read::parse_single(&bytes).expect("parse");
                run_raw(&raw, v)
                    .iter()
                    .map(|out| serde_json::from_str::<Value>(&out.to_string()).map_or(0, |_| 1))
                    .sum::<usize>()
            })
            .sum()
    });
    println!(
        "  `.` round trip: direct Value<->Val {:.0} objects/s, serde Deserialize in + text out {:.0}, text both ways {:.0}",
        per_second(n, direct),
        per_second(n, deser),
        per_second(n, text)
    );
}
