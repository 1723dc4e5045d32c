//! A loaded trace written back out as frames: what `minimize` and `trim` produce is an
//! ordinary trace file that every verb reads.

use super::format::{Sink, TraceError, TraceWriter};
use super::frame::{Begin, End, Frame, Restart};
use super::{BlobId, Trace};

/// A blob's frame: compressed with zstd where that saves at least a tenth (small blobs and
/// incompressible ones are stored as they are). The compressor is kept per thread: making a
/// zstd context costs more than compressing a 4 KiB readback with it, and a recorder calls
/// this on the engine's thread.
pub fn blob_frame(id: BlobId, bytes: &[u8]) -> Frame {
    thread_local! {
        static ZSTD: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let packed = (bytes.len() >= 4096)
        .then(|| {
            ZSTD.with(|z| {
                let mut z = z.try_borrow_mut().ok()?;
                if z.is_none() {
                    *z = zstd::bulk::Compressor::new(1).ok();
                }
                z.as_mut()?.compress(bytes).ok()
            })
        })
        .flatten()
        .filter(|c| c.len() < bytes.len() * 9 / 10);
    match packed {
        Some(data) => Frame::Blob {
            id,
            len: bytes.len() as u64,
            zstd: true,
            data,
        },
        None => raw_blob_frame(id, bytes),
    }
}

/// A blob's frame, its bytes as they are.
fn raw_blob_frame(id: BlobId, bytes: &[u8]) -> Frame {
    Frame::Blob {
        id,
        len: bytes.len() as u64,
        zstd: false,
        data: bytes.to_vec(),
    }
}

impl Trace {
    /// Write this trace to `sink`: header, definitions, initial state, then each call's Begin
    /// and End (a call without a return is left open, as a cut recording leaves it), and a
    /// stop record. Returns the bytes written.
    pub fn write_to(&self, sink: Box<dyn Sink>) -> Result<u64, TraceError> {
        let io = |source| TraceError::Io {
            what: "write",
            path: "<trace sink>".into(),
            source,
        };
        let mut w = TraceWriter::new(sink).map_err(io)?;
        if let Some(h) = &self.header {
            w.write(&Frame::Header(h.clone()))?;
        }
        if let Some(p) = &self.provenance {
            w.write(&Frame::Provenance(p.clone()))?;
        }
        if let Some(epoch_unix_ns) = self.clock_epoch_ns {
            w.write(&Frame::Clock { epoch_unix_ns })?;
        }
        if let Some(d) = &self.dump {
            w.write(&Frame::Dumped(d.clone()))?;
        }
        for (id, s) in &self.sites {
            w.write(&Frame::Site {
                id: *id,
                file: s.file.clone(),
                line: s.line,
                col: s.col,
            })?;
            if let Some(stack) = self.stacks.get(id) {
                w.write(&Frame::Stack {
                    site: *id,
                    stack: stack.clone(),
                })?;
            }
        }
        for f in self.blobs.frames() {
            w.write(&f?)?;
        }
        for m in &self.modules {
            w.write(&Frame::Module(m.clone()))?;
        }
        for (name, image) in &self.module_images {
            w.write(&Frame::ModuleImage {
                name: name.clone(),
                image: *image,
            })?;
        }
        for (buf, global) in &self.globals {
            w.write(&Frame::Global {
                buf: *buf,
                global: global.clone(),
            })?;
        }
        for (id, info) in &self.kernels {
            w.write(&Frame::Kernel {
                id: *id,
                info: info.clone(),
            })?;
            if !info.elems.is_empty() {
                w.write(&Frame::KernelElems {
                    id: *id,
                    elems: info.elems.clone(),
                })?;
            }
            if let Some(dims) = self.kernel_clusters.get(id) {
                w.write(&Frame::KernelCluster {
                    id: *id,
                    dims: *dims,
                })?;
            }
            if self.kernel_cooperative.contains(id) {
                w.write(&Frame::KernelCooperative { id: *id })?;
            }
        }
        for (what, share) in &self.shared {
            w.write(&Frame::Shared {
                what: *what,
                share: share.clone(),
            })?;
        }
        for a in &self.adopted {
            w.write(&Frame::Adopt(a.clone()))?;
        }
        for i in &self.initial {
            w.write(&Frame::Initial {
                buf: i.buf,
                bytes: i.bytes,
                data: i.data,
                site: i.site,
            })?;
        }
        for (buf, addr) in &self.addresses {
            w.write(&Frame::Address {
                buf: *buf,
                addr: *addr,
            })?;
        }
        // A dump's later checkpoints go before their first call; one whose call is not here
        // (cut out of a shorter trace) has nothing to begin and goes too.
        let mut restarts: std::collections::BTreeMap<u64, Vec<&Restart>> = Default::default();
        for r in &self.restarts {
            restarts.entry(r.first_seq).or_default().push(r);
        }
        for c in &self.calls {
            for r in restarts.remove(&c.seq).into_iter().flatten() {
                w.write(&Frame::Restart(r.clone()))?;
            }
            w.write(&Frame::Begin(Begin {
                seq: c.seq,
                thread: c.thread,
                site: c.site,
                t_ns: c.t_ns,
                call: c.call.clone(),
            }))?;
            if let Some(ret) = &c.ret {
                w.write(&Frame::End(End {
                    seq: c.seq,
                    dur_ns: c.dur_ns.unwrap_or(0),
                    ret: ret.clone(),
                }))?;
            }
            if let Some(data) = self.d2h_async.get(&c.seq) {
                w.write(&Frame::D2HResult {
                    seq: c.seq,
                    data: *data,
                    at_sync: c.seq,
                })?;
            }
            if let Some(hashes) = self.sync_hashes.get(&c.seq) {
                w.write(&Frame::SyncHashes {
                    seq: c.seq,
                    hashes: hashes.clone(),
                })?;
            }
        }
        for f in &self.findings {
            w.write(&Frame::Finding(f.clone()))?;
        }
        // A call that never returned makes a cut trace (the recording died inside it), unless
        // a dump names it as in flight when it was taken (a hang), which is a whole trace.
        let in_flight = |seq: u64| self.dump.as_ref().is_some_and(|d| d.was_in_flight(seq));
        if self
            .calls
            .iter()
            .all(|c| c.ret.is_some() || in_flight(c.seq))
        {
            w.write(&Frame::Stop)?;
        }
        w.finish().map_err(io)?;
        Ok(w.bytes_written)
    }

    /// This trace as the bytes of a trace file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, TraceError> {
        let sink = super::VecSink::default();
        let buf = sink.0.clone();
        self.write_to(Box::new(sink))?;
        let out = std::mem::take(&mut *buf.lock());
        Ok(out)
    }
}
