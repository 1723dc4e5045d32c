//! What a trace says of its buffers beyond sizes: which calls write them, and what element
//! type the kernels that use them read them as. `replay --check-finite`, `inspect` and
//! `diff` ask; only the code the trace embeds and its owners' declarations answer.

use super::signature::{pointer_params, PointerParam};
use super::*;
use crate::backend::{ElemType, ParamAccess};

/// The element type kernels read or write `buf` as: the nearest launch before `at` (else
/// after it) whose pointer into `buf` has a type, from the kernel's declared element types or
/// its C signature.
pub fn elem_of(t: &Trace, buf: BufferId, at: u64) -> Option<ElemType> {
    let typed = |c: &CallRecord| -> Option<ElemType> {
        let (k, args) = c.call.launch()?;
        let info = t.kernels.get(&k)?;
        let sig = t
            .modules
            .iter()
            .find(|m| m.name == info.module)
            .and_then(|m| pointer_params(m.source.as_deref()?, &info.name));
        args.iter().enumerate().find_map(|(i, a)| match a {
            Arg::Buf(DevAddr::Buf { buf: b, off: 0 }) if *b == buf => info
                .elems
                .get(i)
                .copied()
                .flatten()
                .or_else(|| sig.as_ref()?.get(i).copied().flatten()?.elem),
            _ => None,
        })
    };
    let (before, after): (Vec<&CallRecord>, Vec<&CallRecord>) =
        t.calls.iter().partition(|c| c.seq <= at);
    before
        .iter()
        .rev()
        .find_map(|c| typed(c))
        .or_else(|| after.iter().find_map(|c| typed(c)))
}

/// Whether a launch may write through a pointer parameter: as its owner declared, else unless
/// its C signature makes the pointee `const`.
pub fn writes_through(access: ParamAccess, sig: Option<PointerParam>) -> bool {
    match access {
        ParamAccess::Write | ParamAccess::ReadWrite => true,
        ParamAccess::Read => false,
        ParamAccess::Unknown | ParamAccess::Value => sig.is_none_or(|p| !p.is_const),
    }
}

/// The buffers call `c` may write, as narrowly as the trace can say: a copy's or memset's
/// destination, a launch's pointers that are not read-only (declared, or `const` in the
/// signature). `refs::written_by` is the wide answer the analyses use.
pub fn written_through(t: &Trace, c: &CallRecord) -> Vec<BufferId> {
    let Some((k, args)) = c.call.launch() else {
        return super::written_by(&c.call);
    };
    let info = t.kernels.get(&k);
    let sig = info.and_then(|info| {
        let m = t.modules.iter().find(|m| m.name == info.module)?;
        pointer_params(m.source.as_deref()?, &info.name)
    });
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let Arg::Buf(DevAddr::Buf { buf, .. }) = a else {
            continue;
        };
        let access = info
            .and_then(|k| k.params.get(i))
            .map_or(ParamAccess::Unknown, |p| p.access);
        let sig = sig.as_ref().and_then(|s| s.get(i).copied().flatten());
        if writes_through(access, sig) && !out.contains(buf) {
            out.push(*buf);
        }
    }
    out
}
