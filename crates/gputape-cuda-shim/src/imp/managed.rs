//! Managed memory (`cudaMallocManaged`), which the host reads and writes with plain loads and
//! stores no driver call sees: a program that fills a managed buffer on the host, launches on
//! it and reads the result on the host would otherwise record a launch on bytes the trace never
//! had and no result to compare.
//!
//! So, while recording to a file (`-o`; not the flight recorder, which must stay cheap), the
//! shim keeps a copy of each managed allocation as it last saw it, and looks again only when
//! the device cannot be touching it:
//! - before the first work queued after the device was idle (a launch, a copy, a memset, a
//!   graph launch), it compares each allocation with its copy and logs what the host changed
//!   (`ManagedWrite`), which a replay writes before that work;
//! - once a context sync returns (`cudaDeviceSynchronize`: every stream done), or a sync or a
//!   blocking read of the legacy stream when all the work since the device was idle went
//!   there, it logs what the device changed (`ManagedRead`), which a replay reads back and
//!   compares.
//!
//! The device counts as idle at the start and after each such sync during which no other
//! thread queued work, until asynchronous work is queued (a synchronous copy or memset leaves it
//! idle when it returns). Nothing is read while a capture is open (captured work does not run) or after a failed
//! sync. Reading managed memory on the host moves its pages there; the program's results are
//! unchanged, its timing is not. Allocations past `LIMIT` bytes in all are not followed (said
//! once on stderr).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use gputape_shimlog::Rec;

use super::log;

/// Bytes of managed memory followed at most (each is copied once more in the shim).
const LIMIT: usize = 1 << 30;

/// Whether any managed allocation is followed: one load on every work call's path.
static ANY: AtomicBool = AtomicBool::new(false);

/// Captures begun and not ended.
static CAPTURING: AtomicU32 = AtomicU32::new(0);

/// Asynchronous work queued so far: a context sync leaves the device idle only if none was
/// queued (by another thread) while it waited.
static QUEUED: AtomicU64 = AtomicU64::new(0);

struct Followed {
    /// Each allocation's base -> the bytes as last seen (empty: not seen yet).
    bufs: BTreeMap<u64, (usize, Vec<u8>)>,
    /// Bytes followed.
    total: usize,
    /// Asynchronous work may be running.
    busy: bool,
    /// Some of it went to a stream other than the legacy one.
    off_legacy: bool,
    /// The limit was reached and said.
    said: bool,
}

static STATE: Mutex<Followed> = Mutex::new(Followed {
    bufs: BTreeMap::new(),
    total: 0,
    busy: false,
    off_legacy: false,
    said: false,
});

fn state() -> std::sync::MutexGuard<'static, Followed> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A managed allocation of `bytes` at `ptr` was made.
pub fn allocated(ptr: u64, bytes: u64) {
    if ptr == 0 || !log::wanted() || log::is_flight() {
        return;
    }
    let mut s = state();
    let bytes = bytes as usize;
    if s.total.saturating_add(bytes) > LIMIT {
        if !s.said {
            s.said = true;
            eprintln!(
                "gputape-shim: managed memory past {} MiB is not followed: host reads and writes of it are not recorded",
                LIMIT >> 20
            );
        }
        return;
    }
    s.total += bytes;
    s.bufs.insert(ptr, (bytes, Vec::new()));
    ANY.store(true, Ordering::Relaxed);
}

/// The allocation at `ptr` was freed (if it was followed).
pub fn freed(ptr: u64) {
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    let mut s = state();
    if let Some((bytes, _)) = s.bufs.remove(&ptr) {
        s.total -= bytes;
    }
}

/// A capture began (`true`) or ended.
pub fn capturing(begun: bool) {
    if begun {
        CAPTURING.fetch_add(1, Ordering::Relaxed);
    } else {
        let _ = CAPTURING.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// Whether a capture is open in the process (`captured.rs` asks which node a call became only
/// then).
#[inline]
pub fn capture_open() -> bool {
    CAPTURING.load(Ordering::Relaxed) > 0
}

/// Called before a call that queues device work is forwarded: while the device is idle, logs
/// what the host wrote to managed memory since it was last seen. Work queued asynchronously on
/// a stream (`Some`, the handle as logged: 0 and 1 the legacy stream) leaves the device busy
/// until a sync that waits for it; a synchronous call (`None`) leaves it idle when it returns.
#[inline]
pub fn before_work(on: Option<u64>) {
    if ANY.load(Ordering::Relaxed) && CAPTURING.load(Ordering::Relaxed) == 0 {
        before_work_slow(on);
    }
}

#[cold]
fn before_work_slow(on: Option<u64>) {
    let mut s = state();
    if !s.busy {
        look(&mut s, |dst, data| Rec::ManagedWrite { dst, data });
    }
    if let Some(stream) = on {
        s.busy = true;
        s.off_legacy |= stream > 1;
        QUEUED.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a sync about to begin passes to `after_sync`.
pub fn before_sync() -> u64 {
    QUEUED.load(Ordering::Relaxed)
}

/// A sync that began when `before_sync` said `queued` returned `r`: a context sync
/// (`legacy_only` false), or a sync of the legacy stream, which leaves the device idle only
/// when all the work since it was last idle went there. After a successful one that leaves it
/// idle, unless another thread queued work meanwhile, what the device changed in managed memory
/// is logged.
pub fn after_sync(r: i32, queued: u64, legacy_only: bool) {
    if !ANY.load(Ordering::Relaxed) || r != 0 || CAPTURING.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut s = state();
    if QUEUED.load(Ordering::Relaxed) != queued || (legacy_only && s.off_legacy) {
        return;
    }
    look(&mut s, |src, data| Rec::ManagedRead { src, data });
    s.busy = false;
    s.off_legacy = false;
}

/// Compares each followed allocation with its copy and logs each changed run of 4 KiB pages
/// (the whole allocation the first time) as `rec` makes it, then keeps what it saw.
fn look(s: &mut Followed, rec: impl Fn(u64, &[u8]) -> Rec<'_>) {
    const PAGE: usize = 4096;
    for (&base, (bytes, seen)) in s.bufs.iter_mut() {
        // SAFETY: a live managed allocation of `bytes` bytes (freed ones are dropped from the
        // map by `freed` before the driver could hand the range out again), read while no
        // device work touches it (the callers' contract: idle device, no capture).
        let now = unsafe { core::slice::from_raw_parts(base as usize as *const u8, *bytes) };
        if seen.len() != now.len() {
            log::write(0, rec(base, now));
            *seen = now.to_vec();
            continue;
        }
        let mut at = 0;
        while at < now.len() {
            let end = (at + PAGE).min(now.len());
            if now[at..end] == seen[at..end] {
                at = end;
                continue;
            }
            // A run of changed pages, logged as one record.
            let start = at;
            while at < now.len() {
                let end = (at + PAGE).min(now.len());
                if now[at..end] == seen[at..end] {
                    break;
                }
                at = end;
            }
            log::write(0, rec(base + start as u64, &now[start..at]));
            seen[start..at].copy_from_slice(&now[start..at]);
        }
    }
}
