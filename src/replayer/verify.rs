//! Comparing the replay's results with the recording's, in a room of its own because it is
//! what makes a replay a check: readbacks (synchronous, and async ones settled at their
//! stream's sync) and buffer hashes at syncs set against the recorded bytes, and a divergence
//! described by the buffer it is about.

use super::{Divergence, ReplayError, Replayer, State};
use crate::backend::GpuBackend;
use crate::trace::*;

impl Replayer<'_> {
    /// At a sync with recorded buffer hashes: the first buffer whose replayed bytes differ, with
    /// the kernels since the previous hashed sync that wrote it (the suspects).
    pub(super) fn check_sync_hashes(
        &self,
        gpu: &dyn GpuBackend,
        st: &State,
        c: &CallRecord,
    ) -> Option<(Option<BufferId>, Option<u64>, String)> {
        let hashes = self.trace.sync_hashes.get(&c.seq)?;
        let mut bytes = Vec::new();
        for (id, want) in hashes.iter().filter(|(id, _)| !st.tainted.contains_key(id)) {
            let (p, size) = st.bufs.get(id)?;
            bytes.clear();
            bytes.resize(*size as usize, 0);
            gpu.copy_d2h(*p, &mut bytes).ok()?;
            if BlobId::of(&bytes) == *want {
                continue;
            }
            let since = self
                .trace
                .sync_hashes
                .range(..c.seq)
                .next_back()
                .map_or(0, |(s, _)| *s);
            let mut suspects: Vec<String> = self
                .trace
                .calls
                .iter()
                .filter(|x| x.seq > since && x.seq < c.seq)
                .filter(|x| {
                    x.call.launch().is_some_and(|(_, args)| {
                        args.iter()
                            .flat_map(Arg::device_addrs)
                            .any(|d| matches!(d, DevAddr::Buf { buf, .. } if buf == id))
                    })
                })
                .map(|x| {
                    format!(
                        "#{} {} ({})",
                        x.seq,
                        x.call
                            .launch()
                            .map_or("?".into(), |(k, _)| self.trace.kernel_name(k)),
                        self.trace.site(x.site)
                    )
                })
                .collect();
            suspects.dedup();
            return Some((
                Some(*id),
                None,
                format!(
                    "{id} no longer matches its recorded hash at this sync (it matched at #{since}); kernels since then that took it: {}",
                    if suspects.is_empty() { "none".to_string() } else { suspects.join(", ") }
                ),
            ));
        }
        None
    }

    /// The recorded buffer a backend error is about, when the backend says which allocation
    /// (the mock's sanitizer errors do), with the site that allocated it in the recording, and
    /// how far past its end the access ran.
    pub(super) fn buffer_in_error(&self, st: &State, e: &anyhow::Error) -> Option<(String, u64)> {
        let a = crate::backend::device_error(e)?.alloc.as_ref()?;
        let (id, _) = st.bufs.iter().find(|(_, (p, _))| p.0 == a.base)?;
        Some((self.describe_buffer(*id), a.past_end))
    }

    /// `buf30 (512 bytes, allocated at src/model/resources.rs:111:22)`.
    pub(super) fn describe_buffer(&self, id: BufferId) -> String {
        let initial = self.trace.initial.iter().find(|i| i.buf == id);
        let alloc = || {
            self.trace
                .calls
                .iter()
                .find_map(|c| match (&c.call, &c.ret) {
                    (
                        Call::Alloc { bytes } | Call::AllocManaged { bytes },
                        Some(Ok(Value::Buffer(b))),
                    ) if *b == id => Some((*bytes, c.site)),
                    _ => None,
                })
        };
        match initial.map(|i| (i.bytes, i.site)).or_else(alloc) {
            Some((bytes, site)) => format!(
                "{id} ({bytes} bytes, allocated at {})",
                self.trace.site(site)
            ),
            None => id.to_string(),
        }
    }

    /// The divergence of a call that succeeded when recorded and failed on replay.
    pub(super) fn failed_divergence(
        &self,
        st: &State,
        c: &CallRecord,
        e: &anyhow::Error,
    ) -> Divergence {
        Divergence {
            seq: c.seq,
            site: self.trace.site(c.site),
            call: c.call.kind().name().to_string(),
            buffer: self.buffer_in_error(st, e).map(|(b, _)| b),
            byte_offset: None,
            last_writer: None,
            detail: format!("succeeded when recorded, failed on replay: {e:#}"),
        }
    }

    /// At a sync of `s`: async readbacks on it are complete; compare them with the recording.
    pub(super) fn settle(
        &self,
        st: &mut State,
        s: StreamRef,
        c: &CallRecord,
        verify: bool,
        checked: &mut bool,
        mismatch: &mut Option<(Option<BufferId>, Option<u64>, String)>,
    ) -> Result<(), ReplayError> {
        let mut keep = Vec::new();
        for (seq, ps, bytes) in std::mem::take(&mut st.pending) {
            if ps != s {
                keep.push((seq, ps, bytes));
                continue;
            }
            let Some(rec) = self.trace.calls.iter().find(|x| x.seq == seq) else {
                continue;
            };
            if !verify {
                continue;
            }
            let Call::CopyD2HAsync { len, dst, src, .. } = &rec.call else {
                continue;
            };
            let Some(blob) = self.trace.d2h_async.get(&seq) else {
                continue;
            };
            if self.unchecked(st, seq, src) {
                continue;
            }
            let got: Vec<u8> = match self.host(st, dst, *len, c)? {
                // SAFETY: the replay's pinned region, at the recorded offset and length; the
                // copy into it completed at this sync.
                Some(h) => unsafe { std::slice::from_raw_parts(h, *len as usize) }.to_vec(),
                None => bytes,
            };
            *checked = true;
            let want = self.blob(*blob)?;
            if let Some(off) = first_diff(want, &got) {
                if mismatch.is_none() {
                    let buf = match src {
                        DevAddr::Buf { buf, off: o } => Some((*buf, *o)),
                        _ => None,
                    };
                    *mismatch = Some((
                        buf.map(|b| b.0),
                        Some(off + buf.map_or(0, |b| b.1)),
                        format!(
                            "async readback #{seq} differs (checked at the sync #{})",
                            c.seq
                        ),
                    ));
                }
            }
        }
        st.pending = keep;
        Ok(())
    }
}

