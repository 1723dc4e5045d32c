//! What the value checks (`--check-finite`, `--against`) share: the calls in the order they
//! ran with every graph's captured calls run eagerly in its launch's place, and a launch's
//! pointer arguments as typed ranges of buffers.

use super::Replayer;
use crate::backend::{ElemType, ParamAccess};
use crate::trace::kernel_types::{self, TypeRule};
use crate::trace::signature::{pointer_params, PointerParam};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A pointer argument of a launch: the range from the pointer to the end of its buffer (the
/// trace has no write extents), what it holds where known and how that was known, and whether
/// the launch may write it.
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub param: usize,
    /// Which pointer inside a by-value parameter it is (PyTorch's array of data pointers, a
    /// GEMM's parameter struct), counted from 0; `None` for a pointer parameter.
    pub inner: Option<usize>,
    pub buf: BufferId,
    pub off: u64,
    /// Bytes from the pointer to the end of the buffer.
    pub bytes: u64,
    pub elem: Option<ElemType>,
    /// Where `elem` came from (`--dtype`, `declared`, `its C signature`, a name rule's words).
    pub how: &'static str,
    pub written: bool,
}

/// Where element types come from beyond the trace, and what to leave out.
#[derive(Default)]
pub(super) struct Typing<'a> {
    pub dtypes: &'a [(BufferId, ElemType)],
    pub rules: &'a [TypeRule],
    pub ignore: &'a [BufferId],
    /// Pointer parameters per kernel, from its C signature (cached).
    ptrs: HashMap<KernelId, Option<Vec<Option<PointerParam>>>>,
    /// Written pointers whose type may be a float the trace does not name: `kernel parameter i`.
    pub untyped: Vec<String>,
}

impl<'a> Typing<'a> {
    pub fn new(
        dtypes: &'a [(BufferId, ElemType)],
        rules: &'a [TypeRule],
        ignore: &'a [BufferId],
    ) -> Self {
        Typing {
            dtypes,
            rules,
            ignore,
            ..Default::default()
        }
    }

    /// The launch's pointer arguments into buffers (and the pointers inside its by-value
    /// parameters), each typed by `--dtype`, else by the kernel's declared element types, else
    /// by its C signature, else by a `--dtype` rule or what its name says
    /// (`trace::kernel_types`).
    pub fn views(&mut self, t: &Trace, kernel: KernelId, args: &[Arg]) -> Vec<View> {
        let info = t.kernels.get(&kernel);
        let ptrs = self
            .ptrs
            .entry(kernel)
            .or_insert_with(|| {
                let info = info?;
                let m = t.modules.iter().find(|m| m.name == info.module)?;
                pointer_params(m.source.as_deref()?, &info.name)
            })
            .clone();
        let symbol = info.map_or("", |k| k.name.as_str());
        let mut out = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let pointers: Vec<(Option<usize>, &BufferId, u64)> = match a {
                Arg::Buf(DevAddr::Buf { buf, off }) => vec![(None, buf, *off)],
                Arg::Words(w) => w
                    .ptrs
                    .iter()
                    .enumerate()
                    .filter_map(|(j, (_, d))| match d {
                        DevAddr::Buf { buf, off } => Some((Some(j), buf, *off)),
                        _ => None,
                    })
                    .collect(),
                _ => continue,
            };
            for (inner, buf, off) in pointers {
                if self.ignore.contains(buf) {
                    continue;
                }
                let sig = ptrs.as_ref().and_then(|p| p.get(i).copied().flatten());
                let access = info
                    .and_then(|k| k.params.get(i))
                    .map_or(ParamAccess::Unknown, |p| p.access);
                let written = writes_through(access, sig);
                let given = self.dtypes.iter().find(|(b, _)| b == buf).map(|(_, e)| *e);
                let declared = info
                    .filter(|_| inner.is_none())
                    .and_then(|k| k.elems.get(i).copied().flatten());
                let signature = sig.and_then(|p| p.elem);
                let named = || {
                    let typed = kernel_types::type_of(self.rules, symbol, i, inner)?;
                    let how = match typed.how {
                        kernel_types::How::Rule(_) => "a --dtype rule",
                        kernel_types::How::Template => "its name's template arguments",
                        kernel_types::How::GemmName => "its cuBLAS/CUTLASS name",
                    };
                    Some((typed.ty.scannable(), how))
                };
                let (elem, how) = match (given, declared, signature) {
                    (Some(e), _, _) => (Some(e), "--dtype"),
                    (None, Some(e), _) => (
                        Some(e),
                        info.and_then(|k| kernel_types::declared_by_triton(t, &k.module))
                            .unwrap_or("declared"),
                    ),
                    (None, None, Some(e)) => (Some(e), "its C signature"),
                    (None, None, None) => named().unwrap_or((None, "")),
                };
                if elem.is_none() && written && sig.is_none_or(|p| p.maybe_float) && how.is_empty()
                {
                    let name = match inner {
                        Some(j) => format!("{} parameter {i} pointer {j}", t.kernel_name(kernel)),
                        None => format!("{} parameter {i}", t.kernel_name(kernel)),
                    };
                    if !self.untyped.contains(&name) {
                        self.untyped.push(name);
                    }
                }
                let bytes = t.sizes.get(buf).copied().unwrap_or(0).saturating_sub(off);
                let misaligned = elem.is_some_and(|e| off % e.size() != 0);
                if bytes == 0 || misaligned {
                    continue;
                }
                out.push(View {
                    param: i,
                    inner,
                    buf: *buf,
                    off,
                    bytes,
                    elem,
                    how,
                    written,
                });
            }
        }
        out
    }
}

impl<'t> Replayer<'t> {
    /// The calls in the order a value check replays them: captures are not replayed as
    /// captures; each graph launch is replaced by its captured calls, tagged with (the launch's
    /// seq, the graph).
    pub(super) fn eager_calls(&self) -> Vec<(&'t CallRecord, Option<(u64, GraphId)>)> {
        let captured: HashSet<u64> = self.captured.values().flatten().copied().collect();
        let mut out = Vec::new();
        for c in &self.trace.calls {
            if captured.contains(&c.seq) {
                continue;
            }
            match &c.call {
                Call::BeginCapture { .. }
                | Call::EndCapture { .. }
                | Call::DestroyGraph { .. }
                | Call::AbortCaptureIfActive { .. } => {}
                Call::LaunchGraph { graph, .. } => {
                    for s in self.captured.get(graph).into_iter().flatten() {
                        if let Some(n) = self.by_seq.get(s) {
                            out.push((*n, Some((c.seq, *graph))));
                        }
                    }
                }
                _ => out.push((c, None)),
            }
        }
        out
    }
}
