//! The call log (`gputape_shimlog`'s layout): with `GPUTAPE_SHIM_LOG_DIR=DIR` set, each process
//! that calls the driver writes `DIR/PID.gtshm`, one record per understood call as it returns.
//! With `GPUTAPE_SHIM_FLIGHT_DIR=DIR` instead, the same records go into a ring in memory
//! (`flight.rs`) and only a fault writes them out, as `DIR/PID.gtshm`.
//!
//! Records gather in a buffer that is written out when it passes `FLUSH_AT`, at every host
//! sync the program makes (so what a program that later dies had synced is on disk), and at
//! exit. Large payloads (a module image, a big upload) go out in the same write as the buffer.
//! A failed write (a full disk) stops the log, says so once on stderr, and never fails the
//! program's call: the recorder must not harm what it records.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use gputape_shimlog::{Header, NO_STACK, Rec, Record};

use super::clock::Clock;
use super::flags::{FLAGS, MODE_FILE, MODE_FLIGHT, MODE_NONE, MODE_UNKNOWN};
use super::flight::{self, Ring};
use super::lines::{Here, Lines};

/// Where logs go: one file per process.
pub const ENV_LOG_DIR: &str = "GPUTAPE_SHIM_LOG_DIR";
/// Where flight dumps go: one file per process that faulted.
pub const ENV_FLIGHT_DIR: &str = "GPUTAPE_SHIM_FLIGHT_DIR";
/// Bytes gathered before a write.
const FLUSH_AT: usize = 1 << 20;

/// What the process does with its records.
enum Mode {
    /// Writes them to `DIR/PID.gtshm` as it goes.
    File(PathBuf),
    /// Keeps them in a ring and writes `DIR/PID.gtshm` at a fault.
    Flight(PathBuf),
}

/// Set once the log is known wanted (a variable was set when the driver was loaded). Hot
/// paths read `FLAGS.mode` instead, and the flags below there too (`flags.rs`).
static WANTED: OnceLock<Option<Mode>> = OnceLock::new();

/// Pauses (`paused` nonzero) or resumes (0) the recording of work in this process: while
/// paused, launches, copies, memsets and syncs are forwarded and not recorded; state
/// (allocations, modules, streams, events, captures) and faults still are, so what is recorded
/// stays consistent, a recording with gaps in its work. For benchmarks that compare steps
/// with and without recording inside one process (through ctypes, say): between processes a
/// program's own speed varies more than the recorder costs.
#[unsafe(no_mangle)]
pub extern "C" fn gputape_shim_pause(paused: core::ffi::c_int) {
    FLAGS.paused.store(paused != 0, Ordering::Relaxed);
}

/// Writes this process's flight dump now, with `reason` (a C string; null: "asked by the
/// program"), the calls its threads are waiting in written as not returned: for a program that
/// notices something wrong itself (NaN logits, a step past its deadline) and wants the window
/// that led there. Through ctypes: `ctypes.CDLL("libcuda.so.1").gputape_flight_dump(b"nan")`.
/// Returns 0 when the dump was written, 1 when this process keeps no flight ring (not run
/// under `gputape run --flight`) or has dumped already (a process dumps once).
///
/// # Safety
/// `reason` is null or a NUL-terminated string that stays valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gputape_flight_dump(reason: *const core::ffi::c_char) -> core::ffi::c_int {
    let why = if reason.is_null() {
        "asked by the program".to_string()
    } else {
        // SAFETY: the caller passes a NUL-terminated string valid for the call.
        unsafe { core::ffi::CStr::from_ptr(reason) }
            .to_string_lossy()
            .into_owned()
    };
    let blocked = super::flight::blocked_now();
    i32::from(!dump_watched(&format!("asked: {why}"), &blocked, false))
}

/// Whether work is being recorded now (wanted, and not paused): hooks skip what they would
/// only have gathered for a record.
pub fn active() -> bool {
    wanted() && !FLAGS.paused.load(Ordering::Relaxed)
}

