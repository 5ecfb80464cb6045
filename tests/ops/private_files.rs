//! Who can read and change bosun's files, end to end: the sandbox's store and kubeconfig
//! (which carries the token) and the data folder of `bosun run --sandbox` are private
//! (`0700` folders, `0600` files), and ones an older bosun left readable are tightened at
//! start. The temp folder (hook files, chart copies, Helm values) is bosun's own: one
//! another user made or can write in is refused. The debug TCP listener asks for a token
//! kept in a file only bosun's user reads. Some cases act as the user `nobody` (the tests
//! run as root).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{
    self, HelmEngine, Killed, Operator, Sandbox, bosun_bin, capture, http_full, wait_for, workdir,
};
use serde_json::{Value, json};

/// Permission bits of `path` (not following symbolic links), which must be there.
fn mode(path: &Path) -> u32 {
    present(path)
        .unwrap_or_else(|| panic!("{}: not found", path.display()))
        .0
}

/// `path` and everything under it. bosun may remove a file of its own meanwhile (a Helm
/// values file once the command ran): what is gone is left out.
fn tree(path: &Path) -> Vec<PathBuf> {
    let mut all = vec![path.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            all.extend(tree(&entry.path()));
        }
    }
    all
}

/// `path`'s permission bits and whether it is a folder, if it is still there.
fn present(path: &Path) -> Option<(u32, bool)> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Some((m.permissions().mode() & 0o777, m.is_dir())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// Asserts nothing under `dir` is open to group or others, and `dir` itself is `0700`.
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for p in tree(dir) {
        if let Some((m, _)) = present(&p) {
            assert_eq!(m & 0o077, 0, "{} is {m:o}", p.display());
        }
    }
}

/// Makes `dir` and everything under it readable by all, as an older bosun left it.
fn loosen(dir: &Path) {
    for p in tree(dir) {
        let m = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }
}

fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let (code, bytes) = http_full(addr, method, path, headers, body.as_bytes());
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[test]
fn the_sandbox_store_and_kubeconfig_are_private_and_older_ones_are_tightened() {
    let mut sb = Sandbox::start_with(&["--token", "s3cret-token"]);
    let auth = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer s3cret-token"),
    ];
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "keep"}, "data": {"password": "hunter2"}});
    let (code, body) = request(
        sb.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &auth,
        &cm.to_string(),
    );
    assert_eq!(code, 201, "{body}");
    assert_private(&sb.data);
    assert_eq!(mode(&sb.kubeconfig), 0o600);
    let text = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    assert!(text.contains("s3cret-token"), "{text}");

    // As an older bosun left them: readable by everyone. A restart tightens them.
    sb.stop();
    loosen(&sb.data);
    std::fs::set_permissions(&sb.kubeconfig, std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    assert_eq!(mode(&sb.data), 0o755);
    sb.restart();
    assert_private(&sb.data);
    assert_eq!(mode(&sb.kubeconfig), 0o600);
    let (code, body) = request(
        sb.addr(),
        "GET",
        "/api/v1/namespaces/default/configmaps/keep",
        &auth,
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["password"], "hunter2");
}

#[test]
fn run_with_the_sandbox_keeps_its_data_folder_private() {
    let work = workdir();
    let data = work.path().join(".data");
    // An empty data folder an older bosun created readable by everyone.
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut child = Command::new(bosun_bin())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run",
            "--sandbox",
            "--sandbox-listen",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data)
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("LOG_LEVEL", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bosun run --sandbox");
    let seen = capture(&mut child);
    let _child = Killed(child);
    let printed = || seen.lock().map(|s| s.clone()).unwrap_or_default();
    wait_for(
        "bosun run --sandbox to start its operator",
        Duration::from_secs(60),
        || printed().contains("bosun is running") || data.join("journal").exists(),
    );
    assert_eq!(mode(&data), 0o700, "{}", printed());
    assert_private(&data.join("sandbox"));
    assert_eq!(mode(&data.join("kubeconfig")), 0o600);
    wait_for("the journal", Duration::from_secs(60), || {
        data.join("journal").join("segments").exists()
    });
    assert_eq!(mode(&data.join("journal")), 0o700);
}

/// Runs `script` with bash as the user `nobody`.
fn as_nobody(script: &str) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "nobody", "--", "bash", "-c", script])
        .output()
        .expect("runuser (the tests run as root, and the user nobody exists)")
}

/// The owner's uid of `path` (not following links).
fn owner(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .uid()
}

