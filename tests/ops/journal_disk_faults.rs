//! bosun on a journal whose filesystem fails under it. Full: it stops being ready and says
//! why, stays alive for a grace period, and once there is room again it goes on by itself
//! (a real 8 MiB tmpfs). Read-only (an ext4 image on a loop device, turned read-only the
//! way the kernel does after a disk error): it says why on `/readyz`, in its log and its
//! metrics, starts no hook whose start it cannot journal, and after a restart on the
//! repaired disk everything it acknowledged is there. Mounting needs root, as the test
//! command runs; where it is not permitted a test says so and does nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;

use crate::common::{Operator, Sandbox, workdir};

/// A mounted tmpfs, unmounted on drop.
struct SmallFs(PathBuf);

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// An 8 MiB tmpfs on `dir`. The test needs root (as the test command runs) and fails
/// naming what is missing where mounting is refused: it never passes untried.
fn small_fs(dir: &Path) -> SmallFs {
    std::fs::create_dir_all(dir).expect("mount point");
    run_or_fail(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(dir),
        "mount a tmpfs",
    );
    SmallFs(dir.to_path_buf())
}

/// Runs `cmd`; fails the test naming `what`, the command's error and that the test needs
/// root with mount and loop devices, when it does not succeed. Its output.
fn run_or_fail(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("this test needs to {what}, as root: {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "this test needs to {what}, which needs root (as the test command runs): {cmd:?}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("filler file");
    let chunk = vec![7u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// An ext4 image mounted through a loop device (`errors=remount-ro`, as a node's disk
/// would be); unmounted and detached on drop.
struct LoopFs {
    dir: PathBuf,
    image: PathBuf,
    device: String,
}

impl LoopFs {
    fn mount(&self) -> bool {
        Command::new("mount")
            .args(["-o", "errors=remount-ro", &self.device])
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Unmounts, once nothing holds the filesystem any more (a hook bosun started may
    /// still be ending).
    fn unmount(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "umount {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the kernel does to ext4 after an I/O error with `errors=remount-ro`: every
    /// write from now on fails with EROFS, files open for writing included.
    fn turn_read_only(&self) {
        let ok = Command::new("mount")
            .args(["-o", "remount,abort"])
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -o remount,abort {}", self.dir.display());
    }

    /// After the disk was taken out: checked and mounted writable again.
    fn repair(&self) {
        self.unmount();
        let _ = Command::new("e2fsck")
            .args(["-f", "-y"])
            .arg(&self.image)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(self.mount(), "mount {} again", self.device);
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// An ext4 image on a loop device. The test needs root (as the test command runs) and
/// fails naming what is missing where a step is refused: it never passes untried.
fn loop_fs(work: &Path) -> LoopFs {
    let dir = work.join("journal-fs");
    std::fs::create_dir_all(&dir).expect("mount point");
    let image = work.join("journal.img");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(64 << 20))
        .expect("the image file");
    run_or_fail(
        Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image),
        "make an ext4 filesystem (mkfs.ext4)",
    );
    let device = run_or_fail(
        Command::new("losetup").args(["-f", "--show"]).arg(&image),
        "attach a loop device (losetup)",
    );
    assert!(!device.is_empty(), "losetup named no loop device");
    // A loop device left read-only by someone else would mount read-only.
    let _ = Command::new("blockdev")
        .args(["--setrw", &device])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let fs = LoopFs { dir, image, device };
    assert!(
        fs.mount(),
        "this test needs to mount {} on {} (as root, as the test command runs)",
        fs.device,
        fs.dir.display()
    );
    fs
}

/// A metric's value in Prometheus text (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// How many times the journal holds a start of the hook's tasks.
fn journaled_starts(journal: &Path, hook: &str) -> usize {
    use bosun_addon::{AddonTask, Event, TaskEvent};
    let (_, events) = common::journal_state(journal);
    let mut ids = std::collections::HashSet::new();
    let mut starts = 0;
    for e in &events {
        match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. }) => {
                if matches!(&task.kind, AddonTask::GlobalHookRun { hook: h, .. } if h == hook) {
                    ids.insert(task.id);
                }
            }
            Event::Task(TaskEvent::TaskStarted { id, .. }) if ids.contains(id) => starts += 1,
            _ => {}
        }
    }
    starts
}

fn successes(journal: &Path) -> usize {
    common::try_journal_state(journal)
        .map(|(_, events)| {
            events
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskSucceeded { .. })
                    )
                })
                .count()
        })
        .unwrap_or(0)
}

