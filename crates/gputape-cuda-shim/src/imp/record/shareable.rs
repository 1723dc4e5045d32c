//! Physical memory shared between processes through the virtual memory API's shareable handles
//! (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`), as NCCL and allocators
//! that share memory without CUDA IPC handles do: the exporter's allocation and the importer's
//! are logged under one key, so that a joint replay can pair them (`gputape ranks --replay`).
//!
//! A fabric handle is 64 bytes the importer receives as they are: they are the key. A file
//! descriptor is a number in the exporting process that means nothing in another (the program
//! passes the descriptor over a socket, or a child inherits it), so the key names the
//! descriptor's open file instead: the exporter keeps a duplicate of the descriptor
//! (`DUP_FLOOR` and up, closed on exec) and writes its process id and number to a file in the
//! recording's directory (`REGISTRY`); the importer asks the kernel (`kcmp`) which of those
//! files its descriptor is. The duplicate keeps the file open while the exporter might still
//! be imported from, and is closed once the allocation is released and no longer mapped in
//! the exporter (and in a child it forks at once), so the allocation lives no longer than the
//! program made it.
//!
//! An imported allocation's bytes are read once a mapping of it becomes readable
//! (`cuMemSetAccess`): what a replay of the importer alone starts from.

use core::ffi::{c_int, c_void};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::sync::Mutex;

use gputape_shimlog::Rec;

use super::ipc::{READ_LIMIT, read};
use super::{R, real_at};
use crate::imp::{log, managed};

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const POSIX_FD: u32 = 1;
/// `CU_MEM_HANDLE_TYPE_FABRIC`: a `CUmemFabricHandle`, 64 bytes.
const FABRIC: u32 = 8;
const FABRIC_BYTES: usize = 64;
/// The file in the recording's directory where exporters list their descriptors' duplicates.
const REGISTRY: &str = gputape_shimlog::SHARED_FDS;
/// The registry's last bytes an importer reads, at most.
const REGISTRY_READ: u64 = 1 << 20;
/// The lowest number a duplicate gets, out of the way of the program's own descriptors.
const DUP_FLOOR: c_int = 512;
/// `kcmp`'s `KCMP_FILE`: whether two descriptors are one open file.
const KCMP_FILE: c_int = 0;

/// What the hooks keep between calls.
#[derive(Default)]
struct Shared {
    /// Exported allocations: their duplicates, and whether released.
    exported: HashMap<u64, Exported>,
    /// Every mapping here: address -> allocation handle (an allocation is often exported
    /// after it is mapped, and released while still mapped).
    mapped: BTreeMap<u64, u64>,
    /// Imported allocations (a map of one backs memory another process wrote).
    imported: HashSet<u64>,
    /// Mappings of imported allocations not read yet: (address, size).
    unread: Vec<(u64, u64)>,
}

#[derive(Default)]
struct Exported {
    dups: Vec<c_int>,
    released: bool,
}

static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Shared) -> T) -> T {
    let mut g = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Shared::default))
}

/// `cuMemExportToShareableHandle`: (void *shareableHandle, CUmemGenericAllocationHandle,
/// CUmemAllocationHandleType, unsigned long long flags).
pub(super) unsafe extern "C" fn export_shareable<const I: usize>(
    out: *mut c_void,
    handle: u64,
    kind: u32,
    flags: u64,
) -> R {
    type F = unsafe extern "C" fn(*mut c_void, u64, u32, u64) -> R;
    // SAFETY: entry point I is cuMemExportToShareableHandle, whose signature F is.
    let r = unsafe { real_at::<F>(I)(out, handle, kind, flags) };
    if r != 0 || out.is_null() {
        return r;
    }
    let key = match kind {
        POSIX_FD => {
            // SAFETY: for this handle type the driver wrote an int descriptor through `out`.
            let fd = unsafe { *(out as *const c_int) };
            exported_fd(handle, fd)
        }
        // SAFETY: for this handle type the driver wrote a 64-byte CUmemFabricHandle at `out`.
        FABRIC => unsafe { std::slice::from_raw_parts(out as *const u8, FABRIC_BYTES) }.to_vec(),
        _ => Vec::new(),
    };
    log::write(
        r,
        Rec::ShareableExport {
            handle,
            kind,
            key: &key,
        },
    );
    r
}

