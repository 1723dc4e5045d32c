//! The canonical text form of a trace: ids, sizes, sites and content hashes; never addresses
//! or times, so it is stable across runs and machines and can be snapshot-tested.

use super::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// A launch's arguments. A value whose type the kernel's embedded code declares is printed as
/// that type (`64`, `1e-5f`); one whose type is unknown stays hex, byte order as in memory read
/// as a little-endian number.
fn args(t: &Trace, k: KernelId, a: &Args) -> String {
    a.iter()
        .enumerate()
        .map(|(i, x)| match x {
            Arg::Buf(d) => d.to_string(),
            Arg::TensorMap(m) => format!("tensor_map({}, {})", m.base, tensor_map(&m.desc)),
            Arg::Words(w) => {
                let ptrs = w.ptrs.iter().map(|(o, d)| format!("@{o}={d}"));
                let maps = w
                    .maps
                    .iter()
                    .map(|(o, m)| format!("@{o}=tensor_map({}, {})", m.base, tensor_map(&m.desc)));
                let all: Vec<String> = ptrs.chain(maps).collect();
                format!("{{{} bytes: {}}}", w.bytes.len(), all.join(" "))
            }
            Arg::Val(v) => {
                if let Some(s) = t.param_type(k, i).and_then(|ty| ty.render(v)) {
                    return s;
                }
                let mut s = String::from("0x");
                for b in v.iter().rev() {
                    let _ = write!(s, "{b:02x}");
                }
                s
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `f32 [64, 32] strides [256] box [32, 8]`, dimensions innermost first as the driver takes them, with any
/// setting that is not the default.
fn tensor_map(d: &crate::backend::TensorMapDesc) -> String {
    let mut s = format!(
        "{:?} {:?} strides {:?} box {:?}",
        d.dtype, d.dims, d.strides, d.box_dims
    )
    .to_lowercase();
    if d.element_strides.iter().any(|e| *e != 1) {
        let _ = write!(s, " every {:?}", d.element_strides);
    }
    for (name, v) in [
        ("interleave", d.interleave),
        ("swizzle", d.swizzle),
        ("l2", d.l2_promotion),
        ("oob", d.oob_fill),
    ] {
        if v != 0 {
            let _ = write!(s, " {name} {v}");
        }
    }
    s
}

fn host(h: &HostAddr) -> String {
    match h {
        HostAddr::Pinned { host, off } => format!("{host}+{off}"),
        HostAddr::Unknown => "pageable".into(),
    }
}

/// One call, without its result. One long function on purpose: an exhaustive match over `Call`,
/// an arm per variant, each a line of text.
pub fn call_text(t: &Trace, c: &Call) -> String {
    let kname = |k: &KernelId| t.kernel_name(*k);
    match c {
        Call::Alloc { bytes } => format!("alloc({bytes})"),
        Call::AllocManaged { bytes } => format!("alloc_managed({bytes})"),
        Call::Free { ptr } => format!("free({ptr})"),
        Call::CopyH2D { dst, data, len } => format!("copy_h2d({dst}, {len} bytes #{data})"),
        Call::CopyD2H { src, len } => format!("copy_d2h({src}, {len} bytes)"),
        Call::CopyD2D { src, dst, len } => format!("copy_d2d({src} -> {dst}, {len})"),
        Call::Launch {
            head:
                LaunchHead {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream,
                },
            args: a,
        }
        | Call::LaunchTyped {
            head:
                LaunchHead {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream,
                },
            args: a,
        } => format!(
            "{} {}<<<{:?}, {:?}, {shared_mem}, {stream}>>>({})",
            if matches!(c, Call::Launch { .. }) {
                "launch"
            } else {
                "launch_typed"
            },
            kname(kernel),
            grid,
            block,
            args(t, *kernel, a)
        ),
        Call::Synchronize { stream } => format!("synchronize({stream})"),
        Call::DefaultStream => "default_stream()".into(),
        Call::Kernel { module, func } => format!("kernel({module}::{func})"),
        Call::OpCache => "op_cache()".into(),
        Call::Memset { dst, value, len } => format!("memset({dst}, {value:#04x}, {len})"),
        Call::MemsetAsync {
            dst,
            value,
            len,
            stream,
        } => {
            format!("memset_async({dst}, {value:#04x}, {len}, {stream})")
        }
        Call::TotalMemory => "total_memory()".into(),
        Call::FreeMemory => "free_memory()".into(),
        Call::SmCount => "sm_count()".into(),
        Call::SweepUnreleased => "sweep_unreleased()".into(),
        Call::LiveBytes => "live_bytes()".into(),
        Call::AllocReport { top_n, min_mb } => format!("alloc_report({top_n}, {min_mb})"),
        Call::CopyD2HOnStream { src, len, stream } => {
            format!("copy_d2h_on_stream({src}, {len} bytes, {stream})")
        }
        Call::StreamIsCapturing { stream } => format!("stream_is_capturing({stream})"),
        Call::ScanRedzones => "scan_redzones()".into(),
        Call::PoisonRedzones { lo, hi } => format!("poison_redzones({lo}, {hi})"),
        Call::DebugSyncKernels => "debug_sync_kernels()".into(),
        Call::KernelRegistry => "kernel_registry()".into(),
        Call::CopyH2DAsync {
            dst,
            data,
            len,
            stream,
        } => {
            format!("copy_h2d_async({dst}, {len} bytes #{data}, {stream})")
        }
        Call::CopyH2DAsyncRetained {
            dst,
            data,
            len,
            stream,
            src,
        } => format!(
            "copy_h2d_async_retained({dst}, {len} bytes #{data} from {}, {stream})",
            host(src)
        ),
        Call::CopyD2HAsync {
            src,
            len,
            stream,
            dst,
        } => {
            format!(
                "copy_d2h_async({src}, {len} bytes to {}, {stream})",
                host(dst)
            )
        }
        Call::CopyD2DAsync {
            src,
            dst,
            len,
            stream,
        } => {
            format!("copy_d2d_async({src} -> {dst}, {len}, {stream})")
        }
        Call::CopyD2D2DAsync {
            src,
            src_pitch,
            dst,
            dst_pitch,
            width,
            height,
            stream,
        } => format!(
            "copy_d2d_2d_async({src}/{src_pitch} -> {dst}/{dst_pitch}, {width}x{height}, {stream})"
        ),
        Call::BeginCapture { stream } => format!("begin_capture({stream})"),
        Call::EndCapture { stream } => format!("end_capture({stream})"),
        Call::LaunchGraph { graph, stream } => format!("launch_graph({graph}, {stream})"),
        Call::DestroyGraph { graph } => format!("destroy_graph({graph})"),
        Call::AbortCaptureIfActive { stream } => format!("abort_capture_if_active({stream})"),
        Call::DeviceFreeMemory => "device_free_memory()".into(),
        Call::LiveAllocCount => "live_alloc_count()".into(),
        Call::RedzoneHits => "redzone_hits()".into(),
        Call::StepBoundary { step } => format!("---- step {step} ----"),
        Call::EncodeTensorMap { base, desc } => {
            format!("encode_tensor_map({base}, {})", tensor_map(desc))
        }
        Call::CreateStream => "create_stream()".into(),
        Call::BindToThread => "bind_to_thread()".into(),
        Call::CreateEvent => "create_event()".into(),
        Call::RecordEvent { event, stream } => format!("record_event({event}, {stream})"),
        Call::StreamWaitEvent { stream, event } => format!("stream_wait_event({stream}, {event})"),
        Call::EventSynchronize { event } => format!("event_synchronize({event})"),
        Call::DestroyEvent { event } => format!("destroy_event({event})"),
        Call::HostPtrToDevice { host: h } => format!("host_ptr_to_device({})", host(h)),
        Call::AllocHostPinned { bytes } => format!("alloc_host_pinned({bytes})"),
        Call::FreeHostPinned { host: h, bytes } => {
            format!("free_host_pinned({}, {bytes})", host(h))
        }
        Call::CommUniqueId => "comm_unique_id()".into(),
        Call::CommInit {
            unique,
            nranks,
            rank,
        } => format!("comm_init({unique}, rank {rank} of {nranks})"),
        Call::Collective {
            comm,
            seq,
            op,
            send,
            recv,
            count,
            dtype,
            stream,
        } => {
            use crate::backend::Collective as C;
            let what = match op {
                C::AllReduce(r) | C::ReduceScatter(r) => format!("{}<{r:?}>", op.name()),
                C::Broadcast { root } => format!("broadcast<root {root}>"),
                C::Send { peer } => format!("send<to {peer}>"),
                C::Recv { peer } => format!("recv<from {peer}>"),
                C::AllGather => "all_gather".into(),
            };
            let bufs = match op {
                C::Send { .. } => format!("{send}"),
                C::Recv { .. } => format!("-> {recv}"),
                _ => format!("{send} -> {recv}"),
            };
            format!("{what}({comm} #{seq}, {bufs}, {count} {dtype:?}, {stream})")
        }
        Call::CommDestroy { comm } => format!("comm_destroy({comm})"),
        Call::Opaque { name } => format!("{name}(...) (not understood: not replayed)"),
        Call::CommGroupStart => "comm_group_start()".into(),
        Call::CommGroupEnd => "comm_group_end()".into(),
        Call::HostFunc { stream, func } => format!("host_func({stream}, {func}) (not run)"),
    }
}

/// A call's result as `show` prints it: `ok`, `buf3`, `ERR CUDA_ERROR_ILLEGAL_ADDRESS (700)`,
/// or `!! never returned` for a call the trace ends inside.
pub fn ret_text(r: &Option<Ret>) -> String {
    match r {
        None => "!! never returned".into(),
        Some(Ok(Value::Unit)) => "ok".into(),
        Some(Ok(v)) => match v {
            Value::Buffer(b) => b.to_string(),
            Value::Stream(s) => s.to_string(),
            Value::Event(e) => e.to_string(),
            Value::Graph(g) => g.to_string(),
            Value::Kernel(k) => k.to_string(),
            Value::Host(h) => h.to_string(),
            Value::Count(n) => n.to_string(),
            Value::OptCount(n) => format!("{n:?}"),
            Value::Bool(b) => b.to_string(),
            Value::Bytes(b) => format!("#{b}"),
            Value::Text(Some(_)) => "<report>".into(),
            Value::Text(None) => "None".into(),
            Value::Comm(c) => c.to_string(),
            Value::Unit => unreachable!(),
        },
        Some(Err(e)) => match e.code {
            Some(c) => format!("ERR {} ({c})", crate::backend::cuda_error_name(c)),
            None => "ERR".into(),
        },
    }
}

/// One call record as its canonical line, without the site column padding.
pub fn render_call(t: &Trace, c: &CallRecord) -> String {
    format!(
        "#{} t{} {} -> {} @ {}",
        c.seq,
        c.thread,
        call_text(t, &c.call),
        ret_text(&c.ret),
        t.site(c.site)
    )
}

/// The whole trace as canonical text. Long on purpose: the text is the trace's sections in one
/// fixed order (header, blobs, kernels, modules, globals, shared memory and events, adopted
/// state, initial contents, calls), each a short loop; a snapshot's order is this function's
/// order, read top to bottom.
pub fn render(t: &Trace) -> String {
    let mut s = String::new();
    if let Some(h) = &t.header {
        let _ = writeln!(s, "trace format {} backend {}", h.format, h.backend);
    }
    if let Some(line) = t.blobs.summary() {
        let _ = writeln!(s, "{line}");
    }
    for (id, k) in &t.kernels {
        let layout: Vec<String> = k
            .params
            .iter()
            .map(|p| format!("{}@{}:{:?}", p.size, p.offset, p.access))
            .collect();
        // A kernel whose module's code the trace does not hold is opaque to a replay: the
        // mock skips it, CUDA can launch it only if the module is loaded some other way.
        let has_code = t.module_images.contains_key(&k.module)
            || t.modules
                .iter()
                .any(|m| m.name == k.module && (m.source.is_some() || m.ptx.is_some()));
        let readable = demangle::readable(&k.name);
        let _ = writeln!(
            s,
            "kernel {id} = {}::{}{} ({}){}{}",
            k.module,
            k.name,
            if readable != k.name.as_str() {
                format!(" ({readable})")
            } else {
                String::new()
            },
            layout.join(" "),
            t.kernel_clusters
                .get(id)
                .map(|d| format!(" cluster {d:?}"))
                .unwrap_or_default()
                + if t.kernel_cooperative.contains(id) {
                    " cooperative"
                } else {
                    ""
                },
            if has_code {
                String::new()
            } else {
                format!(" [opaque: no code for module {} in the trace]", k.module)
            }
        );
        // A compiled kernel's element type where its name gives one (what the value checks
        // read its buffers as), and how it was known.
        if k.elems.iter().all(Option::is_none) {
            if let Some(t) = super::kernel_types::from_name(&k.name) {
                let _ = writeln!(s, "  {id} elements: {} (from {})", t.ty, t.how);
            }
        } else {
            let each: Vec<String> = k
                .elems
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.map(|e| format!("param {i} {}", e.name())))
                .collect();
            let how =
                super::kernel_types::declared_by_triton(t, &k.module).unwrap_or("its declaration");
            let _ = writeln!(s, "  {id} elements: {} (from {how})", each.join(", "));
        }
    }
    // What code is embedded, not its size: a snapshot should not move when a kernel's text
    // does.
    for m in &t.modules {
        let has = |x: &Option<String>| if x.is_some() { "embedded" } else { "none" };
        if let Some(image) = t.module_images.get(&m.name) {
            let _ = writeln!(s, "module {} (image: blob {image})", m.name);
            continue;
        }
        let _ = writeln!(
            s,
            "module {} (source: {}, ptx: {})",
            m.name,
            has(&m.source),
            has(&m.ptx)
        );
    }
    for (buf, g) in &t.globals {
        let _ = writeln!(
            s,
            "global {buf} = {}::{} ({} bytes, the module's own memory)",
            g.module, g.name, g.bytes
        );
    }
    for (what, share) in &t.shared {
        let handle = share_key(what, &share.handle);
        let _ = match share.side {
            ShareSide::Exported { at } => writeln!(
                s,
                "shared {what}: handed to other processes before #{at} ({handle})"
            ),
            ShareSide::Opened { fill } => writeln!(
                s,
                "shared {what}: another process's, opened here ({handle}){}",
                fill.map_or(String::new(), |f| format!(
                    "; what it held then uploaded by #{f}"
                ))
            ),
        };
    }
    for a in &t.adopted {
        let _ = match a {
            Adopted::Stream { id, is_default } => writeln!(
                s,
                "adopted {id}{}",
                if *is_default {
                    " (the default stream)"
                } else {
                    ""
                }
            ),
            Adopted::Event { id } => writeln!(s, "adopted {id}"),
            Adopted::Graph { id } => writeln!(s, "adopted {id}"),
            Adopted::Host { id, bytes } => {
                writeln!(s, "adopted {id} ({bytes} bytes of pinned host memory)")
            }
            Adopted::Comm {
                id,
                unique,
                nranks,
                rank,
                next_seq,
            } => writeln!(
                s,
                "adopted {id} (communicator {unique}, rank {rank} of {nranks}, next collective #{next_seq})"
            ),
            Adopted::CommPairs { id, sends, recvs } => {
                let list = |v: &[(u32, u64)], what: &str| {
                    v.iter()
                        .map(|(peer, n)| format!("{what} rank {peer} #{n}"))
                        .collect::<Vec<_>>()
                };
                let all = [list(sends, "send to"), list(recvs, "receive from")].concat();
                if all.is_empty() {
                    writeln!(s, "adopted {id} pairs: no send or receive yet")
                } else {
                    writeln!(s, "adopted {id} pairs, next: {}", all.join(", "))
                }
            }
        };
    }
    for i in &t.initial {
        let _ = writeln!(
            s,
            "initial {} {} bytes #{} from {}",
            i.buf,
            i.bytes,
            i.data,
            t.site(i.site)
        );
    }
    for c in &t.calls {
        let mut line = format!(
            "#{:<4} t{} {} -> {}",
            c.seq,
            c.thread,
            call_text(t, &c.call),
            ret_text(&c.ret)
        );
        if let Some(b) = t.d2h_async.get(&c.seq) {
            let _ = write!(line, " [bytes #{b} at sync]");
        }
        let _ = writeln!(s, "{line:<100} @ {}", t.site(c.site));
    }
    for f in &t.findings {
        match f {
            Finding::ArgsNotRecorded { seq, params } => {
                let _ = writeln!(
                    s,
                    "FINDING the {params} argument(s) of raw launch #{seq} were not recorded (the backend gave no parameter layout: GpuBackend::kernel_params)"
                );
            }
            Finding::RetainedSourceChanged { seq, at_sync } => {
                let site = t
                    .calls
                    .iter()
                    .find(|c| c.seq == *seq)
                    .map(|c| t.site(c.site))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "FINDING retained source of #{seq} ({site}) changed before the sync at #{at_sync}"
                );
            }
            Finding::Sanitizer {
                seq,
                tool,
                what,
                kernel,
            } => {
                let _ = writeln!(
                    s,
                    "FINDING compute-sanitizer {tool}: {what} in {kernel} at #{seq} (replay --on cuda --sanitize {tool} reproduces it)"
                );
            }
        }
    }
    if let Some(c) = &t.cut {
        let _ = writeln!(
            s,
            "CUT after {} frames at byte {}: {}",
            c.frames, c.offset, c.reason
        );
    } else if !t.stopped {
        let _ = writeln!(s, "(not stopped cleanly)");
    }
    s
}

/// Totals for `gputape show`: calls by kind, allocations and peak live bytes by site, syncs,
/// streams, kernels.
pub fn summary(t: &Trace) -> String {
    let mut s = String::new();
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut syncs = 0;
    let mut streams = BTreeSet::new();
    let mut launches: BTreeMap<String, usize> = BTreeMap::new();
    let mut live: BTreeMap<BufferId, (u64, SiteId)> = BTreeMap::new();
    for i in &t.initial {
        live.insert(i.buf, (i.bytes, i.site));
    }
    // Sizes come from the trace, untrusted: sums saturate rather than overflow.
    let total = |v: &mut dyn Iterator<Item = u64>| v.fold(0u64, u64::saturating_add);
    let mut live_bytes: u64 = total(&mut live.values().map(|v| v.0));
    let mut peak = live_bytes;
    let mut site_bytes: BTreeMap<SiteId, (u64, usize)> = BTreeMap::new();
    let mut errors = 0;
    for c in &t.calls {
        *by_kind.entry(c.call.kind().name()).or_default() += 1;
        if c.call.is_host_sync() {
            syncs += 1;
        }
        if matches!(c.ret, Some(Err(_))) {
            errors += 1;
        }
        match (&c.call, &c.ret) {
            (Call::Alloc { bytes } | Call::AllocManaged { bytes }, Some(Ok(Value::Buffer(b)))) => {
                live.insert(*b, (*bytes, c.site));
                live_bytes = live_bytes.saturating_add(*bytes);
                peak = peak.max(live_bytes);
                let e = site_bytes.entry(c.site).or_default();
                e.0 = e.0.saturating_add(*bytes);
                e.1 += 1;
            }
            (
                Call::Free {
                    ptr: DevAddr::Buf { buf, .. },
                },
                Some(Ok(_)),
            ) => {
                if let Some((n, _)) = live.remove(buf) {
                    live_bytes = live_bytes.saturating_sub(n);
                }
            }
            (Call::CreateStream, Some(Ok(Value::Stream(st)))) => {
                streams.insert(*st);
            }
            (
                Call::Launch {
                    head: LaunchHead { kernel, stream, .. },
                    ..
                }
                | Call::LaunchTyped {
                    head: LaunchHead { kernel, stream, .. },
                    ..
                },
                _,
            ) => {
                streams.insert(*stream);
                let name = t.kernel_name(*kernel);
                *launches.entry(name).or_default() += 1;
            }
            _ => {}
        }
    }
    let _ = writeln!(
        s,
        "{} calls ({} failed), {} host syncs, {} stream(s) used, {} frames",
        t.calls.len(),
        errors,
        syncs,
        streams.len(),
        t.frames
    );
    let _ = writeln!(
        s,
        "initial state: {} buffers, {} bytes; peak live {} bytes; live at end {} bytes in {} buffers",
        t.initial.len(),
        total(&mut t.initial.iter().map(|i| i.bytes)),
        peak,
        live_bytes,
        live.len()
    );
    let _ = writeln!(s, "calls by kind:");
    for (k, n) in &by_kind {
        let _ = writeln!(s, "  {n:>6}  {k}");
    }
    if !site_bytes.is_empty() {
        let _ = writeln!(s, "allocations by site:");
        let mut rows: Vec<_> = site_bytes.into_iter().collect();
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        for (site, (bytes, n)) in rows {
            let _ = writeln!(s, "  {bytes:>12} bytes x{n:<4} {}", t.site(site));
        }
    }
    if !launches.is_empty() {
        let _ = writeln!(s, "launches by kernel:");
        for (k, n) in &launches {
            let _ = writeln!(s, "  {n:>6}  {k}");
        }
    }
    if !t.findings.is_empty() {
        let _ = writeln!(s, "{} finding(s)", t.findings.len());
    }
    s
}

/// What names a shared buffer or event in both processes, for a person: an IPC or fabric
/// handle's first bytes, or the exporting process and the number of its file descriptor (the
/// recording's key for a descriptor, `Rec::ShareableExport`).
fn share_key(what: &SharedId, key: &[u8]) -> String {
    if let (SharedId::Memory(_), [p0, p1, p2, p3, f0, f1, f2, f3]) = (what, key) {
        let pid = u32::from_le_bytes([*p0, *p1, *p2, *p3]);
        let fd = u32::from_le_bytes([*f0, *f1, *f2, *f3]);
        return format!(
            "shareable handle: a file descriptor process {pid} exported, its copy {fd}"
        );
    }
    let hex: String = key.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{} {hex}..", what.through())
}
