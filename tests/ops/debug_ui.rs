//! The web view at `/ui`, loaded by headless Chromium from a real `bosun run` against the
//! sandbox: a global hook that fails (parked after one attempt, so the converge goes on)
//! and one that holds the converge in its afterAll step. The page must show the main queue
//! with the converge, the failing task's error (escaped), the actors, the modules and the
//! journal timeline; a lambda parent whose sync hook fails, with its error and next retry;
//! a DeployItem waiting for a Deployment, with what it waits for; and the explain panel of
//! that item.
//!
//! Chromium (Debian's `chromium`) comes from `./scripts/setup.sh --with-browser`, which the test
//! command runs; without it this test fails and says so.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::webhooks::{Hooks, post_ok};
use crate::common::{Operator, Sandbox, workdir};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Lets the held hook finish when the test ends, passed or not.
struct Release(PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, "");
    }
}

/// One `chromium --dump-dom` run: the DOM after four seconds of virtual time, or why
/// there is none.
fn dump_dom(url: &str, profile: &Path) -> Result<String, String> {
    chromium(url, profile, &["--dump-dom".to_string()])
}

/// A screenshot of the page as a user sees it (1280×2400), kept in the test's target
/// folder (`CARGO_TARGET_TMPDIR`) under `name`; its path.
fn screenshot(url: &str, profile: &Path, name: &str) -> PathBuf {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_file(&file);
    chromium(
        url,
        profile,
        &[
            "--window-size=1280,2400".to_string(),
            "--hide-scrollbars".to_string(),
            format!("--screenshot={}", file.display()),
        ],
    )
    .unwrap_or_else(|e| panic!("screenshot of {url}: {e}"));
    let png = std::fs::read(&file).unwrap_or_default();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "chromium left no screenshot of {url} in {} ({} bytes)",
        file.display(),
        png.len()
    );
    file
}

/// One headless Chromium run on `url` with `mode` (what it prints or writes); its
/// standard output after four seconds of virtual time, or why there is none.
fn chromium(url: &str, profile: &Path, mode: &[String]) -> Result<String, String> {
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--virtual-time-budget=4000")
        .args(mode)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {CHROMIUM}: {e}"))?;
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(45);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let (dom, log) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => Ok(dom),
        Some(s) => Err(format!("chromium exited with {s}: {log}")),
        None => Err(format!("chromium did not finish within 45s: {log}")),
    }
}

/// The part of the page about one queue.
fn queue_block<'a>(dom: &'a str, name: &str) -> &'a str {
    let marker = format!("data-queue=\"{name}\"");
    let Some(start) = dom.find(&marker) else {
        return "";
    };
    let rest = &dom[start + marker.len()..];
    let end = rest
        .find("data-queue=\"")
        .or_else(|| rest.find("</section>"))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The page from `marker` up to the next `end` (empty when the marker is not there).
fn block<'a>(dom: &'a str, marker: &str, end: &str) -> &'a str {
    let Some(start) = dom.find(marker) else {
        return "";
    };
    let rest = &dom[start..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// What the page must show; the first thing missing, if any.
fn missing(dom: &str) -> Option<&'static str> {
    let main = queue_block(dom, "main");
    let parent = block(dom, "data-parent=\"default/broken\"", "</tr>");
    let item = block(dom, "data-item=\"default/waits\"", "</tr>");
    let checks: [(&str, bool); 13] = [
        ("the main queue", !main.is_empty()),
        (
            "the ConvergeModules task in the main queue, marked as a converge in progress",
            main.contains("ConvergeModules:main:OperatorStartup:WaitAfterAll")
                && main.contains("converge in progress"),
        ),
        (
            "the held afterAll hook running at the head of the main queue",
            main.contains("GlobalHookRun:main:afterAll:002-held.sh")
                && main.contains("running for "),
        ),
        (
            "the failing task with its failures and its error, escaped",
            main.contains("task failing")
                && main.contains("failures 1")
                && main.contains("the probe is broken &lt;img src=x id=injected&gt;"),
        ),
        (
            "no markup from the server",
            !dom.contains("id=\"injected\"") && !dom.contains("<img"),
        ),
        (
            "the main queue's actor busy with the hook's task",
            dom.contains("data-actor=\"queue/main\"")
                && dom.contains("job: task GlobalHookRun:main:afterAll:002-held.sh"),
        ),
        (
            "the global hooks actor",
            dom.contains("data-actor=\"global-hooks\""),
        ),
        (
            "the enabled module with its phase",
            dom.contains("data-module=\"demo\"") && dom.contains(">enabled<"),
        ),
        (
            "journal timeline entries",
            dom.matches("class=\"event ev-").count() >= 5
                && dom.contains("converge started (OperatorStartup)")
                && dom.contains("failed (failures 1)"),
        ),
        (
            "the converge badge",
            dom.contains("converge in progress (OperatorStartup)"),
        ),
        (
            "the lambda parent with its last error, failures and next retry",
            parent.contains("CompositeController probes")
                && parent.contains("unsupported status code: 500")
                && parent.contains("failures ")
                && parent.contains("next retry in ")
                && parent.contains("href=\"#explain=parent%2Fdefault%2Fbroken\""),
        ),
        (
            "the DeployItem with what it waits for",
            item.contains(">Progressing<")
                && item.contains("waiting for ManifestsReady=False")
                && item.contains("Deployment default/web")
                && item.contains("href=\"#explain=DeployItem%2Fdefault%2Fwaits\""),
        ),
        (
            "high availability: off for a single replica",
            dom.contains("data-ha=\"single\"") && dom.contains("off: a single replica"),
        ),
    ];
    checks.iter().find(|(_, ok)| !ok).map(|(what, _)| *what)
}