/// Starts `bosun run` with its temp folder at `tmp` (nothing else is needed: the folder is
/// checked before bosun connects) and returns what it printed once it has exited.
fn refused_start(work: &Path, tmp: &Path) -> String {
    std::fs::create_dir_all(work).expect("work folder");
    let tmp = tmp.display().to_string();
    let hooks = work.join("global-hooks").display().to_string();
    let modules = work.join("modules").display().to_string();
    let journal = work.join("journal").display().to_string();
    let socket = work.join("debug.socket").display().to_string();
    let mut op = Operator::start_with_only(
        &[
            ("ADDON_OPERATOR_TMP_DIR", tmp.as_str()),
            ("GLOBAL_HOOKS_DIR", hooks.as_str()),
            ("MODULES_DIR", modules.as_str()),
            ("BOSUN_JOURNAL_DIR", journal.as_str()),
            ("DEBUG_UNIX_SOCKET", socket.as_str()),
            ("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1"),
            ("ADDON_OPERATOR_LISTEN_PORT", "0"),
        ],
        work,
    );
    let exited = op.wait_exit(Duration::from_secs(60));
    let logs = op.logs();
    assert_eq!(exited, Some(false), "bosun did not refuse to start: {logs}");
    assert!(
        !logs.contains("bosun HTTP endpoints listening"),
        "nothing is served: {logs}"
    );
    logs
}

#[test]
fn a_temp_folder_another_user_made_or_can_write_in_is_refused() {
    let work = workdir();
    // A folder like /tmp: anyone may make folders in it; the sticky bit keeps them apart.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let shared = work.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    // Another user makes bosun's default temp folder first, open to all, with a chart of
    // theirs where bosun copies module charts.
    let theirs = shared.join("addon-operator");
    let made = as_nobody(&format!(
        "mkdir -m 0777 {dir} && mkdir -p {dir}/charts/web/templates && \
         printf 'kind: ConfigMap\\nmetadata:\\n  name: theirs\\n' > {dir}/charts/web/templates/cm.yaml",
        dir = theirs.display()
    ));
    assert!(
        made.status.success(),
        "nobody's folder: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert_eq!(owner(&theirs), 65534);
    let logs = refused_start(&work.path().join("a"), &theirs);
    let shown = theirs.display();
    assert!(
        logs.contains(&format!("ADDON_OPERATOR_TMP_DIR {shown}: not starting: {shown} belongs to uid 65534 (nobody) (mode 0777), not to bosun's user uid 0 (root)")),
        "{logs}"
    );
    // Their folder is left as it is: bosun neither uses nor changes it.
    assert_eq!((owner(&theirs), mode(&theirs)), (65534, 0o777));
    assert_eq!(owner(&theirs.join("charts/web/templates/cm.yaml")), 65534);

    // bosun's user's own folder, but writable by others: someone may have put a chart in it.
    let open = work.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let logs = refused_start(&work.path().join("b"), &open);
    assert!(
        logs.contains(&format!(
            "{} is writable by group and others (owner uid 0 (root), mode 0777)",
            open.display()
        )) && logs.contains("bosun expects 0700"),
        "{logs}"
    );
    assert_eq!(mode(&open), 0o777);

    // A link (here to a private folder): refused too, it can be pointed elsewhere.
    let private = work.path().join("private");
    std::fs::create_dir(&private).expect("mkdir");
    let link = work.path().join("link");
    std::os::unix::fs::symlink(&private, &link).expect("symlink");
    let logs = refused_start(&work.path().join("c"), &link);
    assert!(
        logs.contains(&format!("{} is a symbolic link", link.display())),
        "{logs}"
    );

    // A folder inside one another user may write in without the sticky bit.
    let unsticky = work.path().join("unsticky");
    std::fs::create_dir(&unsticky).expect("mkdir");
    std::fs::set_permissions(&unsticky, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let logs = refused_start(&work.path().join("d"), &unsticky.join("tmp"));
    assert!(
        logs.contains(&format!(
            "is inside {}, which others may write in without the sticky bit",
            unsticky.display()
        )),
        "{logs}"
    );
}

#[test]
fn what_bosun_writes_in_its_temp_folder_is_private() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let hooks = common::global_hooks_dir(w);
    common::config_hook(
        &hooks.join("001-startup.sh"),
        r#"{"configVersion":"v1","onStartup":1}"#,
        "true",
    );
    let chart = w.join("modules/010-web");
    std::fs::create_dir_all(chart.join("templates")).expect("chart folder");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-settings\ndata:\n  password: {{ .Values.web.password | quote }}\n",
    )
    .expect("template");
    std::fs::write(
        chart.join("values.yaml"),
        "webEnabled: true\nweb:\n  password: hunter2\n",
    )
    .expect("values.yaml");
    // The temp folder as an older bosun left it: readable by everyone.
    let tmp = w.join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir");
    std::fs::write(tmp.join("old-values.json"), "{}").expect("write");
    loosen(&tmp);
    let mut env: Vec<(String, String)> = HelmEngine::Cli.env();
    env.push(("DEBUG_KEEP_TMP_FILES".into(), "true".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let op = Operator::start_with(&sb, &hooks, w, &env);
    op.wait("the chart installed", Duration::from_secs(90), || {
        sb.get("/api/v1/namespaces/default/configmaps/web-settings")
            .0
            == 200
    });
    let logs = op.logs();
    assert!(
        logs.contains("made the temp folder private") && logs.contains("old-values.json"),
        "{logs}"
    );
    // The hook's kept files and the chart's copy are there, and only bosun's user reads them.
    let all = tree(&tmp);
    let names: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("-binding-context.json"))
            && names
                .iter()
                .any(|n| n.ends_with("charts/web/templates/cm.yaml")),
        "{names:#?}"
    );
    for p in all {
        if let Some((m, is_dir)) = present(&p) {
            let expected = if is_dir { 0o700 } else { 0o600 };
            assert_eq!(m, expected, "{}", p.display());
        }
    }
}

