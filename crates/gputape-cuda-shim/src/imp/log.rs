//! The call log (`gputape_shimlog`'s layout): with `GPUTAPE_SHIM_LOG_DIR=DIR` set, each process
//! that calls the driver writes `DIR/PID.gtshm`, one record per understood call as it returns.
//!
//! Records gather in a buffer that is written out when it passes `FLUSH_AT`, at every host
//! sync the program makes (so what a program that later dies had synced is on disk), and at
//! exit. Large payloads (a module image, a big upload) go out in the same write as the buffer.
//! A failed write (a full disk) stops the log, says so once on stderr, and never fails the
//! program's call: the recorder must not harm what it records.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use gputape_shimlog::{Header, Rec, Record};

/// Where logs go: one file per process.
pub const ENV_LOG_DIR: &str = "GPUTAPE_SHIM_LOG_DIR";
/// Bytes gathered before a write.
const FLUSH_AT: usize = 1 << 20;

/// Set once the log is known wanted (the variable was set when the driver was loaded).
static WANTED: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
/// Cleared for good after a failed write.
static HEALTHY: AtomicBool = AtomicBool::new(true);

struct Log {
    file: Option<std::fs::File>,
    buf: Vec<u8>,
    /// Records in the file so far (the index the next one gets).
    records: u64,
    start: Instant,
}

static LOG: Mutex<Option<Log>> = Mutex::new(None);

/// Whether calls are logged in this process: `GPUTAPE_SHIM_LOG_DIR` was set at load.
pub fn wanted() -> bool {
    WANTED
        .get_or_init(|| std::env::var_os(ENV_LOG_DIR).map(Into::into))
        .is_some()
}

/// The calling thread's id, asked of the kernel once per thread (each record carries it, and
/// a system call per record would be a cost on every logged call).
fn gettid() -> u32 {
    thread_local! {
        // SAFETY: gettid takes nothing and cannot fail.
        static TID: u32 = unsafe { libc::gettid() as u32 };
    }
    TID.with(|t| *t)
}

/// Set in a forked child (a `pthread_atfork` handler), so the child starts a file of its own
/// without asking for its pid at every record.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Appends one record; returns its index in the file (what a later `D2HBytes` names), or
/// `None` when nothing is logged.
pub fn write(status: i32, call: Rec<'_>) -> Option<u64> {
    if !wanted() || !HEALTHY.load(Ordering::Relaxed) {
        return None;
    }
    let thread = gettid();
    let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
    // A forked child starts a file of its own: what the parent had gathered is the parent's.
    if FORKED.swap(false, Ordering::Relaxed) || g.is_none() {
        *g = Some(open(std::process::id())?);
    }
    let log = g.as_mut()?;
    let t_ns = log.start.elapsed().as_nanos() as u64;
    gputape_shimlog::encode(
        &Record {
            t_ns,
            thread,
            status,
            call,
        },
        &mut log.buf,
    );
    let index = log.records;
    log.records += 1;
    if log.buf.len() >= FLUSH_AT {
        flush_locked(log);
    }
    Some(index)
}

fn open(pid: u32) -> Option<Log> {
    let dir = WANTED.get()?.as_ref()?;
    let path = dir.join(format!("{pid}.gtshm"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&path);
    let file = match file {
        Ok(f) => f,
        Err(e) => {
            fail(&format!("cannot create {}: {e}", path.display()));
            return None;
        }
    };
    let mut buf = Vec::with_capacity(FLUSH_AT * 2);
    buf.extend_from_slice(&gputape_shimlog::header(Header {
        pid,
        driver_version: super::record::driver_version(),
    }));
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only stores to an atomic, safe in a forked child.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(mark_forked));
    });
    Some(Log {
        file: Some(file),
        buf,
        records: 0,
        start: Instant::now(),
    })
}

fn flush_locked(log: &mut Log) {
    if log.buf.is_empty() {
        return;
    }
    if let Some(f) = &mut log.file
        && let Err(e) = f.write_all(&log.buf)
    {
        fail(&format!("writing the call log: {e}"));
        log.file = None;
    }
    log.buf.clear();
}

/// Writes out what was gathered (at a host sync, and at exit).
pub fn flush() {
    if !wanted() {
        return;
    }
    let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
    // In a child that has logged nothing yet, what is gathered is the parent's to write.
    if FORKED.load(Ordering::Relaxed) {
        return;
    }
    if let Some(log) = g.as_mut() {
        flush_locked(log);
    }
}

fn fail(why: &str) {
    if HEALTHY.swap(false, Ordering::Relaxed) {
        let _ = writeln!(
            std::io::stderr(),
            "gputape-shim: {why}; the call log stops here (the program runs on unrecorded)"
        );
    }
}

/// Writes out the log when the process exits.
#[used]
#[unsafe(link_section = ".fini_array")]
static AT_EXIT: extern "C" fn() = at_exit;

extern "C" fn at_exit() {
    flush();
}
