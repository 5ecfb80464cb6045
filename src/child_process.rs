//! Children of the bosun process that must not outlive it.

/// Asks Linux to kill the child when the thread that started it (a runtime worker, alive
/// as long as bosun) dies, so a `kill -9` of bosun leaves no child (Helm, the example webhooks) running on.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        })
    };
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_: &mut tokio::process::Command) {}