/// bosun with its journal in `journal`, and its HTTP address once it has one.
fn start_on(sb: &Sandbox, hooks: &Path, work: &Path, journal: &Path) -> (Operator, String) {
    start_on_with(sb, hooks, work, journal, &[])
}

/// [`start_on`] with more environment.
fn start_on_with(
    sb: &Sandbox,
    hooks: &Path,
    work: &Path,
    journal: &Path,
    extra: &[(&str, &str)],
) -> (Operator, String) {
    let journal_dir = journal.display().to_string();
    let mut env = vec![("BOSUN_JOURNAL_DIR", journal_dir.as_str())];
    env.extend_from_slice(extra);
    let op = Operator::start_with(sb, hooks, work, &env);
    let mut addr = String::new();
    op.wait("the HTTP address", Duration::from_secs(60), || {
        addr = op.http_address().unwrap_or_default();
        !addr.is_empty()
    });
    (op, addr)
}

/// GET on bosun's HTTP address: status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let (code, body) = common::http_raw(addr, "GET", path, "", b"");
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// Waits for `/readyz` to fail naming `needle` and the full disk, while `/healthz` stays
/// alive (its grace period).
fn readiness_fails_for_no_space(op: &Operator, addr: &str, needle: &str) {
    let mut why = String::new();
    op.wait(
        &format!("readiness to fail naming {needle:?}"),
        Duration::from_secs(60),
        || {
            let (code, body) = get(addr, "/readyz");
            why = body;
            code == 503 && why.contains(needle)
        },
    );
    assert!(
        why.contains("No space left") || why.contains("os error 28"),
        "/readyz says why: {why}"
    );
    assert_eq!(get(addr, "/healthz").0, 200, "alive while the disk is full");
}

#[test]
fn a_full_journal_disk_fails_readiness_and_room_again_resumes_without_a_restart() {
    let work = workdir();
    let fs = small_fs(&work.path().join("journal-fs"));
    let sb = Sandbox::start();
    let hooks = work.path().join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    // A hook every second: its tasks keep the journal busy.
    common::config_hook(
        &hooks.join("001-tick.sh"),
        r#"{"configVersion":"v1","schedule":[{"name":"tick","crontab":"*/1 * * * * *"}]}"#,
        "true",
    );
    let journal = fs.0.join("journal");
    let (op, addr) = start_on(&sb, &hooks, work.path(), &journal);
    let get = |path: &str| get(&addr, path);
    op.wait("ready", Duration::from_secs(60), || get("/readyz").0 == 200);

    fill(&fs.0.join("filler"));
    readiness_fails_for_no_space(&op, &addr, "journal cannot write");

    std::fs::remove_file(fs.0.join("filler")).expect("room again");
    op.wait("ready again", Duration::from_secs(60), || {
        get("/readyz").0 == 200
    });
    let before = successes(&journal);
    op.wait(
        "tasks to be journaled again",
        Duration::from_secs(60),
        || successes(&journal) > before,
    );
    // The storage was reopened, not the process restarted.
    op.wait("the reopening logged", Duration::from_secs(60), || {
        op.logs().contains("journal storage reopened")
    });
}

