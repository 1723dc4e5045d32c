//! Collectives as the recorder keeps them: each communicator a `CommId` (its unique id in
//! the `comm_init` call ties the rank set's traces together), each group collective numbered
//! on its communicator, so the ranks' `seq`-th collectives can be laid side by side, and each
//! send (receive) numbered among this rank's sends to (receives from) that peer, so a send is
//! paired with its peer's receive whatever the other ranks did meanwhile.

use super::{RecordingBackend, SyncScope};
use crate::backend::{
    CollDtype, Collective, CommHandle, CommUniqueId, DevicePtr, GpuBackend, Numbering,
};
use crate::trace::{Adopted, Frame};
use crate::trace::{Call, CommId, Value};
use anyhow::Result;
use std::panic::Location;

/// A communicator as the recorder keeps it: what its `comm_init` said (a checkpoint lists it
/// as `Adopted::Comm`, so a flight dump can say which rank set it belongs to), and the number
/// of its next collective.
#[derive(Clone, Debug)]
pub(crate) struct CommRec {
    pub id: CommId,
    /// `None` for a communicator joined before the recorder started (its handle first seen
    /// at a collective).
    pub joined: Option<Joined>,
    /// The numbers its next collectives take (`Numbering::group` is what a checkpoint lists).
    pub numbers: Numbering,
}

impl CommRec {
    /// A communicator first seen now, as `id`.
    pub fn new(id: CommId, joined: Option<Joined>) -> Self {
        CommRec {
            id,
            joined,
            numbers: Numbering::default(),
        }
    }
}

/// What a `comm_init` the recorder saw said, and when it returned (a peer's announcement of a
/// dump counts only from then on: `peers.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Joined {
    pub unique: CommUniqueId,
    pub nranks: u32,
    pub rank: u32,
    pub at: std::time::SystemTime,
}

/// The `Adopt` frames a checkpoint writes for the communicators joined so far: each one's
/// `Comm`, then its `CommPairs`.
pub(super) fn comm_frames(st: &super::RecState) -> Vec<Frame> {
    let mut v: Vec<&CommRec> = st.comms.values().collect();
    v.sort_by_key(|c| c.id);
    v.into_iter()
        .filter_map(|c| {
            let j = c.joined?;
            let comm = Frame::Adopt(Adopted::Comm {
                id: c.id,
                unique: j.unique,
                nranks: j.nranks,
                rank: j.rank,
                next_seq: c.numbers.group,
            });
            let pairs = Frame::Adopt(Adopted::CommPairs {
                id: c.id,
                sends: c.numbers.pairs(true),
                recvs: c.numbers.pairs(false),
            });
            Some([comm, pairs])
        })
        .flatten()
        .collect()
}

impl<B: GpuBackend> RecordingBackend<B> {
    pub(super) fn rec_comm_unique_id(
        &self,
        site: &'static Location<'static>,
    ) -> Result<CommUniqueId> {
        let tok = self.begin(site, |_| Call::CommUniqueId);
        let r = self.inner.comm_unique_id();
        self.finish(tok, &r, SyncScope::None, |st, id| {
            Value::Bytes(st.blob(&id.0))
        });
        r
    }

    pub(super) fn rec_comm_init(
        &self,
        site: &'static Location<'static>,
        unique: CommUniqueId,
        nranks: u32,
        rank: u32,
    ) -> Result<CommHandle> {
        let tok = self.begin(site, |_| Call::CommInit {
            unique,
            nranks,
            rank,
        });
        let r = self.inner.comm_init(unique, nranks, rank);
        self.finish(tok, &r, SyncScope::None, |st, h| {
            let id = CommId(st.comms.len() as u32);
            st.comms.insert(
                h.0,
                CommRec::new(
                    id,
                    Some(Joined {
                        unique,
                        nranks,
                        rank,
                        at: std::time::SystemTime::now(),
                    }),
                ),
            );
            Value::Comm(id)
        });
        r
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rec_collective(
        &self,
        site: &'static Location<'static>,
        comm: CommHandle,
        op: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: CollDtype,
        stream: u64,
    ) -> Result<()> {
        let tok = self.begin(site, |st| {
            // A handle this recorder did not see made (a communicator joined before it
            // started) is numbered now, its collectives from here on.
            let next = st.comms.len() as u32;
            let c = st
                .comms
                .entry(comm.0)
                .or_insert_with(|| CommRec::new(CommId(next), None));
            let (id, at) = (c.id, c.numbers.take(op));
            Call::Collective {
                comm: id,
                seq: at,
                op,
                send: st.addr(send.0),
                recv: st.addr(recv.0),
                count,
                dtype,
                stream: st.stream(stream),
            }
        });
        let r = self
            .inner
            .collective(comm, op, send, recv, count, dtype, stream);
        self.finish(tok, &r, SyncScope::None, |_, _| Value::Unit);
        r
    }

    pub(super) fn rec_comm_destroy(
        &self,
        site: &'static Location<'static>,
        comm: CommHandle,
    ) -> Result<()> {
        let tok = self.begin(site, |st| Call::CommDestroy {
            comm: st.comms.get(&comm.0).map_or(CommId(u32::MAX), |c| c.id),
        });
        let r = self.inner.comm_destroy(comm);
        self.finish(tok, &r, SyncScope::None, |_, _| Value::Unit);
        r
    }
}
