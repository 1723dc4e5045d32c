//! The call log, record by record, into trace calls (the table in `mod.rs`).

use std::collections::{BTreeMap, HashMap};

use gputape_shimlog::{LogError, On, Reader, Rec, Record};

use super::{ShimTraceError, Summary};
use crate::backend::image::image_kind;
use crate::backend::{
    KernelInfo, ModuleCode, ParamAccess, ParamInfo, TensorMapDesc, TensorMapDtype,
};
use crate::trace::{
    Adopted, Arg, Args, BlobId, BufferId, Call, CallRecord, DevAddr, ErrorRec, EventId, HostAddr,
    KernelId, Provenance, SiteDef, SiteId, StreamId, StreamRef, TensorMapArg, Trace, TraceHeader,
    Value, WordsArg, FORMAT_VERSION, MIN_READER_VERSION,
};

/// The log in `bytes` (read from `path`, named in errors) as a trace of the process that wrote
/// it, and what was found. A log cut short converts up to the cut (`Summary::cut` says where).
pub fn convert(
    path: &str,
    bytes: &[u8],
    command_line: Vec<String>,
) -> Result<(Trace, Summary), ShimTraceError> {
    let (header, reader) = Reader::new(bytes).map_err(|source| ShimTraceError::Log {
        path: path.to_string(),
        source,
    })?;
    let mut c = Converter::new(header.pid, header.driver_version, command_line);
    let mut records = Vec::new();
    for rec in reader {
        match rec {
            Ok(r) => records.push(r),
            Err(e @ LogError::Cut { .. }) => {
                c.summary.cut = Some(e.to_string());
                break;
            }
            Err(source) => {
                return Err(ShimTraceError::Log {
                    path: path.to_string(),
                    source,
                })
            }
        }
    }
    c.extents = reservation_extents(&records);
    for r in records {
        c.record(r);
    }
    Ok(c.finish())
}

/// How far each reservation of virtual addresses (by the index of its `Reserve` record) was
/// ever backed by maps, from its base: the one buffer it becomes in the trace. PyTorch's
/// expandable segments reserve far more than they map, and a tensor may straddle two maps, so
/// the reservation (up to its last mapped byte), not each map, is the allocation.
fn reservation_extents(records: &[Record<'_>]) -> HashMap<u64, u64> {
    let mut open: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new(); // base -> (size, index, extent)
    let mut out = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        match r.call {
            Rec::Reserve { ptr, size } => {
                open.insert(ptr, (size, i as u64, 0));
            }
            Rec::Map { ptr, size } => {
                if let Some((base, (rsize, _, extent))) = open.range_mut(..=ptr).next_back() {
                    if ptr - base < *rsize {
                        *extent = (*extent).max((ptr - base).saturating_add(size).min(*rsize));
                    }
                }
            }
            Rec::Unreserve { ptr, .. } => {
                if let Some((_, index, extent)) = open.remove(&ptr) {
                    out.insert(index, extent);
                }
            }
            _ => {}
        }
    }
    out.extend(open.into_values().map(|(_, index, extent)| (index, extent)));
    out
}

/// Bytes of a `CUtensorMap`.
const TENSOR_MAP: usize = 128;

/// The one site every call of a driver-level recording has: the program's own lines are not
/// known to the shim.
const SITE: SiteId = SiteId(0);

struct Converter {
    t: Trace,
    summary: Summary,
    /// Live allocations by base address: (buffer, size).
    live: BTreeMap<u64, (BufferId, u64)>,
    /// Freed ones, last by base address, for naming a use after free.
    freed: BTreeMap<u64, (BufferId, u64)>,
    next_buf: u32,
    streams: HashMap<u64, StreamId>,
    events: HashMap<u64, EventId>,
    /// Ids handed out so far (a destroyed handle's id is never reused).
    next_stream: u32,
    next_event: u32,
    /// Module and library handles: (handle, is a library) -> module name.
    modules: HashMap<(u64, bool), String>,
    /// Function and kernel handles -> (module, symbol).
    functions: HashMap<u64, (String, String)>,
    kernels: HashMap<(String, String), KernelId>,
    /// Log index of an async read back -> its call's seq.
    copies: HashMap<u64, u64>,
    /// The recording thread ids (gettid) in order of first call.
    threads: HashMap<u32, u16>,
    /// Each reservation's extent, by the index of its record (`reservation_extents`).
    extents: HashMap<u64, u64>,
    /// Tensor maps encoded so far, by their 128 bytes: what a launch parameter holding those
    /// bytes describes.
    tensor_maps: HashMap<Vec<u8>, TensorMapArg>,
    /// Records read (the index the next one has).
    index: u64,
    seq: u64,
}