/// Keeps a duplicate of exported descriptor `fd` of allocation `handle` and lists it in the
/// registry: the key (this process's id and the duplicate's number), empty when either failed.
fn exported_fd(handle: u64, fd: c_int) -> Vec<u8> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only duplicates the descriptor, if it is open.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, DUP_FLOOR) };
    if dup < 0 {
        return Vec::new();
    }
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    let listed = log::dir().is_some_and(|dir| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(REGISTRY))
            // One write: lines of processes exporting at once do not interleave.
            .and_then(|mut f| f.write_all(format!("{pid} {dup}\n").as_bytes()))
            .is_ok()
    });
    if !listed {
        // SAFETY: `dup` is the descriptor just made, nobody else's.
        unsafe { libc::close(dup) };
        return Vec::new();
    }
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only closes descriptors, safe in a forked child.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(drop_in_child));
    });
    with(|s| s.exported.entry(handle).or_default().dups.push(dup));
    key(pid, dup)
}

/// A forked child's copies of its parent's duplicates name nothing an importer looks for (the
/// registry names the parent's), and would keep the parent's memory alive as long as the child
/// lives: closed. Skipped when another thread held the table at the fork (it never will again).
extern "C" fn drop_in_child() {
    let Ok(mut g) = SHARED.try_lock() else {
        return;
    };
    if let Some(s) = g.as_mut() {
        for fd in s.exported.drain().flat_map(|(_, e)| e.dups) {
            // SAFETY: `fd` is this process's copy of a duplicate of the shim's own.
            unsafe { libc::close(fd) };
        }
    }
}

fn key(pid: i32, fd: c_int) -> Vec<u8> {
    let mut k = pid.to_le_bytes().to_vec();
    k.extend_from_slice(&fd.to_le_bytes());
    k
}

/// `cuMemImportFromShareableHandle`: (CUmemGenericAllocationHandle*, void *osHandle,
/// CUmemAllocationHandleType).
pub(super) unsafe extern "C" fn import_shareable<const I: usize>(
    handle: *mut u64,
    os_handle: *mut c_void,
    kind: u32,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> R;
    // SAFETY: entry point I is cuMemImportFromShareableHandle, whose signature F is.
    let r = unsafe { real_at::<F>(I)(handle, os_handle, kind) };
    if r != 0 || handle.is_null() {
        return r;
    }
    // SAFETY: on success the driver wrote the allocation handle through the caller's pointer.
    let h = unsafe { *handle };
    let key = match kind {
        // The descriptor travels in the pointer's bits.
        POSIX_FD => exporter_of(os_handle as usize as c_int),
        // SAFETY: for this handle type `os_handle` points to the 64-byte CUmemFabricHandle the
        // driver just read.
        FABRIC if !os_handle.is_null() => {
            unsafe { std::slice::from_raw_parts(os_handle as *const u8, FABRIC_BYTES) }.to_vec()
        }
        _ => Vec::new(),
    };
    with(|s| s.imported.insert(h));
    log::write(
        r,
        Rec::ShareableImport {
            handle: h,
            kind,
            key: &key,
        },
    );
    r
}

