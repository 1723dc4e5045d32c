//! What each launch wrote, measured by replaying it: the bytes a compiled kernel nobody
//! described (PyTorch's, cuBLAS's, Triton's) changed, split into the tensors its pointers
//! name, and the element type those bytes read as.
//!
//! A driver-level recording knows a launch's pointer arguments but not how far each reaches or
//! whether the kernel writes through it, and a caching allocator puts many tensors in one
//! allocation. So the replay measures: for each allocation a launch points into, the region
//! from its lowest pointer to the allocation's end is hashed in chunks before the launch and
//! again after it, on the launch's stream (`writes_kernel`), and the chunks whose hash changed
//! are what it wrote. Other pointers into the same allocation only split the changed bytes into
//! tensors: a change belongs to the pointer at or before it, so a view longer than the gap to
//! the next pointer (a fused QKV buffer) keeps its whole extent only where no other argument
//! points inside it. Pointers at the same address are each listed as possible writers.
//!
//! What it cannot see, said where it is used: a write of the value already there (fine for NaN
//! hunting; `--against` keeps comparing from the pointer to the end for a parameter measured
//! writing in another launch of the kernel), writes through pointers held in device memory
//! (pointer tables), and bytes finer than a chunk (512 bytes by default, PyTorch's block
//! rounding, so a chunk never spans two of its tensors). Other streams' work that runs between
//! the two hashes is counted as the launch's: graph nodes run one at a time here, as in the
//! value checks.
//!
//! Each measured writing pointer also keeps the first bytes it wrote, from which an element
//! type is inferred (`infer`) for kernels whose names say none, and an `nvjet` name's
//! undocumented type code is confirmed or not. The result is stored beside the trace
//! (`TRACE.writes.json`, keyed by the trace's blake3) so later checks need not measure again.

use super::state::{resolve_stream, sync_all, Guard, State};
use super::writes_kernel as wk;
use super::{ModuleLoader, Outcome, ReplayError, Replayer};
use crate::backend::{DevicePtr, ElemType, GpuBackend, KernelArg, KernelHandle};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bytes per hashed chunk by default: PyTorch's caching allocator rounds blocks to 512.
pub const CHUNK: u64 = 512;
/// The file format's version.
const FORMAT: u32 = 1;
/// Hash slots on the device (one per chunk of a pending region): 32 MiB, 2 GiB of regions.
const HASH_SLOTS: u64 = 1 << 22;
/// Bitmap words on the device.
const BIT_WORDS: u64 = HASH_SLOTS / 32 + 4096;
/// Bytes kept at each pointer before and after the launch: the changes among them are known to
/// the byte (a small tensor's extent is exact, not its chunk), and what was written there is
/// what its type is inferred from.
const SAMPLE: u64 = 4096;
/// Samples on the device per batch.
const SAMPLE_SLOTS: u64 = 1024;
/// Regions pending before a batch is read back.
const MAX_PENDING: usize = 1024;
/// The largest stored file read back (it is untrusted input like the trace).
const MAX_FILE: u64 = 256 << 20;

/// How the measurement runs.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Bytes per hashed chunk (a power of two, at least 4): what the extents are rounded to.
    pub chunk: u64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { chunk: CHUNK }
    }
}

/// An element type inferred from bytes a launch wrote.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inferred {
    /// The type the bytes read as plausible values in.
    pub elem: ElemType,
    /// Of the values read, how many per thousand were zero or of a plausible magnitude.
    pub plausible_permille: u32,
    /// Values read.
    pub values: u32,
}

/// One pointer argument of a measured launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointerWrites {
    /// The kernel parameter.
    pub param: usize,
    /// Which pointer inside a by-value parameter (PyTorch's array of data pointers).
    pub inner: Option<usize>,
    /// The allocation it points into, and where.
    pub buf: BufferId,
    /// The pointer's offset in `buf`.
    pub off: u64,
    /// Byte ranges of `buf` the launch changed that are this pointer's, each `[start, end)`.
    /// Empty: measured, nothing written through it.
    pub ranges: Vec<(u64, u64)>,
    /// What the first bytes it wrote read as, when they read as one type.
    pub inferred: Option<Inferred>,
}

impl PointerWrites {
    /// From the first byte written to the last.
    pub fn hull(&self) -> Option<(u64, u64)> {
        Some((self.ranges.first()?.0, self.ranges.last()?.1))
    }
}

/// What one launch (a graph's node: every time it ran) wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchWrites {
    /// The launch's seq (a node's captured call).
    pub seq: u64,
    /// `module::kernel`.
    pub kernel: String,
    /// Its pointers into live buffers, each measured (a launch whose regions did not fit a
    /// batch is not listed at all).
    pub pointers: Vec<PointerWrites>,
}

