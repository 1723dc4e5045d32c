//! The flight recorder's own thread, which dumps without help from the engine's threads.
//!
//! A hung engine makes no further calls, so a trigger that waits for "the next recorded call"
//! never fires: the dump that matters most is the one never written. Here SIGUSR1's handler
//! only writes a byte into a pipe (an async-signal-safe act), and this thread, woken by it,
//! dumps every armed flight recorder at once. A few times a second it also looks for a call
//! that has been inside the wrapped backend for longer than its recorder's `hang_after`
//! (`GPUTAPE_FLIGHT_HANG_S`), and dumps then, naming that call; and, for a recorder with a
//! peers directory (`GPUTAPE_FLIGHT_PEERS`), for a dump another rank of its communicators
//! announced there (`peers.rs`); and, at least once a second, for a request of `gputape dump
//! PID` in the flight directory (`.peers/ask.PID`, holding the reason). It calls nothing on the
//! device, so it cannot disturb a capture.

use super::flight::{self, Shared};
use crate::trace::HANG_REASON;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;
use std::time::Duration;

/// The pipe's write end, for the signal handler (-1: no watcher; the handler falls back to
/// a flag the next recorded call reads).
static WAKE: AtomicI32 = AtomicI32::new(-1);
static STARTED: Once = Once::new();

/// How often hangs are looked for while some recorder has `hang_after` set.
const HANG_TICK: Duration = Duration::from_millis(100);
/// How long the watcher waits for a recorder's lock before it tries again next tick.
const LOCK_WAIT: Duration = Duration::from_millis(50);

/// Start the watcher and install the SIGUSR1 handler, once per process.
pub(crate) fn start() {
    STARTED.call_once(|| {
        if let Some(write) = spawn_watcher() {
            WAKE.store(write, Ordering::Release);
        }
        // SAFETY: installing a handler that only does async-signal-safe work (an atomic load
        // and store, one write(2) into a non-blocking pipe).
        unsafe {
            libc::signal(
                libc::SIGUSR1,
                on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    });
}

/// The pipe and the thread reading it; the pipe's write end, or `None` when either could
/// not be made (SIGUSR1 then dumps at the next recorded call, as before).
fn spawn_watcher() -> Option<i32> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the two-element array it is given.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if made != 0 {
        return None;
    }
    let [read, write] = fds;
    let spawned = std::thread::Builder::new()
        .name("gputape-flight-watch".into())
        .spawn(move || watch(read));
    if spawned.is_err() {
        // SAFETY: both descriptors were just made by pipe2 and are used by nothing else.
        unsafe {
            libc::close(read);
            libc::close(write);
        }
        return None;
    }
    Some(write)
}

extern "C" fn on_usr1(_: libc::c_int) {
    let fd = WAKE.load(Ordering::Acquire);
    if fd < 0 {
        flight::SIGNALLED.store(true, Ordering::Relaxed);
        return;
    }
    let byte = 1u8;
    // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, so a full pipe (a
    // wake-up already pending) drops the byte instead of blocking the handler.
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
    }
}

/// The watcher's loop: a signal dumps every armed recorder; a call past its recorder's
/// `hang_after` dumps that recorder, once per stuck call.
fn watch(read: i32) {
    let mut dumped_for: Vec<(usize, u64)> = Vec::new();
    let mut announced: Vec<std::path::PathBuf> = Vec::new();
    let mut watching = false;
    loop {
        let timeout = if watching {
            HANG_TICK
        } else {
            Duration::from_secs(1)
        };
        let signalled = woken(read, timeout);
        watching = false;
        for st in flight::armed() {
            if signalled {
                if let Some(mut g) = st.try_lock_for(Duration::from_secs(1)) {
                    flight::trigger(&mut g, "SIGUSR1", None);
                }
            }
            watching |= check_hang(&st, &mut dumped_for);
            watching |= check_peers(&st, &mut announced);
            check_asked(&st);
        }
    }
}

