//! The shim against a fake driver (`support/c/fake_libcuda.c`, compiled at test time): every
//! listed name is exported, calls arrive with their arguments (registers, stack and floats, the
//! first call too, which loads the driver), `cuGetProcAddress` answers the shim's forwarders,
//! a name the driver lacks returns 500, the shim never forwards to itself, and a process's
//! counts are appended at exit. Each scenario runs in a child (this binary again, running only
//! `child_probe`), since the shim reads its environment and writes its counts once per process.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::Path;
use std::process::{Command, Output};

use support::{fake_driver, scratch, shim};

/// A shared object opened with dlopen.
struct Lib(*mut c_void);

impl Lib {
    fn open(path: &Path) -> Lib {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {}", path.display());
        Lib(h)
    }

    fn ptr(&self, name: &CStr) -> *mut c_void {
        // SAFETY: a live handle and a NUL-terminated name.
        unsafe { libc::dlsym(self.0, name.as_ptr()) }
    }

    /// `name` as a function of type `F` (a function pointer type of the entry point's signature).
    fn sym<F: Copy>(&self, name: &CStr) -> F {
        let p = self.ptr(name);
        assert!(!p.is_null(), "{name:?} is exported");
        assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        // SAFETY: F is a function pointer type (the callers'), the same size as a pointer.
        unsafe { std::mem::transmute_copy(&p) }
    }
}

type Version = unsafe extern "C" fn(*mut c_int) -> c_int;
type Init = unsafe extern "C" fn(u32) -> c_int;
type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type Launch = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;
type Bias = unsafe extern "C" fn(*mut c_void, f32) -> c_int;
type ExportTable = unsafe extern "C" fn(*mut *const c_void, *const [u8; 16]) -> c_int;
type Gpa = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type GpaV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type NoArgs = unsafe extern "C" fn() -> c_int;

/// What the fake's cuLaunchKernel answers for these arguments (small, so the sum fits a c_int).
fn launch_answer(a: [usize; 11]) -> c_int {
    let w = [1, 1, 2, 3, 5, 7, 11, 13, 17, 19, 23];
    a.iter().zip(w).map(|(a, w)| a * w).sum::<usize>() as c_int
}

const LAUNCH_ARGS: [usize; 11] = [0x1000, 1, 2, 3, 4, 5, 6, 7, 3, 5, 9];

/// SAFETY (for the callers): every entry point is called with its own signature and valid
/// pointers; the fake driver reads and writes only what the real one would.
unsafe fn launch(f: Launch, a: [usize; 11]) -> c_int {
    unsafe {
        f(
            a[0] as *mut c_void,
            a[1] as u32,
            a[2] as u32,
            a[3] as u32,
            a[4] as u32,
            a[5] as u32,
            a[6] as u32,
            a[7] as u32,
            a[8] as *mut c_void,
            a[9] as *mut *mut c_void,
            a[10] as *mut *mut c_void,
        )
    }
}

const EXPORT_UUID: [u8; 16] = [
    0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9,
];

/// Runs `child_probe` in a child with `scenario`, the shim loading `real` as the driver and
/// writing its counts to `counts` (if given).
fn child(scenario: &str, real: &Path, counts: Option<&Path>) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_probe", "--nocapture", "--test-threads=1"])
        .env("GPUTAPE_SHIM_TEST_CHILD", scenario)
        .env("GPUTAPE_SHIM_TEST_SHIM", shim())
        .env("GPUTAPE_REAL_LIBCUDA", real)
        .env_remove("GPUTAPE_SHIM_COUNTS");
    if let Some(p) = counts {
        c.env("GPUTAPE_SHIM_COUNTS", p);
    }
    c.output().unwrap()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "child failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The counts' lines a child appended.