impl Converter {
    fn new(pid: u32, driver_version: i32, command_line: Vec<String>) -> Self {
        let mut t = Trace {
            header: Some(TraceHeader {
                format: FORMAT_VERSION,
                min_reader: MIN_READER_VERSION,
                gputape: env!("CARGO_PKG_VERSION").to_string(),
                backend: "cuda".into(),
                device_ordinal: 0,
                device_name: None,
                sm_count: None,
                total_memory: None,
                driver_version: (driver_version != 0).then_some(driver_version),
            }),
            ..Default::default()
        };
        let mut prov = Provenance::now();
        prov.command_line = command_line;
        prov.pid = pid;
        t.provenance = Some(prov);
        t.sites.insert(
            SITE,
            SiteDef {
                file: "<driver call>".into(),
                line: 0,
                col: 0,
            },
        );
        Converter {
            t,
            summary: Summary {
                pid,
                ..Default::default()
            },
            live: BTreeMap::new(),
            freed: BTreeMap::new(),
            next_buf: 0,
            streams: HashMap::new(),
            events: HashMap::new(),
            next_stream: 1,
            next_event: 0,
            modules: HashMap::new(),
            functions: HashMap::new(),
            kernels: HashMap::new(),
            copies: HashMap::new(),
            threads: HashMap::new(),
            extents: HashMap::new(),
            tensor_maps: HashMap::new(),
            index: 0,
            seq: 0,
        }
    }

    fn finish(mut self) -> (Trace, Summary) {
        self.t.stopped = self.summary.cut.is_none();
        self.summary.calls = self.t.calls.len() as u64;
        self.summary.kernels = self.t.kernels.len();
        self.summary.modules = self.t.module_images.len();
        (self.t, self.summary)
    }

