//! The calling thread's Python frames, read from the interpreter's memory on every recorded
//! call, so each call carries the user's line (`Rec::Stack`).
//!
//! PyTorch and ctypes release the GIL around the calls that reach the driver, so nothing here
//! may take the GIL, call into the interpreter's API beyond three lock-free queries, or touch a
//! reference count. What makes a plain read sound: a thread's frame chain is written only by
//! that thread, which is blocked inside this very call; its live frames hold strong
//! references to their code objects, and a code object to its file name, name and line table,
//! so everything read stays alive and unchanged while we read it. The thread's state comes from
//! `PyGILState_GetThisThreadState`, a thread-local read that needs no GIL.
//!
//! The layouts are CPython's private structures, which change between minor versions: 3.11 and
//! 3.12 from tables checked against their headers (`offsetof` on 3.11.7 and 3.12.1), 3.13 from
//! the `_Py_DebugOffsets` the interpreter publishes for tools like this one (cookie, version and
//! free-threading checked). Anything else (3.10, 3.14, a free-threaded or debug build) is
//! refused rather than guessed: every object read is first checked to be of the type expected
//! (`PyCode_Type`, `PyUnicode_Type`, `PyBytes_Type`), and a mismatch turns lines off for the
//! process, once, with a line on stderr.
//!
//! Only raw facts are taken here (which code object, which instruction); lines are worked out
//! by the reader from each code object's line table, logged once (`Rec::Code`).

use core::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Frames kept per call, innermost first: enough to get past PyTorch's own (`Module.__call__`,
/// `_call_impl`, functional wrappers) to the model's line.
pub const MAX_FRAMES: usize = 16;
/// Frames walked at most, kept or skipped (entry frames): a damaged chain ends here.
const MAX_WALK: usize = 64;
/// Set `GPUTAPE_LINES=0` to record no Python lines.
pub const ENV_LINES: &str = "GPUTAPE_LINES";

/// One frame as read: the code object (and the objects that tell a reused address apart) and
/// the index of the instruction it is at (what CPython's `f_lasti` counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawFrame {
    pub code: usize,
    pub filename: usize,
    pub qualname: usize,
    pub linetable: usize,
    pub instr: u32,
}

/// A Python thread's innermost frames (`n` of them; 0: the thread runs no Python code now).
pub struct Raw {
    pub n: usize,
    pub frames: [RawFrame; MAX_FRAMES],
}

/// A code object's fields the reader needs, copied out (`Rec::Code`).
pub struct CodeInfo {
    pub py_minor: u8,
    pub first_line: i32,
    pub filename: Vec<u8>,
    pub qualname: Vec<u8>,
    pub linetable: Vec<u8>,
}

/// Where the innermost frame hangs off a thread state.
#[derive(Clone, Copy)]
enum Root {
    /// `tstate->cframe->current_frame` (3.11, 3.12).
    CFrame { cframe: usize, current: usize },
    /// `tstate->current_frame` (3.13).
    Direct(usize),
}

/// Offsets into one CPython minor version's structures (64-bit, default build).
#[derive(Clone, Copy)]
struct Layout {
    minor: u8,
    root: Root,
    fr_code: usize,
    fr_previous: usize,
    /// `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13): either way, the code unit whose
    /// offset from the code's start is the frame's `f_lasti`.
    fr_instr: usize,
    fr_owner: usize,
    co_filename: usize,
    co_qualname: usize,
    co_linetable: usize,
    co_firstlineno: usize,
    co_code: usize,
    /// Where the first instruction a frame is complete at lies (not published in 3.13's
    /// debug offsets: there, frames are not tested for completeness, which only matters
    /// before a frame's first instruction, where no driver call is made).
    co_firsttraceable: Option<usize>,
    /// Where a compact string's characters begin: ASCII, and any other kind.
    str_ascii: usize,
    str_compact: usize,
}

/// `_PyInterpreterFrame.owner` values the walk treats specially (3.11-3.13).
const OWNED_BY_GENERATOR: u8 = 1;
const OWNED_BY_CSTACK: u8 = 3;

