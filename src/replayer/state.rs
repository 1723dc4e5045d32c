//! The replay's state, in a room of its own because every other room works through it: the
//! recorded ids mapped to this backend's handles (`State`, torn down by `Guard`), how that
//! state is built, restored between loops and freed, how recorded addresses, host offsets and
//! streams resolve to the replay's, and which buffers depend on a kernel the backend cannot
//! run (taint tracking).

use super::{ModuleLoader, ReplayError, Replayer};
use crate::backend::{DevicePtr, GpuBackend, GraphHandle, KernelHandle, ParamAccess};
use crate::trace::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Replay state: recorded ids to this backend's handles.
/// Owns a replay's state and tears it down however the replay ends.
pub(crate) struct Guard<'r, 't> {
    pub r: &'r Replayer<'t>,
    pub gpu: &'r dyn GpuBackend,
    pub st: State,
}

impl Drop for Guard<'_, '_> {
    fn drop(&mut self) {
        self.r.teardown(self.gpu, &mut self.st);
    }
}

impl State {
    /// A fresh state with the resolved kernels and those the backend cannot run.
    pub(crate) fn new(
        (kernels, opaque): &(HashMap<KernelId, KernelHandle>, HashSet<KernelId>),
    ) -> State {
        State {
            bufs: HashMap::default(),
            globals: HashSet::default(),
            borrowed: HashSet::default(),
            borrowed_events: HashSet::default(),
            freed: HashMap::default(),
            streams: HashMap::default(),
            legacy: 0,
            events: HashMap::default(),
            comms: HashMap::default(),
            comm_ids: HashMap::default(),
            graphs: HashMap::default(),
            kernels: kernels.clone(),
            hosts: HashMap::default(),
            pending: Vec::new(),
            last_scan: None,
            opaque: opaque.clone(),
            tainted: HashMap::default(),
            unchecked: Vec::new(),
            failed_unrun: Vec::new(),
            unrecorded_args: Vec::new(),
            seen: Seen::default(),
        }
    }
}

pub(crate) struct State {
    pub bufs: HashMap<BufferId, (DevicePtr, u64)>,
    /// Buffers that are the loaded modules' variables (`Trace::globals`): not freed.
    pub globals: HashSet<BufferId>,
    /// Buffers that are another rank's, opened here in a joint replay (`shared.rs`): not
    /// freed here either.
    pub borrowed: HashSet<BufferId>,
    /// Events that are another rank's, opened here in a joint replay: not destroyed here.
    pub borrowed_events: HashSet<EventId>,
    /// Every buffer, stream and event the replay made, with the backend's handle for it,
    /// kept after they go: what names a backend's own log of the replay
    /// (`ReplayReport::seen`).
    pub seen: Seen,
    /// Where each buffer the replay freed was: a recorded use after free (`DevAddr::Freed`)
    /// aims there again, so the fault it caused can happen again.
    pub freed: HashMap<BufferId, DevicePtr>,
    pub streams: HashMap<StreamId, u64>,
    /// What the recording's legacy stream is in the replay: the backend's legacy stream (0),
    /// or a stream of the replay's own that an eager program's step is moved to, to be captured.
    pub legacy: u64,
    pub events: HashMap<EventId, u64>,
    /// Communicators joined by the replay (single-rank ones: a rank set replays together).
    pub comms: HashMap<crate::trace::CommId, crate::backend::CommHandle>,
    /// `ReplayOptions::comms`: the unique id each recorded communicator is joined under.
    pub comm_ids: HashMap<crate::backend::CommUniqueId, crate::backend::CommUniqueId>,
    pub graphs: HashMap<GraphId, GraphHandle>,
    pub kernels: HashMap<KernelId, KernelHandle>,
    pub hosts: HashMap<HostId, (*mut u8, usize)>,
    /// Host buffers that async copies write into or read from until their stream syncs.
    pub pending: Vec<(u64, StreamRef, Vec<u8>)>,
    /// What the last replayed `scan_redzones` returned.
    pub last_scan: Option<usize>,
    /// Kernels this backend cannot run (no CPU body on the mock): their launches are skipped.
    pub opaque: HashSet<KernelId>,
    /// Buffers whose contents depend on a skipped launch, with the kernel they depend on.
    pub tainted: HashMap<BufferId, KernelId>,
    /// Readbacks not compared because they depend on a skipped launch: (seq, buffer, kernel).
    pub unchecked: Vec<(u64, BufferId, KernelId)>,
    /// Skipped launches whose recording returned an error: (seq, kernel). The replay cannot
    /// say whether it would fail again, so it cannot pass.
    pub failed_unrun: Vec<(u64, KernelId)>,
    /// Raw launches not run because their arguments were not recorded: (seq, kernel, count).
    pub unrecorded_args: Vec<(u64, KernelId, u32)>,
}