    fn record(&mut self, r: Record<'_>) {
        let index = self.index;
        self.index += 1;
        self.summary.records += 1;
        let ok = r.status == 0;
        let ret = |v: Value| -> Result<Value, ErrorRec> {
            if ok {
                Ok(v)
            } else {
                Err(driver_error(r.status))
            }
        };
        let (call, value) = match r.call {
            Rec::Alloc {
                ptr,
                bytes,
                managed,
            } => {
                let call = if managed {
                    Call::AllocManaged { bytes }
                } else {
                    Call::Alloc { bytes }
                };
                if !ok {
                    (call, ret(Value::Unit))
                } else {
                    let id = BufferId(self.next_buf);
                    self.next_buf += 1;
                    self.live.insert(ptr, (id, bytes));
                    self.t.addresses.insert(id, ptr);
                    (call, Ok(Value::Buffer(id)))
                }
            }
            Rec::Free { ptr } => {
                let a = self.addr(ptr);
                if ok {
                    if let Some(b) = self.live.remove(&ptr) {
                        self.freed.insert(ptr, b);
                    }
                }
                (Call::Free { ptr: a }, ret(Value::Unit))
            }
            // Pinned host memory is not a device call here: copies through it carry their bytes.
            Rec::HostAlloc { .. } | Rec::HostFree { .. } => return,
            Rec::CopyH2D { dst, on, data } => {
                let dst = self.addr(dst);
                let len = data.len() as u64;
                let data = self.t.blobs.insert_content(data.to_vec());
                let call = if on.sync {
                    Call::CopyH2D { dst, data, len }
                } else {
                    Call::CopyH2DAsync {
                        dst,
                        data,
                        len,
                        stream: self.stream(on.stream),
                    }
                };
                (call, ret(Value::Unit))
            }
            Rec::CopyD2H {
                src, len, on, data, ..
            } => {
                let src = self.addr(src);
                if on.sync {
                    let v = if ok {
                        Ok(Value::Bytes(self.t.blobs.insert_content(data.to_vec())))
                    } else {
                        ret(Value::Unit)
                    };
                    (Call::CopyD2H { src, len }, v)
                } else {
                    self.copies.insert(index, self.seq);
                    let call = Call::CopyD2HAsync {
                        src,
                        len,
                        stream: self.stream(on.stream),
                        dst: HostAddr::Unknown,
                    };
                    (call, ret(Value::Unit))
                }
            }
            Rec::D2HBytes { copy, data } => {
                if let Some(seq) = self.copies.remove(&copy) {
                    let blob = self.t.blobs.insert_content(data.to_vec());
                    self.t.d2h_async.insert(seq, blob);
                }
                return;
            }
            Rec::CopyD2D { src, dst, len, on } => {
                let (src, dst) = (self.addr(src), self.addr(dst));
                let call = if on.sync {
                    Call::CopyD2D { src, dst, len }
                } else {
                    Call::CopyD2DAsync {
                        src,
                        dst,
                        len,
                        stream: self.stream(on.stream),
                    }
                };
                (call, ret(Value::Unit))
            }
            Rec::Memset {
                dst,
                value,
                elem,
                count,
                on,
            } => (self.memset(dst, value, elem, count, on), ret(Value::Unit)),
            Rec::ModuleLoad {
                handle,
                library,
                image,
            } => {
                if ok {
                    let name = self.module(image);
                    self.modules.insert((handle, library), name);
                }
                return;
            }
            Rec::ModuleUnload { .. } => return,
            Rec::Function {
                owner,
                library,
                handle,
                name,
            } => {
                let module = self
                    .modules
                    .get(&(owner, library))
                    .cloned()
                    .unwrap_or_else(|| format!("unlogged-module-{owner:#x}"));
                let func = String::from_utf8_lossy(name).into_owned();
                if ok {
                    self.functions
                        .insert(handle, (module.clone(), func.clone()));
                }
                let k = ok.then(|| self.kernel_id(&module, &func, None));
                let v = match k {
                    Some(k) => Ok(Value::Kernel(k)),
                    None => ret(Value::Unit),
                };
                (Call::Kernel { module, func }, v)
            }
            Rec::KernelFunction { kernel, func } => {
                if ok {
                    if let Some(named) = self.functions.get(&kernel).cloned() {
                        self.functions.insert(func, named);
                    }
                }
                return;
            }
            Rec::Launch {
                func,
                grid,
                block,
                shared_mem,
                stream,
                cluster,
                layout,
                params,
            } => {
                let (module, name) = match self.functions.get(&func) {
                    Some(n) => n.clone(),
                    None => {
                        self.summary.unnamed_launches += 1;
                        ("unlogged".to_string(), format!("function-{func:#x}"))
                    }
                };
                if layout.is_none() {
                    self.summary.no_layout += 1;
                }
                let kernel = self.kernel_id(&module, &name, layout.as_deref());
                if cluster != [0; 3] {
                    // The trace keeps one cluster shape per kernel (Hopper kernels are built
                    // for theirs): a launch asking for another is counted.
                    let first = *self.t.kernel_clusters.entry(kernel).or_insert(cluster);
                    if first != cluster {
                        self.summary.other_clusters += 1;
                    }
                }
                let args = self.args(layout.as_deref(), params);
                self.summary.launches += 1;
                let call = Call::Launch {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream: self.stream(stream),
                    args,
                };
                (call, ret(Value::Unit))
            }
            Rec::StreamCreate { stream, .. } => {
                if !ok {
                    (Call::CreateStream, ret(Value::Unit))
                } else {
                    let id = self.new_stream(stream);
                    (Call::CreateStream, Ok(Value::Stream(StreamRef::Id(id))))
                }
            }
            // The trait has no stream destruction; a handle reused later is a new stream.
            Rec::StreamDestroy { stream } => {
                if ok {
                    self.streams.remove(&stream);
                }
                return;
            }
            Rec::EventCreate { event, .. } => {
                if !ok {
                    (Call::CreateEvent, ret(Value::Unit))
                } else {
                    let id = self.new_event(event);
                    (Call::CreateEvent, Ok(Value::Event(id)))
                }
            }
            Rec::EventDestroy { event } => {
                let e = self.event(event);
                if ok {
                    self.events.remove(&event);
                }
                (Call::DestroyEvent { event: e }, ret(Value::Unit))
            }
            Rec::EventRecord { event, stream } => (
                Call::RecordEvent {
                    event: self.event(event),
                    stream: self.stream(stream),
                },
                ret(Value::Unit),
            ),
            Rec::StreamWaitEvent { stream, event } => (
                Call::StreamWaitEvent {
                    stream: self.stream(stream),
                    event: self.event(event),
                },
                ret(Value::Unit),
            ),
            Rec::EventSync { event } => (
                Call::EventSynchronize {
                    event: self.event(event),
                },
                ret(Value::Unit),
            ),
            Rec::StreamSync { stream } => (
                Call::Synchronize {
                    stream: self.stream(stream),
                },
                ret(Value::Unit),
            ),
            Rec::CtxSync => (
                Call::Synchronize {
                    stream: StreamRef::Legacy,
                },
                ret(Value::Unit),
            ),
            Rec::Reserve { ptr, .. } => {
                let extent = self.extents.get(&index).copied().unwrap_or(0);
                if extent == 0 {
                    return;
                }
                let id = BufferId(self.next_buf);
                self.next_buf += 1;
                self.live.insert(ptr, (id, extent));
                self.t.addresses.insert(id, ptr);
                (Call::Alloc { bytes: extent }, Ok(Value::Buffer(id)))
            }
            Rec::Unreserve { ptr, .. } => {
                let Some(b) = self.live.remove(&ptr) else {
                    return;
                };
                self.freed.insert(ptr, b);
                (
                    Call::Free {
                        ptr: DevAddr::Buf { buf: b.0, off: 0 },
                    },
                    Ok(Value::Unit),
                )
            }
            // The reservation is the buffer; what backs it when does not change its bytes.
            Rec::Map { .. } | Rec::Unmap { .. } => return,
            Rec::TensorMap {
                map,
                dtype,
                base,
                dims,
                strides,
                box_dims,
                element_strides,
                modes,
            } => match TensorMapDtype::from_driver(dtype) {
                Some(dtype) => {
                    let desc = TensorMapDesc {
                        dtype,
                        dims,
                        strides,
                        box_dims,
                        element_strides,
                        interleave: modes[0],
                        swizzle: modes[1],
                        l2_promotion: modes[2],
                        oob_fill: modes[3],
                    };
                    let base = self.addr(base);
                    self.tensor_maps.insert(
                        map.to_vec(),
                        TensorMapArg {
                            base,
                            desc: desc.clone(),
                        },
                    );
                    (Call::EncodeTensorMap { base, desc }, ret(Value::Unit))
                }
                None => {
                    let name = format!("cuTensorMapEncodeTiled (element type {dtype})");
                    *self.summary.opaque.entry(name.clone()).or_default() += 1;
                    (Call::Opaque { name }, Ok(Value::Unit))
                }
            },
            Rec::Opaque { name } => {
                let name = String::from_utf8_lossy(name).into_owned();
                *self.summary.opaque.entry(name.clone()).or_default() += 1;
                // Logged before the call ran: its result is not known.
                (Call::Opaque { name }, Ok(Value::Unit))
            }
        };
        if value.is_err() {
            self.summary.failed += 1;
        }
        let next = self.threads.len() as u16;
        let thread = *self.threads.entry(r.thread).or_insert(next);
        self.t.calls.push(CallRecord {
            seq: self.seq,
            thread,
            site: SITE,
            t_ns: r.t_ns,
            dur_ns: Some(0),
            call,
            ret: Some(value),
        });
        self.seq += 1;
    }