/// 3.11, from `offsetof` on 3.11.7's headers.
const PY311: Layout = Layout {
    minor: 11,
    root: Root::CFrame {
        cframe: 56,
        current: 8,
    },
    fr_code: 32,
    fr_previous: 48,
    fr_instr: 56,
    fr_owner: 69,
    co_filename: 112,
    co_qualname: 128,
    co_linetable: 136,
    co_firstlineno: 72,
    co_code: 184,
    co_firsttraceable: Some(168),
    str_ascii: 48,
    str_compact: 72,
};

/// 3.12, from `offsetof` on 3.12.1's headers.
const PY312: Layout = Layout {
    minor: 12,
    root: Root::CFrame {
        cframe: 56,
        current: 0,
    },
    fr_code: 0,
    fr_previous: 8,
    fr_instr: 56,
    fr_owner: 70,
    co_filename: 112,
    co_qualname: 128,
    co_linetable: 136,
    co_firstlineno: 68,
    co_code: 192,
    co_firsttraceable: Some(176),
    str_ascii: 40,
    str_compact: 56,
};

/// The interpreter's entry points and types, found in the process.
struct Py {
    layout: Layout,
    this_thread: unsafe extern "C" fn() -> *const c_void,
    initialized: unsafe extern "C" fn() -> c_int,
    finalizing: Option<unsafe extern "C" fn() -> c_int>,
    code_type: usize,
    unicode_type: usize,
    bytes_type: usize,
}

static PY: OnceLock<Option<Py>> = OnceLock::new();
/// Cleared when a read finds an object of the wrong type: the layout is not what we think.
static READABLE: AtomicBool = AtomicBool::new(true);
/// Cleared by `gputape_shim_lines(0)`.
static ON: AtomicBool = AtomicBool::new(true);

/// Turns the recording of Python lines off (`on` 0) or on again in this process: for
/// benchmarks that compare what lines cost inside one process (through ctypes), where a
/// program's own speed is the same for both.
#[unsafe(no_mangle)]
pub extern "C" fn gputape_shim_lines(on: c_int) {
    ON.store(on != 0, Ordering::Relaxed);
}

/// Whether lines are wanted: not turned off by `GPUTAPE_LINES=0` or `gputape_shim_lines(0)`.
pub fn lines_on() -> bool {
    static ENV_OFF: OnceLock<bool> = OnceLock::new();
    ON.load(Ordering::Relaxed)
        && !*ENV_OFF.get_or_init(|| std::env::var(ENV_LINES).is_ok_and(|v| v == "0"))
}

/// Whether the process holds a Python interpreter, of whatever version: its calls are named by
/// their Python lines (or by none), not by a walk of native frames on every call.
pub fn in_process() -> bool {
    static IN: OnceLock<bool> = OnceLock::new();
    *IN.get_or_init(|| sym(b"Py_IsInitialized\0") != 0)
}

fn sym(name: &[u8]) -> usize {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the process's global scope.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast::<c_char>()) as usize }
}

/// The interpreter in this process and its layout, or `None` (no Python, lines off, or a build
/// this file does not know: said once on stderr).
fn py() -> Option<&'static Py> {
    PY.get_or_init(find).as_ref()
}

fn find() -> Option<Py> {
    if std::env::var(ENV_LINES).is_ok_and(|v| v == "0") {
        return None;
    }
    let this_thread = sym(b"PyGILState_GetThisThreadState\0");
    let initialized = sym(b"Py_IsInitialized\0");
    if this_thread == 0 || initialized == 0 {
        return None;
    }
    let version = sym(b"Py_Version\0");
    if version == 0 {
        refuse("a Python older than 3.11 (no Py_Version)");
        return None;
    }
    // SAFETY: `Py_Version` is a `const unsigned long` (3.11+) of the interpreter.
    let hex = unsafe { *(version as *const u32) };
    let (major, minor) = (hex >> 24, (hex >> 16) & 0xff);
    let layout = match (major, minor) {
        (3, 11) => PY311,
        (3, 12) => PY312,
        (3, 13) => from_debug_offsets(hex)?,
        _ => {
            refuse(&format!("Python {major}.{minor}"));
            return None;
        }
    };
    let finalizing = [&b"Py_IsFinalizing\0"[..], b"_Py_IsFinalizing\0"]
        .iter()
        .map(|n| sym(n))
        .find(|&a| a != 0);
    let (code_type, unicode_type, bytes_type) = (
        sym(b"PyCode_Type\0"),
        sym(b"PyUnicode_Type\0"),
        sym(b"PyBytes_Type\0"),
    );
    if code_type == 0 || unicode_type == 0 || bytes_type == 0 {
        refuse("its type objects are not exported");
        return None;
    }
    // SAFETY: the three are the interpreter's own functions, of these C signatures (from its
    // headers); a null was handled above.
    unsafe {
        Some(Py {
            layout,
            this_thread: core::mem::transmute::<usize, unsafe extern "C" fn() -> *const c_void>(
                this_thread,
            ),
            initialized: core::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(
                initialized,
            ),
            finalizing: finalizing
                .map(|a| core::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(a)),
            code_type,
            unicode_type,
            bytes_type,
        })
    }
}