/// `repr(C)`: in the order written, what every record reads first (the next index, the
/// clock, the ring's newest chunk), so a record touches as few of its cache lines as it can.
#[repr(C)]
struct Log {
    /// Records in the file so far (the index the next one gets).
    records: u64,
    /// Each record's time since the log was opened.
    clock: Clock,
    /// The flight recorder's ring (flight mode), and whether its dump was written.
    ring: Option<Ring>,
    dumped: bool,
    pid: u32,
    file: Option<std::fs::File>,
    buf: Vec<u8>,
    /// The Python stacks and code objects named so far.
    lines: Lines,
}

static LOG: Mutex<Option<Log>> = Mutex::new(None);

fn mode() -> Option<&'static Mode> {
    WANTED
        .get_or_init(|| {
            let dir = |v| {
                std::env::var_os(v)
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
            };
            dir(ENV_LOG_DIR)
                .map(Mode::File)
                .or_else(|| dir(ENV_FLIGHT_DIR).map(Mode::Flight))
        })
        .as_ref()
}

/// The directory this process's log or flight dump goes to, when calls are logged (where the
/// processes of one recording find each other's shared handles: `record/shareable.rs`).
pub fn dir() -> Option<&'static std::path::Path> {
    mode().map(|m| match m {
        Mode::File(d) | Mode::Flight(d) => d.as_path(),
    })
}

/// `mode`, as `FLAGS.mode` caches it: one load on the hot path.
#[inline(always)]
fn mode_flag() -> u8 {
    match FLAGS.mode.load(Ordering::Relaxed) {
        MODE_UNKNOWN => first_mode_flag(),
        m => m,
    }
}

/// `mode_flag`'s first answer, out of every record's path.
#[cold]
#[inline(never)]
fn first_mode_flag() -> u8 {
    let m = match mode() {
        None => MODE_NONE,
        Some(Mode::File(_)) => MODE_FILE,
        Some(Mode::Flight(_)) => MODE_FLIGHT,
    };
    FLAGS.mode.store(m, Ordering::Relaxed);
    m
}

/// Whether calls are logged in this process: `GPUTAPE_SHIM_LOG_DIR` or
/// `GPUTAPE_SHIM_FLIGHT_DIR` was set at load.
#[inline]
pub fn wanted() -> bool {
    mode_flag() != MODE_NONE
}

/// Whether this process keeps a flight recorder's ring rather than a log.
pub fn is_flight() -> bool {
    mode_flag() == MODE_FLIGHT
}

/// The calling thread's id, asked of the kernel once per thread (each record carries it, and
/// a system call per record would be a cost on every logged call).
pub fn thread_id() -> u32 {
    thread_local! {
        // Const-initialised (no lazy state to test on each read); 0 until first asked, which
        // no thread's id is.
        static TID: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    }
    #[cold]
    #[inline(never)]
    fn first(t: &core::cell::Cell<u32>) -> u32 {
        // SAFETY: gettid takes nothing and cannot fail.
        let id = unsafe { libc::gettid() as u32 };
        t.set(id);
        id
    }
    TID.with(|t| match t.get() {
        0 => first(t),
        id => id,
    })
}

/// Marks a forked child (a `pthread_atfork` handler, `FLAGS.forked`), so the child starts a
/// file of its own without asking for its pid at every record.
extern "C" fn mark_forked() {
    FLAGS.forked.store(true, Ordering::Relaxed);
}

