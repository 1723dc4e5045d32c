//! The mock's collectives: ranks in one process that really exchange bytes.
//!
//! Each rank is its own `MockGpuBackend` (an engine's one process or thread per GPU); a
//! communicator's ranks meet in a world kept per unique id for the life of the process. A
//! collective is a rendezvous: each rank puts in its send bytes under the collective's
//! sequence number and waits until every rank has; each then takes its own result. A rank
//! that does not arrive within the deadline (`MockConfig::comm_timeout`, default 10 s)
//! fails the others' calls with the ranks missing, and a rank that arrives with another
//! collective, count or type than the others fails with what each rank asked for: a skipped
//! or reordered collective is an error here, not a hang. Every rank of a communicator takes
//! part in each of its collectives: a send is met by its peer's receive at the same place
//! (two ranks, or a pipeline stage's pair); sends between some ranks while others do
//! something else are not emulated yet.
//!
//! A collective on a capturing stream is a node of the graph (`Work::Collective`, as NCCL's
//! kernels are captured, and vLLM captures its decode with them): each launch of the graph
//! meets the other ranks again, under the communicator's next sequence number then.

use super::{here, MockError, MockGpuBackend};
use crate::backend::{
    reduce_into, CallKind, CollDtype, Collective, CommHandle, CommUniqueId, DevicePtr,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The worlds of this process, by unique id.
fn worlds() -> &'static Mutex<HashMap<CommUniqueId, Arc<World>>> {
    static W: OnceLock<Mutex<HashMap<CommUniqueId, Arc<World>>>> = OnceLock::new();
    W.get_or_init(|| Mutex::new(HashMap::new()))
}

pub(super) struct World {
    nranks: u32,
    state: Mutex<Meeting>,
    arrived: Condvar,
}

#[derive(Default)]
struct Meeting {
    joined: Vec<u32>,
    /// Collectives under way, by sequence number: what each rank brought, and how many have
    /// taken their result (the entry goes when all have).
    rounds: BTreeMap<u64, Round>,
}

#[derive(Default)]
struct Round {
    brought: BTreeMap<u32, (Collective, u64, CollDtype, Vec<u8>)>,
    taken: u32,
}

/// This rank's side of a communicator. Its sequence counter is shared with the graphs that
/// captured its collectives: a graph's collective takes its number when the graph runs.
pub(super) struct RankComm {
    world: Arc<World>,
    rank: u32,
    next_seq: Arc<AtomicU64>,
}

/// A collective captured into a graph, run at each of the graph's launches.
pub(crate) struct CapturedCollective {
    world: Arc<World>,
    rank: u32,
    next_seq: Arc<AtomicU64>,
    op: Collective,
    send: u64,
    recv: u64,
    count: u64,
    dtype: CollDtype,
    timeout: Duration,
}

impl CapturedCollective {
    /// (address, bytes) of what it reads and of what it writes.
    pub(super) fn ranges(&self) -> [(u64, usize); 2] {
        let n = self.world.nranks;
        // Past usize: the locate that follows refuses it.
        let len = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
        [
            (
                self.send,
                len(self.op.send_bytes(self.count, self.dtype, n)),
            ),
            (
                self.recv,
                len(self.op.recv_bytes(self.count, self.dtype, n)),
            ),
        ]
    }

    /// Meets the other ranks for one run of the graph: reads its send bytes from `read`,
    /// returns what it receives. `Err`: the meeting failed (a rank missing, or asking for
    /// another collective), in words.
    pub(super) fn run(&self, mine: Vec<u8>) -> Result<Vec<u8>, String> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        meet(
            &self.world,
            self.rank,
            seq,
            (self.op, self.count, self.dtype, mine),
            self.timeout,
        )
        .map_err(|e| format!("captured {}: {e:#}", self.op.name()))
    }

    pub(super) fn name(&self) -> &'static str {
        self.op.name()
    }
}

/// Communicators of one mock backend, by handle.
#[derive(Default)]
pub(super) struct Comms {
    by_handle: HashMap<u64, RankComm>,
    next: u64,
}

