//! Python stacks named once per log: each distinct stack a call is made from gets a number,
//! written (`Rec::Stack`, with a `Rec::Code` for each code object the first time it is seen)
//! before the first record that carries it. A program's calls come from few places, so after
//! its first steps a call costs a walk of its frames and one lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use gputape_shimlog::{NO_STACK, Rec};

use super::native::{self, RawNative};
use super::python::{self, MAX_FRAMES, Raw, RawFrame};

/// Where a call was made from, as read on its thread before the log's lock. On the stack, read
/// once per call: a box would be an allocation on every recorded call.
#[allow(clippy::large_enum_variant)]
pub enum Here {
    Python(Raw),
    Native(RawNative),
}

impl Here {
    /// The calling thread's Python frames; for a program without Python (or when asked, with
    /// `GPUTAPE_NATIVE_FRAMES`), a thread running none, its native return addresses.
    #[inline]
    pub fn read() -> Option<Here> {
        if let Some(raw) = python::here() {
            return Some(Here::Python(raw));
        }
        if !python::lines_on() || (python::in_process() && !native::asked()) {
            return None;
        }
        native::here().map(Here::Native)
    }
}

/// Distinct stacks (and code objects) named at most: past it, calls from new places carry no
/// stack, and the table stops growing (a flight ring keeps every `Stack` record for good).
const MAX_NAMED: u32 = 1 << 16;

/// A code object as the log names it: its address and the objects that tell a later code
/// object at the same address apart (a freed one's address is reused: notebook cells,
/// recompiled functions).
type CodeKey = (usize, usize, usize, usize);

/// A stack's frames, only the first `n` hashed and compared.
struct StackKey {
    n: usize,
    frames: [RawFrame; MAX_FRAMES],
}

impl PartialEq for StackKey {
    fn eq(&self, o: &Self) -> bool {
        self.frames[..self.n] == o.frames[..o.n]
    }
}

impl Eq for StackKey {}

impl Hash for StackKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for f in &self.frames[..self.n] {
            h.write_usize(f.code);
            h.write_u32(f.instr);
        }
        h.write_usize(self.n);
    }
}

/// A multiply-rotate hasher (the keys are addresses, not attacker-chosen): SipHash over a
/// stack's sixteen frames would be most of what a lookup costs.
#[derive(Default)]
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type Fast = BuildHasherDefault<Mix>;

/// The log's names for code objects, native frames and stacks so far.
#[derive(Default)]
pub struct Lines {
    codes: HashMap<CodeKey, u32, Fast>,
    stacks: HashMap<StackKey, u32, Fast>,
    /// Native return addresses -> (their `NativeFrame` id, whether in a library the program
    /// calls through).
    natives: HashMap<usize, (u32, bool), Fast>,
    /// Native stacks by the addresses they keep.
    native_stacks: HashMap<Vec<usize>, u32, Fast>,
    /// Stacks of either kind named so far (the next one's number is one more).
    named: u32,
}

impl Lines {
    /// The number of the stack `here` was read as (see `intern`).
    pub fn intern_here(&mut self, here: &Here, emit: impl FnMut(Rec<'_>)) -> u32 {
        match here {
            Here::Python(raw) => self.intern(raw, emit),
            Here::Native(raw) => self.intern_native(raw, emit),
        }
    }

    /// The number of a native stack: its frames up to the program's own (the innermost outside
    /// the libraries it calls the driver through), or all of them when a depth was asked for;
    /// each frame and the stack named through `emit` the first time.
    fn intern_native(&mut self, raw: &RawNative, mut emit: impl FnMut(Rec<'_>)) -> u32 {
        let all = native::asked();
        let mut kept = Vec::with_capacity(raw.n);
        let mut ids = Vec::with_capacity(4 * raw.n);
        for &ip in &raw.ips[..raw.n] {
            let (id, library) = match self.natives.get(&ip) {
                Some(&f) => f,
                None => {
                    if self.natives.len() as u32 >= MAX_NAMED {
                        return NO_STACK;
                    }
                    let n = native::name(ip);
                    let id = self.natives.len() as u32;
                    emit(Rec::NativeFrame {
                        id,
                        module: &n.module,
                        offset: n.offset,
                        symbol: &n.symbol,
                        symbol_offset: n.symbol_offset,
                    });
                    let f = (id, gputape_shimlog::native_library(&n.module));
                    self.natives.insert(ip, f);
                    f
                }
            };
            kept.push(ip);
            ids.extend_from_slice(&id.to_le_bytes());
            if !all && !library {
                break;
            }
        }
        if let Some(&id) = self.native_stacks.get(&kept) {
            return id;
        }
        if self.named >= MAX_NAMED {
            return NO_STACK;
        }
        self.named += 1;
        let id = self.named;
        emit(Rec::NativeStack { id, frames: &ids });
        self.native_stacks.insert(kept, id);
        id
    }

    /// The number of `raw`'s stack, naming it (and its new code objects) through `emit` the
    /// first time; `NO_STACK` past `MAX_NAMED`, or when a code object cannot be read.
    ///
    /// `raw` must have been read by `python::here` on the calling thread in this same call
    /// (its code objects are alive).
    pub fn intern(&mut self, raw: &Raw, mut emit: impl FnMut(Rec<'_>)) -> u32 {
        let key = StackKey {
            n: raw.n,
            frames: raw.frames,
        };
        if let Some(&id) = self.stacks.get(&key) {
            return id;
        }
        if self.named >= MAX_NAMED || self.codes.len() as u32 >= MAX_NAMED {
            return NO_STACK;
        }
        let mut pairs = Vec::with_capacity(8 * raw.n);
        for f in &raw.frames[..raw.n] {
            let ck = (f.code, f.filename, f.qualname, f.linetable);
            let code = match self.codes.get(&ck) {
                Some(&c) => c,
                None => {
                    // SAFETY: `f` was read on this thread in this call (the caller's promise).
                    let Some(info) = (unsafe { python::code_info(f) }) else {
                        return NO_STACK;
                    };
                    let c = self.codes.len() as u32;
                    emit(Rec::Code {
                        id: c,
                        py_minor: info.py_minor,
                        first_line: info.first_line,
                        filename: &info.filename,
                        qualname: &info.qualname,
                        linetable: &info.linetable,
                    });
                    self.codes.insert(ck, c);
                    c
                }
            };
            pairs.extend_from_slice(&code.to_le_bytes());
            pairs.extend_from_slice(&f.instr.to_le_bytes());
        }
        // Stack numbers start at 1: 0 is `NO_STACK`.
        self.named += 1;
        let id = self.named;
        emit(Rec::Stack { id, frames: &pairs });
        self.stacks.insert(key, id);
        id
    }
}