/// 3.13's layout from `_PyRuntime.debug_offsets` (the runtime's first field), checked: the
/// cookie, the version it describes, and a default (not free-threaded) build.
fn from_debug_offsets(hex: u32) -> Option<Layout> {
    let rt = sym(b"_PyRuntime\0");
    if rt == 0 {
        refuse("Python 3.13 without _PyRuntime");
        return None;
    }
    // SAFETY: `_PyRuntime` is the interpreter's runtime state, whose first field in 3.13 is
    // `_Py_DebugOffsets`: u64 fields after an 8-byte cookie; read only up to the code object's
    // part (index 43), within the struct.
    let at = |i: usize| unsafe { *((rt + 8 + 8 * i) as *const u64) } as usize;
    // SAFETY: the cookie's 8 bytes begin the struct.
    let cookie = unsafe { *(rt as *const [u8; 8]) };
    if &cookie != b"xdebugpy" || (at(0) as u32) >> 16 != hex >> 16 {
        refuse("Python 3.13 whose debug offsets do not check");
        return None;
    }
    if at(1) != 0 {
        refuse("a free-threaded Python");
        return None;
    }
    // Field indices after the cookie: version 0, free_threaded 1, runtime_state 2-4,
    // interpreter_state 5-17, thread_state 18-26, interpreter_frame 27-32, code_object 33-42.
    Some(Layout {
        minor: 13,
        root: Root::Direct(at(22)),
        fr_previous: at(28),
        fr_code: at(29),
        fr_instr: at(30),
        fr_owner: at(32),
        co_filename: at(34),
        co_qualname: at(36),
        co_linetable: at(37),
        co_firstlineno: at(38),
        co_code: at(42),
        co_firsttraceable: None,
        str_ascii: 40,
        str_compact: 56,
    })
}

fn refuse(why: &str) {
    eprintln!("gputape: {why}: recorded calls carry no Python lines");
}

/// # Safety
/// `a` is readable for a `T`.
#[inline(always)]
unsafe fn rd<T: Copy>(a: usize) -> T {
    // SAFETY: the caller's.
    unsafe { core::ptr::read_unaligned(a as *const T) }
}

/// The calling thread's innermost Python frames, or `None` when it is not a Python thread
/// (or the process has no Python, or lines are off).
#[inline]
pub fn here() -> Option<Raw> {
    if !ON.load(Ordering::Relaxed) {
        return None;
    }
    let py = py()?;
    if !READABLE.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: lock-free queries of the interpreter's state, valid on any thread at any time
    // once the interpreter exists (it does: its symbols are in the process).
    unsafe {
        if (py.initialized)() == 0 || py.finalizing.is_some_and(|f| f() != 0) {
            return None;
        }
        let ts = (py.this_thread)() as usize;
        if ts == 0 {
            return None;
        }
        Some(walk(py, ts))
    }
}

