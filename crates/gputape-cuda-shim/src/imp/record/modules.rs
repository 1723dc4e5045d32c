//! Module and library loads, with the whole image a replay loads again, and the functions,
//! kernels and globals asked of them, by name: what later launches and copies refer to.

use core::ffi::{CStr, c_char, c_void};

use gputape_shimlog::Rec;

use super::memory::read_out;
use super::{R, real_at};
use crate::imp::log;

/// The image a module load was given, whole: a fatbin (or the runtime's wrapper around one),
/// an ELF cubin, or NUL-terminated PTX. The driver takes no size; each format says its own.
/// `None` for something else (logged with an empty image: a replay says it cannot load it).
///
/// # Safety
/// `p` is what the driver just accepted as an image.
unsafe fn image<'a>(p: *const c_void) -> &'a [u8] {
    // SAFETY: the contract; `image_len` reads only headers each format guarantees.
    match unsafe { image_len(p.cast::<u8>()) } {
        // SAFETY: the driver read this image; `len` is what its own headers span.
        Some((start, len)) => unsafe { core::slice::from_raw_parts(start, len) },
        None => &[],
    }
}

/// Largest image believed (a size past it is a misread header, not an image).
const IMAGE_MAX: u64 = 4 << 30;

unsafe fn image_len(p: *const u8) -> Option<(*const u8, usize)> {
    if p.is_null() {
        return None;
    }
    // SAFETY (every read below): `p` is an image the driver accepted; each read is within the
    // header its format begins with, or within the extent that header gives.
    let u32_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u32>().read_unaligned() };
    let u16_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u16>().read_unaligned() };
    let u64_at = |q: *const u8, off: usize| unsafe { q.add(off).cast::<u64>().read_unaligned() };
    let magic = u32_at(p, 0);
    // The runtime's wrapper: { magic, version, const void *fatbin, ... }.
    if magic == 0x466243b1 {
        let inner = u64_at(p, 8) as *const u8;
        // SAFETY: the wrapper's data pointer is the fatbin it wraps.
        return unsafe { image_len(inner) };
    }
    // A fatbin: { magic, u16 version, u16 header size, u64 size after the header }.
    if magic == 0xBA55ED50 {
        let total = u16_at(p, 6) as u64 + u64_at(p, 8);
        return (total <= IMAGE_MAX).then_some((p, total as usize));
    }
    // An ELF64 cubin: as far as its section and program header tables and its sections reach.
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        // SAFETY: e_ident is 16 bytes.
        if unsafe { *p.add(4) } != 2 {
            return None;
        }
        let (phoff, shoff) = (u64_at(p, 0x20), u64_at(p, 0x28));
        let (phent, phnum) = (u16_at(p, 0x36) as u64, u16_at(p, 0x38) as u64);
        let (shent, shnum) = (u16_at(p, 0x3A) as u64, u16_at(p, 0x3C) as u64);
        let mut end = (phoff + phent * phnum).max(shoff + shent * shnum).max(64);
        if end > IMAGE_MAX || shent < 0x28 {
            return None;
        }
        for k in 0..shnum {
            // SAFETY: inside the section header table, which is inside the image.
            let sh = unsafe { p.add((shoff + k * shent) as usize) };
            let (ty, off, size) = (u32_at(sh, 4), u64_at(sh, 0x18), u64_at(sh, 0x20));
            // SHT_NOBITS takes no bytes of the file.
            if ty != 8 {
                end = end.max(off.saturating_add(size));
            }
        }
        return (end <= IMAGE_MAX).then_some((p, end as usize));
    }
    // PTX: text up to and with its NUL.
    // SAFETY: anything else the driver accepted is NUL-terminated text.
    let text = unsafe { CStr::from_ptr(p.cast::<c_char>()) };
    let n = text.to_bytes_with_nul().len();
    (n > 1 && (n as u64) <= IMAGE_MAX).then_some((p, n))
}