    /// `a` as the trace spells it: null, inside a live buffer, inside a freed one, or outside
    /// every buffer (with the nearest one below).
    fn addr(&self, a: u64) -> DevAddr {
        if a == 0 {
            return DevAddr::Null;
        }
        let inside = |m: &BTreeMap<u64, (BufferId, u64)>| {
            m.range(..=a)
                .next_back()
                .filter(|(base, (_, size))| a - **base <= *size)
                .map(|(base, (id, _))| (*id, a - base))
        };
        if let Some((buf, off)) = inside(&self.live) {
            return DevAddr::Buf { buf, off };
        }
        if let Some((buf, off)) = inside(&self.freed) {
            return DevAddr::Freed { buf, off };
        }
        DevAddr::Unknown {
            near: self
                .live
                .range(..=a)
                .next_back()
                .map(|(base, (id, _))| (*id, a - base)),
        }
    }

    /// A word that points strictly inside a live buffer (one past its end is no pointer a
    /// kernel would be passed), as that buffer plus offset.
    fn pointer(&self, w: u64) -> Option<DevAddr> {
        let (base, (buf, size)) = self.live.range(..=w).next_back()?;
        (w != 0 && w - base < *size).then_some(DevAddr::Buf {
            buf: *buf,
            off: w - base,
        })
    }

    fn stream(&mut self, h: u64) -> StreamRef {
        // 0 and CU_STREAM_LEGACY (1) are the legacy stream; CU_STREAM_PER_THREAD (2) is taken
        // for it too (see the module docs).
        if h <= 2 {
            return StreamRef::Legacy;
        }
        if let Some(id) = self.streams.get(&h) {
            return StreamRef::Id(*id);
        }
        // A stream the log never saw created (made before the shim was loaded, or by a call
        // it does not log): adopted.
        let id = self.new_stream(h);
        self.t.adopted.push(Adopted::Stream {
            id,
            is_default: false,
        });
        StreamRef::Id(id)
    }

