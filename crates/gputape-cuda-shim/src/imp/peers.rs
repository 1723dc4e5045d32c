//! Dumps across the processes of one `gputape run --flight`: when one process dumps for a
//! fault or a hang, every other process of the same run dumps too.
//!
//! A multi-process program (one process per GPU, as `torchrun` starts them) fails in one
//! process first; the others then wait, in a sync or spinning inside a collective kernel, and
//! make no call whose status a trigger could see. What they were doing at that moment is half
//! of the story, so `gputape run` gives the run an id (`GPUTAPE_SHIM_RUN`), a dump writes a
//! one-line announcement into `DIR/.peers/`, and each flight-recording process has a thread
//! that looks there a few times a second and, at another process's announcement of the same
//! run, dumps its own ring, its waiting calls written as not returned. Such a dump announces
//! nothing, so processes do not wake each other in turn; the shim does not know the program's
//! rank sets (NCCL sits above the driver), so every process of the run is a peer.
//!
//! The same thread answers requests: `gputape dump PID` writes `DIR/.peers/ask.PID` with a
//! reason, and the process dumps as a peer's word would make it, its waiting calls written
//! as not returned (no signal: the program may own them all).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The run's id, set by `gputape run --flight`: announcements of other runs in the same
/// directory are not this run's.
pub const ENV_RUN: &str = "GPUTAPE_SHIM_RUN";
/// How a dump caused by a peer's begins its reason.
pub const PEER_PREFIX: &str = "peer: ";
/// How often the directory is looked at.
const TICK: Duration = Duration::from_millis(200);
/// An announcement is read up to this many bytes.
const MAX_TEXT: u64 = 4096;

/// The run's id, when `gputape run` gave one that can be part of a file name.
fn run_id() -> Option<&'static str> {
    static RUN: OnceLock<Option<String>> = OnceLock::new();
    RUN.get_or_init(|| {
        let v = std::env::var(ENV_RUN).ok()?;
        let ok = !v.is_empty()
            && v.len() <= 64
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        ok.then_some(v)
    })
    .as_deref()
}

/// Whether this process watches for its peers' dumps (a flight recording of a run with an id).
pub fn enabled() -> bool {
    super::log::is_flight() && run_id().is_some()
}

fn place(flight_dir: &Path) -> PathBuf {
    flight_dir.join(gputape_shimlog::PEERS_DIR)
}

/// Starts this process's watcher (once per process: a forked child starts its own).
pub fn start(flight_dir: &Path) {
    static STARTED_FOR: AtomicU32 = AtomicU32::new(0);
    if !enabled() {
        return;
    }
    let pid = std::process::id();
    if STARTED_FOR.swap(pid, Ordering::Relaxed) == pid {
        return;
    }
    let dir = place(flight_dir);
    let _ = std::thread::Builder::new()
        .name("gputape-peers".into())
        .spawn(move || watch(&dir, pid));
}

/// Tells the run's other processes that this one dumped (`reason`, into `dump`). Through a
/// temporary name, so a watcher never reads half of one; `Err` says what failed.
pub fn announce(flight_dir: &Path, reason: &str, dump: &Path) -> Result<(), String> {
    let Some(run) = run_id() else {
        return Ok(());
    };
    let dir = place(flight_dir);
    let pid = std::process::id();
    let path = dir.join(format!("{run}.{pid}"));
    let tmp = dir.join(format!(".{run}.{pid}.tmp"));
    let text = format!("process {pid} dumped to {}: {reason}\n", dump.display());
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&tmp, text))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!(
                "announcing the dump to the run's other processes ({}): {e}",
                path.display()
            )
        })
}

/// The watcher: at the first announcement of this run by another process, dumps (once) and
/// stops.
fn watch(dir: &Path, pid: u32) {
    let Some(run) = run_id() else {
        return;
    };
    loop {
        std::thread::sleep(TICK);
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_str() == Some(&gputape_shimlog::ask_name(pid)) {
                // `gputape dump PID`: a dump without a fault, with the asker's reason.
                let said = read_text(&e.path());
                let _ = std::fs::remove_file(e.path());
                let blocked = super::flight::blocked_now();
                super::log::dump_watched(
                    &format!(
                        "asked: {said}; {} thread(s) of this process waiting",
                        blocked.len()
                    ),
                    &blocked,
                    false,
                );
                continue;
            }
            let Some(other) = name
                .to_str()
                .and_then(|n| n.strip_prefix(run))
                .and_then(|n| n.strip_prefix('.'))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if other == pid {
                continue;
            }
            let said = read_text(&e.path());
            let blocked = super::flight::blocked_now();
            super::log::dump_watched(
                &format!(
                    "{PEER_PREFIX}process {other} of this run dumped ({said}); {} thread(s) of this process waiting",
                    blocked.len()
                ),
                &blocked,
                false,
            );
            return;
        }
    }
}

/// An announcement's text, bounded and on one line.
fn read_text(path: &Path) -> String {
    let mut s = String::new();
    match std::fs::File::open(path).and_then(|f| f.take(MAX_TEXT).read_to_string(&mut s)) {
        Ok(_) => s.trim().replace('\n', " "),
        Err(e) => format!("its announcement could not be read: {e}"),
    }
}