fn count_lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The child's side: one scenario against the shim, in its own process.
#[test]
fn child_probe() {
    let Ok(scenario) = std::env::var("GPUTAPE_SHIM_TEST_CHILD") else {
        return; // run by the parent tests only
    };
    let lib = Lib::open(Path::new(
        &std::env::var_os("GPUTAPE_SHIM_TEST_SHIM").unwrap(),
    ));
    // SAFETY: see `launch`.
    unsafe {
        match scenario.as_str() {
            "forward" => {
                // The first call loads the driver (lazy_entry): 6 register and 5 stack
                // arguments must arrive.
                let f: Launch = lib.sym(c"cuLaunchKernel");
                assert_eq!(launch(f, LAUNCH_ARGS), launch_answer(LAUNCH_ARGS));
                assert_eq!(launch(f, LAUNCH_ARGS), launch_answer(LAUNCH_ARGS));
                let mut v = 0;
                assert_eq!(lib.sym::<Version>(c"cuDriverGetVersion")(&mut v), 0);
                assert_eq!(v, 12345);
                let mut p = 0u64;
                assert_eq!(lib.sym::<MemAlloc>(c"cuMemAlloc_v2")(&mut p, 1234), 0);
                assert_eq!(p, 0xfa0000000000 + 1234);
                let init: Init = lib.sym(c"cuInit");
                assert_eq!(init(0), 0);
                assert_eq!(init(1), 1);
                let mut t: *const c_void = std::ptr::null();
                assert_eq!(
                    lib.sym::<ExportTable>(c"cuGetExportTable")(&mut t, &EXPORT_UUID),
                    0
                );
                assert_eq!(*(t as *const i32), 7, "the fake's table");
            }
            "float" => {
                // The first call loads the driver: xmm0 must survive it.
                let f: Bias = lib.sym(c"cuTexRefSetMipmapLevelBias");
                assert_eq!(f(0x10 as *mut c_void, 1.5), 0x10 + 150);
                assert_eq!(f(0x10 as *mut c_void, 2.25), 0x10 + 225);
            }
            "procaddr" => {
                let fake = Lib::open(Path::new(
                    &std::env::var_os("GPUTAPE_REAL_LIBCUDA").unwrap(),
                ));
                let gpa2: GpaV2 = lib.sym(c"cuGetProcAddress_v2");
                let ask = |name: &CStr, flags: u64| {
                    let mut p = std::ptr::null_mut();
                    let mut status = -1;
                    let r = gpa2(name.as_ptr(), &mut p, 13000, flags, &mut status);
                    (r, p, status)
                };
                // The shim's forwarder, not the driver's function; and it still forwards.
                let (r, p, status) = ask(c"cuDriverGetVersion", 0);
                assert_eq!((r, status), (0, 0));
                assert_eq!(p, lib.ptr(c"cuDriverGetVersion"));
                assert_ne!(p, fake.ptr(c"cuDriverGetVersion"));
                let mut v = 0;
                assert_eq!(std::mem::transmute::<*mut c_void, Version>(p)(&mut v), 0);
                assert_eq!(v, 12345);
                // The driver picks the variant; the shim answers that variant's forwarder.
                let (_, p, _) = ask(c"cuLaunchKernel", 2);
                assert_eq!(p, lib.ptr(c"cuLaunchKernel_ptsz"));
                let f = std::mem::transmute::<*mut c_void, Launch>(p);
                assert_eq!(
                    launch(f, LAUNCH_ARGS),
                    1_000_000 + launch_answer(LAUNCH_ARGS)
                );
                let (_, p, _) = ask(c"cuLaunchKernel", 0);
                assert_eq!(p, lib.ptr(c"cuLaunchKernel"));
                let (_, p, _) = ask(c"cuMemAlloc", 0);
                assert_eq!(p, lib.ptr(c"cuMemAlloc_v2"));
                // Itself, when asked for cuGetProcAddress; and the version 1 entry point too.
                let (_, p, _) = ask(c"cuGetProcAddress", 0);
                assert_eq!(p, lib.ptr(c"cuGetProcAddress_v2"));
                let again = std::mem::transmute::<*mut c_void, GpaV2>(p);
                let mut q = std::ptr::null_mut();
                assert_eq!(
                    again(c"cuInit".as_ptr(), &mut q, 13000, 0, std::ptr::null_mut()),
                    0
                );
                assert_eq!(q, lib.ptr(c"cuInit"));
                let gpa1: Gpa = lib.sym(c"cuGetProcAddress");
                let mut q = std::ptr::null_mut();
                assert_eq!(gpa1(c"cuGetExportTable".as_ptr(), &mut q, 12000, 0), 0);
                assert_eq!(q, lib.ptr(c"cuGetExportTable"));
                // A function that is no exported entry point: passed on, counted as unmapped.
                let (r, p, _) = ask(c"cuInternalOnly", 0);
                assert_eq!(r, 0);
                assert_eq!(std::mem::transmute::<*mut c_void, NoArgs>(p)(), 4242);
                let (r, p, _) = ask(c"cuNewerThanTheList", 0);
                assert_eq!(r, 0);
                assert_eq!(std::mem::transmute::<*mut c_void, NoArgs>(p)(), 4343);
                // What the driver does not know stays unknown.
                let (r, p, status) = ask(c"cuNoSuchThing", 0);
                assert_eq!((r, p, status), (500, std::ptr::null_mut(), 1));
            }
            "missing" => {
                // Listed, exported, absent from the driver: CUDA_ERROR_NOT_FOUND.
                assert_eq!(lib.sym::<NoArgs>(c"cuCtxResetPersistingL2Cache")(), 500);
                let mut v = 0;
                assert_eq!(lib.sym::<Version>(c"cuDriverGetVersion")(&mut v), 0);
            }
            "no-driver" => {
                let mut v = 0;
                assert_eq!(lib.sym::<Version>(c"cuDriverGetVersion")(&mut v), 100);
                let gpa2: GpaV2 = lib.sym(c"cuGetProcAddress_v2");
                let mut p = std::ptr::null_mut();
                let r = gpa2(c"cuInit".as_ptr(), &mut p, 13000, 0, std::ptr::null_mut());
                assert_eq!((r, p), (100, std::ptr::null_mut()));
            }
            other => panic!("no scenario {other}"),
        }
    }
    println!("child {scenario}: ok");
}