/// Appends one record; returns its index in the file (what a later `D2HBytes` names), or
/// `None` when nothing is logged.
pub fn write(status: i32, call: Rec<'_>) -> Option<u64> {
    let (tag, family, state) = (call.tag(), call.family(), call.is_state());
    // Work queued on a stream while a capture is open: the node it became follows it.
    let queued = match &call {
        _ if !super::managed::capture_open() => None,
        Rec::CopyH2D { on, .. }
        | Rec::CopyD2H { on, .. }
        | Rec::CopyD2D { on, .. }
        | Rec::Memset { on, .. }
        | Rec::ValueWrite { on, .. } => (!on.sync).then_some(on.stream),
        Rec::HostFunc { stream, .. } => Some(*stream),
        _ => None,
    };
    let at = write_rec(status, call, (tag, family, state));
    if let Some(stream) = queued {
        super::captured::after_work(status, stream);
    }
    at
}

/// `write` of `call`, given its (type byte, family, whether it is state).
fn write_rec(
    status: i32,
    call: Rec<'_>,
    (tag, family, state): (u8, &'static str, bool),
) -> Option<u64> {
    write_with(status, (tag, family, state), |to, head| {
        let rec = Record {
            t_ns: head.0,
            thread: head.1,
            status,
            stack: head.2,
            call,
        };
        match to {
            To::Ring(ring, index) => ring.push(index, &rec),
            To::Buf(buf) => gputape_shimlog::encode(&rec, buf),
        }
    })
}

/// `write` of a launch, which `enc` appends given the record's (time, thread, status):
/// encoded where it is kept, with no record built and no buffer between (every launch a
/// program makes passes here; `launch.rs`).
#[inline]
pub fn write_launch(
    status: i32,
    enc: impl FnOnce(&mut Vec<u8>, gputape_shimlog::Head),
) -> Option<u64> {
    let kind = (gputape_shimlog::TAG_LAUNCH, "cuLaunchKernel", false);
    write_with(status, kind, |to, head| {
        let head = (head.0, head.1, status, head.2);
        match to {
            To::Ring(ring, index) => ring.push_work(index, head.1, |b| enc(b, head)),
            To::Buf(buf) => enc(buf, head),
        }
    })
}

/// Where a record goes: the flight recorder's ring, as record `index`, or the log's buffer.
enum To<'a> {
    Ring(&'a mut Ring, u64),
    Buf(&'a mut Vec<u8>),
}

/// `write` with the record's (type byte, family, whether it is state) given and its bytes
/// put where they go by `put`, handed the time, thread and stack they carry.
#[inline(always)]
fn write_with(
    status: i32,
    (tag, family, state): (u8, &'static str, bool),
    put: impl FnOnce(To<'_>, (u64, u32, u32)),
) -> Option<u64> {
    if !wanted() || !FLAGS.healthy.load(Ordering::Relaxed) {
        return None;
    }
    if FLAGS.paused.load(Ordering::Relaxed) && !state && !flight::is_fault(status) {
        return None;
    }
    let _t = super::selftime::Guard::start(|| (tag, family));
    let thread = thread_id();
    // Read before the lock: only this thread's own memory.
    let here = Here::read();
    let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
    // A forked child starts a file of its own: what the parent had gathered is the parent's.
    // A load first: a swap on every record would be a locked write to a shared line.
    let forked =
        FLAGS.forked.load(Ordering::Relaxed) && FLAGS.forked.swap(false, Ordering::Relaxed);
    if forked || g.is_none() {
        reopen(&mut g)?;
    }
    let log = g.as_mut()?;
    let t_ns = log.clock.now_ns();
    let stack = match &here {
        Some(h) => name_stack(log, h, t_ns, thread),
        None => NO_STACK,
    };
    let index = log.records;
    log.records += 1;
    if let Some(ring) = &mut log.ring {
        put(To::Ring(ring, index), (t_ns, thread, stack));
        if flight::is_fault(status) {
            dump_at_fault(log, family, index, thread, status);
        }
        return Some(index);
    }
    put(To::Buf(&mut log.buf), (t_ns, thread, stack));
    if log.buf.len() >= FLUSH_AT {
        flush_locked(log);
    }
    Some(index)
}

/// The number of the stack `raw` (read on this thread, in this call), naming it and its new
/// code objects in the log first, as records of their own.
fn name_stack(log: &mut Log, here: &Here, t_ns: u64, thread: u32) -> u32 {
    let mut lines = std::mem::take(&mut log.lines);
    let id = lines.intern_here(here, |call| {
        let rec = Record {
            t_ns,
            thread,
            status: 0,
            stack: NO_STACK,
            call,
        };
        let index = log.records;
        log.records += 1;
        match &mut log.ring {
            Some(ring) => ring.push(index, &rec),
            None => gputape_shimlog::encode(&rec, &mut log.buf),
        }
    });
    log.lines = lines;
    id
}

/// The calling thread's stack, named in the log (for a call that blocks: its record is written
/// later, by whichever thread dumps); `NO_STACK` when there is none or nothing is logged.
pub fn stack_here() -> u32 {
    if !wanted() {
        return NO_STACK;
    }
    let Some(here) = Here::read() else {
        return NO_STACK;
    };
    let thread = thread_id();
    let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let Some(log) = g.as_mut() else {
        return NO_STACK;
    };
    let t_ns = log.clock.now_ns();
    name_stack(log, &here, t_ns, thread)
}

/// The flight recorder's dump at a record whose status is a fault (record `index`, of the
/// `family` of calls). Out of line: the hot path of every record only tests for it.
#[cold]
#[inline(never)]
fn dump_at_fault(log: &mut Log, family: &str, index: u64, thread: u32, status: i32) {
    // The record's status names the fault; the reader spells it (`gputape run` does).
    let reason = format!(
        "returned by {family} (record {index} of process {}'s calls)",
        log.pid
    );
    dump_locked(log, &reason, thread, status, &[], true);
}

/// The flight recorder's dump written by a watcher thread (a hang's, a peer's): `blocked` are
/// the calls threads are waiting in, the longest waiting first, written as not returned;
/// `announce`: tell the run's other processes (`peers.rs`), which a peer's dump does not.
/// Whether this call wrote it (not: no flight ring, or dumped already).
pub fn dump_watched(reason: &str, blocked: &[(u32, u32, Rec<'_>)], announce: bool) -> bool {
    let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let Some(log) = g.as_mut() else {
        return false;
    };
    let before = log.dumped;
    let t_ns = log.clock.elapsed_ns();
    let tail: Vec<Record<'_>> = blocked
        .iter()
        .map(|(thread, stack, call)| Record {
            t_ns,
            thread: *thread,
            status: gputape_shimlog::STATUS_NOT_RETURNED,
            stack: *stack,
            call: call.clone(),
        })
        .collect();
    let reason = format!("{reason} (process {})", log.pid);
    dump_locked(log, &reason, thread_id(), 0, &tail, announce);
    !before && log.dumped
}

/// Writes the flight recorder's dump (once per process): `DIR/PID.gtshm`, through a temporary
/// name so a reader never sees half of one. `blocked` (a hang's) go just before the `Dump`;
/// `announce`: the run's other processes are told, and dump too (`peers.rs`).
fn dump_locked(
    log: &mut Log,
    reason: &str,
    thread: u32,
    status: i32,
    blocked: &[Record<'_>],
    announce: bool,
) {
    let (Some(ring), false, Some(Mode::Flight(dir))) = (&log.ring, log.dumped, mode()) else {
        return;
    };
    log.dumped = true;
    let mut why = reason.to_string();
    if ring.dropped > 0 {
        why.push_str(&format!(
            "; the ring ({} MiB) had dropped the {} oldest work records",
            ring.cap_mb(),
            ring.dropped
        ));
    }
    let mut tail = blocked.to_vec();
    tail.push(Record {
        t_ns: log.clock.elapsed_ns(),
        thread,
        status,
        stack: NO_STACK,
        call: Rec::Dump {
            reason: why.as_bytes(),
        },
    });
    let bytes = ring.dump(&log.buf, &tail);
    let path = dir.join(format!("{}.gtshm", log.pid));
    let tmp = dir.join(format!(".{}.gtshm.tmp", log.pid));
    match std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &path)) {
        Ok(()) => {
            let fault = if status != 0 {
                format!("driver status {status} ")
            } else {
                String::new()
            };
            let _ = writeln!(
                std::io::stderr(),
                "gputape-shim: flight dump of process {}: {fault}{why} -> {}",
                log.pid,
                path.display()
            );
            if announce && let Err(why) = super::peers::announce(dir, &why, &path) {
                let _ = writeln!(std::io::stderr(), "gputape-shim: {why}");
            }
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            fail(&format!("writing the flight dump {}: {e}", path.display()));
        }
    }
}

/// A log of this process's own in `g` (the first, or a forked child's: the parent's, dropped
/// here, was the parent's). Out of line, the old log's drop with it.
#[cold]
#[inline(never)]
fn reopen(g: &mut Option<Log>) -> Option<()> {
    *g = Some(open(std::process::id())?);
    Some(())
}

fn open(pid: u32) -> Option<Log> {
    let mut log = open_log(pid)?;
    note_wall_clock(&mut log);
    Some(log)
}

/// The log's first record: the wall clock as the log's own clock starts, so that a reader
/// can lay this process's calls beside another's (a process forked later starts a log, and
/// a clock, of its own).
fn note_wall_clock(log: &mut Log) {
    let Ok(wall) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return;
    };
    let rec = Record {
        t_ns: log.clock.now_ns(),
        thread: 0,
        status: 0,
        stack: NO_STACK,
        call: Rec::WallClock {
            wall_ns: wall.as_nanos() as u64,
        },
    };
    let index = log.records;
    log.records += 1;
    match &mut log.ring {
        Some(ring) => ring.push(index, &rec),
        None => gputape_shimlog::encode(&rec, &mut log.buf),
    }
}

fn open_log(pid: u32) -> Option<Log> {
    super::selftime::init();
    let header = gputape_shimlog::header(Header {
        pid,
        driver_version: super::record::driver_version(),
    });
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only stores to an atomic, safe in a forked child.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(mark_forked));
    });
    let dir = match mode()? {
        Mode::File(dir) => dir,
        // Flight: nothing is written until a dump, whose header `buf` keeps.
        Mode::Flight(dir) => {
            super::peers::start(dir);
            return Some(Log {
                file: None,
                buf: header.to_vec(),
                ring: Some(Ring::from_env()),
                dumped: false,
                pid,
                records: 0,
                clock: Clock::new(),
                lines: Lines::default(),
            });
        }
    };
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
    buf.extend_from_slice(&header);
    Some(Log {
        file: Some(file),
        buf,
        ring: None,
        dumped: false,
        pid,
        records: 0,
        clock: Clock::new(),
        lines: Lines::default(),
    })
}

#[cold]
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
    if FLAGS.forked.load(Ordering::Relaxed) {
        return;
    }
    if let Some(log) = g.as_mut()
        && log.ring.is_none()
    {
        flush_locked(log);
    }
}

fn fail(why: &str) {
    if FLAGS.healthy.swap(false, Ordering::Relaxed) {
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
    if let Some(line) = super::selftime::summary() {
        let _ = writeln!(
            std::io::stderr(),
            "gputape-shim: process {}: {line}",
            std::process::id()
        );
    }
    if std::env::var_os(flight::ENV_AT_EXIT).is_some_and(|v| v == "1") {
        let mut g = LOG.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(log) = g.as_mut() {
            let reason = format!(
                "at exit of process {} ({}=1), after {} driver calls",
                log.pid,
                flight::ENV_AT_EXIT,
                log.records
            );
            dump_locked(log, &reason, thread_id(), 0, &[], false);
        }
    }
}