impl<'t> Replayer<'t> {
    /// Allocate buffer `id` of `bytes`: at its recorded address when placing, else anywhere.
    pub(super) fn alloc_buf(
        &self,
        gpu: &dyn GpuBackend,
        id: BufferId,
        bytes: u64,
        managed: bool,
    ) -> anyhow::Result<DevicePtr> {
        match (self.placer, self.trace.addresses.get(&id)) {
            (Some(place), Some(addr)) => place(*addr, bytes as usize)
                .map_err(|e| e.context(format!("placing {id} ({bytes} bytes) at {addr:#x}"))),
            _ if managed => gpu.alloc_managed(bytes as usize),
            _ => gpu.alloc(bytes as usize),
        }
    }

    /// Refuse to go on if a pointer hidden in some buffer targets `id` and `id` is not where the
    /// recording had it.
    pub(super) fn check_hidden(&self, id: BufferId, at: DevicePtr) -> Result<(), ReplayError> {
        for h in self.hidden.iter().filter(|h| h.target == id) {
            let recorded = self.trace.addresses.get(&id).copied().unwrap_or(0);
            if recorded != at.0 {
                return Err(ReplayError::HiddenPointer {
                    holder: h.holder,
                    offset: h.offset,
                    target: h.target,
                    seq: h.seq,
                    recorded,
                    replayed: at.0,
                });
            }
        }
        Ok(())
    }