/// The writes of every launch a replay could measure.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WriteExtents {
    /// The file format.
    pub format: u32,
    /// The trace's blake3 (hex): a stored file for another trace is not used.
    pub trace: String,
    /// Bytes per chunk: every range starts and ends on one (or at a pointer or the buffer's end).
    pub chunk: u64,
    /// By seq.
    pub launches: Vec<LaunchWrites>,
    /// Launches not measured, and why.
    pub unmeasured: Vec<String>,
    /// Launches replayed.
    pub replayed: u64,
    /// Bytes hashed (each region twice).
    pub bytes_hashed: u64,
    /// Wall time of the measuring replay.
    pub elapsed_ms: f64,
    /// The replay stopped early: the call and the error.
    pub stopped: Option<String>,
    /// (kernel, param, inner) measured writing in some launch: `--against` keeps comparing such
    /// a parameter where a launch wrote the values already there.
    #[serde(skip)]
    writers: HashSet<(String, usize, Option<usize>)>,
    /// (kernel, param, inner) -> a type inferred from the bytes some launch of it wrote there:
    /// a compiled kernel's parameter has one type, so a launch that changed only a few bytes
    /// (or none at its pointer) reads as the others did.
    #[serde(skip)]
    param_types: HashMap<(String, usize, Option<usize>), Inferred>,
}

impl WriteExtents {
    /// The launch `seq`'s measurement, if it was measured.
    pub fn launch(&self, seq: u64) -> Option<&LaunchWrites> {
        let i = self.launches.binary_search_by_key(&seq, |l| l.seq).ok()?;
        self.launches.get(i)
    }

    /// The type inferred for parameter (`param`, `inner`) of `kernel` from what any of its
    /// launches wrote there (the most values read wins).
    pub fn param_type(&self, kernel: &str, param: usize, inner: Option<usize>) -> Option<Inferred> {
        self.param_types
            .get(&(kernel.to_string(), param, inner))
            .copied()
    }

    /// Whether parameter (`param`, `inner`) of `kernel` was measured writing in any launch.
    pub fn ever_writes(&self, kernel: &str, param: usize, inner: Option<usize>) -> bool {
        self.writers.contains(&(kernel.to_string(), param, inner))
    }

    fn index(&mut self) {
        self.launches.sort_by_key(|l| l.seq);
        self.writers = self
            .launches
            .iter()
            .flat_map(|l| {
                l.pointers
                    .iter()
                    .filter(|p| !p.ranges.is_empty())
                    .map(|p| (l.kernel.clone(), p.param, p.inner))
            })
            .collect();
        self.param_types.clear();
        for l in &self.launches {
            for p in &l.pointers {
                let Some(i) = p.inferred else { continue };
                let e = self
                    .param_types
                    .entry((l.kernel.clone(), p.param, p.inner))
                    .or_insert(i);
                if i.values > e.values {
                    *e = i;
                }
            }
        }
    }

    /// The report as text: each launch's written ranges, by pointer.
    pub fn summary(&self, t: &Trace) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let writing = self
            .launches
            .iter()
            .filter(|l| l.pointers.iter().any(|p| !p.ranges.is_empty()))
            .count();
        let _ = writeln!(
            s,
            "write extents: {} launches replayed, {} measured, {} wrote through a pointer; {} hashed in {}-byte chunks; {:.1} ms",
            self.replayed,
            self.launches.len(),
            writing,
            super::finite::bytes_text(self.bytes_hashed),
            self.chunk,
            self.elapsed_ms
        );
        for l in &self.launches {
            let site = t
                .calls
                .iter()
                .find(|c| c.seq == l.seq)
                .map(|c| t.site(c.site))
                .unwrap_or_default();
            let _ = writeln!(s, "#{} {} @ {site}", l.seq, l.kernel);
            for p in &l.pointers {
                let name = match p.inner {
                    Some(j) => format!("parameter {} pointer {j}", p.param),
                    None => format!("parameter {}", p.param),
                };
                if p.ranges.is_empty() {
                    let _ = writeln!(s, "  {name} = {}+{}: read only", p.buf, p.off);
                    continue;
                }
                let ranges: Vec<String> = p
                    .ranges
                    .iter()
                    .map(|(a, b)| format!("{}+{}..+{} ({} B)", p.buf, a, b, b - a))
                    .collect();
                let ty = p
                    .inferred
                    .map(|i| {
                        format!(
                            "; its bytes read as {} ({}/1000 of {} values plausible)",
                            i.elem.name(),
                            i.plausible_permille,
                            i.values
                        )
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {name} = {}+{} wrote {}{ty}",
                    p.buf,
                    p.off,
                    ranges.join(", ")
                );
            }
        }
        for u in &self.unmeasured {
            let _ = writeln!(s, "not measured: {u}");
        }
        if let Some(e) = &self.stopped {
            let _ = writeln!(s, "the replay stopped: {e}");
        }
        s
    }

