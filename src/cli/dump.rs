//! `gputape dump PID`: ask a process that `gputape run --flight` is recording for its flight
//! dump now, with no fault: a step that hangs, a server that stopped answering, numbers that
//! look wrong; or a process whose engine armed gputape's flight recorder itself
//! (`GPUTAPE_FLIGHT=DIR`). The request is a file its recorder already watches (the shim's peers
//! thread, or the trait-level recorder's watcher: `DIR/.peers/ask.PID`, holding the reason), not
//! a signal, which the program may own; a signal is sent only when asked for (`--signal`).
//! The dump opens at once with every verb (`show`, `replay`, `minimize` read the raw
//! `.gtshm`), and the calls the process was waiting in are in it as not returned: its replay
//! is judged as a hang's.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::{Ctx, Exit};

/// The variables that say where a process dumps: `gputape run --flight`'s for the command's
/// processes (the shim's watcher answers), then an engine's own trait-level recorder's
/// (`RecordingBackend::from_env`; its watcher thread answers).
const ENV_FLIGHT_DIRS: [&str; 2] = [super::run::ENV_FLIGHT_DIR, "GPUTAPE_FLIGHT"];

#[derive(clap::Args)]
pub struct Args {
    /// The process to dump (one of a `gputape run --flight` command's processes).
    pid: u32,
    /// Why: written into the dump, which `show` and `replay` print.
    #[arg(long, default_value = "asked with gputape dump")]
    reason: String,
    /// Send this signal instead (`USR1`, `USR2` or a number), for an engine whose own
    /// recorder dumps on it; the dump is then wherever that recorder writes.
    #[arg(long, value_name = "SIG")]
    signal: Option<String>,
    /// How long to wait for the dump to be written, in seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
}

/// Exit 0 with the dump's path on stdout once it is written; 1 when the process did not
/// dump in time (it has dumped already: a process dumps once); 2 when it cannot be asked.
pub fn exec(a: Args, _ctx: &Ctx) -> Result<Exit> {
    if let Some(sig) = &a.signal {
        let n = signal_number(sig)?;
        // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
        if unsafe { libc::kill(a.pid as libc::pid_t, n) } != 0 {
            bail!(
                "cannot signal process {}: {}",
                a.pid,
                std::io::Error::last_os_error()
            );
        }
        eprintln!("sent signal {n} to process {}", a.pid);
        return Ok(Exit::Pass);
    }
    let dir = flight_dir(a.pid)?;
    let asked = SystemTime::now();
    let req = gputape_shimlog::ask_path(&dir, a.pid);
    let peers = req.parent().unwrap_or(&dir).to_path_buf();
    std::fs::create_dir_all(&peers)
        .with_context(|| format!("cannot create {}", peers.display()))?;
    let tmp = peers.join(format!(".ask.{}.tmp", a.pid));
    std::fs::write(&tmp, a.reason.replace('\n', " "))
        .and_then(|()| std::fs::rename(&tmp, &req))
        .with_context(|| format!("cannot write the request {}", req.display()))?;
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(a.timeout.clamp(0.1, 3600.0));
    while t0.elapsed() < limit {
        // Taken, and a dump of this process written since: the shim's `PID.gtshm`, or a
        // trait-level recorder's `gputape-flight-PID-N.gtape`.
        if !req.exists() {
            if let Some(dump) = dump_of(&dir, a.pid, asked) {
                println!("{}", dump.display());
                return Ok(Exit::Pass);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_file(&req);
    eprintln!(
        "process {} wrote no dump within {:.1} s (it may have dumped already: a process dumps once; see {})",
        a.pid,
        limit.as_secs_f64(),
        dir.display()
    );
    Ok(Exit::Findings)
}

/// A dump of process `pid` in `dir` written since `since` (a second's slack for coarse
/// clocks), complete (no temporary name).
fn dump_of(dir: &Path, pid: u32, since: SystemTime) -> Option<PathBuf> {
    let (shim, own) = (format!("{pid}.gtshm"), format!("gputape-flight-{pid}-"));
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n == shim || (n.starts_with(&own) && n.ends_with(".gtape"))
        })
        .filter_map(|e| {
            let t = e.metadata().and_then(|m| m.modified()).ok()?;
            (t + Duration::from_secs(1) >= since).then(|| (t, e.path()))
        })
        // The newest: a recorder's dumps are numbered, and "-10" sorts before "-9".
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
}

/// Where process `pid` writes its flight dump, read from its environment.
fn flight_dir(pid: u32) -> Result<PathBuf> {
    let env_path = Path::new("/proc").join(pid.to_string()).join("environ");
    let env = std::fs::read(&env_path)
        .with_context(|| format!("cannot read the environment of process {pid}"))?;
    let dir = ENV_FLIGHT_DIRS.iter().find_map(|var| {
        let want = format!("{var}=");
        env.split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(want.as_bytes()))
            .filter(|v| !v.is_empty())
            .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
    });
    let dir = dir.ok_or_else(|| {
        anyhow::anyhow!(
            "process {pid} keeps no flight recorder this can ask (neither {} in its environment): a recorder armed in code may dump on a signal: --signal USR1",
            ENV_FLIGHT_DIRS.join(" nor ")
        )
    })?;
    // A relative directory is the process's own working directory's.
    Ok(if dir.is_relative() {
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|cwd| cwd.join(&dir))
            .unwrap_or(dir)
    } else {
        dir
    })
}

/// `USR1`, `SIGUSR1` or a number.
fn signal_number(s: &str) -> Result<libc::c_int> {
    if let Ok(n) = s.parse::<libc::c_int>() {
        return Ok(n);
    }
    Ok(match s.trim_start_matches("SIG") {
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "QUIT" => libc::SIGQUIT,
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        other => {
            bail!("--signal {other}: name one of USR1, USR2, QUIT, TERM, INT, HUP, or a number")
        }
    })
}
