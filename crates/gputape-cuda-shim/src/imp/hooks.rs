//! The entry points the shim answers itself, each reached through its own forwarder (so its
//! calls are counted like any other) and forwarding to the driver.
//!
//! `cuGetProcAddress` (CUDA 11.3's, four arguments) and `cuGetProcAddress_v2` (CUDA 12's, a
//! fifth for the query's status): the driver is asked, and the pointer it answers is mapped back
//! to the entry point it is, whose forwarder is answered instead. The driver picks the variant
//! (`cuLaunchKernel` with the per-thread default stream flag is its `cuLaunchKernel_ptsz`; a
//! `cudaVersion` picks `_v2` or `_v3`); the reverse map finds which one it picked, so the
//! program gets the forwarder of that same variant and the same signature. Asked for
//! `cuGetProcAddress` itself, the driver answers its own, which maps to the shim's. A pointer
//! that is no exported entry point is answered unchanged, and counted as unmapped.
//!
//! `cuGetExportTable`: forwarded, counted by the table's UUID.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::mem::transmute;

use super::counts;
use super::resolve::reverse;
use super::table::{NAMES, WRAPPERS, index, real};

type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetExportTable = unsafe extern "C" fn(*mut *const c_void, *const [u8; 16]) -> c_int;

/// The shim's own function for entry point `i`, if it intercepts it.
pub fn hook_for(i: usize) -> Option<*mut ()> {
    let f: *mut () = match NAMES[i] {
        "cuGetProcAddress" => get_proc_address as *mut (),
        "cuGetProcAddress_v2" => get_proc_address_v2 as *mut (),
        "cuGetExportTable" => get_export_table as *mut (),
        _ => return None,
    };
    Some(f)
}

/// The driver's function for a hooked entry point (a stub if it has none).
fn real_of(name: &str) -> *mut () {
    // The hook was installed for this name, so it is in the list.
    real(index(name).expect("a hooked entry point is in the list"))
}

unsafe extern "C" fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: REAL holds the driver's cuGetProcAddress (or a stub that ignores its arguments),
    // whose signature this is.
    let f: GetProcAddress = unsafe { transmute(real_of("cuGetProcAddress")) };
    // SAFETY: the caller's arguments, passed on as they came.
    let r = unsafe { f(symbol, pfn, cuda_version, flags) };
    if r == 0 {
        // SAFETY: the driver accepted these pointers and wrote *pfn.
        unsafe { answer(symbol, pfn) };
    }
    r
}

unsafe extern "C" fn get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: as in get_proc_address, for the five-argument version.
    let f: GetProcAddressV2 = unsafe { transmute(real_of("cuGetProcAddress_v2")) };
    // SAFETY: the caller's arguments, passed on as they came.
    let r = unsafe { f(symbol, pfn, cuda_version, flags, status) };
    if r == 0 {
        // SAFETY: the driver accepted these pointers and wrote *pfn.
        unsafe { answer(symbol, pfn) };
    }
    r
}

unsafe extern "C" fn get_export_table(table: *mut *const c_void, id: *const [u8; 16]) -> c_int {
    if !id.is_null() {
        // SAFETY: a CUuuid is 16 bytes; the caller passes one to the driver, which reads it.
        counts::export_table(unsafe { *id });
    }
    // SAFETY: REAL holds the driver's cuGetExportTable (or a stub), whose signature this is.
    let f: GetExportTable = unsafe { transmute(real_of("cuGetExportTable")) };
    // SAFETY: the caller's arguments, passed on as they came.
    unsafe { f(table, id) }
}

/// Replaces the driver's answer in `*pfn` by the forwarder of the entry point it is.
///
/// # Safety
/// `symbol` is null or NUL-terminated, `pfn` null or valid for reads and writes.
unsafe fn answer(symbol: *const c_char, pfn: *mut *mut c_void) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: non-null and valid (the contract).
    let p = unsafe { *pfn };
    if p.is_null() {
        return;
    }
    // SAFETY: non-null and NUL-terminated (the contract).
    let symbol = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    match wrapper_of(symbol, p as usize) {
        // SAFETY: valid for writes (the contract).
        Some(w) => unsafe { *pfn = w as *mut c_void },
        None => counts::unmapped(&unmapped_key(symbol, p)),
    }
}