    /// Where the measurement of `trace` is stored: beside it.
    pub fn path_for(trace: &Path) -> PathBuf {
        let mut name = trace.as_os_str().to_os_string();
        name.push(".writes.json");
        PathBuf::from(name)
    }

    /// The stored measurement for the trace whose blake3 is `key`, if there is one: `None`
    /// when the file is missing or made for another trace or another chunk size; an error
    /// names a file that is there but cannot be used.
    pub fn load(path: &Path, key: &str, chunk: u64) -> Result<Option<WriteExtents>, WritesError> {
        let bad = |why: String| WritesError::Stored {
            path: path.to_path_buf(),
            why,
        };
        let len = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(e.to_string())),
        };
        if len > MAX_FILE {
            return Err(bad(format!(
                "{len} bytes, more than the {MAX_FILE} a measurement may hold"
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let mut w: WriteExtents = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if w.format != FORMAT {
            return Err(bad(format!(
                "format {}, this gputape reads {FORMAT}",
                w.format
            )));
        }
        if w.trace != key || w.chunk != chunk {
            return Ok(None);
        }
        w.index();
        Ok(Some(w))
    }

    /// Store the measurement at `path` (through a temporary file, so a reader never sees half).
    pub fn save(&self, path: &Path) -> Result<(), WritesError> {
        let bad = |e: std::io::Error| WritesError::Stored {
            path: path.to_path_buf(),
            why: e.to_string(),
        };
        let text = serde_json::to_vec(self).map_err(|e| WritesError::Stored {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        let mut tmp = path.as_os_str().to_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        std::fs::write(&tmp, text).map_err(bad)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            bad(e)
        })
    }
}

/// A trace's key for its stored measurement: the blake3 of its file.
pub fn trace_key(path: &Path) -> Result<String, WritesError> {
    let mut f = std::fs::File::open(path).map_err(|e| WritesError::Stored {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut f, &mut h).map_err(|e| WritesError::Stored {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok(h.finalize().to_hex().to_string())
}

/// Why a stored measurement could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WritesError {
    /// The file beside the trace.
    #[error("write extents {path}: {why}")]
    Stored {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
}

/// Infer the element type of bytes a kernel wrote: the first of bf16, f32 and f16 under which
/// nearly every value (98%) is zero or a normal number of a plausible magnitude (2^-40 to
/// 2^40). The order matters: f32 data read as bf16 has random low halves (about one in four
/// plausible); f16 read as bf16 or f32 puts its exponent bits in the wrong place (magnitudes
/// past 2^±60); f16's narrow range makes most bits plausible as f16, so it is tried last
/// (random bits still fail it: one in sixteen is subnormal, Inf or NaN), and bf16 is taken
/// only where its magnitudes span a believable number of octaves (`MAX_OCTAVES`). Data mostly zero, or f32
/// whose low halves are all zero (bf16 widened), says nothing narrower than f32.
pub fn infer(bytes: &[u8]) -> Option<Inferred> {
    const MIN_NONZERO: usize = 16;
    const NEED: u32 = 980;
    // Zero, or a normal number (no subnormal, no Inf or NaN) of a plausible magnitude.
    let judge = |elem: ElemType| -> Option<Inferred> {
        let (width, mant, bias, top) = match elem {
            ElemType::F32 => (4, 23, 127, 255),
            ElemType::Bf16 => (2, 7, 127, 255),
            ElemType::F16 => (2, 10, 15, 31),
        };
        let words: Vec<u32> = bytes
            .chunks_exact(width)
            .map(|w| match width {
                4 => u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                _ => u16::from_le_bytes([w[0], w[1]]) as u32,
            })
            .collect();
        let sign = 1u32 << (width * 8 - 1);
        let nonzero = words.iter().filter(|w| **w & !sign != 0).count();
        if words.is_empty() || nonzero < MIN_NONZERO {
            return None;
        }
        let ok = words
            .iter()
            .filter(|w| {
                let exp = ((**w & !sign) >> mant) as i32;
                **w & !sign == 0 || (exp != 0 && exp != top && (exp - bias).abs() <= 40)
            })
            .count();
        let permille = (ok * 1000 / words.len()) as u32;
        (permille >= NEED).then_some(Inferred {
            elem,
            plausible_permille: permille,
            values: words.len() as u32,
        })
    };
    // bf16 widened to f32 reads as bf16 with every other value zero: it is f32.
    let halves: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|w| u16::from_le_bytes([w[0], w[1]]))
        .collect();
    // (Read as bf16, such a low half is a signed zero: f32s holding small integers, or few
    // mantissa bits, have them too.)
    let low_zero = halves
        .iter()
        .step_by(2)
        .filter(|h| **h & 0x7fff == 0)
        .count();
    let high_nonzero = halves
        .iter()
        .skip(1)
        .step_by(2)
        .filter(|h| **h != 0)
        .count();
    let widened = high_nonzero >= MIN_NONZERO && low_zero * 10 >= halves.len().div_ceil(2) * 9;
    if !widened && octaves_as_bf16(halves.iter()) <= MAX_OCTAVES {
        if let Some(i) = judge(ElemType::Bf16) {
            return Some(i);
        }
    }
    // An f32's exponent is its high half's, read as bf16.
    let f32_ok = octaves_as_bf16(halves.iter().skip(1).step_by(2)) <= MAX_OCTAVES;
    f32_ok.then(|| judge(ElemType::F32)).flatten().or_else(|| {
        if widened {
            None
        } else {
            judge(ElemType::F16)
        }
    })
}

/// How many octaves the middle 90% of a tensor's magnitudes may span and still read as bf16:
/// f16 read as bf16 puts three mantissa bits into the exponent, spreading its values over eight
/// times as many octaves (a tensor between 0.01 and 3 reads as spanning about 60).
const MAX_OCTAVES: i32 = 20;

/// The span, in octaves, of the middle 90% of the nonzero finite bf16 values' exponents.
fn octaves_as_bf16<'a>(halves: impl Iterator<Item = &'a u16>) -> i32 {
    let mut exps: Vec<i32> = halves
        .map(|h| ((h >> 7) & 0xff) as i32)
        .filter(|e| *e != 0 && *e != 0xff)
        .collect();
    if exps.is_empty() {
        return 0;
    }
    exps.sort_unstable();
    let at = |q: usize| exps[(exps.len() - 1) * q / 100];
    at(95) - at(5)
}

/// A region pending on the device: one allocation a launch points into.
struct Pending {
    seq: u64,
    buf: BufferId,
    /// Where the hashed region starts in `buf`, and the buffer's size.
    start: u64,
    size: u64,
    chunks: u64,
    /// Its first hash slot, and its first word in the bitmap.
    slot: u64,
    word: u64,
    /// The launch's pointers into `buf`.
    ptrs: Vec<Ptr>,
}

/// One pointer of a pending region, with the sample slots of the bytes at it before and after
/// the launch.
#[derive(Clone, Copy)]
struct Ptr {
    param: usize,
    inner: Option<usize>,
    off: u64,
    /// Bytes sampled at the pointer (up to `SAMPLE`, to the buffer's end).
    len: u64,
    before: u64,
    after: u64,
}

/// The device side: the hash kernel, its hash slots, bitmap and samples.
struct Hasher {
    handle: KernelHandle,
    hashes: DevicePtr,
    bits: DevicePtr,
    samples: DevicePtr,
    hash_used: u64,
    bit_used: u64,
    sample_used: u64,
    sm: u32,
    chunk: u64,
    pending: Vec<Pending>,
}

impl Hasher {
    fn new(gpu: &dyn GpuBackend, chunk: u64) -> anyhow::Result<Hasher> {
        gpu.load_module(&wk::module())?;
        let handle = gpu.kernel(wk::MODULE, wk::KERNEL)?;
        let hashes = gpu.alloc((HASH_SLOTS * 8) as usize)?;
        let bits = gpu.alloc((BIT_WORDS * 4) as usize)?;
        let samples = gpu.alloc((SAMPLE_SLOTS * SAMPLE) as usize)?;
        gpu.memset(bits, 0, (BIT_WORDS * 4) as usize)?;
        Ok(Hasher {
            handle,
            hashes,
            bits,
            samples,
            hash_used: 0,
            bit_used: 0,
            sample_used: 0,
            sm: gpu.sm_count().unwrap_or(1).max(1),
            chunk,
            pending: Vec::new(),
        })
    }

    fn release(self, gpu: &dyn GpuBackend) {
        for p in [self.hashes, self.bits, self.samples] {
            if let Err(e) = gpu.free(p) {
                tracing::warn!("write extents: freeing a buffer of its own: {e:#}");
            }
        }
    }

    /// Whether `chunks` more hash slots, their bitmap and `samples` more samples fit the batch.
    fn fits(&self, chunks: u64, samples: u64) -> bool {
        self.hash_used + chunks <= HASH_SLOTS
            && self.bit_used + chunks.div_ceil(32) <= BIT_WORDS
            && self.sample_used + samples <= SAMPLE_SLOTS
    }

    /// Enqueue one pass over `bytes` at `p` on `stream`, its hashes at slot `slot`.
    #[allow(clippy::too_many_arguments)]
    fn pass(
        &self,
        gpu: &dyn GpuBackend,
        p: DevicePtr,
        bytes: u64,
        mode: u32,
        slot: u64,
        word: u64,
        stream: u64,
    ) -> anyhow::Result<()> {
        let chunks = bytes.div_ceil(self.chunk);
        let grid = chunks
            .div_ceil(wk::BLOCK as u64)
            .min(self.sm as u64 * 8)
            .max(1) as u32;
        let (b, c, m) = (
            bytes.to_le_bytes(),
            self.chunk.to_le_bytes(),
            mode.to_le_bytes(),
        );
        gpu.launch_typed(
            self.handle,
            [grid, 1, 1],
            [wk::BLOCK, 1, 1],
            0,
            stream,
            &[
                KernelArg::Buffer(p),
                KernelArg::Bytes(&b),
                KernelArg::Bytes(&c),
                KernelArg::Bytes(&m),
                KernelArg::Buffer(self.hashes.offset((slot * 8) as usize)),
                KernelArg::Buffer(self.bits.offset((word * 4) as usize)),
            ],
        )
    }

    /// Copy `len` bytes at `p` into the next sample slot, on `stream`; the slot.
    fn sample(
        &mut self,
        gpu: &dyn GpuBackend,
        p: DevicePtr,
        len: u64,
        stream: u64,
    ) -> anyhow::Result<u64> {
        let at = self.sample_used;
        gpu.copy_d2d_async(
            p,
            self.samples.offset((at * SAMPLE) as usize),
            len as usize,
            stream,
        )?;
        self.sample_used += 1;
        Ok(at)
    }

    /// Wait for every stream and turn the batch's bitmaps and samples into writes.
    fn flush(&mut self, gpu: &dyn GpuBackend, st: &State, out: &mut Collect) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        sync_all(gpu, st)?;
        let mut bits = vec![0u8; (self.bit_used * 4) as usize];
        gpu.copy_d2h(self.bits, &mut bits)?;
        let mut samples = vec![0u8; (self.sample_used * SAMPLE) as usize];
        if !samples.is_empty() {
            gpu.copy_d2h(self.samples, &mut samples)?;
        }
        for p in std::mem::take(&mut self.pending) {
            let words =
                &bits[(p.word * 4) as usize..((p.word + p.chunks.div_ceil(32)) * 4) as usize];
            let changed = changed_ranges(words, p.chunks, p.start, self.chunk, p.size);
            out.add(&p, &changed, &samples);
        }
        gpu.memset(self.bits, 0, (self.bit_used * 4) as usize)?;
        self.hash_used = 0;
        self.bit_used = 0;
        self.sample_used = 0;
        Ok(())
    }
}

/// The byte ranges whose chunk's bit is set, merged, clipped to the buffer's `size`.
fn changed_ranges(words: &[u8], chunks: u64, start: u64, chunk: u64, size: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for c in 0..chunks {
        let (w, b) = ((c / 32) as usize, c % 32);
        let word = u32::from_le_bytes(words[w * 4..w * 4 + 4].try_into().unwrap());
        if word & (1 << b) == 0 {
            continue;
        }
        let (a, z) = (start + c * chunk, (start + (c + 1) * chunk).min(size));
        match out.last_mut() {
            Some(last) if last.1 == a => last.1 = z,
            _ => out.push((a, z)),
        }
    }
    out
}

/// Split changed byte ranges among pointers into the same buffer: a byte belongs to the
/// pointer at the highest offset at or before it; bytes before every pointer (the first
/// chunk's part before it) belong to none. Pointers at the same offset share their bytes.
fn split(changed: &[(u64, u64)], offsets: &[u64]) -> HashMap<u64, Vec<(u64, u64)>> {
    let mut sorted: Vec<u64> = offsets.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: HashMap<u64, Vec<(u64, u64)>> = HashMap::default();
    for &(a, z) in changed {
        for (i, &off) in sorted.iter().enumerate() {
            let next = sorted.get(i + 1).copied().unwrap_or(u64::MAX);
            let (s, e) = (a.max(off), z.min(next));
            if s < e {
                out.entry(off).or_default().push((s, e));
            }
        }
    }
    out
}

/// The byte ranges where `before` and `after` (sampled at offset `off`) differ, aligned to 8
/// bytes from the pointer (a value's bytes that happen to be unchanged do not split it), gaps
/// under 64 bytes closed; the first starts at the pointer, where the tensor does.
fn exact(before: &[u8], after: &[u8], off: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (i, (x, y)) in before.iter().zip(after).enumerate() {
        if x == y {
            continue;
        }
        let (a, z) = (i as u64 / 8 * 8, (i as u64 / 8 + 1) * 8);
        match out.last_mut() {
            Some(last) if a <= last.1 + 64 => last.1 = last.1.max(z),
            _ => out.push((a, z)),
        }
    }
    if let Some(first) = out.first_mut() {
        first.0 = 0;
    }
    let len = before.len().min(after.len()) as u64;
    out.into_iter()
        .map(|(a, z)| (off + a, off + z.min(len)))
        .collect()
}

/// Merge `more` into sorted, disjoint `ranges`.
fn merge(ranges: &mut Vec<(u64, u64)>, more: &[(u64, u64)]) {
    ranges.extend_from_slice(more);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(a, z) in ranges.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(z),
            _ => out.push((a, z)),
        }
    }
    *ranges = out;
}

