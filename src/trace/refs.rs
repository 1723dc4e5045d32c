//! What a call names, as ids: its buffers, streams, events, graphs, pinned regions and blobs
//! (read off `Call::operands`, the one walk over a call's arguments): `minimize` and `trim`
//! keep a call only with everything it names.

use super::call::*;
use super::operands::{Operand, Use};

/// The ids one call refers to (arguments and return value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refs {
    /// Buffers an address argument lies in, live or freed (or, for a wild address, the
    /// nearest below it).
    pub bufs: Vec<BufferId>,
    /// Streams, the legacy one left out.
    pub streams: Vec<StreamId>,
    /// Events.
    pub events: Vec<EventId>,
    /// Graphs.
    pub graphs: Vec<GraphId>,
    /// Pinned host regions.
    pub hosts: Vec<HostId>,
    /// Blobs: the bytes a copy uploads.
    pub blobs: Vec<BlobId>,
}

impl Refs {
    fn dev(&mut self, a: &DevAddr) {
        match a {
            DevAddr::Buf { buf, .. } | DevAddr::Freed { buf, .. } => self.bufs.push(*buf),
            DevAddr::Unknown {
                near: Some((buf, _)),
            } => self.bufs.push(*buf),
            DevAddr::Unknown { near: None } | DevAddr::Null => {}
        }
    }

    fn stream(&mut self, s: &StreamRef) {
        if let StreamRef::Id(id) = s {
            self.streams.push(*id);
        }
    }

    fn host(&mut self, h: &HostAddr) {
        if let HostAddr::Pinned { host, .. } = h {
            self.hosts.push(*host);
        }
    }
}

/// The ids `call` takes as arguments. What it creates (its return value) is not among them.
pub fn refs(call: &Call) -> Refs {
    let mut r = Refs::default();
    call.operands(&mut |o| match o {
        Operand::Dev(d, _) => r.dev(d),
        Operand::Stream(s, _) => r.stream(s),
        Operand::Legacy => {}
        Operand::Event(e) => r.events.push(*e),
        Operand::Graph(g) => r.graphs.push(*g),
        Operand::Host(h) => r.host(h),
        Operand::Blob(b) => r.blobs.push(*b),
    });
    r
}

/// The buffers `call` may write: copy and memset destinations, a collective's receive side,
/// and every buffer a launch takes (a kernel may write any pointer it is given unless its
/// layout says otherwise, which the recorder checks where it knows the layout; a tensor map's
/// buffer too: TMA both loads and stores).
pub fn written_by(call: &Call) -> Vec<BufferId> {
    let mut r = Refs::default();
    call.operands(&mut |o| {
        if let Operand::Dev(d, Use::Writes | Use::Kernel) = o {
            r.dev(d);
        }
    });
    r.bufs
}
