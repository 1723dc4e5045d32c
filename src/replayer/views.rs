//! What the value checks (`--check-finite`, `--against`) share: the calls in the order they
//! ran with every graph's captured calls run eagerly in its launch's place, and a launch's
//! pointer arguments as typed ranges of buffers.

use super::Replayer;
use crate::backend::{ElemType, ParamAccess};
use crate::trace::kernel_types::{self, TypeRule};
use crate::trace::signature::{pointer_params, pointer_params_from_name, PointerParam};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// A pointer argument of a launch: the bytes it wrote where a replay measured them
/// (`writes`), else the range from the pointer to the end of its buffer; what it holds where
/// known and how that was known, and whether the launch may write it.
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub param: usize,
    /// Which pointer inside a by-value parameter it is (PyTorch's array of data pointers, a
    /// GEMM's parameter struct), counted from 0; `None` for a pointer parameter.
    pub inner: Option<usize>,
    pub buf: BufferId,
    /// Where the range starts: the pointer, or the first byte it was measured writing.
    pub off: u64,
    /// Bytes in the range.
    pub bytes: u64,
    /// The range is what a replay measured the launch writing, not the pointer to the end.
    pub measured: bool,
    pub elem: Option<ElemType>,
    /// Where `elem` came from (`--dtype`, `declared`, `its C signature`, a name rule's words).
    pub how: &'static str,
    pub written: bool,
}

/// How a type inferred from the bytes a launch wrote is named: a guess, so a NaN found only
/// under it is reported as suspected.
pub(super) const GUESS: &str = "the bytes it wrote (inferred: a guess)";
/// The same, where the bytes disagree with an `nvjet` name's type code.
pub(super) const GUESS_AGAINST_CODE: &str =
    "the bytes it wrote (inferred: a guess, against its nvjet type code)";

/// Whether a type was guessed (from bytes, or an unconfirmed `nvjet` code).
pub(super) fn is_guess(how: &str) -> bool {
    how == GUESS || how == GUESS_AGAINST_CODE || how.ends_with("(unconfirmed)")
}

/// A kernel's parameters as pointers (`None`: a value), and whether that came from its
/// mangled name rather than its C source.
type Pointers = (Vec<Option<PointerParam>>, bool);

/// Where element types come from beyond the trace, and what to leave out.
#[derive(Default)]
pub(super) struct Typing<'a> {
    pub dtypes: &'a [(BufferId, ElemType)],
    pub rules: &'a [TypeRule],
    pub ignore: &'a [BufferId],
    /// Pointer parameters per kernel, from its C signature or else its mangled name, and
    /// whether from the name (cached).
    ptrs: HashMap<KernelId, Option<Pointers>>,
    /// Written pointers whose type may be a float the trace does not name: `kernel parameter i`.
    pub untyped: Vec<String>,
    /// What a replay measured each launch writing (`writes`): decides whether an undeclared
    /// pointer is written, and how far.
    pub writes: Option<&'a super::writes::WriteExtents>,
    /// A parameter measured writing in some launch of its kernel counts as written where a
    /// launch changed nothing through it (it may have written the values already there):
    /// what `--against` needs, which compares whole regions.
    pub same_value_writes: bool,
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

    /// The launch `seq`'s pointer arguments into buffers (and the pointers inside its by-value
    /// parameters), each typed by `--dtype`, else by the kernel's declared element types, else
    /// by its C signature, else by a `--dtype` rule or what its name says
    /// (`trace::kernel_types`), else by the bytes a replay measured it writing (a guess).
    pub fn views(&mut self, t: &Trace, seq: u64, kernel: KernelId, args: &[Arg]) -> Vec<View> {
        let info = t.kernels.get(&kernel);
        let ptrs = self
            .ptrs
            .entry(kernel)
            .or_insert_with(|| {
                let info = info?;
                let source = t
                    .modules
                    .iter()
                    .find(|m| m.name == info.module)
                    .and_then(|m| m.source.as_deref());
                match source.and_then(|src| pointer_params(src, &info.name)) {
                    Some(p) => Some((p, false)),
                    None => pointer_params_from_name(&info.name).map(|p| (p, true)),
                }
            })
            .clone();
        let (ptrs, sig_how) = match ptrs {
            Some((p, true)) => (Some(p), "its mangled name's parameter types"),
            Some((p, false)) => (Some(p), "its C signature"),
            None => (None, ""),
        };
        let symbol = info.map_or("", |k| k.name.as_str());
        let mut out = Vec::new();
        for (i, inner, buf, off) in launch_pointers(args) {
            let buf = &buf;
            if self.ignore.contains(buf) {
                continue;
            }
            let sig = ptrs.as_ref().and_then(|p| p.get(i).copied().flatten());
            let access = info
                .and_then(|k| k.params.get(i))
                .map_or(ParamAccess::Unknown, |p| p.access);
            let mut written = writes_through(access, sig);
            let size = t.sizes.get(buf).copied().unwrap_or(0);
            let mut range = (off, size.saturating_sub(off));
            // Declared access is the owner's word; anything else is what was measured.
            let undeclared = !matches!(
                access,
                ParamAccess::Read | ParamAccess::Write | ParamAccess::ReadWrite
            );
            let launch = self
                .writes
                .filter(|_| undeclared)
                .and_then(|w| w.launch(seq));
            let measured = launch.and_then(|l| {
                l.pointers
                    .iter()
                    .find(|p| p.param == i && p.inner == inner && p.buf == *buf && p.off == off)
            });
            let mut was_measured = false;
            match measured.map(|m| m.hull()) {
                Some(Some((s, e))) => {
                    written = true;
                    range = (s, e - s);
                    was_measured = true;
                }
                // Measured writing nothing (or not listed: it points past its buffer).
                Some(None) | None if launch.is_some() => {
                    written = self.same_value_writes
                        && self
                            .writes
                            .is_some_and(|w| w.ever_writes(&t.kernel_name(kernel), i, inner));
                }
                _ => {}
            }
            let inferred = measured.and_then(|m| m.inferred).or_else(|| {
                let w = self.writes?;
                w.param_type(&t.kernel_name(kernel), i, inner)
            });
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
                    kernel_types::How::NvjetCode => match inferred {
                        Some(g) if Some(g.elem) == typed.ty.scannable() => {
                            "its nvjet type code, confirmed by the bytes it wrote"
                        }
                        Some(_) => return Some((inferred.map(|g| g.elem), GUESS_AGAINST_CODE)),
                        None => "its nvjet type code (unconfirmed)",
                    },
                };
                Some((typed.ty.scannable(), how))
            };
            let guessed = || inferred.map(|g| (Some(g.elem), GUESS));
            let (elem, how) = match (given, declared, signature) {
                (Some(e), _, _) => (Some(e), "--dtype"),
                (None, Some(e), _) => (
                    Some(e),
                    info.and_then(|k| kernel_types::declared_by_triton(t, &k.module))
                        .unwrap_or("declared"),
                ),
                (None, None, Some(e)) => (Some(e), sig_how),
                (None, None, None) => named().or_else(guessed).unwrap_or((None, "")),
            };
            if elem.is_none() && written && sig.is_none_or(|p| p.maybe_float) && how.is_empty() {
                let name = match inner {
                    Some(j) => format!("{} parameter {i} pointer {j}", t.kernel_name(kernel)),
                    None => format!("{} parameter {i}", t.kernel_name(kernel)),
                };
                if !self.untyped.contains(&name) {
                    self.untyped.push(name);
                }
            }
            let (off, bytes) = range;
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
                measured: was_measured,
                elem,
                how,
                written,
            });
        }
        out
    }
}