/// The measurements as they come back, by seq. Every pointer of every launch is measured:
/// a parameter that wrote nothing in earlier launches may write now (a benchmark loop writes
/// the same values again and again, then the real call writes a NaN).
#[derive(Default)]
struct Collect {
    launches: HashMap<u64, LaunchWrites>,
}

impl Collect {
    fn add(&mut self, p: &Pending, changed: &[(u64, u64)], samples: &[u8]) {
        let offsets: Vec<u64> = p.ptrs.iter().map(|x| x.off).collect();
        let mut by_off = split(changed, &offsets);
        let l = self.launches.entry(p.seq).or_insert_with(|| LaunchWrites {
            seq: p.seq,
            kernel: String::new(),
            pointers: Vec::new(),
        });
        for ptr in &p.ptrs {
            let (param, inner, off) = (ptr.param, ptr.inner, ptr.off);
            let sample = |slot: u64| {
                let at = (slot * SAMPLE) as usize;
                samples.get(at..at + ptr.len as usize)
            };
            let (before, after) = (sample(ptr.before), sample(ptr.after));
            let mut ranges = by_off.get(&off).cloned().unwrap_or_default();
            // Changes that all lie in the bytes sampled at the pointer are known exactly.
            if let (Some(b), Some(a), Some(last)) = (before, after, ranges.last()) {
                if last.1 <= off + ptr.len {
                    ranges = exact(b, a, off);
                }
            }
            // The sample is the first bytes at the pointer; only what was written counts.
            let inferred = after.and_then(|a| {
                let (s, e) = *ranges.first()?;
                (s == off).then_some(())?;
                infer(a.get(..(e - s).min(ptr.len) as usize)?)
            });
            match l
                .pointers
                .iter_mut()
                .find(|x| x.param == param && x.inner == inner && x.buf == p.buf && x.off == off)
            {
                Some(x) => {
                    merge(&mut x.ranges, &ranges);
                    x.inferred = x.inferred.or(inferred);
                }
                None => l.pointers.push(PointerWrites {
                    param,
                    inner,
                    buf: p.buf,
                    off,
                    ranges,
                    inferred,
                }),
            }
        }
        by_off.clear();
    }
}

