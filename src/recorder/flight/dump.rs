//! A dump: the kept spans written out as a trace, from the oldest usable checkpoint.

use super::{FlightStore, GraphKept, Held, Record, Span};
use crate::trace::{FrameClass, TraceError, TraceWriter};
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
        let sink = crate::trace::MmapSink::create(&path)?;
        let mut w = TraceWriter::new(Box::new(sink)).map_err(io("write", &path))?;
        for d in &self.definitions {
            w.write_payload(FrameClass::Definition, d)?;
        }
        w.write(&crate::trace::Frame::Dumped(crate::trace::DumpInfo {
            reason: reason.to_string(),
            in_flight,
        }))?;
        let oldest = self.span_no + 1 - self.spans.len() as u64;
        let pinned = self.graph_blobs();
        for (id, (held, last)) in &self.blobs {
            if *last < oldest && !pinned.contains(id) {
                continue;
            }
            match held {
                Held::Mem(p) => w.write_payload(FrameClass::Definition, p)?,
                Held::Disk(_) => {
                    let s = &self.spill;
                    let p = s
                        .get(*id)
                        .map_err(io("read the spilled blob", &s.place()))?;
                    w.write_payload(FrameClass::Definition, &p)?;
                }
            }
        }
        // From the oldest span whose checkpoint is whole.
        let first = self.spans.iter().position(Span::usable).unwrap_or(0);
        if let Some(s) = self.spans.get(first) {
            for c in &s.checkpoint {
                w.write_payload(FrameClass::Checkpoint, c)?;
            }
        }
        let records = || self.spans.iter().skip(first).flat_map(|s| s.log.records());
        // Graphs captured before the first kept call, still alive: their captures come
        // first, so a launch of one replays (and a fault inside it is pinned to its node).
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
                w.write_payload(FrameClass::Call, f)?;
            }
        }
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
        let mut buf = Vec::with_capacity(256);
        let mut lost = 0usize;
        for r in records() {
            buf.clear();
            let (seq, ok, made) = match r {
                Record::Call {
                    slot,
                    seq,
                    t_ns,
                    ok,
                } => (
                    seq,
                    ok,
                    self.templates.append_begin(slot, seq, t_ns, &mut buf),
                ),
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
                            .append_begin_patched((slot, at, bytes), seq, t_ns, &mut buf);
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
                        w.write_payload(FrameClass::Call, c)?;
                    }
                    continue;
                }
            };
            if !made {
                lost += 1;
                continue;
            }
            begun.insert(seq);
            w.write_payload(FrameClass::Call, &buf)?;
            if ok && !ended.contains(&seq) && open != Some(seq) {
                buf.clear();
                let unit = Ok(crate::trace::Value::Unit);
                crate::trace::codec::append_end(seq, 0, &unit, &mut buf)?;
                w.write_payload(FrameClass::Call, &buf)?;
            }
        }
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