/// The temp folder swapped after the start for another user's, holding a chart of theirs
/// where bosun keeps its copy of a module's chart (what a user who may write in the pod
/// volume above it could do): a module without hooks does not install their chart; its
/// Helm run fails naming the folder, and bosun keeps running.
#[test]
fn a_temp_folder_swapped_after_the_start_is_refused_on_the_helm_path() {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let hooks = common::global_hooks_dir(w);
    let chart = w.join("modules/010-web");
    std::fs::create_dir_all(chart.join("templates")).expect("chart folder");
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-settings\ndata:\n  greeting: {{ .Values.web.greeting | quote }}\n",
    )
    .expect("template");
    std::fs::write(
        chart.join("values.yaml"),
        "webEnabled: true\nweb:\n  greeting: one\n",
    )
    .expect("values.yaml");
    let op = Operator::start_with(&sb, &hooks, w, &[]);
    let greeting = || {
        let (code, cm) = sb.get("/api/v1/namespaces/default/configmaps/web-settings");
        (code == 200).then(|| {
            cm["data"]["greeting"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    };
    op.wait("the chart installed", Duration::from_secs(90), || {
        greeting().as_deref() == Some("one")
    });

    // The swap: bosun's folder moved away, another user's in its place.
    let tmp = w.join("tmp");
    std::fs::rename(&tmp, w.join("tmp.moved")).expect("move bosun's folder");
    let theirs = tmp.join("charts/web/templates");
    std::fs::create_dir_all(&theirs).expect("their folders");
    std::fs::write(
        theirs.join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: theirs\n",
    )
    .expect("their chart");
    std::fs::write(
        tmp.join("charts/web/Chart.yaml"),
        "apiVersion: v2\nname: web\nversion: 6.6.6\n",
    )
    .expect("their Chart.yaml");
    for p in std::iter::once(tmp.clone()).chain(tree(&tmp)) {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).expect("chmod");

    // A values change: the module runs Helm again.
    let (code, mut cm) = sb.get("/api/v1/namespaces/default/configmaps/addon-operator");
    if code == 200 {
        cm["data"]["web"] = json!("greeting: two\n");
        let (code, body) = sb.put("/api/v1/namespaces/default/configmaps/addon-operator", &cm);
        assert_eq!(code, 200, "{body}");
    } else {
        let (code, body) = sb.post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "addon-operator"},
                    "data": {"web": "greeting: two\n"}}),
        );
        assert_eq!(code, 201, "{body}");
    }
    let chart_copy = tmp.join("charts/web");
    op.wait("the Helm run refused", Duration::from_secs(90), || {
        op.logs().contains(&format!(
            "not running Helm for release web: its chart copy {} is not in bosun's private folder any more",
            chart_copy.display()
        ))
    });
    assert!(
        op.logs().contains("belongs to uid 65534 (nobody)"),
        "the error says whose the folder is: {}",
        op.logs()
    );
    assert_eq!(
        sb.get("/api/v1/namespaces/default/configmaps/theirs").0,
        404,
        "their chart was installed"
    );
    assert_eq!(greeting().as_deref(), Some("one"), "nothing was upgraded");
    let addr = op.http_address().expect("listening");
    let (code, _) = common::http(&addr, "GET", "/healthz", "", "");
    assert_eq!(code, 200, "bosun keeps running");
}