    fn event(&mut self, h: u64) -> EventId {
        if let Some(id) = self.events.get(&h) {
            return *id;
        }
        let id = self.new_event(h);
        self.t.adopted.push(Adopted::Event { id });
        id
    }

    fn new_stream(&mut self, h: u64) -> StreamId {
        let id = StreamId(self.next_stream);
        self.next_stream += 1;
        self.streams.insert(h, id);
        id
    }

    fn new_event(&mut self, h: u64) -> EventId {
        let id = EventId(self.next_event);
        self.next_event += 1;
        self.events.insert(h, id);
        id
    }

    /// A memset as the trace's byte fill when every byte of the element is the same; any other
    /// pattern is kept by name, as opaque.
    fn memset(&mut self, dst: u64, value: u32, elem: u8, count: u64, on: On) -> Call {
        let bytes = value.to_le_bytes();
        let elem = elem.clamp(1, 4);
        let fill = &bytes[..elem as usize];
        if fill.iter().any(|b| *b != fill[0]) {
            let name = format!(
                "cuMemsetD{}{}",
                elem as u32 * 8,
                if on.sync { "" } else { "Async" }
            );
            *self.summary.opaque.entry(name.clone()).or_default() += 1;
            return Call::Opaque { name };
        }
        let dst = self.addr(dst);
        let len = count.saturating_mul(elem as u64);
        if on.sync {
            Call::Memset {
                dst,
                value: fill[0],
                len,
            }
        } else {
            Call::MemsetAsync {
                dst,
                value: fill[0],
                len,
                stream: self.stream(on.stream),
            }
        }
    }

    /// The module name of an image: its kind and the head of its hash, so one image loaded
    /// twice is one module; its bytes kept as a blob.
    fn module(&mut self, image: &[u8]) -> String {
        let kind = match image_kind(image) {
            Ok(k) => k.name(),
            Err(_) => "unknown",
        };
        let id = BlobId::of(image);
        let name = format!("{kind}-{}", &id.hex()[..12]);
        if !self.t.module_images.contains_key(&name) && kind != "unknown" {
            let blob = self.t.blobs.insert_content(image.to_vec());
            self.t.module_images.insert(name.clone(), blob);
            self.t.modules.push(ModuleCode {
                name: name.clone(),
                source: None,
                ptx: None,
            });
        }
        name
    }

    fn kernel_id(&mut self, module: &str, name: &str, layout: Option<&[(u32, u32)]>) -> KernelId {
        let key = (module.to_string(), name.to_string());
        if let Some(k) = self.kernels.get(&key) {
            // A lookup names a kernel before its first launch says its layout.
            if let (Some(l), Some(info)) = (layout, self.t.kernels.get_mut(k)) {
                if info.params.is_empty() && !l.is_empty() {
                    info.params = params(l);
                }
            }
            return *k;
        }
        let id = KernelId(self.kernels.len() as u32);
        self.kernels.insert(key, id);
        self.t.kernels.insert(
            id,
            KernelInfo {
                module: module.to_string(),
                name: name.to_string(),
                params: layout.map(params).unwrap_or_default(),
                elems: Vec::new(),
            },
        );
        id
    }

    /// A launch's parameter bytes, one argument per parameter of `layout`: an address inside
    /// a live buffer is that buffer plus offset (alone, or as a word of a larger parameter).
    fn args(&self, layout: Option<&[(u32, u32)]>, bytes: &[u8]) -> Args {
        let mut out = Args::new();
        let Some(layout) = layout else {
            return out;
        };
        for &(off, size) in layout {
            let (o, n) = (off as usize, size as usize);
            let Some(p) = bytes.get(o..o.saturating_add(n)) else {
                // A layout the bytes do not cover: what there is, zero-filled.
                let mut v = bytes.get(o..).unwrap_or(&[]).to_vec();
                v.resize(n, 0);
                out.push(Arg::Val(v.as_slice().into()));
                continue;
            };
            let word = |k: usize| u64::from_le_bytes(p[k..k + 8].try_into().expect("8 bytes"));
            if n == 8 {
                match self.pointer(word(0)) {
                    Some(d) => out.push(Arg::Buf(d)),
                    None => out.push(Arg::Val(p.into())),
                }
                continue;
            }
            if let Some(m) = (n == TENSOR_MAP).then(|| self.tensor_maps.get(p)).flatten() {
                out.push(Arg::TensorMap(Box::new(m.clone())));
                continue;
            }
            // Tensor maps inside a larger parameter (CUTLASS's Params hold them), 64-byte
            // aligned as CUtensorMap is; then address words outside them.
            let maps: Vec<(u32, TensorMapArg)> = (0..n.saturating_sub(TENSOR_MAP - 1))
                .filter(|k| (o + k) % 64 == 0)
                .filter_map(|k| {
                    let m = self.tensor_maps.get(&p[k..k + TENSOR_MAP])?;
                    Some((k as u32, m.clone()))
                })
                .collect();
            let in_map = |k: usize| {
                maps.iter()
                    .any(|(m, _)| (*m as usize..*m as usize + TENSOR_MAP).contains(&k))
            };
            let ptrs: Vec<(u32, DevAddr)> = (0..n / 8)
                .map(|k| k * 8)
                .filter(|k| (o + k) % 8 == 0 && !in_map(*k))
                .filter_map(|k| self.pointer(word(k)).map(|d| (k as u32, d)))
                .collect();
            if ptrs.is_empty() && maps.is_empty() {
                out.push(Arg::Val(p.into()));
            } else {
                out.push(Arg::Words(Box::new(WordsArg {
                    bytes: p.to_vec(),
                    ptrs,
                    maps,
                })));
            }
        }
        out
    }
}

