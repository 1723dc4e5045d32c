//! The converter's calls for stream work beyond plain launches and copies: uploads, values
//! written and waited for on streams (`cuStreamWriteValue*`, `cuStreamWaitValue*`), and the
//! attributes a launch carries (`cuLaunchKernelEx`).

use super::*;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`, `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`: the
/// value's first 8 bytes are an event the launch records.
const LAUNCH_ATTR_PROGRAMMATIC_EVENT: u64 = 7;
const LAUNCH_ATTR_COMPLETION_EVENT: u64 = 12;

/// A `CUlaunchAttributeID`'s name, for a person.
fn launch_attribute_name(id: u64) -> String {
    match id {
        1 => "access policy window".into(),
        3 => "synchronization policy".into(),
        5 => "cluster scheduling policy".into(),
        6 => "programmatic stream serialization".into(),
        8 => "priority".into(),
        9 => "memory sync domain map".into(),
        10 => "memory sync domain".into(),
        11 => "preferred cluster dimension".into(),
        13 => "device-updatable kernel node".into(),
        14 => "preferred shared memory carveout".into(),
        n => format!("attribute {n}"),
    }
}

/// Whether `written` (a value's little-endian bytes) meets a wait for `value` under `flags`
/// (`CUstreamWaitValue_flags`' low bits: 0 greater or equal, as a wrapping signed difference;
/// 1 equal; 2 and; 3 nor), compared at 64 (`wide`) or 32 bits.
pub(super) fn value_meets(written: &[u8], value: u64, flags: u32, wide: bool) -> bool {
    let mask = if wide { u64::MAX } else { u64::from(u32::MAX) };
    let mut b = [0u8; 8];
    let n = written.len().min(8);
    b[..n].copy_from_slice(&written[..n]);
    let (w, v) = (u64::from_le_bytes(b) & mask, value & mask);
    match flags & 3 {
        0 if wide => (w.wrapping_sub(v) as i64) >= 0,
        0 => (w.wrapping_sub(v) as u32 as i32) >= 0,
        1 => w == v,
        2 => w & v != 0,
        _ => !(w | v) & mask != 0,
    }
}

impl Converter {
    /// A launch's attributes beyond its cluster shape and the cooperative flag (`attrs`: id,
    /// value pairs), on `stream`, the launch `ok`: an event the launch records (a programmatic
    /// or completion event) is recorded on its stream just after it, which a replay waits for
    /// as the program did (after the whole kernel: a later point than a programmatic trigger,
    /// never an earlier one); the rest change how launches overlap or are scheduled, not what
    /// they compute, and are counted by name.
    pub(super) fn launch_attributes(&mut self, attrs: &[u64], stream: u64, ok: bool) {
        for pair in attrs.chunks_exact(2) {
            let (id, value) = (pair[0], pair[1]);
            match id {
                LAUNCH_ATTR_PROGRAMMATIC_EVENT | LAUNCH_ATTR_COMPLETION_EVENT => {
                    if ok && value != 0 {
                        self.summary.launch_events += 1;
                        let call = Call::RecordEvent {
                            event: self.event(value),
                            stream: self.stream(stream),
                        };
                        self.after.push(call);
                    }
                }
                _ => {
                    let name = launch_attribute_name(id);
                    *self.summary.launch_attrs.entry(name).or_default() += 1;
                }
            }
        }
    }

    /// An upload of `data` to `dst` on `on`, as the trace spells it.
    pub(super) fn upload(&mut self, dst: u64, on: On, data: &[u8]) -> Call {
        let dst = self.addr(dst);
        let len = data.len() as u64;
        let data = self.t.blobs.insert_content(data.to_vec());
        if on.sync {
            Call::CopyH2D { dst, data, len }
        } else {
            Call::CopyH2DAsync {
                dst,
                data,
                len,
                stream: self.stream(on.stream),
            }
        }
    }

    /// The event recorded after each value written at `addr` on stream `stream` (one per
    /// stream and address, adopted: a replay makes it before the first call).
    pub(super) fn value_event(&mut self, stream: u64, addr: u64) -> EventId {
        if let Some(&e) = self.value_events.get(&(stream, addr)) {
            return e;
        }
        let id = EventId(self.next_event);
        self.next_event += 1;
        self.t.adopted.push(Adopted::Event { id });
        self.value_events.insert((stream, addr), id);
        id
    }

    /// The stream and event of the latest value written at `addr` that meets a wait for `value`
    /// under `flags` (`value_meets`).
    pub(super) fn value_met(
        &self,
        addr: u64,
        value: u64,
        flags: u32,
        wide: bool,
    ) -> Option<(StreamRef, EventId)> {
        let writes = self.value_writes.get(&addr)?;
        writes
            .iter()
            .rev()
            .find(|(_, _, data)| value_meets(data, value, flags, wide))
            .map(|&(s, e, _)| (s, e))
    }
}