#[test]
fn the_debug_tcp_listener_answers_only_with_its_token() {
    let sb = Sandbox::start();
    let work = workdir();
    // Others may reach the folder (not list it): the token file itself must keep them out.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let hooks = common::global_hooks_dir(work.path());
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "global:\n  apiKey: s3cret-api-key\n",
    )
    .expect("values.yaml");
    let op = Operator::start_with(
        &sb,
        &hooks,
        work.path(),
        &[("DEBUG_HTTP_SERVER_ADDR", "127.0.0.1:0")],
    );
    op.wait("the web view's address", Duration::from_secs(60), || {
        common::debug_tcp(&op.logs()).is_some()
    });
    let (addr, token) = common::debug_tcp(&op.logs()).unwrap_or_default();
    let file = work.path().join("debug.token");
    assert!(
        op.logs()
            .contains(&format!("bosun debug token in {}", file.display())),
        "{}",
        op.logs()
    );
    assert_eq!(mode(&file), 0o600);
    let kept = std::fs::read_to_string(&file).expect("token file");
    assert_eq!(kept.trim(), token);
    assert_eq!(token.len(), 64, "{token}");

    // Another local user reads neither the token file nor, without it, any value.
    let read = as_nobody(&format!("cat {}", file.display()));
    assert!(
        !read.status.success()
            && String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "nobody read the token: {} {}",
        String::from_utf8_lossy(&read.stdout),
        String::from_utf8_lossy(&read.stderr)
    );
    let (host, port) = addr.rsplit_once(':').unwrap_or_default();
    let asked = as_nobody(&format!(
        "exec 3<>/dev/tcp/{host}/{port} && \
         printf 'GET /global/values.json HTTP/1.1\\r\\nHost: {addr}\\r\\nConnection: close\\r\\n\\r\\n' >&3 && \
         cat <&3"
    ));
    let answer = String::from_utf8_lossy(&asked.stdout);
    assert!(
        answer.starts_with("HTTP/1.1 401") && !answer.contains("s3cret-api-key"),
        "{answer} {}",
        String::from_utf8_lossy(&asked.stderr)
    );
    assert!(
        answer.contains("www-authenticate: Bearer") && answer.contains(&file.display().to_string()),
        "the answer says where the token is: {answer}"
    );

    // With the token (header or query), the values; a wrong one is refused.
    let get = |path: &str, headers: &[(&str, &str)]| {
        let (code, body) = http_full(&addr, "GET", path, headers, b"");
        (code, String::from_utf8_lossy(&body).into_owned())
    };
    let bearer = format!("Bearer {token}");
    let (code, body) = get("/global/values.json", &[("Authorization", &bearer)]);
    assert!(
        code == 200 && body.contains("s3cret-api-key"),
        "{code} {body}"
    );
    let (code, body) = get(&format!("/global/values.json?token={token}"), &[]);
    assert!(
        code == 200 && body.contains("s3cret-api-key"),
        "{code} {body}"
    );
    let wrong = format!("Bearer {}", "0".repeat(64));
    for (path, headers) in [
        (
            "/global/values.json",
            vec![("Authorization", wrong.as_str())],
        ),
        ("/journal/log.json", vec![]),
        ("/module/list.json", vec![]),
        ("/explain.json?subject=values%20global.apiKey", vec![]),
        ("/config/list.json", vec![]),
    ] {
        let (code, body) = get(path, &headers);
        assert!(
            code == 401 && !body.contains("s3cret"),
            "{path}: {code} {body}"
        );
    }
    let (code, body) = http_full(
        &addr,
        "POST",
        "/config/set",
        &[
            ("Content-Type", "application/json"),
            ("X-Bosun-Client", "cli"),
        ],
        b"name=log.level&value=error",
    );
    assert_eq!(code, 401, "{}", String::from_utf8_lossy(&body));
    // The page itself holds no data and loads without it (it takes the token from its
    // address); the unix socket needs none.
    let (code, page) = get("/ui", &[]);
    assert!(code == 200 && page.contains("Bearer"), "{code}");
    let values = common::run_ok(&mut common::debug_cli(
        &work.path().join("debug.socket"),
        &["global", "values", "-o", "json"],
    ));
    assert!(values.contains("s3cret-api-key"), "{values}");
}