impl MockGpuBackend {
    pub(super) fn comm_unique_id_impl(&self) -> anyhow::Result<CommUniqueId> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&n.to_le_bytes());
        id[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        id[12..].copy_from_slice(b"mock");
        Ok(CommUniqueId(id))
    }

    #[track_caller]
    pub(super) fn comm_init_impl(
        &self,
        id: CommUniqueId,
        nranks: u32,
        rank: u32,
    ) -> anyhow::Result<CommHandle> {
        self.tick_kind(CallKind::CommInit)?;
        anyhow::ensure!(
            nranks > 0 && rank < nranks,
            "comm_init: rank {rank} of {nranks} ranks"
        );
        let world = {
            let mut w = worlds().lock().expect("the worlds' lock");
            w.entry(id)
                .or_insert_with(|| {
                    Arc::new(World {
                        nranks,
                        state: Mutex::new(Meeting::default()),
                        arrived: Condvar::new(),
                    })
                })
                .clone()
        };
        anyhow::ensure!(
            world.nranks == nranks,
            "comm_init: communicator {id} has {} ranks; rank {rank} joined it as one of {nranks}",
            world.nranks
        );
        {
            let mut m = world.state.lock().expect("a world's lock");
            anyhow::ensure!(
                !m.joined.contains(&rank),
                "comm_init: rank {rank} of communicator {id} joined twice"
            );
            m.joined.push(rank);
            world.arrived.notify_all();
            let wait = self.cfg.comm_timeout;
            let until = Instant::now() + wait;
            while m.joined.len() < nranks as usize {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let missing: Vec<u32> = (0..nranks)
                        .filter(|r| !m.joined.contains(r))
                        .take(64)
                        .collect();
                    anyhow::bail!(
                        "comm_init: rank {rank} of communicator {id} waited {wait:?} for ranks {missing:?}, which never joined"
                    );
                }
                m = world
                    .arrived
                    .wait_timeout(m, left)
                    .expect("a world's lock")
                    .0;
            }
        }
        let mut c = self.comms.lock();
        c.next += 1;
        let h = c.next;
        c.by_handle.insert(
            h,
            RankComm {
                world,
                rank,
                next_seq: Arc::new(AtomicU64::new(0)),
            },
        );
        Ok(CommHandle(h))
    }

    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn collective_impl(
        &self,
        comm: CommHandle,
        op: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: CollDtype,
        stream: u64,
    ) -> anyhow::Result<()> {
        let site = here();
        self.tick_kind(CallKind::Collective)?;
        let (world, rank, counter) = {
            let c = self.comms.lock();
            let rc = c.by_handle.get(&comm.0).ok_or_else(|| {
                anyhow::anyhow!("collective {}: no communicator {}", op.name(), comm.0)
            })?;
            (rc.world.clone(), rc.rank, rc.next_seq.clone())
        };
        if self.stream_is_capturing_now(stream) {
            let captured = CapturedCollective {
                world,
                rank,
                next_seq: counter,
                op,
                send: send.0,
                recv: recv.0,
                count,
                dtype,
                timeout: self.cfg.comm_timeout,
            };
            let mut st = self.state.lock();
            return mock_try!(Self::submit(
                &mut st,
                crate::backend::CaptureOp::StreamWork,
                stream,
                super::exec::Work::Collective(Arc::new(captured)),
                op.name(),
                site,
            ));
        }
        let seq = counter.fetch_add(1, Ordering::Relaxed);
        let n = world.nranks;
        let (sb, rb) = (
            op.send_bytes(count, dtype, n),
            op.recv_bytes(count, dtype, n),
        );
        // This stream's work first (the mock runs it at submission unless in chaos mode).
        self.drain_stream(stream)?;
        let mine = self.read_device(send, sb, op.name(), site)?;
        let result = meet(
            &world,
            rank,
            seq,
            (op, count, dtype, mine),
            self.cfg.comm_timeout,
        )?;
        if rb > 0 {
            self.write_device(recv, &result, op.name(), site)?;
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn comm_destroy_impl(&self, comm: CommHandle) -> anyhow::Result<()> {
        self.tick_kind(CallKind::CommDestroy)?;
        self.comms
            .lock()
            .by_handle
            .remove(&comm.0)
            .map(|_| ())
            .ok_or_else(|| anyhow::anyhow!("comm_destroy: no communicator {}", comm.0))
    }
}

/// Rank `rank`'s part of collective `seq`: bring what it sends, wait for every rank's, and
/// work out its result.
fn meet(
    world: &World,
    rank: u32,
    seq: u64,
    brought: (Collective, u64, CollDtype, Vec<u8>),
    wait: Duration,
) -> anyhow::Result<Vec<u8>> {
    let n = world.nranks;
    let mut m = world.state.lock().expect("a world's lock");
    m.rounds
        .entry(seq)
        .or_default()
        .brought
        .insert(rank, brought);
    world.arrived.notify_all();
    let until = Instant::now() + wait;
    loop {
        let r = &m.rounds[&seq];
        if r.brought.len() == n as usize {
            break;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let missing: Vec<u32> = (0..n)
                .filter(|q| !r.brought.contains_key(q))
                .take(64)
                .collect();
            let (op, count, dtype, _) = &r.brought[&rank];
            anyhow::bail!(
                "collective #{seq} ({} of {count} {dtype:?}): rank {rank} waited {wait:?} for ranks {missing:?}, which never made it",
                op.name()
            );
        }
        m = world
            .arrived
            .wait_timeout(m, left)
            .expect("a world's lock")
            .0;
    }
    let round = m.rounds.get_mut(&seq).expect("this round");
    let result = outcome(rank, n, seq, &round.brought);
    round.taken += 1;
    if round.taken == n {
        m.rounds.remove(&seq);
    }
    result
}

/// What `rank` receives from collective `seq`, given what every rank brought; an error when
/// the ranks did not ask for the same collective.
fn outcome(
    rank: u32,
    n: u32,
    seq: u64,
    all: &BTreeMap<u32, (Collective, u64, CollDtype, Vec<u8>)>,
) -> anyhow::Result<Vec<u8>> {
    let (op, count, dtype, _) = &all[&rank];
    let same = |q: &(Collective, u64, CollDtype, Vec<u8>)| match (op, &q.0) {
        // Point to point: each side names the other.
        (Collective::Send { .. } | Collective::Recv { .. }, _) => true,
        (a, b) => a == b && q.1 == *count && q.2 == *dtype,
    };
    if !all.values().all(same) {
        let asked: Vec<String> = all
            .iter()
            .map(|(r, (o, c, d, _))| format!("rank {r}: {} of {c} {d:?}", o.name()))
            .collect();
        anyhow::bail!(
            "collective #{seq}: the ranks asked for different collectives ({})",
            asked.join("; ")
        );
    }
    let bytes = |r: u32| &all[&r].3;
    Ok(match *op {
        Collective::AllReduce(red) => {
            let mut acc = bytes(0).clone();
            for r in 1..n {
                reduce_into(red, *dtype, &mut acc, bytes(r));
            }
            acc
        }
        Collective::AllGather => (0..n).flat_map(|r| bytes(r).iter().copied()).collect(),
        Collective::ReduceScatter(red) => {
            let block = (*count * dtype.size()) as usize;
            let at = rank as usize * block;
            let mut acc = bytes(0)[at..at + block].to_vec();
            for r in 1..n {
                reduce_into(red, *dtype, &mut acc, &bytes(r)[at..at + block]);
            }
            acc
        }
        Collective::Broadcast { root } => {
            anyhow::ensure!(
                root < n,
                "collective #{seq}: broadcast from rank {root} of {n}"
            );
            bytes(root).clone()
        }
        Collective::Send { .. } => Vec::new(),
        Collective::Recv { peer } => {
            anyhow::ensure!(
                matches!(all.get(&peer), Some((Collective::Send { peer: to }, ..)) if *to == rank),
                "collective #{seq}: rank {rank} receives from rank {peer}, which does not send to it"
            );
            bytes(peer).clone()
        }
    })
}

/// The state-touching steps a collective is made of, each under the mock's lock once.
impl MockGpuBackend {
    #[track_caller]
    fn tick_kind(&self, kind: CallKind) -> anyhow::Result<()> {
        let mut st = self.state.lock();
        mock_try!(Self::tick(&mut st, kind, here()))
    }

    fn stream_is_capturing_now(&self, stream: u64) -> bool {
        self.state
            .lock()
            .captures
            .iter()
            .any(|c| c.streams.contains(&stream))
    }

    #[track_caller]
    fn drain_stream(&self, stream: u64) -> anyhow::Result<()> {
        let site = here();
        let mut st = self.state.lock();
        mock_try!(Self::check_stream(&st, stream, "collective", site))?;
        mock_try!(Self::chaos_wait(
            &mut st,
            super::chaos::Until::Stream(stream)
        ))
    }

    fn read_device(
        &self,
        p: DevicePtr,
        len: u64,
        op: &'static str,
        site: crate::backend::Site,
    ) -> anyhow::Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let st = self.state.lock();
        mock_try!(st.mem.read(p.0, len as usize, op, site).map(|b| b.to_vec()))
    }

    fn write_device(
        &self,
        p: DevicePtr,
        bytes: &[u8],
        op: &'static str,
        site: crate::backend::Site,
    ) -> anyhow::Result<()> {
        let mut st = self.state.lock();
        let out = mock_try!(st.mem.write(p.0, bytes.len(), op, site))?;
        out.copy_from_slice(bytes);
        Ok(())
    }
}
