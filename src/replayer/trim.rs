//! `trim`: a trace cut to calls A..B, starting from the device state at A.
//!
//! The state at A is what the calls before A left: they are replayed (unverified) on a
//! backend, every stream is synchronised, and every live buffer is read back into the new
//! trace's initial snapshot. Streams, events and pinned regions alive at A become adopted
//! resources. A cut inside a capture, or calls after A that use a graph made before it, are
//! refused: a graph cannot be carried across the cut.

use super::{sync_all, ModuleLoader, Outcome, ReplayError, Replayer, State};
use crate::backend::GpuBackend;
use crate::trace::*;
use rustc_hash::FxHashMap as HashMap;

impl Replayer<'_> {
    /// The trace of calls `range.0..range.1`, with the state at `range.0` as its initial state.
    pub fn trim(
        &self,
        gpu: &dyn GpuBackend,
        range: (u64, u64),
        loader: Option<ModuleLoader<'_>>,
    ) -> Result<Trace, ReplayError> {
        let t = self.trace;
        let (a, b) = range;
        self.check_cut(a, b)?;
        let mut guard = self.set_up(gpu, loader)?;
        let st = &mut guard.st;
        for c in t.calls.iter().take_while(|c| c.seq < a) {
            if let Outcome::Failed(e) = self.issue(gpu, st, c, false)? {
                if c.ret.as_ref().is_some_and(|r| r.is_ok()) {
                    return Err(ReplayError::Setup {
                        what: format!("rebuilding the state at #{a}: call #{} failed", c.seq),
                        cause: format!("{e:#}"),
                    });
                }
            }
        }
        sync_all(gpu, st).map_err(setup_error(format!("waiting for the device at #{a}")))?;
        let mut out = Trace {
            modules: t.modules.clone(),
            module_images: t.module_images.clone(),
            kernel_clusters: t.kernel_clusters.clone(),
            kernel_cooperative: t.kernel_cooperative.clone(),
            kernels: t.kernels.clone(),
            ..t.derived()
        };
        for image in t.module_images.values() {
            t.blobs.copy_to(image, &mut out.blobs)?;
        }
        self.snapshot_buffers(gpu, st, a, &mut out)?;
        self.adopt_live(st, &mut out);
        drop(guard);
        self.copy_kept(a, b, &mut out)?;
        out.size_buffers();
        Ok(out)
    }

    /// A cut inside a capture, or kept calls that use a graph made before the cut, are
    /// refused: a graph cannot be carried across it.
    fn check_cut(&self, a: u64, b: u64) -> Result<(), ReplayError> {
        let t = self.trace;
        let refuse = |seq: u64, msg: String| ReplayError::Unsupported {
            seq,
            site: t
                .calls
                .iter()
                .find(|c| c.seq == seq)
                .map(|c| t.site(c.site))
                .unwrap_or_default(),
            msg,
        };
        let mut open_capture = None;
        for c in t.calls.iter().take_while(|c| c.seq < a) {
            match c.call {
                Call::BeginCapture { .. } => open_capture = Some(c.seq),
                Call::EndCapture { .. } => open_capture = None,
                _ => {}
            }
        }
        if let Some(s) = open_capture {
            return Err(refuse(
                a,
                format!(
                    "call #{a} is inside the capture begun at #{s}: cut before it or after its end"
                ),
            ));
        }
        let made_before: std::collections::BTreeSet<GraphId> = t
            .calls
            .iter()
            .filter(|c| c.seq < a)
            .filter_map(|c| match &c.ret {
                Some(Ok(Value::Graph(g))) => Some(*g),
                _ => None,
            })
            .collect();
        for c in t.calls.iter().filter(|c| c.seq >= a && c.seq < b) {
            if let Some(g) = refs(&c.call)
                .graphs
                .iter()
                .find(|g| made_before.contains(g))
            {
                return Err(refuse(
                    c.seq,
                    format!(
                        "uses {g}, captured before #{a}: a graph cannot be carried across the cut"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every buffer live at the cut, read back into the new trace's initial snapshot (with
    /// the site that made it and its recorded address).
    fn snapshot_buffers(
        &self,
        gpu: &dyn GpuBackend,
        st: &State,
        a: u64,
        out: &mut Trace,
    ) -> Result<(), ReplayError> {
        let t = self.trace;
        let mut made_at: HashMap<BufferId, SiteId> =
            t.initial.iter().map(|i| (i.buf, i.site)).collect();
        for c in &t.calls {
            if let Some(Ok(Value::Buffer(b))) = &c.ret {
                made_at.entry(*b).or_insert(c.site);
            }
        }
        let mut live: Vec<_> = st.bufs.iter().map(|(id, (p, n))| (*id, *p, *n)).collect();
        live.sort_by_key(|(id, _, _)| *id);
        for (id, p, n) in live {
            let what = || format!("reading {id} back at #{a}");
            // A buffer's size comes from the trace: a host copy of it that cannot be made is
            // this trim's error, not an abort.
            let mut bytes = Vec::new();
            bytes.try_reserve_exact(n as usize).map_err(|_| {
                setup_error(what())(anyhow::anyhow!("{n} bytes do not fit in host memory"))
            })?;
            bytes.resize(n as usize, 0);
            gpu.copy_d2h(p, &mut bytes).map_err(setup_error(what()))?;
            let data = out.blobs.insert_content(bytes);
            out.initial.push(InitialBuffer {
                buf: id,
                bytes: n,
                data,
                site: made_at.get(&id).copied().unwrap_or(SiteId(0)),
            });
            if let Some(addr) = t.addresses.get(&id) {
                out.addresses.insert(id, *addr);
            }
        }
        Ok(())
    }

    /// Streams, events and pinned regions alive at the cut become the new trace's adopted
    /// resources (the recording's default stream stays the default).
    fn adopt_live(&self, st: &State, out: &mut Trace) {
        let default_stream: Option<StreamId> = self.trace.adopted.iter().find_map(|x| match x {
            Adopted::Stream {
                id,
                is_default: true,
            } => Some(*id),
            _ => None,
        });
        let mut streams: Vec<StreamId> = st.streams.keys().copied().collect();
        streams.sort();
        out.adopted
            .extend(streams.into_iter().map(|id| Adopted::Stream {
                id,
                is_default: Some(id) == default_stream,
            }));
        let mut events: Vec<EventId> = st.events.keys().copied().collect();
        events.sort();
        out.adopted
            .extend(events.into_iter().map(|id| Adopted::Event { id }));
        let mut hosts: Vec<(HostId, usize)> =
            st.hosts.iter().map(|(id, (_, n))| (*id, *n)).collect();
        hosts.sort();
        out.adopted
            .extend(hosts.into_iter().map(|(id, n)| Adopted::Host {
                id,
                bytes: n as u64,
            }));
    }

    /// The kept calls, numbered from 0, with their blobs and what is keyed by their numbers.
    fn copy_kept(&self, a: u64, b: u64, out: &mut Trace) -> Result<(), ReplayError> {
        let t = self.trace;
        for (i, c) in t
            .calls
            .iter()
            .filter(|c| c.seq >= a && c.seq < b)
            .enumerate()
        {
            let n = i as u64;
            let mut c = c.clone();
            let r = refs(&c.call);
            for blob in r.blobs {
                t.blobs.copy_to(&blob, &mut out.blobs)?;
            }
            if let Some(Ok(Value::Bytes(blob))) = &c.ret {
                t.blobs.copy_to(blob, &mut out.blobs)?;
            }
            if let Some(blob) = t.d2h_async.get(&c.seq) {
                out.d2h_async.insert(n, *blob);
                t.blobs.copy_to(blob, &mut out.blobs)?;
            }
            if let Some(h) = t.sync_hashes.get(&c.seq) {
                out.sync_hashes.insert(n, h.clone());
            }
            if let Some(Ok(Value::Buffer(b))) = &c.ret {
                if let Some(addr) = t.addresses.get(b) {
                    out.addresses.insert(*b, *addr);
                }
            }
            c.seq = n;
            out.calls.push(c);
        }
        Ok(())
    }
}

/// A device failure while making the trimmed trace's state, said with what was being done.
fn setup_error(what: String) -> impl FnOnce(anyhow::Error) -> ReplayError {
    move |e: anyhow::Error| ReplayError::Setup {
        what,
        cause: format!("{e:#}"),
    }
}