#[test]
fn the_web_view_shows_queues_actors_modules_and_the_journal_in_headless_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run ./scripts/setup.sh --with-browser (it installs Debian's chromium) to run \
         the web view's test"
    );
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = common::global_hooks_dir(work.path());
    common::config_hook(
        &hooks.join("001-broken.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        r#"echo "the probe is broken <img src=x id=injected>" >&2
exit 1"#,
    );
    common::config_hook(
        &hooks.join("002-held.sh"),
        r#"{"configVersion":"v1","afterAll":1}"#,
        r#"for _ in $(seq 1200); do [[ -f "$OUT_DIR/held.release" ]] && exit 0; sleep 0.1; done"#,
    );
    std::fs::create_dir_all(work.path().join("modules/001-demo")).expect("module dir");
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "demoEnabled: true\n",
    )
    .expect("values.yaml");
    let _release = Release(work.path().join("out/held.release"));
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[
            ("BOSUN_TASK_MAX_ATTEMPTS", "1"),
            ("DEBUG_HTTP_SERVER_ADDR", "127.0.0.1:0"),
        ],
    );
    op.wait("the debug TCP address", Duration::from_secs(60), || {
        common::debug_tcp(&op.logs()).is_some()
    });
    let (addr, token) = common::debug_tcp(&op.logs()).unwrap_or_default();
    // A lambda controller whose sync hook fails for its one parent.
    let hooks = Hooks::serve(|_, _| (500, serde_json::Value::String("internal trouble".into())));
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "probes.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Probe", "plural": "probes", "singular": "probe", "listKind": "ProbeList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    );
    op.wait(
        "the Probe CRD and bosun's CRDs served",
        Duration::from_secs(60),
        || {
            [
                "/apis/example.com/v1/probes",
                "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
                "/apis/landscaper.gardener.cloud/v1alpha1/targets",
                "/apis/landscaper.gardener.cloud/v1alpha1/deployitems",
            ]
            .iter()
            .all(|p| sb.get(p).0 == 200)
        },
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "probes"},
            "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "probes"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/probes",
        &json!({"apiVersion": "example.com/v1", "kind": "Probe", "metadata": {"name": "broken"},
            "spec": {"selector": {"matchLabels": {"app": "broken"}}}}),
    );
    // A DeployItem that deploys a Deployment into this same cluster and waits for it.
    let kubeconfig = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/targets",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": "here", "namespace": "default"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kubeconfig}}}),
    );
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/deployitems",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "waits", "namespace": "default"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-manifest", "target": {"name": "here"},
                "config": {"apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
                    "kind": "ProviderConfiguration",
                    "manifests": [{"manifest": {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "web", "namespace": "default"},
                        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}}]}}}),
    );
    // The address bosun printed, with the token the page sends with its requests.
    let url = format!("http://{addr}/ui?token={token}");
    let profile = tempfile::tempdir().expect("profile dir");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (why, dom) = match dump_dom(&url, profile.path()) {
            Ok(dom) => match missing(&dom) {
                None => break,
                Some(what) => (what.to_string(), dom),
            },
            Err(e) => (e, String::new()),
        };
        if Instant::now() > deadline {
            let logs = op.logs();
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "the page at {url} did not show everything within 60s; missing: {why}\n\n\
                 page:\n{dom}\n\noperator log ends with:\n{}",
                tail.join("\n")
            );
        }
    }

    // The filter (kept in the address's fragment): only the module's events.
    let dom =
        dump_dom(&format!("{url}#module:demo"), profile.path()).unwrap_or_else(|e| panic!("{e}"));
    let rows: Vec<&str> = dom.split("<tr class=\"event ev-").skip(1).collect();
    assert!(
        !rows.is_empty()
            && rows.iter().all(|r| r
                .split("</tr>")
                .next()
                .unwrap_or_default()
                .contains("<td>demo</td>")),
        "the filter module:demo keeps only the module's events: {dom}"
    );
    assert!(dom.contains("module demo enabled"), "{dom}");

    // The explain panel of the item (linked from its row): its history and its wait.
    let dom = dump_dom(
        &format!("{url}#explain=DeployItem%2Fdefault%2Fwaits"),
        profile.path(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let panel = block(&dom, "<section id=\"explain\"", "</section>");
    assert!(
        panel.contains("data-explained=\"DeployItem default/waits\"")
            && panel.contains("the deployer (landscaper's DeployItem contract)")
            && panel.contains("deployitem/default/waits: - → Init")
            && panel.contains("(live) phase Progressing, waiting for ManifestsReady=False"),
        "the explain panel names the item's history and wait: {panel}"
    );
    // Screenshots of both pages, as a user sees them, kept for review.
    let page = screenshot(&url, profile.path(), "ui.png");
    let explain = screenshot(
        &format!("{url}#explain=DeployItem%2Fdefault%2Fwaits"),
        profile.path(),
        "ui-explain.png",
    );
    println!("screenshots: {} {}", page.display(), explain.display());
}