/// A launch's pointer arguments into live buffers: (param, inner, buffer, offset).
fn pointers(args: &[Arg]) -> Vec<(usize, Option<usize>, BufferId, u64)> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        match a {
            Arg::Buf(DevAddr::Buf { buf, off }) => out.push((i, None, *buf, *off)),
            Arg::Words(w) => {
                for (j, (_, d)) in w.ptrs.iter().enumerate() {
                    if let DevAddr::Buf { buf, off } = d {
                        out.push((i, Some(j), *buf, *off));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

impl Replayer<'_> {
    /// Replay the trace on `gpu`, measuring what every launch wrote (see the module docs).
    /// `key` is the trace's blake3 (`trace_key`), kept with the result.
    pub fn measure_writes(
        &self,
        gpu: &dyn GpuBackend,
        opts: &WriteOptions,
        key: String,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<WriteExtents, ReplayError> {
        let t0 = Instant::now();
        if opts.chunk < 4 || !opts.chunk.is_power_of_two() {
            return Err(ReplayError::Setup {
                what: "measuring writes".into(),
                cause: format!(
                    "a chunk of {} bytes: it must be a power of two, at least 4",
                    opts.chunk
                ),
            });
        }
        let kernels = self.kernels(gpu, loader)?;
        let mut guard = Guard {
            r: self,
            gpu,
            st: State::new(&kernels),
        };
        self.setup(gpu, &mut guard.st)?;
        let mut hasher = Hasher::new(gpu, opts.chunk).map_err(|e| ReplayError::Setup {
            what: "loading the write-extent hash kernel".into(),
            cause: format!("{e:#}"),
        })?;
        let mut out = WriteExtents {
            format: FORMAT,
            trace: key,
            chunk: opts.chunk,
            ..Default::default()
        };
        let mut got = Collect::default();
        let st = &mut guard.st;
        let mut unmeasured: HashSet<String> = HashSet::default();
        for (c, graph) in self.eager_calls() {
            let step =
                self.measure_one(gpu, st, &mut hasher, &mut got, c, &mut out, &mut unmeasured);
            if let Err(e) = step {
                out.stopped = Some(e);
                break;
            }
            if graph.is_some() && c.call.launch().is_some() {
                if let Err(e) = sync_all(gpu, st) {
                    out.stopped = Some(format!("graph node #{}: {e:#}", c.seq));
                    break;
                }
            }
        }
        if let Err(e) = hasher.flush(gpu, st, &mut got) {
            out.stopped
                .get_or_insert(format!("reading the measurements back: {e:#}"));
        }
        hasher.release(gpu);
        drop(guard);
        for (seq, mut l) in got.launches {
            l.kernel = self
                .by_seq
                .get(&seq)
                .and_then(|c| c.call.launch())
                .map(|(k, _)| self.trace.kernel_name(k))
                .unwrap_or_default();
            l.pointers.sort_by_key(|p| (p.param, p.inner));
            out.launches.push(l);
        }
        out.unmeasured = unmeasured.into_iter().collect();
        out.unmeasured.sort();
        out.index();
        out.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(out)
    }

    /// Issue one call, with a launch's hashes around it; an error that stops the measurement.
    #[allow(clippy::too_many_arguments)]
    fn measure_one(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        hasher: &mut Hasher,
        got: &mut Collect,
        c: &CallRecord,
        out: &mut WriteExtents,
        unmeasured: &mut HashSet<String>,
    ) -> Result<(), String> {
        let fail = |e: &dyn std::fmt::Display| {
            format!("call #{} at {}: {e}", c.seq, self.trace.site(c.site))
        };
        let launch = c.call.launch().filter(|(k, _)| !st.opaque.contains(k));
        if let Some((k, _)) = c.call.launch().filter(|(k, _)| st.opaque.contains(k)) {
            unmeasured.insert(format!(
                "{}: this backend cannot run it",
                self.trace.kernel_name(k)
            ));
        }
        let mut regions: Vec<Pending> = Vec::new();
        let mut stream = 0;
        if let Some((kernel, args)) = launch {
            out.replayed += 1;
            if let Some(s) = c.call.work_stream() {
                stream = resolve_stream(st, s, c).map_err(|e| fail(&e))?;
            }
            for (param, inner, buf, off) in pointers(args) {
                let Some((_, size)) = st.bufs.get(&buf).copied() else {
                    continue;
                };
                if off >= size {
                    continue;
                }
                match regions.iter_mut().find(|r| r.buf == buf) {
                    Some(r) => {
                        r.start = r.start.min(off / hasher.chunk * hasher.chunk);
                        r.ptrs.push(Ptr {
                            param,
                            inner,
                            off,
                            len: SAMPLE.min(size - off),
                            before: 0,
                            after: 0,
                        });
                    }
                    None => regions.push(Pending {
                        seq: c.seq,
                        buf,
                        start: off / hasher.chunk * hasher.chunk,
                        size,
                        chunks: 0,
                        slot: 0,
                        word: 0,
                        ptrs: vec![Ptr {
                            param,
                            inner,
                            off,
                            len: SAMPLE.min(size - off),
                            before: 0,
                            after: 0,
                        }],
                    }),
                }
            }
            for r in regions.iter_mut() {
                r.chunks = (r.size - r.start).div_ceil(hasher.chunk);
            }
            let chunks: u64 = regions.iter().map(|r| r.chunks).sum();
            let samples: u64 = 2 * regions.iter().map(|r| r.ptrs.len() as u64).sum::<u64>();
            if !hasher.fits(chunks, samples) || hasher.pending.len() + regions.len() > MAX_PENDING {
                hasher
                    .flush(gpu, st, got)
                    .map_err(|e| fail(&format!("{e:#}")))?;
            }
            if !hasher.fits(chunks, samples) {
                unmeasured.insert(format!(
                    "#{} {}: its regions ({} chunks) exceed what one batch holds",
                    c.seq,
                    self.trace.kernel_name(kernel),
                    chunks
                ));
                regions.clear();
            }
            for r in regions.iter_mut() {
                let (base, _) = st.bufs[&r.buf];
                r.word = hasher.bit_used;
                r.slot = hasher.hash_used;
                hasher.hash_used += r.chunks;
                hasher.bit_used += r.chunks.div_ceil(32);
                out.bytes_hashed += 2 * (r.size - r.start);
                hasher
                    .pass(
                        gpu,
                        base.offset(r.start as usize),
                        r.size - r.start,
                        wk::STORE,
                        r.slot,
                        r.word,
                        stream,
                    )
                    .map_err(|e| fail(&format!("{e:#}")))?;
                for p in r.ptrs.iter_mut() {
                    p.before = hasher
                        .sample(gpu, base.offset(p.off as usize), p.len, stream)
                        .map_err(|e| fail(&format!("keeping what it held: {e:#}")))?;
                }
            }
        }
        if let Some(e) = self.issue_checked(gpu, st, c)? {
            return Err(fail(&e));
        }
        for mut r in regions {
            let (base, _) = st.bufs[&r.buf];
            let bytes = r.size - r.start;
            hasher
                .pass(
                    gpu,
                    base.offset(r.start as usize),
                    bytes,
                    wk::COMPARE,
                    r.slot,
                    r.word,
                    stream,
                )
                .map_err(|e| fail(&format!("{e:#}")))?;
            for p in r.ptrs.iter_mut() {
                p.after = hasher
                    .sample(gpu, base.offset(p.off as usize), p.len, stream)
                    .map_err(|e| fail(&format!("keeping what it wrote: {e:#}")))?;
            }
            hasher.pending.push(r);
        }
        Ok(())
    }

    /// Issue `c`; the error that stops the measurement, if it failed where the recording did
    /// not.
    fn issue_checked(
        &self,
        gpu: &dyn GpuBackend,
        st: &mut State,
        c: &CallRecord,
    ) -> Result<Option<String>, String> {
        match self.issue(gpu, st, c, false) {
            Err(e) => Err(format!(
                "call #{} at {}: {e}",
                c.seq,
                self.trace.site(c.site)
            )),
            Ok(Outcome::Failed(e)) if !matches!(c.ret, Some(Err(_))) => Ok(Some(format!("{e:#}"))),
            Ok(_) => Ok(None),
        }
    }
}

/// Whether a check of `t` needs measured writes: some launch passes a pointer to a kernel whose
/// owner declared nothing about its parameters (a driver-level recording's kernels).
pub fn wanted(t: &Trace) -> bool {
    let undeclared: HashSet<KernelId> = t
        .kernels
        .iter()
        .filter(|(_, k)| {
            k.params
                .iter()
                .all(|p| p.access == crate::backend::ParamAccess::Unknown)
        })
        .map(|(id, _)| *id)
        .collect();
    !undeclared.is_empty()
        && t.calls.iter().any(|c| {
            c.call
                .launch()
                .is_some_and(|(k, args)| undeclared.contains(&k) && !pointers(args).is_empty())
        })
}

impl Replayer<'_> {
    /// The writes a check of the trace at `path` uses: the stored measurement beside it when it
    /// was made for this file, else measured now on `gpu` and stored there (a directory that
    /// cannot be written to only costs the next check the measurement again). Also a line
    /// saying which.
    pub fn writes_for(
        &self,
        gpu: &dyn GpuBackend,
        path: &Path,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<(WriteExtents, String), ReplayError> {
        let opts = WriteOptions::default();
        let stored = WriteExtents::path_for(path);
        let key = match path.is_file() {
            true => trace_key(path).ok(),
            false => None,
        };
        if let Some(k) = &key {
            match WriteExtents::load(&stored, k, opts.chunk) {
                Ok(Some(w)) => {
                    let note = format!("write extents: read from {}", stored.display());
                    return Ok((w, note));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("{e}; measuring again"),
            }
        }
        let w = self.measure_writes(gpu, &opts, key.clone().unwrap_or_default(), loader)?;
        let note = match (&key, &w.stopped) {
            _ if w.launches.is_empty() => {
                "write extents: none measured (this backend runs none of the trace's kernels)"
                    .to_string()
            }
            (Some(_), None) => match w.save(&stored) {
                Ok(()) => format!(
                    "write extents: measured at replay in {:.0} ms, stored in {}",
                    w.elapsed_ms,
                    stored.display()
                ),
                Err(e) => format!("write extents: measured at replay ({e}: not stored)"),
            },
            (_, Some(e)) => format!("write extents: measured up to where the replay stopped ({e})"),
            (None, None) => "write extents: measured at replay".to_string(),
        };
        Ok((w, note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_chunks_become_ranges_clipped_to_the_buffer() {
        // Chunks 0, 1 and 3 of 4 changed; 16-byte chunks from offset 32 of a 90-byte buffer.
        let words = 0b1011u32.to_le_bytes();
        assert_eq!(
            changed_ranges(&words, 4, 32, 16, 90),
            vec![(32, 64), (80, 90)]
        );
    }

    #[test]
    fn changes_split_at_the_pointers_and_bytes_before_them_are_nobody_s() {
        let got = split(&[(0, 100), (200, 300)], &[10, 50, 50, 250]);
        assert_eq!(got[&10], vec![(10, 50)]);
        assert_eq!(got[&50], vec![(50, 100), (200, 250)]);
        assert_eq!(got[&250], vec![(250, 300)]);
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn types_are_inferred_from_the_bytes_only_when_they_say_one() {
        let vals: Vec<f32> = (0..256)
            .map(|i| ((i as f32) * 0.37).sin() * 3.0 + 0.01)
            .collect();
        let f32s: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf16s: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let f16s: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let widened: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_f32().to_le_bytes())
            .collect();
        assert_eq!(infer(&f32s).map(|i| i.elem), Some(ElemType::F32));
        assert_eq!(infer(&bf16s).map(|i| i.elem), Some(ElemType::Bf16));
        assert_eq!(infer(&f16s).map(|i| i.elem), Some(ElemType::F16));
        assert_eq!(infer(&widened).map(|i| i.elem), Some(ElemType::F32));
        assert_eq!(infer(&[0u8; 1024]), None, "zeros say nothing");
        let ints: Vec<u8> = (0..512u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            infer(&ints).map(|i| i.elem),
            None,
            "small integers are no float"
        );
    }
}
