//! Faulting a trace file's map in ahead of its writer, on a thread of its own.
//!
//! The first store to each new page of a file map makes the kernel allocate a page-cache page
//! and zero it. Done on the writing thread (a populate when the map grew, as it was), that
//! stalled one recorded call for most of a second whenever the file grew by 256 MB, and cost a
//! full recording more than half its time per call (both measured on a 2-core VM). Here a
//! helper faults the next pages in while the writer fills the current ones; a page the writer
//! reaches first it faults itself, as any map would. Faulting a page in changes none of its bytes, so the helper and the
//! writer never race on contents; the one hazard is the map going away under the helper,
//! which `retarget` rules out by waiting for the chunk in progress.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// How much the helper faults in at a time: small enough that `retarget` waits little.
const CHUNK: usize = 2 << 20;

#[derive(Default)]
struct Want {
    /// The next address to fault in, and where to stop (`next >= end`: nothing to do).
    next: usize,
    end: usize,
    /// A chunk is being faulted in now.
    busy: bool,
    stop: bool,
}

type Shared = Arc<(Mutex<Want>, Condvar)>;

/// The helper thread of one map.
pub(crate) struct Prefault {
    shared: Shared,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prefault {
    /// Start the helper; `None` if no thread can be made, or `GPUTAPE_PREFAULT=0` says not to
    /// (an engine that pins its threads, say): the writer then faults pages in itself, a
    /// stretch at a time when the map grows.
    pub fn start() -> Option<Self> {
        if std::env::var_os("GPUTAPE_PREFAULT").is_some_and(|v| v == "0") {
            return None;
        }
        let shared: Shared = Arc::default();
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gputape-prefault".into())
            .spawn(move || run(&theirs))
            .ok()?;
        Some(Prefault {
            shared,
            thread: Some(thread),
        })
    }

    /// Fault in `[from, to)` of a live mapping from now on, instead of whatever was asked
    /// before. Returns once no chunk of the earlier range is being faulted, so the caller may
    /// unmap it (`retarget(0, 0)` first, then the new map's range).
    pub fn retarget(&self, from: usize, to: usize) {
        let (m, cv) = &*self.shared;
        let mut w = m.lock();
        w.next = from;
        w.end = to;
        while w.busy {
            cv.wait(&mut w);
        }
        cv.notify_all();
    }

    /// Fault in the current range as far as `to` (a writer that has moved on asks for more);
    /// nothing when no range is set.
    pub fn extend(&self, to: usize) {
        let (m, cv) = &*self.shared;
        let mut w = m.lock();
        if w.end != 0 && to > w.end {
            w.end = to;
            cv.notify_all();
        }
    }
}

impl Drop for Prefault {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.shared;
            let mut w = m.lock();
            w.stop = true;
            w.end = 0;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let (m, cv) = &**shared;
    let mut w = m.lock();
    loop {
        while !w.stop && w.next >= w.end {
            cv.wait(&mut w);
        }
        if w.stop {
            return;
        }
        let at = w.next;
        let len = (w.end - at).min(CHUNK);
        w.next += len;
        w.busy = true;
        drop(w);
        populate(at, len);
        w = m.lock();
        w.busy = false;
        cv.notify_all();
    }
}

/// Fault `[at, at + len)` in for writing; where the kernel lacks the advice (before 5.14), ask
/// for it to be read ahead instead.
#[cfg(target_os = "linux")]
fn populate(at: usize, len: usize) {
    // SAFETY: the range lies in a shared map of the trace file that `retarget` keeps mapped
    // until this returns (`busy` is set). Both advices only fault pages in or read them ahead:
    // no byte of the mapping changes, so the writer storing into the same pages meanwhile is
    // not a data race.
    unsafe {
        let p = at as *mut libc::c_void;
        if libc::madvise(p, len, libc::MADV_POPULATE_WRITE) != 0 {
            libc::madvise(p, len, libc::MADV_WILLNEED);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn populate(_at: usize, _len: usize) {}
