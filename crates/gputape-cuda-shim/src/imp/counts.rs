//! What the shim counts besides `COUNTS` (export tables by UUID, `cuGetProcAddress` answers it
//! could not map), and the line a process appends to `GPUTAPE_SHIM_COUNTS` at exit.
//!
//! Both are lock-free (a fixed number of keyed slots, claimed by compare-and-swap): nothing here
//! can be held by another thread when the process forks, so the fork handler, which zeroes every
//! count in the child, cannot deadlock.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::io::Write as _;
use std::sync::Once;

use super::record::{Kind, kind_of};
use super::resolve::driver;
use super::table::{COUNTS, NAMES, index};

/// Where the counts go, one JSON line per process that called the driver.
const ENV_COUNTS: &str = "GPUTAPE_SHIM_COUNTS";

const EMPTY: u8 = 0;
const CLAIMED: u8 = 1;
const READY: u8 = 2;
const KEY_MAX: usize = 128;
const SLOTS: usize = 64;

/// A count under a key of up to `KEY_MAX` bytes. The key is written once, by the thread that
/// moves `state` from EMPTY to CLAIMED, and read only after `state` is READY.
struct Slot {
    state: AtomicU8,
    len: AtomicUsize,
    key: UnsafeCell<[u8; KEY_MAX]>,
    count: AtomicU64,
}

// SAFETY: `key` is written only by the one thread that claimed the slot, before the Release
// store of READY, and read only after an Acquire load of READY.
unsafe impl Sync for Slot {}

impl Slot {
    const fn new() -> Self {
        Slot {
            state: AtomicU8::new(EMPTY),
            len: AtomicUsize::new(0),
            key: UnsafeCell::new([0; KEY_MAX]),
            count: AtomicU64::new(0),
        }
    }

    fn key(&self) -> Option<&[u8]> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        let len = self.len.load(Ordering::Relaxed);
        // SAFETY: READY: the key is written and never written again (see `Sync`).
        Some(unsafe { &(&*self.key.get())[..len] })
    }
}

/// Counts keyed by bytes; a key past the slots is counted in `overflow`. Two threads adding a
/// new key at once may each claim a slot for it: `merged` adds such twins up.
struct Keyed {
    slots: [Slot; SLOTS],
    overflow: AtomicU64,
}

impl Keyed {
    const fn new() -> Self {
        Keyed {
            slots: [const { Slot::new() }; SLOTS],
            overflow: AtomicU64::new(0),
        }
    }

