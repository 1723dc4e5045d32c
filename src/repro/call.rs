//! One recorded call as the program's C: the driver call that makes it, its status checked
//! against the recording's, and what it needs around it (the bytes an upload reads, the
//! comparison of a read back).

use std::fmt::Write as _;

use super::{c_str, comment, stream, Gen, ProgramError};
use crate::trace::{Arg, Call, CallRecord, DevAddr, HostAddr, LaunchHead, StreamRef, Value};

/// An async read back, compared once a sync has completed it: (seq, host variable, data file,
/// bytes, stream).
pub(super) type Pending = Vec<(u64, String, String, u64, StreamRef)>;

/// `bytes` as the initializer of a C byte array (never empty: C has no empty arrays).
fn c_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "0".into();
    }
    bytes
        .iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Gen<'_> {
    /// One call's text. One long function on purpose: an exhaustive match over `Call`, an arm
    /// per variant, so a new call is a compile error here until a program can make it.
    pub(super) fn call(
        &mut self,
        s: &mut String,
        c: &CallRecord,
        pending: &mut Pending,
    ) -> Result<(), ProgramError> {
        let t = self.t;
        let seq = c.seq;
        let want = match &c.ret {
            Some(Ok(_)) | None => "0".to_string(),
            Some(Err(e)) => e.code.map_or("ANY_ERROR".into(), |c| c.to_string()),
        };
        let what = c.call.kind().name();
        let site = t
            .sites
            .get(&c.site)
            .map(|d| format!(" at {d}"))
            .unwrap_or_default();
        let emit = |g: &mut Self, s: &mut String, expr: &str, func: &str| {
            g.made += 1;
            let _ = writeln!(
                s,
                "    /* #{seq} {}{} */\n    r = {expr};\n    status({seq}, {}, r, {want});",
                comment(what),
                comment(&site),
                c_str(func)
            );
            if c.ret.is_none() {
                let _ = writeln!(
                    s,
                    "    printf(\"repro: call #{seq} never returned when recorded; here it \
                     returned %d\\n\", r);"
                );
            }
        };
        if let Some((expr, func)) = self.single(c)? {
            emit(self, s, &expr, func);
            return Ok(());
        }
        let a = |g: &mut Self, d: &DevAddr| g.addr(d, seq, what);
        match &c.call {
            Call::CopyH2D { dst, data, len }
            | Call::CopyH2DAsync { dst, data, len, .. }
            | Call::CopyH2DAsyncRetained { dst, data, len, .. } => {
                let p = a(self, dst)?;
                let file = self.file(*data);
                let have = self.bytes(*data, what)?.len() as u64;
                let _ = writeln!(s, "    {{\n    void *h = load({}, {have});", c_str(&file));
                let expr = match &c.call {
                    Call::CopyH2DAsync { stream: st, .. }
                    | Call::CopyH2DAsyncRetained { stream: st, .. } => {
                        format!("cuMemcpyHtoDAsync_v2({p}, h, {len}ull, {})", stream(st))
                    }
                    _ => format!("cuMemcpyHtoD_v2({p}, h, {len}ull)"),
                };
                emit(self, s, &expr, "cuMemcpyHtoD");
                // An async upload's source must outlive the copy: it is never freed.
                if matches!(c.call, Call::CopyH2D { .. }) {
                    s.push_str("    free(h);\n");
                }
                s.push_str("    }\n");
            }
            Call::CopyD2H { src, len } | Call::CopyD2HOnStream { src, len, .. } => {
                let p = a(self, src)?;
                let var = format!("out{seq}");
                let _ = writeln!(s, "    void *{var} = malloc({len} + 1);");
                if let Call::CopyD2HOnStream { stream: st, .. } = &c.call {
                    let _ = writeln!(s, "    cuStreamSynchronize({});", stream(st));
                }
                let expr = format!("cuMemcpyDtoH_v2({var}, {p}, {len}ull)");
                emit(self, s, &expr, "cuMemcpyDtoH");
                if let Some(blob) = t.readback_blob(c) {
                    let file = self.file(blob);
                    let _ = writeln!(
                        s,
                        "    if (r == 0) bytes({seq}, {var}, {}, {len});",
                        c_str(&file)
                    );
                }
            }
            Call::CopyD2HAsync {
                src,
                len,
                stream: st,
                ..
            } => {
                let p = a(self, src)?;
                let var = format!("out{seq}");
                let _ = writeln!(s, "    void *{var} = malloc({len} + 1);");
                let expr = format!("cuMemcpyDtoHAsync_v2({var}, {p}, {len}ull, {})", stream(st));
                emit(self, s, &expr, "cuMemcpyDtoHAsync");
                if let Some(blob) = t.readback_blob(c) {
                    let file = self.file(blob);
                    pending.push((seq, var, file, *len, *st));
                }
            }
            Call::Launch {
                head:
                    LaunchHead {
                        kernel,
                        grid,
                        block,
                        shared_mem,
                        stream: st,
                    },
                args,
            }
            | Call::LaunchTyped {
                head:
                    LaunchHead {
                        kernel,
                        grid,
                        block,
                        shared_mem,
                        stream: st,
                    },
                args,
            } => {
                let f = self.kernels[kernel];
                s.push_str("    {\n");
                let mut ptrs = Vec::new();
                for (i, arg) in args.iter().enumerate() {
                    match arg {
                        Arg::Buf(d) => {
                            let e = a(self, d)?;
                            let _ = writeln!(s, "    CUdeviceptr a{i} = {e};");
                            ptrs.push(format!("&a{i}"));
                            continue;
                        }
                        Arg::Val(b) => {
                            let _ = writeln!(
                                s,
                                "    unsigned char a{i}[{}] = {{{}}};",
                                b.len().max(1),
                                c_bytes(b)
                            );
                        }
                        Arg::Words(w) => {
                            let _ = writeln!(
                                s,
                                "    unsigned char a{i}[{}] = {{{}}};",
                                w.bytes.len().max(1),
                                c_bytes(&w.bytes)
                            );
                            for (off, d) in &w.ptrs {
                                let e = a(self, d)?;
                                let _ = writeln!(
                                    s,
                                    "    {{ CUdeviceptr w = {e}; memcpy(a{i} + {off}, &w, 8); }}"
                                );
                            }
                        }
                        Arg::TensorMap(_) => unreachable!("refused in plan"),
                    }
                    ptrs.push(format!("a{i}"));
                }
                let list = if ptrs.is_empty() {
                    "0".into()
                } else {
                    ptrs.join(", ")
                };
                let _ = writeln!(s, "    void *p[] = {{{list}}};");
                // More than 48 KiB of dynamic shared memory needs the function's limit raised
                // first: the recorded program did it (`cuFuncSetAttribute`, or the
                // `cuKernelSetAttribute` a recording keeps by name only).
                if *shared_mem > 48 * 1024 {
                    let _ = writeln!(
                        s,
                        "    cuFuncSetAttribute(fn[{f}], 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, {shared_mem});"
                    );
                }
                // A cooperative kernel's launch takes no `extra`.
                let (entry, extra) = if t.kernel_cooperative.contains(kernel) {
                    ("cuLaunchCooperativeKernel", "")
                } else {
                    ("cuLaunchKernel", ", 0")
                };
                let expr = format!(
                    "{entry}(fn[{f}], {}, {}, {}, {}, {}, {}, {shared_mem}, {}, p{extra})",
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    stream(st)
                );
                emit(
                    self,
                    s,
                    &expr,
                    &format!("{entry} {}", t.kernel_name(*kernel)),
                );
                s.push_str("    }\n");
            }
            Call::Synchronize { stream: st } => {
                let expr = match st {
                    StreamRef::Legacy => "cuCtxSynchronize()".to_string(),
                    _ => format!("cuStreamSynchronize({})", stream(st)),
                };
                emit(self, s, &expr, "a sync");
                let (done, later): (Vec<_>, Vec<_>) = pending
                    .drain(..)
                    .partition(|p| *st == StreamRef::Legacy || p.4 == *st);
                *pending = later;
                for (seq, var, file, len, _) in done {
                    let _ = writeln!(s, "    bytes({seq}, {var}, {}, {len});", c_str(&file));
                }
            }
            Call::Kernel { .. } => match &c.ret {
                Some(Ok(Value::Kernel(k))) if self.kernels.contains_key(k) => {
                    let _ = writeln!(s, "    /* #{seq} the kernel looked up{} */", comment(&site));
                    self.function(s, *k, "    ")?;
                    self.made += 1;
                }
                _ => self.skipped += 1,
            },
            // A call whose result the trace lacks (it failed when recorded): made into a
            // variable of its own, for its status.
            Call::Alloc { bytes } | Call::AllocManaged { bytes } => {
                let _ = writeln!(
                    s,
                    "    {{ CUdeviceptr p; r = cuMemAlloc_v2(&p, {bytes}ull); \
                     status({seq}, \"cuMemAlloc\", r, {want}); }}"
                );
                self.made += 1;
            }
            Call::EndCapture { stream: st } => {
                let _ = writeln!(
                    s,
                    "    {{ CUgraph g; r = cuStreamEndCapture({}, &g); \
                     status({seq}, \"cuStreamEndCapture\", r, {want}); }}",
                    stream(st)
                );
                self.made += 1;
            }
            // Creates whose result the trace lacks, a free of memory that is no pinned
            // region's base, `cuCtxSetCurrent` (the program's start made its context current),
            // and calls that change nothing on the device (queries, marks, the engine's own
            // bookkeeping): no call is made.
            Call::CreateStream
            | Call::CreateEvent
            | Call::AllocHostPinned { .. }
            | Call::FreeHostPinned { .. }
            | Call::Opaque { .. }
            // The recorded program's own code, which ran on the host.
            | Call::HostFunc { .. }
            | Call::DefaultStream
            | Call::OpCache
            | Call::TotalMemory
            | Call::FreeMemory
            | Call::SmCount
            | Call::SweepUnreleased
            | Call::LiveBytes
            | Call::AllocReport { .. }
            | Call::StreamIsCapturing { .. }
            | Call::ScanRedzones
            | Call::PoisonRedzones { .. }
            | Call::DebugSyncKernels
            | Call::KernelRegistry
            | Call::AbortCaptureIfActive { .. }
            | Call::DeviceFreeMemory
            | Call::LiveAllocCount
            | Call::BindToThread
            | Call::RedzoneHits
            | Call::StepBoundary { .. } => self.skipped += 1,
            Call::Free { .. }
            | Call::CopyD2D { .. }
            | Call::CopyD2DAsync { .. }
            | Call::Memset { .. }
            | Call::MemsetAsync { .. }
            | Call::RecordEvent { .. }
            | Call::StreamWaitEvent { .. }
            | Call::EventSynchronize { .. }
            | Call::DestroyEvent { .. }
            | Call::BeginCapture { .. }
            | Call::LaunchGraph { .. }
            | Call::DestroyGraph { .. } => unreachable!("made by `single`"),
            Call::CopyD2D2DAsync { .. }
            | Call::EncodeTensorMap { .. }
            | Call::HostPtrToDevice { .. }
            | Call::CommUniqueId
            | Call::CommInit { .. }
            | Call::Collective { .. }
            | Call::CommDestroy { .. }
            | Call::CommGroupStart
            | Call::CommGroupEnd => unreachable!("refused in plan"),
        }
        Ok(())
    }

    /// The driver call of a call that is one expression, and the name its status line gives;
    /// `None` for the others.
    fn single(&mut self, c: &CallRecord) -> Result<Option<(String, &'static str)>, ProgramError> {
        let (seq, what) = (c.seq, c.call.kind().name());
        let mut a = |d: &DevAddr| self.addr(d, seq, what);
        Ok(Some(match (&c.call, &c.ret) {
            (Call::Alloc { bytes }, Some(Ok(Value::Buffer(b)))) => {
                self.buf(*b);
                (
                    format!("cuMemAlloc_v2(&buf[{}], {bytes}ull)", b.0),
                    "cuMemAlloc",
                )
            }
            (Call::AllocManaged { bytes }, Some(Ok(Value::Buffer(b)))) => {
                self.buf(*b);
                let expr = format!("cuMemAllocManaged(&buf[{}], {bytes}ull, 1)", b.0);
                (expr, "cuMemAlloc")
            }
            (Call::Free { ptr }, _) => (format!("cuMemFree_v2({})", a(ptr)?), "cuMemFree"),
            (Call::CopyD2D { src, dst, len }, _) => {
                let (sp, dp) = (a(src)?, a(dst)?);
                let expr = format!("cuMemcpyDtoD_v2({dp}, {sp}, {len}ull)");
                (expr, "cuMemcpyDtoD")
            }
            (
                Call::CopyD2DAsync {
                    src,
                    dst,
                    len,
                    stream: st,
                },
                _,
            ) => {
                let (sp, dp) = (a(src)?, a(dst)?);
                let expr = format!("cuMemcpyDtoDAsync_v2({dp}, {sp}, {len}ull, {})", stream(st));
                (expr, "cuMemcpyDtoDAsync")
            }
            (Call::Memset { dst, value, len }, _) => {
                let expr = format!("cuMemsetD8_v2({}, {value}, {len}ull)", a(dst)?);
                (expr, "cuMemsetD8")
            }
            (
                Call::MemsetAsync {
                    dst,
                    value,
                    len,
                    stream: st,
                },
                _,
            ) => {
                let p = a(dst)?;
                let expr = format!("cuMemsetD8Async({p}, {value}, {len}ull, {})", stream(st));
                (expr, "cuMemsetD8Async")
            }
            (Call::CreateStream, Some(Ok(Value::Stream(StreamRef::Id(id))))) => (
                format!("cuStreamCreate(&st[{}], 0)", id.0),
                "cuStreamCreate",
            ),
            (Call::CreateEvent, Some(Ok(Value::Event(id)))) => {
                (format!("cuEventCreate(&ev[{}], 0)", id.0), "cuEventCreate")
            }
            (Call::RecordEvent { event, stream: st }, _) => (
                format!("cuEventRecord(ev[{}], {})", event.0, stream(st)),
                "cuEventRecord",
            ),
            (Call::StreamWaitEvent { stream: st, event }, _) => (
                format!("cuStreamWaitEvent({}, ev[{}], 0)", stream(st), event.0),
                "cuStreamWaitEvent",
            ),
            (Call::EventSynchronize { event }, _) => (
                format!("cuEventSynchronize(ev[{}])", event.0),
                "cuEventSynchronize",
            ),
            (Call::DestroyEvent { event }, _) => (
                format!("cuEventDestroy_v2(ev[{}])", event.0),
                "cuEventDestroy",
            ),
            (Call::BeginCapture { stream: st }, _) => (
                format!("cuStreamBeginCapture_v2({}, 0)", stream(st)),
                "cuStreamBeginCapture",
            ),
            (Call::EndCapture { stream: st }, Some(Ok(Value::Graph(g)))) => (
                format!(
                    "cuStreamEndCapture({}, &graph[{g}]); if (r == 0) r = \
                     cuGraphInstantiateWithFlags(&exec[{g}], graph[{g}], 0)",
                    stream(st),
                    g = g.0
                ),
                "cuStreamEndCapture",
            ),
            (Call::LaunchGraph { graph, stream: st }, _) => (
                format!("cuGraphLaunch(exec[{}], {})", graph.0, stream(st)),
                "cuGraphLaunch",
            ),
            (Call::DestroyGraph { graph }, _) => (
                format!(
                    "cuGraphExecDestroy(exec[{g}]); cuGraphDestroy(graph[{g}])",
                    g = graph.0
                ),
                "cuGraphExecDestroy",
            ),
            (Call::AllocHostPinned { bytes }, Some(Ok(Value::Host(h)))) => (
                format!("cuMemAllocHost_v2(&host[{}], {bytes}ull)", h.0),
                "cuMemAllocHost",
            ),
            (
                Call::FreeHostPinned {
                    host: HostAddr::Pinned { host, off: 0 },
                    ..
                },
                _,
            ) => (format!("cuMemFreeHost(host[{}])", host.0), "cuMemFreeHost"),
            _ => return Ok(None),
        }))
    }
}
