//! What each launch wrote, measured by replaying it: the bytes a compiled kernel nobody
//! described (PyTorch's, cuBLAS's, Triton's) changed, split into the tensors its pointers
//! name, and the element type those bytes read as.
//!
//! A driver-level recording knows a launch's pointer arguments but not how far each reaches or
//! whether the kernel writes through it, and a caching allocator puts many tensors in one
//! allocation. So the replay measures: for each allocation a launch points into, the region
//! from its lowest pointer to the allocation's end (or `WriteOptions::reach` past its last
//! pointer, for allocations of tens of GB) is hashed in chunks before the launch and
//! again after it, on the launch's stream (`kernel.rs`), and the chunks whose hash changed
//! are what it wrote. Other pointers into the same allocation only split the changed bytes into
//! tensors: a change belongs to the pointer at or before it, so a view longer than the gap to
//! the next pointer (a fused QKV buffer) keeps its whole extent only where no other argument
//! points inside it. Pointers at the same address are each listed as possible writers.
//!
//! What it cannot see, said where it is used: a write of the value already there (fine for NaN
//! hunting; `--against` keeps comparing from the pointer to the end for a parameter measured
//! writing in another launch of the kernel), writes through pointers held in device memory
//! (pointer tables), and bytes finer than a chunk (512 bytes by default, PyTorch's block
//! rounding, so a chunk never spans two of its tensors) beyond the 4 KiB at each pointer, which
//! are kept before and after the launch and compared byte for byte. Other streams' work that
//! runs between the two hashes is counted as the launch's: graph nodes run one at a time here,
//! as in the value checks.
//!
//! The bytes kept after the launch also give an element type (`infer.rs`) for kernels whose
//! names say none, and confirm an `nvjet` name's undocumented type code or not. The result is stored beside the trace
//! (`TRACE.writes.json`, keyed by the trace's blake3) so later checks need not measure again.

mod infer;
mod kernel;
mod measure;

pub use infer::infer;

use super::views::launch_pointers as pointers;
use super::{ModuleLoader, ReplayError, Replayer};
use crate::backend::{ElemType, GpuBackend};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bytes per hashed chunk by default: PyTorch's caching allocator rounds blocks to 512.
pub const CHUNK: u64 = 512;
/// The file format's version.
const FORMAT: u32 = 1;
/// The largest stored file read back (it is untrusted input like the trace).
const MAX_FILE: u64 = 256 << 20;

/// How the measurement runs.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Bytes per hashed chunk (a power of two, at least 4): what the extents are rounded to.
    pub chunk: u64,
    /// How far past its last pointer a region is hashed. An allocation can be one tensor or a
    /// whole process's memory (PyTorch's expandable segments map it all into one reservation,
    /// tens of GB): a launch's pointers further apart than this are hashed as separate regions,
    /// and a write running further than this past the last pointer before it is cut there
    /// (`WriteExtents::bounded` counts the regions that stop short of their allocation's end).
    pub reach: u64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            chunk: CHUNK,
            reach: 1 << 30,
        }
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
    /// Regions hashed only to `reach` past their last pointer, short of their allocation's
    /// end (a write running further than that is cut there).
    #[serde(default)]
    pub bounded: u64,
    /// `WriteOptions::reach` of the measurement.
    #[serde(default)]
    pub reach: u64,
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
        if self.bounded > 0 {
            let _ = writeln!(
                s,
                "  {} regions were hashed only to {} past their last pointer (their allocation runs further): a write past that is not seen",
                self.bounded,
                super::finite::bytes_text(self.reach)
            );
        }
        let sites: HashMap<u64, SiteId> = t.calls.iter().map(|c| (c.seq, c.site)).collect();
        for l in &self.launches {
            let site = sites.get(&l.seq).map(|s| t.site(*s)).unwrap_or_default();
            let _ = writeln!(s, "#{} {} @ {site}", l.seq, l.kernel);
            for p in &l.pointers {
                let name = match p.inner {
                    Some(j) => format!("parameter {} pointer {j}", p.param),
                    None => format!("parameter {}", p.param),
                };
                if p.ranges.is_empty() {
                    let _ = writeln!(
                        s,
                        "  {name} = {}+{}: no byte changed (read only, or it wrote what was there)",
                        p.buf, p.off
                    );
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

    /// `self`, if every range it holds lies inside a buffer of `t` (a stored file is untrusted
    /// input: a range past its buffer would make a check read past it on the device); else an
    /// error naming the first that does not.
    pub fn checked(self, t: &Trace, path: &Path) -> Result<WriteExtents, WritesError> {
        for l in &self.launches {
            for p in &l.pointers {
                let size = t.sizes.get(&p.buf).copied().unwrap_or(0);
                let mut at = p.off;
                let fits = p.off < size
                    && p.ranges.iter().all(|(a, z)| {
                        let ok = at <= *a && a < z && *z <= size;
                        at = *z;
                        ok
                    });
                if !fits {
                    return Err(WritesError::Stored {
                        path: path.to_path_buf(),
                        why: format!(
                            "launch #{} parameter {}: {}+{} ranges {:?} do not lie in order inside its {size} bytes",
                            l.seq, p.param, p.buf, p.off, p.ranges
                        ),
                    });
                }
            }
        }
        Ok(self)
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
            let loaded = WriteExtents::load(&stored, k, opts.chunk)
                .and_then(|w| w.map(|w| w.checked(self.trace, &stored)).transpose());
            match loaded {
                Ok(Some(w)) => {
                    let note = format!("write extents: read from {}", stored.display());
                    return Ok((w, note));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("{e}; measuring again"),
            }
        }
        self.measure_and_store(gpu, path, key, loader)
    }

    /// Measure what each launch of the trace at `path` writes on `gpu` and store it beside the
    /// trace (`key`: the trace file's blake3, `None` when it is no file: nothing stored); also
    /// a line saying what was measured and where it went.
    pub fn measure_and_store(
        &self,
        gpu: &dyn GpuBackend,
        path: &Path,
        key: Option<String>,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<(WriteExtents, String), ReplayError> {
        let opts = WriteOptions::default();
        let stored = WriteExtents::path_for(path);
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