fn log_load(r: R, out: *mut u64, library: bool, image: &[u8]) {
    let handle = if r == 0 { read_out(out) } else { 0 };
    log::write(
        r,
        Rec::ModuleLoad {
            handle,
            library,
            image,
        },
    );
}

pub(super) unsafe extern "C" fn module_load_data<const I: usize>(
    m: *mut u64,
    img: *const c_void,
) -> R {
    // SAFETY: entry point I is cuModuleLoadData or cuModuleLoadFatBinary: (CUmodule*, void*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, *const c_void) -> R>(I)(m, img) };
    // SAFETY: the driver accepted `img` as an image (only read on success).
    let bytes = if r == 0 { unsafe { image(img) } } else { &[] };
    log_load(r, m, false, bytes);
    r
}

pub(super) unsafe extern "C" fn module_load_data_ex<const I: usize>(
    m: *mut u64,
    img: *const c_void,
    n: u32,
    opts: *mut c_void,
    vals: *mut *mut c_void,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *const c_void, u32, *mut c_void, *mut *mut c_void) -> R;
    // SAFETY: entry point I is cuModuleLoadDataEx, whose signature F is.
    let r = unsafe { real_at::<F>(I)(m, img, n, opts, vals) };
    // SAFETY: as in module_load_data.
    let bytes = if r == 0 { unsafe { image(img) } } else { &[] };
    log_load(r, m, false, bytes);
    r
}

pub(super) unsafe extern "C" fn module_load_file<const I: usize>(
    m: *mut u64,
    path: *const c_char,
) -> R {
    // SAFETY: entry point I is cuModuleLoad: (CUmodule*, const char*).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, *const c_char) -> R>(I)(m, path) };
    // SAFETY: the driver read `path` as a NUL-terminated file name.
    let file = if r == 0 {
        unsafe { read_file(path) }
    } else {
        Vec::new()
    };
    log_load(r, m, false, &file);
    r
}

/// The file a module or library was loaded from (empty when it cannot be read again).
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn read_file(path: *const c_char) -> Vec<u8> {
    if path.is_null() {
        return Vec::new();
    }
    // SAFETY: the contract.
    let p = unsafe { CStr::from_ptr(path) };
    let p = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p.to_bytes());
    std::fs::read(p).unwrap_or_default()
}

type LibLoad = unsafe extern "C" fn(
    *mut u64,
    *const c_void,
    *mut c_void,
    *mut *mut c_void,
    u32,
    *mut c_void,
    *mut *mut c_void,
    u32,
) -> R;

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn library_load_data<const I: usize>(
    lib: *mut u64,
    code: *const c_void,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    njo: u32,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nlo: u32,
) -> R {
    // SAFETY: entry point I is cuLibraryLoadData, whose signature LibLoad is.
    let r = unsafe { real_at::<LibLoad>(I)(lib, code, jo, jv, njo, lo, lv, nlo) };
    // SAFETY: as in module_load_data.
    let bytes = if r == 0 { unsafe { image(code) } } else { &[] };
    log_load(r, lib, true, bytes);
    r
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn library_load_file<const I: usize>(
    lib: *mut u64,
    path: *const c_void,
    jo: *mut c_void,
    jv: *mut *mut c_void,
    njo: u32,
    lo: *mut c_void,
    lv: *mut *mut c_void,
    nlo: u32,
) -> R {
    // SAFETY: entry point I is cuLibraryLoadFromFile, of LibLoad's shape (a path for the code).
    let r = unsafe { real_at::<LibLoad>(I)(lib, path, jo, jv, njo, lo, lv, nlo) };
    // SAFETY: the driver read `path` as a NUL-terminated file name.
    let file = if r == 0 {
        unsafe { read_file(path.cast::<c_char>()) }
    } else {
        Vec::new()
    };
    log_load(r, lib, true, &file);
    r
}

pub(super) unsafe extern "C" fn module_unload<const I: usize, const LIB: bool>(h: u64) -> R {
    // SAFETY: entry point I is cuModuleUnload or cuLibraryUnload: (handle).
    let r = unsafe { real_at::<unsafe extern "C" fn(u64) -> R>(I)(h) };
    log::write(
        r,
        Rec::ModuleUnload {
            handle: h,
            library: LIB,
        },
    );
    r
}

/// `cuModuleGetFunction` (LIB false) and `cuLibraryGetKernel` (LIB true).
pub(super) unsafe extern "C" fn get_function<const I: usize, const LIB: bool>(
    out: *mut u64,
    owner: u64,
    name: *const c_char,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, u64, *const c_char) -> R;
    // SAFETY: entry point I is cuModuleGetFunction or cuLibraryGetKernel, of signature F.
    let r = unsafe { real_at::<F>(I)(out, owner, name) };
    let handle = if r == 0 { read_out(out) } else { 0 };
    let name = if name.is_null() {
        &[][..]
    } else {
        // SAFETY: the driver read `name` as a NUL-terminated symbol.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    log::write(
        r,
        Rec::Function {
            owner,
            library: LIB,
            handle,
            name,
        },
    );
    r
}