/// # Safety
/// `ts` is the calling thread's live thread state, of `py.layout`.
unsafe fn walk(py: &Py, ts: usize) -> Raw {
    let l = &py.layout;
    let mut out = Raw {
        n: 0,
        frames: [RawFrame::default(); MAX_FRAMES],
    };
    // SAFETY (every read below): the thread's own frame chain, which only it writes and it is
    // inside this call; each object is type-checked before its fields are read.
    let mut f: usize = unsafe {
        match l.root {
            Root::CFrame { cframe, current } => {
                let cf: usize = rd(ts + cframe);
                if cf == 0 { 0 } else { rd(cf + current) }
            }
            Root::Direct(off) => rd(ts + off),
        }
    };
    for _ in 0..MAX_WALK {
        if f == 0 || out.n == MAX_FRAMES {
            break;
        }
        let (owner, code): (u8, usize) = unsafe { (rd(f + l.fr_owner), rd(f + l.fr_code)) };
        if owner != OWNED_BY_CSTACK && code != 0 {
            if unsafe { rd::<usize>(code + 8) } != py.code_type {
                unreadable("a frame's code is not a code object");
                break;
            }
            let instr: usize = unsafe { rd(f + l.fr_instr) };
            let index = (instr as isize - (code + l.co_code) as isize) / 2;
            let first = l
                .co_firsttraceable
                .map_or(0, |o| unsafe { rd::<i32>(code + o) } as isize);
            let complete = owner == OWNED_BY_GENERATOR || index >= first;
            if complete && (0..=u32::MAX as isize).contains(&index) {
                out.frames[out.n] = unsafe {
                    RawFrame {
                        code,
                        filename: rd(code + l.co_filename),
                        qualname: rd(code + l.co_qualname),
                        linetable: rd(code + l.co_linetable),
                        instr: index as u32,
                    }
                };
                out.n += 1;
            }
        }
        f = unsafe { rd(f + l.fr_previous) };
    }
    out
}

#[cold]
fn unreadable(why: &str) {
    if READABLE.swap(false, Ordering::Relaxed) {
        refuse(&format!(
            "this Python's frames do not read as expected ({why})"
        ));
    }
}

/// A frame's code object's fields, copied out; `None` if an object is not of its type.
///
/// # Safety
/// `f` was read by `here` on the calling thread, whose frames still hold it (the same call).
pub unsafe fn code_info(f: &RawFrame) -> Option<CodeInfo> {
    let py = py()?;
    let l = &py.layout;
    // SAFETY: the caller's: the code object and its fields are alive.
    unsafe {
        Some(CodeInfo {
            py_minor: l.minor,
            first_line: rd(f.code + l.co_firstlineno),
            filename: string(py, f.filename)?,
            qualname: string(py, f.qualname)?,
            linetable: bytes(py, f.linetable)?,
        })
    }
}

/// A `str` object's text as UTF-8 (compact strings only: what code objects hold).
///
/// # Safety
/// `o` is a live object.
unsafe fn string(py: &Py, o: usize) -> Option<Vec<u8>> {
    let l = &py.layout;
    // SAFETY: the caller's; the type is checked before the string's fields are read.
    unsafe {
        if o == 0 || rd::<usize>(o + 8) != py.unicode_type {
            unreadable("a name is not a str");
            return None;
        }
        let len = rd::<isize>(o + 16).clamp(0, 1 << 16) as usize;
        let state: u32 = rd(o + 32);
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
        if compact == 0 {
            return Some(b"?".to_vec());
        }
        let data = o + if ascii == 1 {
            l.str_ascii
        } else {
            l.str_compact
        };
        let ch = |i: usize| -> u32 {
            match kind {
                2 => u32::from(rd::<u16>(data + 2 * i)),
                4 => rd::<u32>(data + 4 * i),
                _ => u32::from(rd::<u8>(data + i)),
            }
        };
        let mut s = String::with_capacity(len);
        for i in 0..len {
            s.push(char::from_u32(ch(i)).unwrap_or('\u{fffd}'));
        }
        Some(s.into_bytes())
    }
}

/// A `bytes` object's contents (at most 1 MiB: a line table is far smaller).
///
/// # Safety
/// `o` is a live object.
unsafe fn bytes(py: &Py, o: usize) -> Option<Vec<u8>> {
    // SAFETY: the caller's; the type is checked before the contents are read.
    unsafe {
        if o == 0 || rd::<usize>(o + 8) != py.bytes_type {
            unreadable("a line table is not bytes");
            return None;
        }
        let len = rd::<isize>(o + 16).clamp(0, 1 << 20) as usize;
        Some(core::slice::from_raw_parts((o + 32) as *const u8, len).to_vec())
    }
}