    pub(super) fn blob(&self, id: BlobId) -> Result<&'t [u8], ReplayError> {
        self.trace.try_blob(id)?.ok_or(ReplayError::MissingBlob(id))
    }

    /// Load modules (through `loader`, if given) and resolve every kernel the trace uses.
    /// The replay's state with its kernels looked up and the trace's setup done (adopted
    /// handles, initial contents): where every walk over the calls starts. The guard frees what
    /// the replay made when it goes.
    pub(crate) fn set_up<'r>(
        &'r self,
        gpu: &'r dyn GpuBackend,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<Guard<'r, 't>, ReplayError> {
        let kernels = self.kernels(gpu, loader)?;
        let mut guard = Guard {
            r: self,
            gpu,
            st: State::new(&kernels),
        };
        self.setup(gpu, &mut guard.st)?;
        Ok(guard)
    }

    pub(crate) fn kernels(
        &self,
        gpu: &dyn GpuBackend,
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<(HashMap<KernelId, KernelHandle>, HashSet<KernelId>), ReplayError> {
        self.kernels_with(gpu, loader, self.opaque_ok)
    }

    /// `kernels`, with kernels the backend cannot run allowed (`opaque_ok`) or refused.
    pub(crate) fn kernels_with(
        &self,
        gpu: &dyn GpuBackend,
        loader: Option<ModuleLoader<'_>>,
        opaque_ok: bool,
    ) -> Result<(HashMap<KernelId, KernelHandle>, HashSet<KernelId>), ReplayError> {
        if let Some(load) = loader {
            // Image modules are loaded below, as images.
            for m in self
                .trace
                .modules
                .iter()
                .filter(|m| !self.trace.module_images.contains_key(&m.name))
            {
                load(m).map_err(|e| ReplayError::Setup {
                    what: format!("loading module {}", m.name),
                    cause: format!("{e:#}"),
                })?;
            }
        }
        // A driver-level recording's modules are binary images, loaded as they are; where the
        // backend cannot (the mock), their kernels are opaque when that is allowed.
        for (name, image) in &self.trace.module_images {
            let loaded = match self.trace.try_blob(*image)? {
                Some(bytes) => gpu.load_module_image(name, bytes),
                None => Err(anyhow::anyhow!(
                    "its image (blob {image}) is not in the trace"
                )),
            };
            if let Err(e) = loaded {
                if !opaque_ok {
                    return Err(ReplayError::Setup {
                        what: format!("loading module image {name}"),
                        cause: format!("{e:#}"),
                    });
                }
            }
        }
        let mut out = HashMap::default();
        let mut opaque = HashSet::default();
        let registry = gpu.kernel_registry();
        for (id, info) in &self.trace.kernels {
            // What the recording knew of each parameter, so a recorded replay knows it too.
            if let Some(reg) = &registry {
                if info.params.iter().any(|p| p.access != ParamAccess::Unknown) {
                    reg.declare_access(&info.module, &info.name, &info.params);
                }
            }
            match gpu.kernel(&info.module, &info.name) {
                Ok(h) => {
                    out.insert(*id, h);
                }
                Err(_) if opaque_ok => {
                    opaque.insert(*id);
                }
                Err(e) => {
                    return Err(ReplayError::Kernel {
                        id: id.0,
                        module: info.module.clone(),
                        name: info.name.clone(),
                        cause: format!("{e:#}"),
                    })
                }
            }
        }
        // How a driver-level recording launched its kernels beyond their grid: cluster
        // shapes, cooperatively.
        let setup = |id: &KernelId, how: String, r: anyhow::Result<()>| {
            r.map_err(|e| ReplayError::Setup {
                what: format!("launching {} {how}", self.trace.kernel_name(*id)),
                cause: format!("{e:#}"),
            })
        };
        for (id, dims) in &self.trace.kernel_clusters {
            if let Some(h) = out.get(id) {
                let how = format!("in clusters of {dims:?}");
                setup(id, how, gpu.set_kernel_cluster(*h, *dims))?;
            }
        }
        for id in &self.trace.kernel_cooperative {
            if let Some(h) = out.get(id) {
                setup(id, "cooperatively".into(), gpu.set_kernel_cooperative(*h))?;
            }
        }
        Ok((out, opaque))
    }

    /// Launch `kernel` over `args`: which buffers now depend on an opaque kernel. A skipped
    /// launch taints every buffer it may write; a run one taints what it writes when it reads
    /// a tainted buffer.
    pub(super) fn taint_launch(&self, st: &mut State, kernel: KernelId, args: &[Arg]) {
        let params = self
            .trace
            .kernels
            .get(&kernel)
            .map(|k| &k.params[..])
            .unwrap_or(&[]);
        // A tensor map's parameter is a by-value blob; TMA may load and store through it.
        let access = |i: usize| match args.get(i) {
            Some(Arg::TensorMap(_)) => ParamAccess::ReadWrite,
            _ => params.get(i).map_or(ParamAccess::Unknown, |p| p.access),
        };
        let bufs = || {
            args.iter()
                .enumerate()
                .filter_map(|(i, a)| match a.device_addr() {
                    Some(DevAddr::Buf { buf, .. }) => Some((i, *buf)),
                    _ => None,
                })
        };
        let origin = if st.opaque.contains(&kernel) {
            Some(kernel)
        } else {
            bufs()
                .filter(|(i, _)| access(*i) != ParamAccess::Write)
                .find_map(|(_, b)| st.tainted.get(&b).copied())
        };
        if let Some(k) = origin {
            for (i, b) in bufs() {
                if !matches!(access(i), ParamAccess::Read | ParamAccess::Value) {
                    st.tainted.insert(b, k);
                }
            }
        }
    }

    /// A readback of `src`: true when it depends on an opaque kernel (and is logged as not
    /// checked rather than compared).
    pub(super) fn unchecked(&self, st: &mut State, seq: u64, src: &DevAddr) -> bool {
        let DevAddr::Buf { buf, .. } = src else {
            return false;
        };
        match st.tainted.get(buf).copied() {
            Some(k) => {
                st.unchecked.push((seq, *buf, k));
                true
            }
            None => false,
        }
    }

    /// The initial state: adopted resources created and initial buffers allocated (each only
    /// if `st` lacks it), then every initial buffer filled with its recorded contents. Fills
    /// `st` as it goes, so whatever was made before a failure is still torn down.
    pub(crate) fn setup(&self, gpu: &dyn GpuBackend, st: &mut State) -> Result<(), ReplayError> {
        let setup = |what: String| {
            move |e: anyhow::Error| ReplayError::Setup {
                what,
                cause: format!("{e:#}"),
            }
        };
        for a in &self.trace.adopted {
            match a {
                Adopted::Stream { id, is_default } if !st.streams.contains_key(id) => {
                    let s = if *is_default {
                        gpu.default_stream()
                    } else {
                        gpu.create_stream()
                            .map_err(setup(format!("creating {id}")))?
                    };
                    st.streams.insert(*id, s);
                    st.seen.streams.insert(s, *id);
                }
                Adopted::Event { id } if !st.events.contains_key(id) => {
                    let e = gpu
                        .create_event()
                        .map_err(setup(format!("creating {id}")))?;
                    st.events.insert(*id, e);
                    st.seen.events.insert(e, *id);
                }
                Adopted::Host { id, bytes } if !st.hosts.contains_key(id) => {
                    let p = gpu
                        .alloc_host_pinned(*bytes as usize)
                        .map_err(setup(format!("allocating {id}")))?;
                    st.hosts.insert(*id, (p, *bytes as usize));
                }
                // Joined again where it can be: a communicator of one, or one whose rank set
                // replays together (`replay_ranks`). Otherwise its collectives fail, named.
                Adopted::Comm {
                    id,
                    unique,
                    nranks,
                    rank,
                    ..
                } if !st.comms.contains_key(id) => {
                    let join = match (st.comm_ids.get(unique), *nranks) {
                        (Some(u), _) => Some(gpu.comm_init(*u, *nranks, *rank)),
                        (None, 1) => {
                            Some(gpu.comm_unique_id().and_then(|u| gpu.comm_init(u, 1, 0)))
                        }
                        (None, _) => None,
                    };
                    if let Some(h) = join {
                        let h = h.map_err(setup(format!("joining {id}")))?;
                        st.comms.insert(*id, h);
                    }
                }
                _ => {}
            }
        }
        // Module variables: found in the modules loaded (the replay's own memory, not
        // freed by it); a backend without them (the mock) gets a stand-in buffer, zeroed.
        for (id, g) in &self.trace.globals {
            if st.bufs.contains_key(id) {
                continue;
            }
            match gpu.module_global(&g.module, &g.name) {
                Ok((p, n)) => {
                    if n < g.bytes {
                        return Err(ReplayError::Setup {
                            what: format!("finding variable {}::{} ({id})", g.module, g.name),
                            cause: format!("{n} bytes here, {} when recorded", g.bytes),
                        });
                    }
                    st.globals.insert(*id);
                    st.bufs.insert(*id, (p, g.bytes));
                    st.seen.bufs.push((*id, p.0, g.bytes));
                }
                Err(_) => {
                    let p = self
                        .alloc_buf(gpu, *id, g.bytes, false)
                        .map_err(setup(format!(
                            "allocating a stand-in for {}::{}",
                            g.module, g.name
                        )))?;
                    st.bufs.insert(*id, (p, g.bytes));
                    st.seen.bufs.push((*id, p.0, g.bytes));
                }
            }
        }
        let mut fills = Vec::with_capacity(self.trace.initial.len());
        let mut sizes = Vec::with_capacity(self.trace.initial.len());
        for i in &self.trace.initial {
            let p = match st.bufs.get(&i.buf) {
                Some((p, _)) => *p,
                None => {
                    let p = self
                        .alloc_buf(gpu, i.buf, i.bytes, false)
                        .map_err(setup(format!("allocating {}", i.buf)))?;
                    self.check_hidden(i.buf, p)?;
                    st.bufs.insert(i.buf, (p, i.bytes));
                    st.seen.bufs.push((i.buf, p.0, i.bytes));
                    p
                }
            };
            fills.push(super::restore::Fill {
                buf: i.buf,
                dst: p,
                data: i.data,
            });
            sizes.push(i.bytes);
        }
        super::restore::fill(gpu, &self.trace.blobs, &fills, &sizes)
    }

    /// Back to the initial state for another loop, keeping what `setup` made: wait for every
    /// stream, drop what the replayed calls created (buffers, graphs, events, pinned regions),
    /// then `setup` again, which makes only what a call destroyed and refills the initial
    /// buffers.
    pub(crate) fn restore(&self, gpu: &dyn GpuBackend, st: &mut State) -> Result<(), ReplayError> {
        for (id, s) in &st.streams {
            gpu.synchronize(*s).map_err(|e| ReplayError::Setup {
                what: format!("waiting for {id} after the previous loop"),
                cause: format!("{e:#}"),
            })?;
        }
        for (_, g) in st.graphs.drain() {
            let _ = gpu.destroy_graph(g);
        }
        let initial: HashSet<BufferId> = self.trace.initial.iter().map(|i| i.buf).collect();
        st.bufs.retain(|id, (p, _)| {
            let keep = initial.contains(id) || self.trace.globals.contains_key(id);
            if !keep {
                let _ = gpu.free(*p);
            }
            keep
        });
        let adopted = |want: &dyn Fn(&Adopted) -> bool| self.trace.adopted.iter().any(want);
        st.events.retain(|id, e| {
            let keep = adopted(&|a| matches!(a, Adopted::Event { id: x } if x == id));
            if !keep {
                let _ = gpu.destroy_event(*e);
            }
            keep
        });
        st.hosts.retain(|id, (p, n)| {
            let keep = adopted(&|a| matches!(a, Adopted::Host { id: x, .. } if x == id));
            if !keep {
                let _ = gpu.free_host_pinned(*p, *n);
            }
            keep
        });
        st.pending.clear();
        st.last_scan = None;
        st.tainted.clear();
        self.setup(gpu, st)
    }

    /// Free what `setup` and the replayed calls left allocated. A replay that stopped inside a
    /// capture first ends it: while a stream captures, the driver refuses the frees.
    pub(crate) fn teardown(&self, gpu: &dyn GpuBackend, st: &mut State) {
        gpu.abort_capture_if_active(0);
        for s in st.streams.values() {
            gpu.abort_capture_if_active(*s);
        }
        for (_, g) in st.graphs.drain() {
            let _ = gpu.destroy_graph(g);
        }
        for (id, (p, _)) in st.bufs.drain() {
            // A module variable is the module's, not the replay's to free.
            if !st.globals.contains(&id) && !st.borrowed.contains(&id) {
                let _ = gpu.free(p);
            }
        }
        for (id, e) in st.events.drain() {
            if !st.borrowed_events.contains(&id) {
                let _ = gpu.destroy_event(e);
            }
        }
        for (_, (p, n)) in st.hosts.drain() {
            let _ = gpu.free_host_pinned(p, n);
        }
    }
}