#[test]
fn every_listed_entry_point_is_exported() {
    let list = include_str!("../src/entry_points.txt");
    let names: Vec<&str> = list
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(names.len() > 600, "{} names", names.len());
    // dlsym only: nothing is called, so the shim loads no driver in this process.
    let lib = Lib::open(&shim());
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| lib.ptr(&std::ffi::CString::new(*n).unwrap()).is_null())
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    for n in [
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuGetExportTable",
        "cuLaunchKernel_ptsz",
    ] {
        assert!(names.contains(&n), "{n}");
    }
}

#[test]
fn calls_reach_the_driver_with_their_arguments_and_are_counted_at_exit() {
    let d = scratch("forward");
    let counts = d.join("counts.jsonl");
    assert_ok(&child("forward", fake_driver(), Some(&counts)));
    assert_ok(&child("float", fake_driver(), Some(&counts)));
    // One line per process, appended.
    let lines = count_lines(&counts);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let c = &lines[0]["calls"];
    assert_eq!(c["cuLaunchKernel"], 2);
    assert_eq!(c["cuDriverGetVersion"], 1);
    assert_eq!(c["cuMemAlloc_v2"], 1);
    assert_eq!(c["cuInit"], 2);
    assert_eq!(c["cuGetExportTable"], 1);
    assert_eq!(c.as_object().unwrap().len(), 5, "{c}");
    assert_eq!(
        lines[0]["export_tables"]["6bd5fb6c5bf4e74a8987d93912fd9df9"],
        1
    );
    assert_eq!(lines[0]["driver"], fake_driver().to_str().unwrap());
    assert_eq!(lines[1]["calls"]["cuTexRefSetMipmapLevelBias"], 2);
    assert_ne!(lines[0]["pid"], lines[1]["pid"]);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn cu_get_proc_address_answers_the_shim_s_forwarders() {
    let d = scratch("procaddr");
    let counts = d.join("counts.jsonl");
    assert_ok(&child("procaddr", fake_driver(), Some(&counts)));
    let lines = count_lines(&counts);
    let c = &lines[0]["calls"];
    // Calls through the answered pointers are counted: they are the forwarders.
    assert_eq!(c["cuDriverGetVersion"], 1);
    assert_eq!(c["cuLaunchKernel_ptsz"], 1);
    assert_eq!(c["cuGetProcAddress_v2"], 9, "{c}");
    assert_eq!(c["cuGetProcAddress"], 1);
    assert_eq!(
        lines[0]["unmapped_proc_addresses"]["cuInternalOnly (not an exported function)"], 1,
        "{}",
        lines[0]
    );
    let newer = "cuNewerThanTheList (= cuNewerThanTheList, not in the shim's list)";
    assert_eq!(
        lines[0]["unmapped_proc_addresses"][newer], 1,
        "{}",
        lines[0]
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn an_entry_point_the_driver_lacks_returns_not_found() {
    assert_ok(&child("missing", fake_driver(), None));
}

#[test]
fn the_shim_never_forwards_to_itself_and_no_driver_means_no_device() {
    let d = scratch("self");
    // The shim itself, by another name (same inode) ...
    let link = d.join("libcuda.so.1");
    std::os::unix::fs::symlink(shim(), &link).unwrap();
    let o = child("no-driver", &link, None);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("gputape's shim itself"), "{err}");
    // ... a copy of it (another inode, but it exports the shim's marker) ...
    let copy = d.join("copy.so");
    std::fs::copy(shim(), &copy).unwrap();
    let o = child("no-driver", &copy, None);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("a copy of gputape's shim"), "{err}");
    // ... and no file at all: CUDA_ERROR_NO_DEVICE, said once on stderr.
    let o = child("no-driver", &d.join("absent.so"), None);
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("gputape-shim:").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(d);
}
