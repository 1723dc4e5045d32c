//! What the value checks (`--check-finite`, `--against`) share: the calls in the order they
//! ran with every graph's captured calls run eagerly in its launch's place, and a launch's
//! pointer arguments as typed ranges of buffers.

use super::Replayer;
use crate::backend::{ElemType, ParamAccess};
use crate::trace::signature::{pointer_params, PointerParam};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A pointer argument of a launch: the range from the pointer to the end of its buffer (the
/// trace has no write extents), what it holds where known, and whether the launch may write it.
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub param: usize,
    pub buf: BufferId,
    pub off: u64,
    /// Bytes from the pointer to the end of the buffer.
    pub bytes: u64,
    pub elem: Option<ElemType>,
    pub written: bool,
}

/// Where element types come from beyond the trace, and what to leave out.
#[derive(Default)]
pub(super) struct Typing<'a> {
    pub dtypes: &'a [(BufferId, ElemType)],
    pub ignore: &'a [BufferId],
    /// Pointer parameters per kernel, from its C signature (cached).
    ptrs: HashMap<KernelId, Option<Vec<Option<PointerParam>>>>,
    /// Written pointers whose type may be a float the trace does not name: `kernel parameter i`.
    pub untyped: Vec<String>,
}

impl<'a> Typing<'a> {
    pub fn new(dtypes: &'a [(BufferId, ElemType)], ignore: &'a [BufferId]) -> Self {
        Typing {
            dtypes,
            ignore,
            ..Default::default()
        }
    }

    /// The launch's pointer arguments into buffers, each typed by `--dtype`, else by the
    /// kernel's declared element types, else by its C signature.
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
        let mut out = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let Arg::Buf(DevAddr::Buf { buf, off }) = a else {
                continue;
            };
            if self.ignore.contains(buf) {
                continue;
            }
            let sig = ptrs.as_ref().and_then(|p| p.get(i).copied().flatten());
            let access = info
                .and_then(|k| k.params.get(i))
                .map_or(ParamAccess::Unknown, |p| p.access);
            let written = writes_through(access, sig);
            let elem = self
                .dtypes
                .iter()
                .find(|(b, _)| b == buf)
                .map(|(_, e)| *e)
                .or_else(|| info.and_then(|k| k.elems.get(i).copied().flatten()))
                .or(sig.and_then(|p| p.elem));
            if elem.is_none() && written && sig.is_none_or(|p| p.maybe_float) {
                let name = format!("{} parameter {i}", t.kernel_name(kernel));
                if !self.untyped.contains(&name) {
                    self.untyped.push(name);
                }
            }
            let bytes = t.sizes.get(buf).copied().unwrap_or(0).saturating_sub(*off);
            let misaligned = elem.is_some_and(|e| off % e.size() != 0);
            if bytes == 0 || misaligned {
                continue;
            }
            out.push(View {
                param: i,
                buf: *buf,
                off: *off,
                bytes,
                elem,
                written,
            });
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