/// A launch's pointer arguments into buffers, and the pointers inside its by-value parameters
/// (PyTorch's array of data pointers): (param, pointer inside it, buffer, offset).
pub(super) fn launch_pointers(args: &[Arg]) -> Vec<(usize, Option<usize>, BufferId, u64)> {
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

/// A range of a buffer a call wrote, with its element type where known.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WrittenTensor {
    /// The allocation.
    pub buf: BufferId,
    /// Where the range starts in it.
    pub off: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// What it holds, where known.
    pub elem: Option<ElemType>,
    /// How that was known (empty when it was not).
    pub how: &'static str,
    /// The range is what a replay measured the call writing (`writes`), not what the trace
    /// says it may reach.
    pub measured: bool,
}

/// What call `seq` wrote: a launch's written pointers, each typed and, where `writes` measured
/// it, cut to the bytes it wrote (else from the pointer to the end of its buffer); the bytes a
/// copy or memset wrote; any other call's destination buffers whole.
pub fn written_tensors(
    t: &Trace,
    seq: u64,
    writes: Option<&super::writes::WriteExtents>,
    rules: &[TypeRule],
) -> Vec<WrittenTensor> {
    let Some(c) = t.calls.iter().find(|c| c.seq == seq) else {
        return Vec::new();
    };
    let Some((kernel, args)) = c.call.launch() else {
        // A copy or memset names the bytes it wrote; anything else, its buffers whole.
        let range = match &c.call {
            Call::CopyH2D { dst, len, .. }
            | Call::CopyH2DAsync { dst, len, .. }
            | Call::CopyH2DAsyncRetained { dst, len, .. }
            | Call::CopyD2D { dst, len, .. }
            | Call::CopyD2DAsync { dst, len, .. }
            | Call::Memset { dst, len, .. }
            | Call::MemsetAsync { dst, len, .. } => match dst {
                DevAddr::Buf { buf, off } => Some((*buf, *off, *len)),
                _ => None,
            },
            _ => None,
        };
        let whole = |buf: BufferId| (buf, 0, t.sizes.get(&buf).copied().unwrap_or(0));
        let ranges: Vec<(BufferId, u64, u64)> = match range {
            Some(r) => vec![r],
            None => crate::trace::written_through(t, c)
                .into_iter()
                .map(whole)
                .collect(),
        };
        return ranges
            .into_iter()
            .map(|(buf, off, bytes)| WrittenTensor {
                buf,
                off,
                bytes,
                elem: None,
                how: "",
                measured: false,
            })
            .collect();
    };
    let mut typing = Typing::new(&[], rules, &[]);
    typing.writes = writes;
    typing
        .views(t, seq, kernel, args)
        .into_iter()
        .filter(|v| v.written)
        .map(|v| WrittenTensor {
            buf: v.buf,
            off: v.off,
            bytes: v.bytes,
            elem: v.elem,
            how: v.how,
            measured: v.measured,
        })
        .collect()
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