#[test]
fn a_journal_disk_gone_read_only_stops_hooks_says_why_and_loses_nothing_acknowledged() {
    let work = workdir();
    let fs = loop_fs(work.path());
    let sb = Sandbox::start();
    let hooks = work.path().join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    // A hook every second that records each run outside the journal's filesystem.
    let runs = work.path().join("runs");
    common::config_hook(
        &hooks.join("001-tick.sh"),
        r#"{"configVersion":"v1","schedule":[{"name":"tick","crontab":"*/1 * * * * *"}]}"#,
        &format!("echo run >> {}", runs.display()),
    );
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let journal = fs.dir.join("journal");
    let (mut op, addr) = start_on(&sb, &hooks, work.path(), &journal);
    op.wait("ready", Duration::from_secs(60), || {
        get(&addr, "/readyz").0 == 200
    });
    op.wait("two hook runs", Duration::from_secs(60), || count() >= 2);

    fs.turn_read_only();
    let mut why = String::new();
    op.wait("readiness to fail", Duration::from_secs(60), || {
        let (code, body) = get(&addr, "/readyz");
        why = body;
        code == 503 && why.contains("journal cannot write")
    });
    assert!(
        why.contains("Read-only file system") || why.contains("os error 30"),
        "/readyz says why: {why}"
    );
    assert_eq!(
        get(&addr, "/healthz").0,
        200,
        "alive during the grace period"
    );
    let text = get(&addr, "/metrics").1;
    assert_eq!(metric(&text, "bosun_journal_failing"), 1.0, "{text}");
    let errors = metric(&text, "bosun_journal_write_errors_total");
    assert!(errors >= 1.0, "{text}");
    op.wait("the log saying so", Duration::from_secs(60), || {
        op.logs().contains("the journal cannot write")
    });
    // The scheduler goes on queueing runs every second and bosun goes on trying the disk;
    // once it has failed three more writes (seconds of ticks), no run started meanwhile
    // beyond the one that may have been under way when the disk went.
    let seen = count();
    op.wait("three more failed writes", Duration::from_secs(60), || {
        metric(
            &get(&addr, "/metrics").1,
            "bosun_journal_write_errors_total",
        ) >= errors + 3.0
    });
    assert!(
        count() <= seen + 1,
        "no hook starts while its start cannot be journaled: {seen} runs, then {}",
        count()
    );

    // The pod is restarted on the repaired disk: every run before the failure had its
    // start journaled, and bosun goes on from the journal.
    op.kill9();
    let ran = count();
    fs.repair();
    let starts = journaled_starts(&journal, "001-tick.sh");
    assert!(
        starts + 1 >= ran,
        "{ran} runs, {starts} journaled starts: at most the run under way when the disk went is not"
    );
    let verify = Command::new(common::bosun_bin())
        .args(["journal", "verify", "--journal-dir"])
        .arg(&journal)
        .output()
        .expect("bosun journal verify");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    op.spawn();
    op.wait(
        "runs again after the restart",
        Duration::from_secs(90),
        || count() >= ran + 2,
    );
    assert!(journaled_starts(&journal, "001-tick.sh") > starts);
}

/// A damaged lambda journal keeps the lambda controllers from starting: the modules and
/// the deployer run on, and `/readyz` fails saying which subsystem did not start and why.
#[test]
fn a_damaged_lambda_journal_fails_readiness_naming_it() {
    let sb = Sandbox::start();
    let work = workdir();
    let journal = work.path().join("journal");
    let (mut op, addr) = start_on(&sb, &work.path().join("no-hooks"), work.path(), &journal);
    op.wait("ready", Duration::from_secs(60), || {
        get(&addr, "/readyz").0 == 200
    });
    op.kill9();
    let lambda = journal.join("lambda");
    // Every file of it, in every folder, overwritten with 0xff.
    let mut damaged = Vec::new();
    let mut dirs = vec![lambda.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("the lambda journal")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let len = std::fs::metadata(&path).map_or(0, |m| m.len());
            if len > 0 {
                std::fs::write(&path, vec![0xff; len as usize]).expect("damage");
                damaged.push(path);
            }
        }
    }
    assert!(!damaged.is_empty(), "no file in {}", lambda.display());
    // A work folder of its own: its log names the new HTTP address.
    let again = workdir();
    let (op, addr) = start_on(&sb, &work.path().join("no-hooks"), again.path(), &journal);
    op.wait("the refusal in /readyz", Duration::from_secs(60), || {
        let (code, body) = get(&addr, "/readyz");
        code == 503 && body.contains("the lambda controllers did not start")
    });
    let (_, body) = get(&addr, "/readyz");
    assert!(body.contains("lambda journal"), "{body}");
}