/// `cuModuleGetGlobal_v2` (LIB false) and `cuLibraryGetGlobal` (LIB true): where a module
/// variable lies, and its size (either out pointer may be null).
pub(super) unsafe extern "C" fn get_global<const I: usize, const LIB: bool>(
    ptr: *mut u64,
    bytes: *mut usize,
    owner: u64,
    name: *const c_char,
) -> R {
    type F = unsafe extern "C" fn(*mut u64, *mut usize, u64, *const c_char) -> R;
    // SAFETY: entry point I is cuModuleGetGlobal_v2 or cuLibraryGetGlobal, of signature F.
    let r = unsafe { real_at::<F>(I)(ptr, bytes, owner, name) };
    if r != 0 || name.is_null() || (ptr.is_null() && bytes.is_null()) {
        return r;
    }
    // The CUDA runtime asks for the address alone (its size out-parameter null): the other
    // answer is asked of the driver again, into the shim's own variables, as a replay needs
    // both to place the variable.
    let (mut at, mut n) = (0u64, 0usize);
    let (p, b) = (
        if ptr.is_null() { &raw mut at } else { ptr },
        if bytes.is_null() { &raw mut n } else { bytes },
    );
    if (ptr.is_null() || bytes.is_null())
        // SAFETY: as above; both out-pointers valid, `name` the one the driver just read.
        && unsafe { real_at::<F>(I)(p, b, owner, name) } != 0
    {
        return r;
    }
    // SAFETY: `p` and `b` point at what the driver wrote (it returned success); the driver
    // read `name` as a NUL-terminated symbol.
    let (at, n, name) = unsafe { (*p, *b as u64, CStr::from_ptr(name).to_bytes()) };
    log::write(
        r,
        Rec::Global {
            owner,
            library: LIB,
            name,
            ptr: at,
            bytes: n,
        },
    );
    r
}

/// `cuLibraryGetModule`: the module behind a library, which the CUDA runtime asks variables'
/// addresses of.
pub(super) unsafe extern "C" fn library_get_module<const I: usize>(
    out: *mut u64,
    library: u64,
) -> R {
    // SAFETY: entry point I is cuLibraryGetModule: (CUmodule*, CUlibrary).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64) -> R>(I)(out, library) };
    if r == 0 {
        let module = read_out(out);
        log::write(r, Rec::LibraryModule { library, module });
    }
    r
}

pub(super) unsafe extern "C" fn kernel_get_function<const I: usize>(
    out: *mut u64,
    kernel: u64,
) -> R {
    // SAFETY: entry point I is cuKernelGetFunction: (CUfunction*, CUkernel).
    let r = unsafe { real_at::<unsafe extern "C" fn(*mut u64, u64) -> R>(I)(out, kernel) };
    let func = if r == 0 { read_out(out) } else { 0 };
    log::write(r, Rec::KernelFunction { kernel, func });
    r
}