pub(super) fn first_diff(a: &[u8], b: &[u8]) -> Option<u64> {
    // Slices compared a chunk at a time (memcmp), and only the chunk that differs byte by
    // byte: a byte-wise scan of a step's 8 MB of logits was most of a batch-16 replay's
    // readback time.
    const CHUNK: usize = 4096;
    let n = a.len().min(b.len());
    let mut at = 0;
    while at < n {
        let end = (at + CHUNK).min(n);
        if a[at..end] != b[at..end] {
            let p = a[at..end].iter().zip(&b[at..end]).position(|(x, y)| x != y);
            return p.map(|p| (at + p) as u64);
        }
        at = end;
    }
    (a.len() != b.len()).then_some(n as u64)
}

#[cfg(test)]
mod tests {
    use super::first_diff;

    #[test]
    fn first_diff_names_the_first_differing_byte_or_the_shorter_length() {
        let a = vec![7u8; 10_000];
        assert_eq!(first_diff(&a, &a), None);
        for at in [0usize, 1, 4095, 4096, 4097, 9999] {
            let mut b = a.clone();
            b[at] = 8;
            b[9999] ^= if at == 9999 { 0 } else { 1 };
            assert_eq!(first_diff(&a, &b), Some(at as u64), "at {at}");
        }
        assert_eq!(first_diff(&a, &a[..5000]), Some(5000));
        assert_eq!(first_diff(&a[..4096], &a), Some(4096));
        assert_eq!(first_diff(&[], &[]), None);
    }
}