/// How an unmapped answer is counted: the name asked for, and what the answer is: an exported
/// symbol of the shim's list does not get here, so either one the list lacks (named, for the
/// next `scripts/gen-shim-entry-points.sh`) or a function the driver does not export at all.
fn unmapped_key(symbol: &[u8], p: *mut c_void) -> Vec<u8> {
    // SAFETY: Dl_info is plain data; an all-zero value is valid and dladdr overwrites it.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: any address may be asked about; a valid out-pointer.
    let found = unsafe { libc::dladdr(p, &mut info) } != 0;
    let mut key = symbol.to_vec();
    if found && info.dli_saddr == p && !info.dli_sname.is_null() {
        // SAFETY: dladdr sets dli_sname to a NUL-terminated name owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_bytes();
        key.extend_from_slice(b" (= ");
        key.extend_from_slice(name);
        key.extend_from_slice(b", not in the shim's list)");
    } else {
        key.extend_from_slice(b" (not an exported function)");
    }
    key
}

/// The forwarder of the entry point whose driver function is at `real`, `symbol` being the name
/// it was asked for: among entry points at that address (the driver may alias some), the one
/// named `symbol`, else a variant of it (`symbol` + `_vN` and/or `_ptsz`/`_ptds`), else any.
pub fn wrapper_of(symbol: &[u8], real: usize) -> Option<usize> {
    let rev = reverse();
    let from = rev.partition_point(|&(a, _)| a < real);
    rev[from..]
        .iter()
        .take_while(|&&(a, _)| a == real)
        .map(|&(_, i)| i as usize)
        // The closest kin; of equals, the first.
        .min_by_key(|&i| core::cmp::Reverse(kinship(symbol, NAMES[i].as_bytes())))
        .map(|i| WRAPPERS[i] as usize)
}

/// 2 when `name` is `symbol`, 1 when it is a variant of it (`_vN`, then `_ptsz` or `_ptds`), 0
/// otherwise.
fn kinship(symbol: &[u8], name: &[u8]) -> u8 {
    if name == symbol {
        return 2;
    }
    let Some(mut rest) = name.strip_prefix(symbol) else {
        return 0;
    };
    if let Some(v) = rest.strip_prefix(b"_v") {
        let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return 0;
        }
        rest = &v[digits..];
    }
    u8::from(rest.is_empty() || rest == b"_ptsz" || rest == b"_ptds")
}

#[cfg(test)]
mod tests {
    use super::kinship;
    use crate::imp::table::{index, per_thread};

    #[test]
    fn per_thread_default_stream_forms_are_told_by_their_names() {
        let is = |n: &str| per_thread(index(n).unwrap());
        assert!(is("cuLaunchKernel_ptsz"));
        assert!(is("cuMemcpyHtoD_v2_ptds"));
        assert!(is("cuStreamSynchronize_ptsz"));
        assert!(!is("cuLaunchKernel"));
        assert!(!is("cuMemcpyHtoD_v2"));
        assert!(!is("cuMemcpy"));
    }

    #[test]
    fn variants_of_the_name_asked_for_are_preferred() {
        assert_eq!(kinship(b"cuLaunchKernel", b"cuLaunchKernel"), 2);
        assert_eq!(kinship(b"cuLaunchKernel", b"cuLaunchKernel_ptsz"), 1);
        assert_eq!(kinship(b"cuMemcpyHtoD", b"cuMemcpyHtoD_v2_ptds"), 1);
        assert_eq!(
            kinship(b"cuStreamGetCaptureInfo", b"cuStreamGetCaptureInfo_v3"),
            1
        );
        assert_eq!(kinship(b"cuLaunchKernel", b"cuLaunchKernelEx"), 0);
        assert_eq!(kinship(b"cuMemcpy", b"cuMemcpyAsync_ptsz"), 0);
        assert_eq!(kinship(b"cuMemcpy", b"cuMemcpy_v"), 0);
    }
}