const ITEMS: &str = "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/deployitems";

/// The deployer and the lambda controllers on a full journal disk: `/readyz` names the
/// journal that cannot write, and once there is room again every item and every parent
/// made meanwhile is worked on without a restart.
#[test]
fn deploy_items_queued_while_the_journal_disk_is_full_all_run_once_there_is_room() {
    let work = workdir();
    let fs = small_fs(&work.path().join("journal-fs"));
    let sb = Sandbox::start();
    let hooks = work.path().join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    let journal = fs.0.join("journal");
    let (op, addr) = start_on_with(
        &sb,
        &hooks,
        work.path(),
        &journal,
        &[("BOSUN_MODULES", "false")],
    );
    let get = |path: &str| get(&addr, path);
    op.wait("ready", Duration::from_secs(60), || {
        get("/readyz").0 == 200 && sb.get(ITEMS).0 == 200
    });
    let create = |name: &str| {
        let (code, body) = sb.post(
            ITEMS,
            &serde_json::json!({
                "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"type": "landscaper.gardener.cloud/mock", "config": {
                    "apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1",
                    "kind": "ProviderConfiguration"}},
            }),
        );
        assert_eq!(code, 201, "{body}");
    };
    // A lambda controller: each Disk parent gets a ConfigMap child.
    let hooks = common::webhooks::Hooks::serve(|_, request| {
        let name = request["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or("x");
        (
            200,
            serde_json::json!({"status": {"synced": true}, "children": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-child")}}
            ]}),
        )
    });
    common::webhooks::post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "disks.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Disk", "plural": "disks", "singular": "disk", "listKind": "DiskList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        }),
    );
    const DISKS: &str = "/apis/example.com/v1/namespaces/default/disks";
    op.wait("the Disk resource served", Duration::from_secs(60), || {
        sb.get(DISKS).0 == 200
            && sb
                .get("/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers")
                .0
                == 200
    });
    common::webhooks::post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &serde_json::json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "disks"},
            "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "disks"},
                "generateSelector": true,
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}}}),
    );
    let disk = |name: &str| {
        common::webhooks::post_ok(
            &sb,
            DISKS,
            &serde_json::json!({"apiVersion": "example.com/v1", "kind": "Disk", "metadata": {"name": name}}),
        );
    };
    let child = |name: &str| {
        sb.get(&format!(
            "/api/v1/namespaces/default/configmaps/{name}-child"
        ))
        .0 == 200
    };
    disk("first");
    op.wait("the first parent's child", Duration::from_secs(60), || {
        child("first")
    });
    create("before");
    let phase = |name: &str| {
        let (code, item) = sb.get(&format!("{ITEMS}/{name}"));
        (code == 200)
            .then(|| item["status"]["phase"].as_str().map(String::from))
            .flatten()
    };
    op.wait("the first item succeeded", Duration::from_secs(60), || {
        phase("before").as_deref() == Some("Succeeded")
    });

    fill(&fs.0.join("filler"));
    let names: Vec<String> = (0..20).map(|i| format!("queued-{i}")).collect();
    for name in &names {
        create(name);
    }
    let parents: Vec<String> = (0..5).map(|i| format!("parent-{i}")).collect();
    for name in &parents {
        disk(name);
    }
    readiness_fails_for_no_space(&op, &addr, "deployer");

    std::fs::remove_file(fs.0.join("filler")).expect("room again");
    // Nothing appends to a journal that refuses new work: it finds the room by itself.
    let (mut ready, mut last) = (false, String::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ready && std::time::Instant::now() < deadline {
        let (code, body) = get("/readyz");
        (ready, last) = (code == 200, body);
        if !ready {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(ready, "not ready again: {last}");
    op.wait(
        "every item queued meanwhile succeeded",
        Duration::from_secs(120),
        || {
            names
                .iter()
                .all(|n| phase(n).as_deref() == Some("Succeeded"))
        },
    );
    op.wait(
        "every parent made meanwhile has its child",
        Duration::from_secs(120),
        || parents.iter().all(|p| child(p)),
    );
}