fn params(layout: &[(u32, u32)]) -> Vec<ParamInfo> {
    layout
        .iter()
        .map(|&(offset, size)| ParamInfo {
            offset,
            size,
            access: ParamAccess::Unknown,
        })
        .collect()
}

/// A driver status as a recorded error.
fn driver_error(code: i32) -> ErrorRec {
    ErrorRec {
        code: Some(code as u32),
        message: format!("CUDA driver error {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputape_shimlog::{encode, header, Header};

    fn log(recs: &[(i32, Rec<'_>)]) -> Vec<u8> {
        let mut out = header(Header {
            pid: 7,
            driver_version: 13000,
        })
        .to_vec();
        for (i, (status, call)) in recs.iter().enumerate() {
            encode(
                &Record {
                    t_ns: i as u64,
                    thread: 100 + (i as u32 % 2),
                    status: *status,
                    call: call.clone(),
                },
                &mut out,
            );
        }
        out
    }

    const A: u64 = 0x7000_0000;
    const B: u64 = 0x7100_0000;

    fn program() -> Vec<u8> {
        // A kernel taking (float *x, struct { float *p[2]; int n; } s, u64 k): x inside A, the
        // struct's pointers inside B and A, k a number that is no address.
        let mut params = (A + 16).to_le_bytes().to_vec();
        params.extend_from_slice(&(B + 4).to_le_bytes());
        params.extend_from_slice(&A.to_le_bytes());
        params.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
        params.extend_from_slice(&12345u64.to_le_bytes());
        let ptx = b".version 8.0\n.entry k()\0";
        log(&[
            (
                0,
                Rec::Alloc {
                    ptr: A,
                    bytes: 64,
                    managed: false,
                },
            ),
            (
                0,
                Rec::Alloc {
                    ptr: B,
                    bytes: 64,
                    managed: false,
                },
            ),
            (
                2,
                Rec::Alloc {
                    ptr: 0,
                    bytes: 1 << 40,
                    managed: false,
                },
            ),
            (
                0,
                Rec::ModuleLoad {
                    handle: 5,
                    library: true,
                    image: ptx,
                },
            ),
            (
                0,
                Rec::Function {
                    owner: 5,
                    library: true,
                    handle: 6,
                    name: b"_Z1kPf1Sy",
                },
            ),
            (
                0,
                Rec::KernelFunction {
                    kernel: 6,
                    func: 66,
                },
            ),
            (
                0,
                Rec::Launch {
                    func: 66,
                    grid: [1, 1, 1],
                    block: [32, 1, 1],
                    shared_mem: 0,
                    stream: 0,
                    cluster: [0; 3],
                    layout: Some(vec![(0, 8), (8, 24), (32, 8)]),
                    params: &params,
                },
            ),
            (0, Rec::Free { ptr: B }),
            (
                0,
                Rec::CopyD2D {
                    src: B + 8,
                    dst: A + 64,
                    len: 4,
                    on: On {
                        stream: 0,
                        sync: true,
                    },
                },
            ),
        ])
    }

    #[test]
    fn launches_pointers_and_failures_map_onto_trace_calls() {
        let (t, s) = convert("test", &program(), vec!["prog".into()]).unwrap();
        assert_eq!(s.records, 9);
        assert_eq!(
            (s.calls, s.launches, s.kernels, s.modules, s.failed),
            (7, 1, 1, 1, 1)
        );
        assert!(t.stopped);
        // The failed allocation is recorded with its driver error and makes no buffer.
        let failed = &t.calls[2];
        assert_eq!(
            failed.ret.as_ref().unwrap().as_ref().unwrap_err().code,
            Some(2)
        );
        // The kernel is named by its library's image, found through cuKernelGetFunction.
        let k = &t.kernels[&KernelId(0)];
        assert!(k.module.starts_with("ptx-"), "{}", k.module);
        assert_eq!(k.name, "_Z1kPf1Sy");
        assert_eq!(k.params.len(), 3);
        let Call::Launch { args, kernel, .. } = &t.calls[4].call else {
            panic!("{:?}", t.calls[4].call)
        };
        assert_eq!(*kernel, KernelId(0));
        let (a, b) = (BufferId(0), BufferId(1));
        assert_eq!(args[0], Arg::Buf(DevAddr::Buf { buf: a, off: 16 }));
        let Arg::Words(w) = &args[1] else {
            panic!("{:?}", args[1])
        };
        assert_eq!(
            w.ptrs,
            vec![
                (0, DevAddr::Buf { buf: b, off: 4 }),
                (8, DevAddr::Buf { buf: a, off: 0 })
            ]
        );
        assert_eq!(w.bytes.len(), 24);
        assert!(matches!(&args[2], Arg::Val(v) if v[..] == 12345u64.to_le_bytes()));
        // Relocated for a replay where the buffers live elsewhere.
        let moved = w
            .relocated(
                |d| match d {
                    DevAddr::Buf { buf, off } => Ok::<u64, ()>(0x9000 * (buf.0 as u64 + 1) + off),
                    _ => Err(()),
                },
                |_| Err(()),
            )
            .unwrap();
        assert_eq!(moved[..8], (0x9000u64 * 2 + 4).to_le_bytes());
        assert_eq!(moved[8..16], 0x9000u64.to_le_bytes());
        assert_eq!(moved[16..], w.bytes[16..]);
        // After the free, B's addresses are named as freed; one past A's end stays A's.
        let Call::CopyD2D { src, dst, .. } = &t.calls[6].call else {
            panic!("{:?}", t.calls[6].call)
        };
        assert_eq!(*src, DevAddr::Freed { buf: b, off: 8 });
        assert_eq!(*dst, DevAddr::Buf { buf: a, off: 64 });
        // Two recording threads, numbered in order of first call.
        assert_eq!(t.calls[1].thread, 1);
        // The trace writes and reads back whole.
        let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
        assert_eq!(back.calls.len(), 7);
        assert_eq!(back.module_images.len(), 1);
        assert_eq!(back.calls[4].call, t.calls[4].call);
    }

    #[test]
    fn a_damaged_log_converts_up_to_the_damage_or_is_refused_never_a_panic() {
        let bytes = program();
        // Where each record ends: a log cut there is whole, anywhere else says it was cut.
        let (_, mut r) = Reader::new(&bytes).unwrap();
        let mut ends = vec![r.offset() as usize];
        while r.next().is_some() {
            ends.push(r.offset() as usize);
        }
        for cut in gputape_shimlog::HEADER_LEN..bytes.len() {
            let (_, s) = convert("cut", &bytes[..cut], vec![]).unwrap();
            let whole = ends.iter().position(|e| *e == cut);
            assert_eq!(s.cut.is_none(), whole.is_some(), "cut at {cut}");
            assert_eq!(
                s.records as usize,
                ends.iter().filter(|e| **e <= cut).count() - 1
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            let _ = convert("flipped", &b, vec![]);
        }
        assert!(matches!(
            convert("x", b"not a log", vec![]),
            Err(ShimTraceError::Log { .. })
        ));
    }

    #[test]
    fn a_reservation_is_one_buffer_as_far_as_it_was_ever_mapped() {
        const R: u64 = 0x8000_0000;
        let chunk = 2u64 << 20;
        let bytes = log(&[
            (
                0,
                Rec::Reserve {
                    ptr: R,
                    size: 1 << 36,
                },
            ),
            (
                0,
                Rec::Map {
                    ptr: R,
                    size: chunk,
                },
            ),
            (
                0,
                Rec::Map {
                    ptr: R + chunk,
                    size: chunk,
                },
            ),
            // A copy that straddles the two maps: one buffer, one offset.
            (
                0,
                Rec::CopyD2D {
                    src: R + chunk - 8,
                    dst: R,
                    len: 16,
                    on: On {
                        stream: 0,
                        sync: true,
                    },
                },
            ),
            (
                0,
                Rec::Unmap {
                    ptr: R,
                    size: chunk,
                },
            ),
            (
                0,
                Rec::Unreserve {
                    ptr: R,
                    size: 1 << 36,
                },
            ),
            // Never mapped: no buffer at all.
            (0, Rec::Reserve { ptr: R, size: 64 }),
        ]);
        let (t, _) = convert("vmm", &bytes, vec![]).unwrap();
        let calls: Vec<&Call> = t.calls.iter().map(|c| &c.call).collect();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(calls[0], &Call::Alloc { bytes: 2 * chunk });
        let buf = BufferId(0);
        assert_eq!(
            calls[1],
            &Call::CopyD2D {
                src: DevAddr::Buf {
                    buf,
                    off: chunk - 8
                },
                dst: DevAddr::Buf { buf, off: 0 },
                len: 16
            }
        );
        assert_eq!(
            calls[2],
            &Call::Free {
                ptr: DevAddr::Buf { buf, off: 0 }
            }
        );
        assert_eq!(t.addresses[&buf], R);
    }

    #[test]
    fn tensor_maps_are_found_alone_and_inside_structs() {
        let mut map = [0u8; 128];
        map[..8].copy_from_slice(&(A + 64).to_le_bytes());
        map[8..16].copy_from_slice(&0xfeed_u64.to_le_bytes());
        // A struct: a pointer, padding to 64, the map, padding to 256.
        let mut s = vec![0u8; 256];
        s[..8].copy_from_slice(&A.to_le_bytes());
        s[64..192].copy_from_slice(&map);
        let mut params = map.to_vec();
        params.extend_from_slice(&s);
        let bytes = log(&[
            (
                0,
                Rec::Alloc {
                    ptr: A,
                    bytes: 4096,
                    managed: false,
                },
            ),
            (
                0,
                Rec::TensorMap {
                    map: &map,
                    dtype: 9,
                    base: A + 64,
                    dims: vec![64, 16],
                    strides: vec![128],
                    box_dims: vec![64, 8],
                    element_strides: vec![1, 1],
                    modes: [0, 0, 0, 0],
                },
            ),
            (
                0,
                Rec::TensorMap {
                    map: &[1; 128],
                    dtype: 11,
                    base: A,
                    dims: vec![8],
                    strides: vec![],
                    box_dims: vec![8],
                    element_strides: vec![1],
                    modes: [0, 0, 0, 0],
                },
            ),
            (
                0,
                Rec::Launch {
                    func: 1,
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem: 0,
                    stream: 0,
                    cluster: [1, 2, 1],
                    layout: Some(vec![(0, 128), (128, 256)]),
                    params: &params,
                },
            ),
        ]);
        let (t, s) = convert("maps", &bytes, vec![]).unwrap();
        // The map of a type this description lacks (TF32) is kept by name.
        assert_eq!(
            s.opaque.keys().collect::<Vec<_>>(),
            ["cuTensorMapEncodeTiled (element type 11)"]
        );
        let Call::EncodeTensorMap { base, desc } = &t.calls[1].call else {
            panic!("{:?}", t.calls[1].call)
        };
        let a = BufferId(0);
        assert_eq!(*base, DevAddr::Buf { buf: a, off: 64 });
        assert_eq!(desc.dtype, TensorMapDtype::Bf16);
        let Call::Launch { args, kernel, .. } = &t.calls[3].call else {
            panic!("{:?}", t.calls[3].call)
        };
        // The cluster its cuLaunchKernelEx asked for is the kernel's, and written out.
        assert_eq!(t.kernel_clusters[kernel], [1, 2, 1]);
        let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
        assert_eq!(back.kernel_clusters[kernel], [1, 2, 1]);
        let Arg::TensorMap(m) = &args[0] else {
            panic!("{:?}", args[0])
        };
        assert_eq!(m.base, DevAddr::Buf { buf: a, off: 64 });
        let Arg::Words(w) = &args[1] else {
            panic!("{:?}", args[1])
        };
        // The map's own address word is the map's, not a pointer of the struct's.
        assert_eq!(w.ptrs, vec![(0, DevAddr::Buf { buf: a, off: 0 })]);
        assert_eq!(w.maps.len(), 1);
        assert_eq!(w.maps[0].0, 64);
        let moved = w
            .relocated(|_| Ok::<u64, ()>(0x1111), |_| Ok(vec![0xab; 128]))
            .unwrap();
        assert_eq!(moved[..8], 0x1111u64.to_le_bytes());
        assert!(moved[64..192].iter().all(|b| *b == 0xab));
        assert!(moved[192..].iter().all(|b| *b == 0));
    }
}
