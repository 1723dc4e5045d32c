//! A dump: the kept spans written out as a trace, from the oldest usable checkpoint.

use super::{FlightStore, GraphKept, Held, Record, Span};
use crate::trace::{BlobId, FrameClass, TraceError, TraceWriter};
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};

impl FlightStore {
    /// Write the kept spans as a trace to a new file in the dump directory. `open`: a call
    /// the dumping thread is inside (a panic in the wrapped backend), which gets no End;
    /// `in_flight`: every call begun and not returned (by seq, with its thread), stored with
    /// the reason.
    pub fn dump(
        &mut self,
        reason: &str,
        open: Option<u64>,
        in_flight: Vec<(u64, u16)>,
    ) -> Result<PathBuf, TraceError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| TraceError::Io { what, path, source }
        };
        std::fs::create_dir_all(&self.cfg.dir)
            .map_err(io("create the directory of", &self.cfg.dir))?;
        self.dumps += 1;
        let path = self.cfg.dir.join(format!(
            "gputape-flight-{}-{}.gtape",
            std::process::id(),
            self.dumps
        ));
        // Calls not returned (a sync a hang's deadline found waiting): no End is implied for
        // one the fast path logged.
        let waiting: rustc_hash::FxHashSet<u64> = in_flight.iter().map(|(s, _)| *s).collect();
        let oldest = self.span_no + 1 - self.spans.len() as u64;
        let pinned = self.graph_blobs();
        let kept = |id: &BlobId, last: u64| last >= oldest || pinned.contains(id);
        let names = self
            .real_names(&kept)
            .map_err(io("read the spilled blob", &self.spill.place()))?;
        let sink = crate::trace::MmapSink::create(&path)?;
        let mut w = TraceWriter::new(Box::new(sink)).map_err(io("write", &path))?;
        let mut buf = Vec::with_capacity(256);
        for d in &self.definitions {
            w.write_payload(FrameClass::Definition, renamed(&names, d, &mut buf)?)?;
        }
        w.write(&crate::trace::Frame::Dumped(crate::trace::DumpInfo {
            reason: reason.to_string(),
            in_flight,
        }))?;
        self.write_blobs(&mut w, &names, &kept, &mut buf)?;
        // From the oldest span whose checkpoint is whole.
        let first = self.spans.iter().position(Span::usable).unwrap_or(0);
        if let Some(s) = self.spans.get(first) {
            for c in &s.checkpoint {
                w.write_payload(FrameClass::Checkpoint, renamed(&names, c, &mut buf)?)?;
            }
        }
        self.write_old_graphs(&mut w, &names, first, &mut buf)?;
        let lost = self.write_calls(&mut w, &names, first, (open, &waiting), &mut buf)?;
        if lost > 0 {
            tracing::error!("gputape: flight recorder lost the template of {lost} kept calls");
        }
        w.write(&crate::trace::Frame::Stop)?;
        w.finish().map_err(io("finish", &path))?;
        tracing::warn!(
            "gputape: flight recorder dumped {} calls (steps {}..) to {} ({reason})",
            self.held_calls(),
            self.spans.front().map_or(0, |s| s.first_step),
            path.display()
        );
        Ok(path)
    }
}

impl FlightStore {
    /// The kept blobs, each once (a blob kept under its provisional id and its hash is one),
    /// under its real name; spilled ones read back from disk.
    fn write_blobs(
        &self,
        w: &mut TraceWriter,
        names: &FxHashMap<BlobId, BlobId>,
        kept: &dyn Fn(&BlobId, u64) -> bool,
        buf: &mut Vec<u8>,
    ) -> Result<(), TraceError> {
        let mut written = rustc_hash::FxHashSet::default();
        for (id, (held, last)) in &self.blobs {
            if !kept(id, *last) || !written.insert(*names.get(id).unwrap_or(id)) {
                continue;
            }
            let spilled;
            let p = match held {
                Held::Mem(p) => p,
                Held::Disk(_) => {
                    let s = &self.spill;
                    spilled = s.get(*id).map_err(|source| TraceError::Io {
                        what: "read the spilled blob",
                        path: s.place(),
                        source,
                    })?;
                    &spilled
                }
            };
            // A raw blob is renamed without decoding its bytes; a chunked one's frame is
            // small.
            let p = match (names.get(id), crate::trace::codec::blob_record(p)) {
                (Some(real), Some((_, len, zstd, data))) => {
                    buf.clear();
                    crate::trace::codec::append_blob(*real, len, zstd, &p[data], buf);
                    &buf[..]
                }
                (Some(_), None) => renamed(names, p, buf)?,
                (None, _) => p,
            };
            w.write_payload(FrameClass::Definition, p)?;
        }
        Ok(())
    }

