//! `perf record` of one phase of a bench, when the environment variable naming its file
//! is set.

use std::time::Duration;

/// Starts `perf record` (`--call-graph dwarf`) into the file `var` names, when it is set:
/// of this process, or of the whole machine with `whole_machine` (the API servers' and
/// webhooks' processes beside this one). Stopped by [`perf_stop`].
pub fn perf_start(var: &str, whole_machine: bool) -> Option<std::process::Child> {
    let out = std::env::var(var).ok()?;
    let mut cmd = std::process::Command::new("perf");
    cmd.args([
        "record",
        "-F",
        "1999",
        "--call-graph",
        "dwarf,16384",
        "-o",
        &out,
    ]);
    if whole_machine {
        cmd.arg("-a");
    } else {
        cmd.arg("-p").arg(std::process::id().to_string());
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{var}: perf could not start: {e}"));
    // perf attaches to the threads before the phase begins.
    std::thread::sleep(Duration::from_millis(500));
    Some(child)
}

/// Stops a recording [`perf_start`] began, and waits for perf to write its file.
pub fn perf_stop(perf: Option<std::process::Child>) {
    if let Some(p) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait_with_output();
    }
}
