//! The calling thread's native frames, for a call made where no Python frame says where it came
//! from (a CUDA C++ program, a thread Python never ran on): the return addresses outside the
//! shim, each named once as module + offset (`Rec::NativeFrame`), so such a program's calls
//! carry where in it they were made.
//!
//! The walk is the C++ runtime's own unwinder (`_Unwind_Backtrace`, from libgcc_s, which Rust's
//! standard library links already), stopped after a few frames: what a C++ exception would walk,
//! so it needs nothing the program does not have (no frame pointers). Only addresses are taken
//! before the log's lock; modules and symbols are looked up (`dladdr`) the first time an
//! address is seen.

use core::ffi::{c_int, c_void};
use std::os::unix::ffi::OsStrExt as _;
use std::sync::OnceLock;

/// Frames kept at most by default: enough to get through the CUDA runtime (and cuBLAS above
/// it) to the program's own frame; `GPUTAPE_NATIVE_FRAMES` asks for another depth (0: none).
const DEFAULT_FRAMES: usize = 8;
/// The most `GPUTAPE_NATIVE_FRAMES` may ask for.
pub const MAX_FRAMES: usize = 32;
/// Frames walked at most, the shim's own included.
const MAX_WALK: usize = MAX_FRAMES + 16;
/// How many native frames a call keeps (`0` records none).
pub const ENV_NATIVE_FRAMES: &str = "GPUTAPE_NATIVE_FRAMES";

/// A call's native return addresses outside the shim, innermost first.
pub struct RawNative {
    pub n: usize,
    pub ips: [usize; MAX_FRAMES],
}

/// `_Unwind_Reason_Code` values the walk uses.
const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

unsafe extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

/// How many frames a call keeps, from the environment (once).
fn depth() -> usize {
    static DEPTH: OnceLock<usize> = OnceLock::new();
    *DEPTH.get_or_init(|| {
        std::env::var(ENV_NATIVE_FRAMES)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(DEFAULT_FRAMES, |n| n.min(MAX_FRAMES))
    })
}

/// Whether the user asked for a depth (then every frame up to it is kept, not only those up to
/// the program's own). Read once: it is asked on every recorded call.
pub fn asked() -> bool {
    static ASKED: OnceLock<bool> = OnceLock::new();
    *ASKED.get_or_init(|| std::env::var_os(ENV_NATIVE_FRAMES).is_some())
}

/// The address range of the shim's own code: frames in it are ours, not the caller's.
fn own_text() -> (usize, usize) {
    static OWN: OnceLock<(usize, usize)> = OnceLock::new();
    *OWN.get_or_init(|| {
        let here = own_text as *const () as usize;
        let mut found = (here, here + 1);
        // SAFETY: `dl_iterate_phdr` calls `each` with valid `dl_phdr_info`s for every loaded
        // object, one at a time; `each` reads them only during the call.
        unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut found).cast::<c_void>()) };
        found
    })
}

/// `dl_iterate_phdr`'s callback: widens `*data` (starting as one address of ours) to the whole
/// extent of the loadable segments of the object holding it.
unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: the loader's (see `own_text`); `data` is `own_text`'s `(usize, usize)`.
    let (info, range) = unsafe { (&*info, &mut *data.cast::<(usize, usize)>()) };
    let here = range.0;
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    for i in 0..usize::from(info.dlpi_phnum) {
        // SAFETY: `dlpi_phdr` holds `dlpi_phnum` headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type != libc::PT_LOAD {
            continue;
        }
        let start = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
        lo = lo.min(start);
        hi = hi.max(start.wrapping_add(ph.p_memsz as usize));
    }
    if lo <= here && here < hi {
        *range = (lo, hi);
        return 1;
    }
    0
}

struct Walk {
    own: (usize, usize),
    want: usize,
    seen: usize,
    out: RawNative,
}

unsafe extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is `here`'s `Walk`, alive for the whole walk; `ctx` is the unwinder's.
    let (w, ip) = unsafe { (&mut *arg.cast::<Walk>(), _Unwind_GetIP(ctx)) };
    w.seen += 1;
    if ip == 0 || w.seen > MAX_WALK {
        return URC_END_OF_STACK;
    }
    if (w.own.0..w.own.1).contains(&ip) {
        // Still in the shim (the hook, the log); a frame of the caller's has not come yet.
        return if w.out.n == 0 {
            URC_NO_REASON
        } else {
            URC_END_OF_STACK
        };
    }
    w.out.ips[w.out.n] = ip;
    w.out.n += 1;
    if w.out.n >= w.want {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

/// The calling thread's return addresses outside the shim, or `None` when native frames are
/// off (`GPUTAPE_NATIVE_FRAMES=0`) or the walk found none.
pub fn here() -> Option<RawNative> {
    let want = depth();
    if want == 0 {
        return None;
    }
    let mut w = Walk {
        own: own_text(),
        want,
        seen: 0,
        out: RawNative {
            n: 0,
            ips: [0; MAX_FRAMES],
        },
    };
    // SAFETY: `step` is called on this thread during the walk only, with `&mut w`.
    unsafe { _Unwind_Backtrace(step, (&raw mut w).cast::<c_void>()) };
    (w.out.n > 0).then_some(w.out)
}

/// What `dladdr` knows of a return address: its module's path, the offset in it, and the
/// nearest exported symbol before it with the offset from it (empty when none).
pub struct Named {
    pub module: Vec<u8>,
    pub offset: u64,
    pub symbol: Vec<u8>,
    pub symbol_offset: u64,
}

/// Names a return address. A return address points just past its call: the frame is named by
/// the address one before it, inside the calling instruction.
pub fn name(ip: usize) -> Named {
    let at = ip.saturating_sub(1);
    // SAFETY: `dladdr` only reads the loader's tables and writes `info`.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    let found = unsafe { libc::dladdr(at as *const c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return Named {
            module: b"?".to_vec(),
            offset: at as u64,
            symbol: Vec::new(),
            symbol_offset: 0,
        };
    }
    // SAFETY: `dladdr` answered NUL-terminated strings that live as long as the object.
    let module = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }
        .to_bytes()
        .to_vec();
    let module = if module.first() == Some(&b'/') {
        module
    } else {
        // The main program (the loader names it as it was started, `./app`, or "") or a
        // library loaded by a relative path: absolute, so the trace says which file it was.
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&module));
        std::fs::canonicalize(path)
            .ok()
            .filter(|_| !module.is_empty())
            .or_else(|| std::fs::read_link("/proc/self/exe").ok())
            .unwrap_or_else(|| "<main program>".into())
            .into_os_string()
            .into_encoded_bytes()
    };
    let (symbol, symbol_offset) = if info.dli_sname.is_null() {
        (Vec::new(), 0)
    } else {
        (
            // SAFETY: as above.
            unsafe { core::ffi::CStr::from_ptr(info.dli_sname) }
                .to_bytes()
                .to_vec(),
            (at as u64).wrapping_sub(info.dli_saddr as u64),
        )
    };
    Named {
        module,
        offset: (at as u64).wrapping_sub(info.dli_fbase as u64),
        symbol,
        symbol_offset,
    }
}
