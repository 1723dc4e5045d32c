//! The flight ring's memory, faulted in before the program needs it.
//!
//! A fresh megabyte from the allocator is untouched address space: the first write to each of
//! its pages traps into the kernel, which zeroes the page and maps it. Filled by the recording
//! of a launch-bound program, that is one trap every few records, in the program's own thread:
//! on the fake driver it was 0.14 page faults and about 190 of the 490 ns the flight recorder
//! added to a launch. So a helper thread (`gputape-chunks`) keeps `READY` chunks written once
//! through, and the ring takes those; it allocates inline only when the helper has fallen
//! behind or the process is a forked child whose helper has not started yet.

use std::sync::{Condvar, Mutex};

/// Work records are kept in chunks of about this many bytes; the oldest chunk is dropped whole.
pub const CHUNK: usize = 1 << 20;
/// A chunk's buffer holds this much, so the record that crosses `CHUNK` rarely reallocates.
const CAPACITY: usize = CHUNK + (CHUNK >> 2);
/// Record positions a chunk holds before its list grows (a megabyte of 64-byte records).
const POSITIONS: usize = CHUNK / 64;
/// Chunks the helper keeps ready: a burst of records (a generate's launches, back to back) may
/// outrun it for a while, and it catches up while the program waits on the device.
const READY: usize = 4;

/// A run of encoded records.
#[derive(Default)]
pub struct Chunk {
    pub buf: Vec<u8>,
    /// (record index, offset of its bytes in `buf`).
    pub at: Vec<(u64, usize)>,
}

impl Chunk {
    /// Each record held, by index, with the bytes from its start on.
    pub fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.at.iter().map(|&(i, o)| (i, &self.buf[o..]))
    }

    /// An empty chunk whose memory has been written once, so filling it takes no page fault.
    /// (`vec![0; n]` would not do: zeroed memory comes from `calloc`, which leaves fresh pages
    /// untouched.)
    fn faulted() -> Chunk {
        let mut c = Chunk::lazy();
        if !populate(c.buf.as_mut_ptr().cast(), c.buf.capacity()) {
            c.buf.resize(CAPACITY, 0);
            c.buf.clear();
        }
        let bytes = c.at.capacity() * size_of::<(u64, usize)>();
        if !populate(c.at.as_mut_ptr().cast(), bytes) {
            c.at.resize(POSITIONS, (0, 0));
            c.at.clear();
        }
        c
    }

    /// An empty chunk whose pages fault in as it fills: the cost spread over its records
    /// rather than paid at once by the call that needed it.
    fn lazy() -> Chunk {
        Chunk {
            buf: Vec::with_capacity(CAPACITY),
            at: Vec::with_capacity(POSITIONS),
        }
    }
}

/// Maps in the pages under `[p, p + len)` for writing with one system call
/// (`MADV_POPULATE_WRITE`, Linux 5.14) rather than a trap per page; false where the kernel
/// cannot, and the caller writes them instead.
fn populate(p: *mut u8, len: usize) -> bool {
    const PAGE: usize = 4096;
    // Whole pages inside the allocation: madvise takes a page-aligned start.
    let start = (p as usize).next_multiple_of(PAGE);
    let end = (p as usize + len) & !(PAGE - 1);
    if end <= start {
        return false;
    }
    // SAFETY: the range lies inside an allocation this thread owns; populating only maps in
    // its pages (zeroed, as fresh pages are) and does not change what it holds.
    let r = unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_WRITE,
        )
    };
    r == 0
}

struct Pool {
    ready: Vec<Chunk>,
    /// The process whose helper fills `ready` (a forked child starts its own).
    helper_of: Option<u32>,
    /// Whether that helper started.
    helping: bool,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    ready: Vec::new(),
    helper_of: None,
    helping: false,
});
/// Signalled when a chunk was taken.
static TAKEN: Condvar = Condvar::new();

/// Starts this process's helper, so chunks are ready before the first record needs one.
pub fn start() {
    if let Ok(mut pool) = POOL.try_lock() {
        helper(&mut pool);
    }
}

/// Makes sure this process has a helper; false when none could be started (every chunk is
/// then allocated inline, with no retry at each take).
fn helper(pool: &mut Pool) -> bool {
    let pid = std::process::id();
    if pool.helper_of == Some(pid) {
        return pool.helping;
    }
    // A forked child: what is ready is its parent's helper's, in memory the child shares
    // copy-on-write; it starts its own.
    pool.ready.clear();
    pool.helper_of = Some(pid);
    pool.helping = std::thread::Builder::new()
        .name("gputape-chunks".into())
        .spawn(supply)
        .is_ok();
    pool.helping
}

/// An empty chunk: a ready one when there is one, else one allocated here and now (faulting
/// in as it fills).
pub fn take() -> Chunk {
    // `try_lock`: a child forked while the helper held the lock would wait for ever.
    let got = POOL.try_lock().ok().and_then(|mut pool| {
        if !helper(&mut pool) {
            return None;
        }
        let got = pool.ready.pop();
        TAKEN.notify_one();
        got
    });
    got.unwrap_or_else(Chunk::lazy)
}

/// The helper: keeps `READY` chunks faulted in, waking when one is taken.
fn supply() {
    let pid = std::process::id();
    loop {
        {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            while pool.ready.len() >= READY {
                if pool.helper_of != Some(pid) {
                    return;
                }
                pool = TAKEN.wait(pool).unwrap_or_else(|p| p.into_inner());
            }
        }
        let c = Chunk::faulted();
        POOL.lock().unwrap_or_else(|p| p.into_inner()).ready.push(c);
    }
}