    /// Graphs captured before the first kept call, still alive: their captures come first,
    /// so a launch of one replays (and a fault inside it is pinned to its node).
    fn write_old_graphs(
        &self,
        w: &mut TraceWriter,
        names: &FxHashMap<BlobId, BlobId>,
        first: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(), TraceError> {
        let records = || self.spans.iter().skip(first).flat_map(|s| s.log.records());
        let first_seq = records()
            .find_map(|r| match r {
                Record::Call { seq, .. } | Record::Delta { seq, .. } => Some(seq),
                Record::Frame(_) => None,
            })
            .unwrap_or(u64::MAX);
        let mut old_graphs: Vec<&GraphKept> = self
            .graphs
            .values()
            .filter(|g| g.first_seq < first_seq)
            .collect();
        old_graphs.sort_by_key(|g| g.first_seq);
        for g in old_graphs {
            for f in &g.frames {
                w.write_payload(FrameClass::Call, renamed(names, f, buf)?)?;
            }
        }
        Ok(())
    }

    /// The kept spans' calls, each Begin made from its template and an End implied for a
    /// fast-path call that returned (not for one still `open` or `waiting`); a later usable
    /// checkpoint before its span. Returns how many calls had lost their template.
    fn write_calls(
        &self,
        w: &mut TraceWriter,
        names: &FxHashMap<BlobId, BlobId>,
        first: usize,
        (open, waiting): (Option<u64>, &rustc_hash::FxHashSet<u64>),
        buf: &mut Vec<u8>,
    ) -> Result<usize, TraceError> {
        let records = || self.spans.iter().skip(first).flat_map(|s| s.log.records());
        // Calls whose End was kept whole (a fast-path call that failed): no End is implied.
        let ended: rustc_hash::FxHashSet<u64> = records()
            .filter_map(|r| match r {
                Record::Frame(p) => crate::trace::codec::end_seq(p).map(|(seq, _)| seq),
                Record::Call { .. } | Record::Delta { .. } => None,
            })
            .collect();
        // A call that began before the checkpoint the dump starts from may end after it: its
        // End (and what its sync found) is left out with its Begin.
        let mut begun = rustc_hash::FxHashSet::default();
        let mut out = Vec::with_capacity(256);
        let mut lost = 0usize;
        let spans = self.spans.iter().enumerate().skip(first);
        let mut in_span = first;
        for (k, r) in spans.flat_map(|(k, s)| s.log.records().map(move |r| (k, r))) {
            if k != in_span {
                in_span = k;
                // A later usable checkpoint goes before its span's first record.
                let s = &self.spans[k];
                if let (true, Some(f)) = (s.usable(), self.restart(s, names, buf)?) {
                    w.write(&f)?;
                }
            }
            buf.clear();
            let (seq, ok, made) = match r {
                Record::Call {
                    slot,
                    seq,
                    t_ns,
                    ok,
                } => (seq, ok, self.templates.append_begin(slot, seq, t_ns, buf)),
                Record::Delta {
                    slot,
                    seq,
                    t_ns,
                    ok,
                    at,
                    bytes,
                    ..
                } => {
                    let made =
                        self.templates
                            .append_begin_patched((slot, at, bytes), seq, t_ns, buf);
                    (seq, ok, made)
                }
                Record::Frame(c) => {
                    let keep = match crate::trace::codec::decode(c) {
                        Ok(crate::trace::Frame::End(e)) => begun.contains(&e.seq),
                        Ok(crate::trace::Frame::D2HResult { seq, .. })
                        | Ok(crate::trace::Frame::SyncHashes { seq, .. }) => begun.contains(&seq),
                        _ => true,
                    };
                    if keep {
                        w.write_payload(FrameClass::Call, renamed(names, c, &mut out)?)?;
                    }
                    continue;
                }
            };
            if !made {
                lost += 1;
                continue;
            }
            begun.insert(seq);
            w.write_payload(FrameClass::Call, renamed(names, buf, &mut out)?)?;
            if ok && !ended.contains(&seq) && open != Some(seq) && !waiting.contains(&seq) {
                buf.clear();
                let unit = Ok(crate::trace::Value::Unit);
                crate::trace::codec::append_end(seq, 0, &unit, buf)?;
                w.write_payload(FrameClass::Call, buf)?;
            }
        }
        Ok(lost)
    }

    /// Span `s`'s checkpoint as a `Frame::Restart`, its blobs under their real names; `None`
    /// for a span that holds no call.
    fn restart(
        &self,
        s: &Span,
        names: &FxHashMap<BlobId, BlobId>,
        buf: &mut Vec<u8>,
    ) -> Result<Option<crate::trace::Frame>, TraceError> {
        use crate::trace::{Frame, InitialBuffer, Restart};
        let Some(first_seq) = s.log.records().find_map(|r| match r {
            Record::Call { seq, .. } | Record::Delta { seq, .. } => Some(seq),
            Record::Frame(_) => None,
        }) else {
            return Ok(None);
        };
        let mut r = Restart {
            step: s.first_step,
            first_seq,
            initial: Vec::new(),
            adopted: Vec::new(),
            addresses: Vec::new(),
        };
        for c in &s.checkpoint {
            match crate::trace::codec::decode(renamed(names, c, buf)?)? {
                Frame::Initial {
                    buf,
                    bytes,
                    data,
                    site,
                } => r.initial.push(InitialBuffer {
                    buf,
                    bytes,
                    data,
                    site,
                }),
                Frame::Adopt(a) => r.adopted.push(a),
                Frame::Address { buf, addr } => r.addresses.push((buf, addr)),
                _ => {}
            }
        }
        Ok(Some(Frame::Restart(r)))
    }

    /// Each provisional id (`BlobId::quick`, `BlobId::numbered`) of a blob the dump keeps, with the id a trace
    /// names its bytes by: plain blobs hashed, then chunked ones from their parts' new ids.
    fn real_names(
        &self,
        kept: &dyn Fn(&BlobId, u64) -> bool,
    ) -> std::io::Result<FxHashMap<BlobId, BlobId>> {
        let mut names = FxHashMap::default();
        let mut chunked = Vec::new();
        for id in &self.provisional {
            let Some((held, last)) = self.blobs.get(id) else {
                continue;
            };
            if !kept(id, *last) {
                continue;
            }
            if let Some(parts) = self.parts.get(id) {
                chunked.push((*id, parts));
                continue;
            }
            let spilled;
            let p = match held {
                Held::Mem(p) => p,
                Held::Disk(_) => {
                    spilled = self.spill.get(*id)?;
                    &spilled
                }
            };
            // Held raw as `note_provisional` encoded it; anything else keeps its id, and a
            // reader names it as a blob whose bytes do not match.
            if let Some((_, _, false, data)) = crate::trace::codec::blob_record(p) {
                names.insert(*id, BlobId::of(&p[data]));
            }
        }
        for (id, parts) in chunked {
            let Some((Held::Mem(p), _)) = self.blobs.get(&id) else {
                continue;
            };
            if let Ok(crate::trace::Frame::Chunked { len, .. }) = crate::trace::codec::decode(p) {
                let real: Vec<BlobId> = parts.iter().map(|p| *names.get(p).unwrap_or(p)).collect();
                names.insert(id, BlobId::chunked(len, &real));
            }
        }
        Ok(names)
    }
}

/// `payload` with every provisional blob id it names renamed (into `buf`), or as it is when
/// it names none (or there are none).
fn renamed<'a>(
    names: &FxHashMap<BlobId, BlobId>,
    payload: &'a [u8],
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], TraceError> {
    if names.is_empty() {
        return Ok(payload);
    }
    let Ok(mut frame) = crate::trace::codec::decode(payload) else {
        return Ok(payload);
    };
    let mut changed = false;
    crate::trace::each_blob_mut(&mut frame, &mut |id| {
        if let Some(real) = names.get(id) {
            *id = *real;
            changed = true;
        }
    });
    if !changed {
        return Ok(payload);
    }
    buf.clear();
    crate::trace::codec::append(&frame, buf)?;
    Ok(buf)
}
