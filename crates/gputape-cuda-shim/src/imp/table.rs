//! The forwarders and the tables they read. Entry point `i` (its index in the sorted `NAMES`)
//! has a counter `COUNTS[i]`, the driver's function `REAL[i]` (or a stub), and `DISPATCH[i]`:
//! where its forwarder jumps. Each forwarder is
//!
//! ```text
//! lock inc qword ptr [COUNTS + 8*i]   ; count the call (flags only are touched)
//! mov r11d, i                         ; which entry point, for lazy_entry
//! jmp qword ptr [DISPATCH + 8*i]      ; the real function, a hook, or lazy_entry
//! ```
//!
//! so it needs no signature: argument registers, the stack and the return address are as the
//! caller left them (r11 is a scratch register no argument uses, and a PLT stub clobbers it
//! too). A hook of the next stage is a function of the entry point's real signature stored in
//! `DISPATCH[i]`, which calls `REAL[i]`.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::resolve::resolve_all;

/// Expands the generated list (`$OUT_DIR/entry_points.rs`, one `INDEX NAME,` a line) into one
/// exported forwarder per entry point, and `WRAPPERS`, their addresses in `NAMES` order.
macro_rules! trampolines {
    ($($i:literal $name:ident,)*) => {
        $(
            /// A forwarder (see the module docs): counts, then jumps through `DISPATCH`.
            #[unsafe(no_mangle)]
            #[unsafe(naked)]
            #[allow(non_snake_case)]
            pub unsafe extern "C" fn $name() {
                core::arch::naked_asm!(
                    "lock inc qword ptr [rip + {counts} + {off}]",
                    "mov r11d, {i}",
                    "jmp qword ptr [rip + {dispatch} + {off}]",
                    counts = sym COUNTS,
                    dispatch = sym DISPATCH,
                    off = const $i * 8,
                    i = const $i,
                )
            }
        )*
        /// Each entry point's forwarder, in `NAMES` order: what `cuGetProcAddress` answers.
        pub static WRAPPERS: [unsafe extern "C" fn(); N] = [$($name),*];
    };
}

include!(concat!(env!("OUT_DIR"), "/entry_points.rs"));

/// Calls per entry point, bumped by its forwarder.
pub static COUNTS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

/// Where each forwarder jumps: `lazy_entry` until the driver is loaded, then `REAL[i]` or the
/// shim's hook for that entry point.
pub static DISPATCH: [AtomicPtr<()>; N] = [const { AtomicPtr::new(lazy_entry as *mut ()) }; N];

/// The driver's own function for each entry point (a stub where it has none); null until
/// `resolve_all` has run.
pub static REAL: [AtomicPtr<()>; N] = [const { AtomicPtr::new(core::ptr::null_mut()) }; N];

/// The index of entry point `name`, at compile time: a hook names the entry point whose
/// driver function it calls as `REAL[entry("cuMemAlloc_v2")]` in a const, so a name missing
/// from the list fails the build rather than a lookup at run time.
pub const fn entry(name: &str) -> usize {
    let mut i = 0;
    while i < N {
        if same(NAME_LIST[i].as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("not an entry point of the shim's list")
}

/// Whether entry point `i` is a per-thread default stream form (`_ptsz`, `_ptds`), at compile
/// time: through one, stream 0 is the calling thread's own default stream, not the legacy one.
pub const fn per_thread(i: usize) -> bool {
    let n = NAME_LIST[i].as_bytes();
    if n.len() < 5 {
        return false;
    }
    let (_, tail) = n.split_at(n.len() - 5);
    same(tail, b"_ptsz") || same(tail, b"_ptds")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of an entry point by name.
pub fn index(name: &str) -> Option<usize> {
    NAMES.binary_search(&name).ok()
}

/// The driver's function for entry point `i`, once resolved.
pub fn real(i: usize) -> *mut () {
    REAL[i].load(Ordering::Acquire)
}

/// A naked function `$name` that saves every register a C call may take arguments in (rdi,
/// rsi, rdx, rcx, r8, r9, rax for a variadic call's vector count, xmm0-7) and r11 (the entry
/// point's index, which forwarders set), runs `$setup` then calls `$f`, restores them and
/// jumps to `$table[r11]`. The stack is as the caller left it when that jump is taken, so
/// stack-passed arguments are untouched.
macro_rules! save_call_jump {
    ($(#[$doc:meta])* $vis:vis $name:ident, $setup:literal, $f:path, $table:path) => {
        $(#[$doc])*
        #[unsafe(naked)]
        $vis unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                // Entered by a jump from a forwarder that was called: rsp = 8 (mod 16). One
                // push of rbp and eight more leave it at 0, as the call below needs. The CFI
                // lines let an unwinder walk through (`native.rs`: where a call was made from).
                ".cfi_startproc",
                "push rbp",
                ".cfi_def_cfa_offset 16",
                ".cfi_offset rbp, -16",
                "mov rbp, rsp",
                ".cfi_def_cfa_register rbp",
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "push r11",
                "sub rsp, 128",
                "movdqu [rsp], xmm0",
                "movdqu [rsp + 16], xmm1",
                "movdqu [rsp + 32], xmm2",
                "movdqu [rsp + 48], xmm3",
                "movdqu [rsp + 64], xmm4",
                "movdqu [rsp + 80], xmm5",
                "movdqu [rsp + 96], xmm6",
                "movdqu [rsp + 112], xmm7",
                $setup,
                "call {f}",
                "movdqu xmm0, [rsp]",
                "movdqu xmm1, [rsp + 16]",
                "movdqu xmm2, [rsp + 32]",
                "movdqu xmm3, [rsp + 48]",
                "movdqu xmm4, [rsp + 64]",
                "movdqu xmm5, [rsp + 80]",
                "movdqu xmm6, [rsp + 96]",
                "movdqu xmm7, [rsp + 112]",
                "add rsp, 128",
                "pop r11",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "pop rbp",
                ".cfi_def_cfa rsp, 8",
                "lea r10, [rip + {table}]",
                "jmp qword ptr [r10 + r11 * 8]",
                ".cfi_endproc",
                f = sym $f,
                table = sym $table,
            )
        }
    };
}

save_call_jump! {
    /// In a recording process, a call of an entry point the hooks do not understand but which
    /// changes the device lands here (r11 = its index): it is logged by name
    /// (`record::note_opaque`, given r11) and forwarded to the driver's function.
    pub opaque_entry, "mov rdi, r11", super::record::note_opaque, REAL
}

save_call_jump! {
    /// The first call into any forwarder lands here (r11 = its index): the driver is loaded
    /// (`resolve_all`, once per process; concurrent first callers wait for it), then the jump
    /// goes where `DISPATCH[r11]` now points.
    lazy_entry, "nop", resolve_all, DISPATCH
}
