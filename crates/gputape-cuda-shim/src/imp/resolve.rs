//! Loading the real driver, once per process, at the first call into any forwarder: open it
//! (never the shim itself), fill `REAL` with its functions (a stub for each it lacks), build
//! the reverse map the `cuGetProcAddress` hooks answer from, point `DISPATCH` at the real
//! functions and hooks, and arm the fork handler.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::Ordering;
use std::ffi::{CStr, CString, OsStr};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};

use super::table::{CNAMES, DISPATCH, N, REAL, opaque_entry};
use super::{counts, hooks, record};
use crate::locate;

/// `CUDA_ERROR_NOT_FOUND`: what an entry point the driver lacks returns.
const CUDA_ERROR_NOT_FOUND: c_int = 500;
/// `CUDA_ERROR_NO_DEVICE`: what every entry point returns when no driver could be loaded.
const CUDA_ERROR_NO_DEVICE: c_int = 100;

static ONCE: Once = Once::new();

/// The driver's functions as `(address, entry point)`, sorted: `cuGetProcAddress`'s answers
/// are looked up here. Stubs are left out.
static REVERSE: OnceLock<Vec<(usize, u32)>> = OnceLock::new();

/// The driver loaded, for the counts' `"driver"`.
static DRIVER: OnceLock<PathBuf> = OnceLock::new();

/// Stands in for an entry point the driver does not export (any arguments; CUresult out).
extern "C" fn not_found() -> c_int {
    CUDA_ERROR_NOT_FOUND
}

/// Stands in for every entry point when no driver could be loaded.
extern "C" fn no_driver() -> c_int {
    CUDA_ERROR_NO_DEVICE
}

/// Loads the driver and fills the tables, once per process; `lazy_entry` calls it, and so may
/// anything that needs the tables filled.
pub extern "C" fn resolve_all() {
    ONCE.call_once(resolve);
}

/// The reverse map (empty before `resolve_all`, or with no driver).
pub fn reverse() -> &'static [(usize, u32)] {
    REVERSE.get().map(Vec::as_slice).unwrap_or(&[])
}

/// The driver loaded, if one was.
pub fn driver() -> Option<&'static Path> {
    DRIVER.get().map(PathBuf::as_path)
}

fn resolve() {
    let lib = open_driver();
    let fallback = match &lib {
        Ok(_) => not_found as *mut (),
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "gputape-shim: {why}; every CUDA driver call returns CUDA_ERROR_NO_DEVICE (100)"
            );
            no_driver as *mut ()
        }
    };
    let mut reverse = Vec::with_capacity(N);
    for (i, name) in CNAMES.iter().enumerate() {
        let p = match &lib {
            // SAFETY: a live handle from dlopen, and a NUL-terminated name.
            Ok((_, h)) => unsafe { libc::dlsym(*h, name.as_ptr()) },
            Err(_) => core::ptr::null_mut(),
        };
        let p = if p.is_null() {
            fallback
        } else {
            reverse.push((p as usize, i as u32));
            p.cast::<()>()
        };
        REAL[i].store(p, Ordering::Release);
    }
    reverse.sort_unstable();
    let _ = REVERSE.set(reverse);
    if let Ok((path, _)) = lib {
        let _ = DRIVER.set(path);
    }
    for (i, slot) in DISPATCH.iter().enumerate() {
        let to = hooks::hook_for(i)
            .or_else(|| record::hook_for(i, opaque_entry as *mut ()))
            .unwrap_or_else(|| REAL[i].load(Ordering::Acquire));
        slot.store(to, Ordering::Release);
    }
    counts::arm();
}

/// The real driver, opened: `GPUTAPE_REAL_LIBCUDA` when set (only there), else the first
/// candidate that opens and is not the shim.
fn open_driver() -> Result<(PathBuf, *mut c_void), String> {
    let me = own_path();
    if let Some(p) = std::env::var_os(locate::ENV_REAL) {
        let p = PathBuf::from(p);
        return open_one(&p, me.as_deref())
            .map(|h| (p.clone(), h))
            .map_err(|e| format!("{}={}: {e}", locate::ENV_REAL, p.display()));
    }
    let mut tried = Vec::new();
    for p in locate::candidates() {
        // The shim itself, found on LD_LIBRARY_PATH where `gputape run` put it: passed over.
        if me.as_deref().is_some_and(|me| locate::same_file(&p, me)) {
            continue;
        }
        match open_one(&p, me.as_deref()) {
            Ok(h) => return Ok((p, h)),
            Err(e) => tried.push(format!("{}: {e}", p.display())),
        }
    }
    Err(format!(
        "no real libcuda.so.1 found ({} is not set; searched LD_LIBRARY_PATH, {} and `ldconfig -p`{}{})",
        locate::ENV_REAL,
        locate::USUAL.join(", "),
        if tried.is_empty() { "" } else { "; refused: " },
        tried.join("; ")
    ))
}

/// dlopen one candidate, unless it is the shim itself (the same file, or a copy: a shared
/// object exporting the shim's marker).
fn open_one(p: &Path, me: Option<&Path>) -> Result<*mut c_void, String> {
    if me.is_some_and(|me| locate::same_file(p, me)) {
        return Err("that is gputape's shim itself, not the driver".into());
    }
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| "a NUL in the path")?;
    // SAFETY: a NUL-terminated path; loading a library runs its constructors, which is what
    // loading the driver means.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(dlerror());
    }
    // SAFETY: a live handle and a NUL-terminated name.
    if !unsafe { libc::dlsym(h, c"gputape_cuda_shim".as_ptr()) }.is_null() {
        // SAFETY: the handle just opened, used no further.
        unsafe { libc::dlclose(h) };
        return Err("a copy of gputape's shim, not the driver".into());
    }
    Ok(h)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message valid until the next dl call.
    let e: *const c_char = unsafe { libc::dlerror() };
    if e.is_null() {
        "dlopen failed".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The file the shim was loaded from, as the loader knows it (`dladdr` of one of its own
/// functions).
fn own_path() -> Option<PathBuf> {
    // SAFETY: Dl_info is plain data; an all-zero value is valid and dladdr overwrites it.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: the address of a function of this object, and a valid out-pointer.
    let ok = unsafe { libc::dladdr(resolve_all as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr sets dli_fname to a NUL-terminated name owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}