/// `gputape dump PID`: a request for this process's dump, `DIR/.peers/ask.PID` in the
/// recorder's flight directory, holding the reason. Taken (removed) and answered with a dump,
/// whatever `max_dumps` says, as `flight_dump` is: it was asked for.
fn check_asked(st: &Shared) {
    let dir = {
        let Some(g) = st.try_lock_for(LOCK_WAIT) else {
            return;
        };
        let Some(f) = g.flight.as_deref() else {
            return;
        };
        f.cfg.dir.clone()
    };
    let req = gputape_shimlog::ask_path(&dir, std::process::id());
    let Ok(text) = std::fs::read(&req) else {
        return;
    };
    if std::fs::remove_file(&req).is_err() {
        // Another recorder of this process took it.
        return;
    }
    let said = String::from_utf8_lossy(&text[..text.len().min(1024)])
        .trim()
        .replace('\n', " ");
    if let Some(mut g) = st.try_lock_for(Duration::from_secs(1)) {
        let reason = format!("asked: {said}");
        if let Some(Err(e)) = g.flight_dump(&reason, None) {
            g.own_failure(format!("could not dump ({reason}): {e}"));
        }
    }
}

/// Dump `st` if a peer of one of its communicators announced a dump; whether `st` has a
/// peers directory to watch.
fn check_peers(st: &Shared, announced: &mut Vec<std::path::PathBuf>) -> bool {
    let (dir, comms) = {
        let Some(g) = st.try_lock_for(LOCK_WAIT) else {
            return true;
        };
        let Some(dir) = g.flight.as_deref().and_then(|f| f.cfg.peers.clone()) else {
            return false;
        };
        (dir, g.comms.values().cloned().collect::<Vec<_>>())
    };
    // The directory is read without the recorder's lock: the engine's calls go on meanwhile.
    let Some(reason) = super::peers::check(&dir, &comms, announced) else {
        return true;
    };
    if announced.len() > 1024 {
        announced.drain(..512);
    }
    if let Some(mut g) = st.try_lock_for(Duration::from_secs(1)) {
        flight::trigger(&mut g, &reason, None);
    }
    true
}

/// Dump `st` if its oldest call in flight has been there longer than its `hang_after`.
/// Whether `st` watches for hangs at all (which sets how often the watcher looks).
fn check_hang(st: &Shared, dumped_for: &mut Vec<(usize, u64)>) -> bool {
    let Some(mut g) = st.try_lock_for(LOCK_WAIT) else {
        // Busy now: look again at the next tick.
        return true;
    };
    let Some(after) = g.flight.as_deref().and_then(|f| f.cfg.hang_after) else {
        return false;
    };
    let Some(c) = g.open_calls.first() else {
        return true;
    };
    let key = (std::sync::Arc::as_ptr(st) as usize, c.seq);
    let waited = c.since.elapsed();
    if waited < after || dumped_for.contains(&key) {
        return true;
    }
    let reason = match c.own {
        None => format!(
            "{HANG_REASON} call #{} on recording thread t{} has not returned after {:.1} s (GPUTAPE_FLIGHT_HANG_S={})",
            c.seq,
            c.thread,
            waited.as_secs_f64(),
            after.as_secs_f64()
        ),
        Some(what) => format!(
            "{HANG_REASON} {what} has not returned after {:.1} s (GPUTAPE_FLIGHT_HANG_S={}): the device is stuck on work queued up to call #{}",
            waited.as_secs_f64(),
            after.as_secs_f64(),
            c.seq
        ),
    };
    if dumped_for.len() >= 64 {
        dumped_for.remove(0);
    }
    dumped_for.push(key);
    flight::trigger(&mut g, &reason, None);
    true
}

/// Wait up to `timeout` for the pipe; true when a wake-up came (drained).
fn woken(read: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: read,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, its count 1.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as libc::c_int) };
    if n <= 0 || pfd.revents & libc::POLLIN == 0 {
        return false;
    }
    let mut buf = [0u8; 64];
    // SAFETY: reading into a buffer we own, of its length; the descriptor is non-blocking.
    while unsafe { libc::read(read, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    true
}