    fn add(&self, key: &[u8]) {
        let key = &key[..key.len().min(KEY_MAX)];
        for s in &self.slots {
            if s.key() == Some(key) {
                s.count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        for s in &self.slots {
            if s.state
                .compare_exchange(EMPTY, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: this thread claimed the slot; no one reads the key before READY.
                unsafe { (&mut *s.key.get())[..key.len()].copy_from_slice(key) };
                s.len.store(key.len(), Ordering::Relaxed);
                s.count.fetch_add(1, Ordering::Relaxed);
                s.state.store(READY, Ordering::Release);
                return;
            }
        }
        self.overflow.fetch_add(1, Ordering::Relaxed);
    }

    /// Each key with its count (twins added up), counts of zero left out.
    fn merged(&self) -> Vec<(Vec<u8>, u64)> {
        let mut out: Vec<(Vec<u8>, u64)> = Vec::new();
        for s in &self.slots {
            let (Some(k), n) = (s.key(), s.count.load(Ordering::Relaxed)) else {
                continue;
            };
            match out.iter_mut().find(|(o, _)| o == k) {
                Some((_, m)) => *m += n,
                None => out.push((k.to_vec(), n)),
            }
        }
        out.retain(|&(_, n)| n > 0);
        out
    }

    fn zero(&self) {
        for s in &self.slots {
            s.count.store(0, Ordering::Relaxed);
        }
        self.overflow.store(0, Ordering::Relaxed);
    }
}

static EXPORT_TABLES: Keyed = Keyed::new();
static UNMAPPED: Keyed = Keyed::new();

/// A `cuGetExportTable` call for the table with this UUID.
pub fn export_table(uuid: [u8; 16]) {
    EXPORT_TABLES.add(&uuid);
}

/// A `cuGetProcAddress` answer for `symbol` that is no exported entry point.
pub fn unmapped(symbol: &[u8]) {
    UNMAPPED.add(symbol);
}

/// After the driver is loaded: a forked child counts from zero (its parent's calls are the
/// parent's to report).
pub fn arm() {
    static ARM: Once = Once::new();
    ARM.call_once(|| {
        // SAFETY: registers a handler that only stores to atomics.
        unsafe { libc::pthread_atfork(None, None, Some(zero_in_child)) };
    });
}

extern "C" fn zero_in_child() {
    for c in &COUNTS {
        c.store(0, Ordering::Relaxed);
    }
    EXPORT_TABLES.zero();
    UNMAPPED.zero();
}

/// Runs when the process exits (or the shim is unloaded): the counts' line, if asked for and
/// anything was counted.
#[used]
#[unsafe(link_section = ".fini_array")]
static AT_EXIT: extern "C" fn() = at_exit;

extern "C" fn at_exit() {
    let Some(path) = std::env::var_os(ENV_COUNTS) else {
        return;
    };
    let Some(line) = counts_line() else {
        return;
    };
    // One write of the whole line, appended: processes of one run share the file.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
}

/// `{"pid":…,"driver":…,"calls":{name:n},"export_tables":{uuid:n},"unmapped_proc_addresses":{…}}`
/// and a newline; None when nothing was counted.
fn counts_line() -> Option<String> {
    let calls: Vec<(&str, u64)> = NAMES
        .iter()
        .zip(&COUNTS)
        .map(|(n, c)| (*n, c.load(Ordering::Relaxed)))
        .filter(|&(_, c)| c > 0)
        .collect();
    let mut tables: Vec<(String, u64)> = EXPORT_TABLES
        .merged()
        .into_iter()
        .map(|(k, n)| (k.iter().map(|b| format!("{b:02x}")).collect(), n))
        .collect();
    let extra = EXPORT_TABLES.overflow.load(Ordering::Relaxed);
    if extra > 0 {
        tables.push(("other".into(), extra));
    }
    let mut unmapped: Vec<(String, u64)> = UNMAPPED
        .merged()
        .into_iter()
        .map(|(k, n)| (String::from_utf8_lossy(&k).into_owned(), n))
        .collect();
    let extra = UNMAPPED.overflow.load(Ordering::Relaxed);
    if extra > 0 {
        unmapped.push(("other".into(), extra));
    }
    if calls.is_empty() && tables.is_empty() && unmapped.is_empty() {
        return None;
    }
    let mut s = format!("{{\"pid\":{},\"driver\":", std::process::id());
    match driver() {
        Some(d) => json_str(&mut s, &d.to_string_lossy()),
        None => s.push_str("null"),
    }
    s.push_str(",\"calls\":");
    json_map(&mut s, calls.iter().map(|&(k, n)| (k, n)));
    s.push_str(",\"export_tables\":");
    json_map(&mut s, tables.iter().map(|(k, n)| (k.as_str(), *n)));
    s.push_str(",\"unmapped_proc_addresses\":");
    json_map(&mut s, unmapped.iter().map(|(k, n)| (k.as_str(), *n)));
    // How a recording treats each entry point called: its own hook, or by name only; the
    // rest are forwarded and counted only.
    for (key, kind) in [("recorded", Kind::Recorded), ("opaque", Kind::Opaque)] {
        s.push_str(&format!(",\"{key}\":["));
        let names = calls
            .iter()
            .filter(|(n, _)| index(n).is_some_and(|i| kind_of(i) == kind));
        for (i, (n, _)) in names.enumerate() {
            if i > 0 {
                s.push(',');
            }
            json_str(&mut s, n);
        }
        s.push(']');
    }
    s.push_str("}\n");
    Some(s)
}

fn json_map<'a>(s: &mut String, entries: impl Iterator<Item = (&'a str, u64)>) {
    s.push('{');
    for (i, (k, n)) in entries.enumerate() {
        if i > 0 {
            s.push(',');
        }
        json_str(s, k);
        s.push_str(&format!(":{n}"));
    }
    s.push('}');
}

fn json_str(s: &mut String, v: &str) {
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04x}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
}

#[cfg(test)]
mod tests {
    use super::{Keyed, json_str};

    #[test]
    fn keyed_counts_add_up_per_key() {
        let k = Keyed::new();
        k.add(b"a");
        k.add(b"b");
        k.add(b"a");
        assert_eq!(k.merged(), vec![(b"a".to_vec(), 2), (b"b".to_vec(), 1)]);
        k.zero();
        assert!(k.merged().is_empty());
        for i in 0..70u8 {
            k.add(&[i]);
        }
        assert_eq!(k.overflow.load(core::sync::atomic::Ordering::Relaxed), 8);
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n");
        assert_eq!(s, r#""a\"b\\c\u000a""#);
    }
}