/// Wait for every stream of the replay (the legacy stream too): after a launch inside a fault
/// window, whatever the launch raised is reported here.
pub(crate) fn sync_all(gpu: &dyn GpuBackend, st: &State) -> anyhow::Result<()> {
    gpu.synchronize(0)?;
    for s in st.streams.values() {
        gpu.synchronize(*s)?;
    }
    Ok(())
}

/// A device-to-device copy carries its source's dependence on an opaque kernel.
pub(super) fn taint_copy(st: &mut State, src: &DevAddr, dst: &DevAddr) {
    if let (DevAddr::Buf { buf: s, .. }, DevAddr::Buf { buf: d, .. }) = (src, dst) {
        if let Some(k) = st.tainted.get(s).copied() {
            st.tainted.insert(*d, k);
        }
    }
}

pub(crate) fn resolve_stream(st: &State, s: StreamRef, c: &CallRecord) -> Result<u64, ReplayError> {
    match s {
        StreamRef::Legacy => Ok(st.legacy),
        StreamRef::Id(id) => st
            .streams
            .get(&id)
            .copied()
            .ok_or_else(|| ReplayError::Dangling {
                seq: c.seq,
                kind: c.call.kind().name(),
                what: id.to_string(),
            }),
    }
}

impl Replayer<'_> {
    pub(super) fn addr(
        &self,
        st: &State,
        a: &DevAddr,
        c: &CallRecord,
    ) -> Result<DevicePtr, ReplayError> {
        match a {
            DevAddr::Null => Ok(DevicePtr::NULL),
            // An address outside every buffer when recorded (`Unknown` with a `near`) aims
            // just as far past the nearest one, so an out-of-bounds access stays out of bounds.
            DevAddr::Buf { buf, off }
            | DevAddr::Freed { buf, off }
            | DevAddr::Unknown {
                near: Some((buf, off)),
            } => st
                .bufs
                .get(buf)
                .map(|(p, _)| *p)
                .or_else(|| match a {
                    DevAddr::Freed { .. } => st.freed.get(buf).copied(),
                    _ => None,
                })
                .map(|p| p.offset(*off as usize))
                .ok_or_else(|| ReplayError::Dangling {
                    seq: c.seq,
                    kind: c.call.kind().name(),
                    what: buf.to_string(),
                }),
            DevAddr::Unknown { near: None } => Err(ReplayError::Unsupported {
                seq: c.seq,
                site: self.trace.site(c.site),
                msg: "a pointer that was in no known buffer when recorded cannot be remapped"
                    .into(),
            }),
        }
    }

    /// The replay's address for `len` bytes at a recorded pinned host address, checked to lie
    /// inside the region (a trace is untrusted: its offsets are not believed, they are checked).
    pub(super) fn host(
        &self,
        st: &State,
        h: &HostAddr,
        len: u64,
        c: &CallRecord,
    ) -> Result<Option<*mut u8>, ReplayError> {
        match h {
            HostAddr::Pinned { host, off } => match st.hosts.get(host) {
                Some((p, n)) => {
                    if off.checked_add(len).is_none_or(|end| end > *n as u64) {
                        return Err(ReplayError::Unsupported {
                            seq: c.seq,
                            site: self.trace.site(c.site),
                            msg: format!(
                                "{len} bytes at offset {off} of {host} run past its {n} bytes"
                            ),
                        });
                    }
                    // SAFETY: `off + len` lies inside this live pinned region of `n` bytes
                    // (checked above), so the pointer stays in the same allocation.
                    Ok(Some(unsafe { p.add(*off as usize) }))
                }
                None => Ok(None),
            },
            HostAddr::Unknown => Ok(None),
        }
    }

    /// Zeroed host memory for `len` bytes a trace asks for, refused past the replay's limit
    /// instead of aborting the process.
    pub(super) fn host_bytes(&self, len: u64, c: &CallRecord) -> Result<Vec<u8>, ReplayError> {
        let too_big = || ReplayError::TooLarge {
            seq: c.seq,
            what: c.call.kind().name(),
            bytes: len,
            limit: self.max_host_bytes,
        };
        if len > self.max_host_bytes {
            return Err(too_big());
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len as usize).map_err(|_| too_big())?;
        v.resize(len as usize, 0);
        Ok(v)
    }
}

/// What a replay made, by the trace's names and the backend's handles.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Each buffer as it was placed, in order: id, address, bytes.
    pub bufs: Vec<(BufferId, u64, u64)>,
    /// Streams by the backend's handle.
    pub streams: std::collections::BTreeMap<u64, StreamId>,
    /// Events by the backend's handle.
    pub events: std::collections::BTreeMap<u64, EventId>,
}