/// The key of the exporter's duplicate that descriptor `fd` is one open file with (the
/// registry's newest lines first), empty when none is (the exporter was not recorded, or the
/// kernel does not compare descriptors for us).
fn exporter_of(fd: c_int) -> Vec<u8> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Some(dir) = log::dir() else {
        return Vec::new();
    };
    let mut text = String::new();
    let read = std::fs::File::open(dir.join(REGISTRY)).and_then(|mut f| {
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(REGISTRY_READ)))?;
        f.take(REGISTRY_READ).read_to_string(&mut text)
    });
    if read.is_err() {
        return Vec::new();
    }
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    for line in text.lines().rev() {
        let mut words = line.split_ascii_whitespace().map(str::parse::<i32>);
        let (Some(Ok(pid)), Some(Ok(dup))) = (words.next(), words.next()) else {
            continue;
        };
        // SAFETY: kcmp compares two processes' descriptor tables' entries and changes nothing;
        // a process that is gone, or a number not open there, is an error, not a match.
        let same = unsafe { libc::syscall(libc::SYS_kcmp, me, pid, KCMP_FILE, fd, dup) } == 0;
        if same {
            return key(pid, dup);
        }
    }
    Vec::new()
}

/// `cuMemMap` mapped `size` bytes at `ptr` of allocation `handle`.
pub(super) fn mapped(ptr: u64, size: u64, handle: u64) {
    with(|s| {
        s.mapped.insert(ptr, handle);
        if s.imported.contains(&handle) {
            s.unread.push((ptr, size));
        }
    });
}

/// `cuMemUnmap` of `size` bytes at `ptr`.
pub(super) fn unmapped(ptr: u64, size: u64) {
    let end = ptr.saturating_add(size);
    with(|s| {
        s.unread.retain(|&(p, _)| p < ptr || p >= end);
        let gone: Vec<u64> = s.mapped.range(ptr..end).map(|(&p, _)| p).collect();
        for p in gone {
            if let Some(h) = s.mapped.remove(&p) {
                settle(s, h);
            }
        }
    });
}

/// Closes allocation `handle`'s duplicates once it is released and mapped nowhere here.
fn settle(s: &mut Shared, handle: u64) {
    let unmapped = || !s.mapped.values().any(|&h| h == handle);
    if s.exported.get(&handle).is_some_and(|e| e.released) && unmapped() {
        for fd in s
            .exported
            .remove(&handle)
            .map(|e| e.dups)
            .unwrap_or_default()
        {
            // SAFETY: `fd` is a duplicate of the shim's own, open until now.
            unsafe { libc::close(fd) };
        }
    }
}

/// `cuMemRelease`: (CUmemGenericAllocationHandle).
pub(super) unsafe extern "C" fn mem_release<const I: usize>(handle: u64) -> R {
    // SAFETY: entry point I is cuMemRelease: (CUmemGenericAllocationHandle).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(handle) };
    if r == 0 {
        with(|s| {
            s.imported.remove(&handle);
            if let Some(e) = s.exported.get_mut(&handle) {
                e.released = true;
            }
            settle(s, handle);
        });
    }
    r
}

/// `cuMemSetAccess`: (CUdeviceptr, size_t, const CUmemAccessDesc*, size_t count). A mapping of
/// an imported allocation in the range is readable from here: its bytes are logged (not in a
/// flight recording, past `READ_LIMIT`, or while a capture is open, where a read would end it).
pub(super) unsafe extern "C" fn set_access<const I: usize>(
    ptr: u64,
    size: usize,
    desc: *const c_void,
    count: usize,
) -> R {
    type F = unsafe extern "C" fn(u64, usize, *const c_void, usize) -> R;
    // SAFETY: entry point I is cuMemSetAccess, whose signature F is.
    let r = unsafe { real_at::<F>(I)(ptr, size, desc, count) };
    if r != 0 {
        return r;
    }
    let end = ptr.saturating_add(size as u64);
    let ready: Vec<(u64, u64)> = with(|s| {
        let (ready, rest) = s
            .unread
            .iter()
            .partition(|&&(p, n)| p >= ptr && p.saturating_add(n) <= end);
        s.unread = rest;
        ready
    });
    let quiet = log::is_flight() || managed::capture_open();
    for (at, bytes) in ready {
        let data = if quiet || bytes > READ_LIMIT {
            Vec::new()
        } else {
            read(at, bytes).unwrap_or_default()
        };
        log::write(
            r,
            Rec::ImportedBytes {
                ptr: at,
                data: &data,
            },
        );
    }
    r
}
