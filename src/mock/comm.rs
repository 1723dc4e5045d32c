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
//! part in each of its group collectives (all-reduce, all-gather, reduce-scatter,
//! broadcast), numbered on the communicator. A send and a receive are two ranks' business
//! alone, as NCCL's are: the k-th send from rank a to rank b meets b's k-th receive from a
//! (each rank counts its sends to, and receives from, each peer), while the other ranks do
//! whatever they do, so a pipeline's stages pass activations down the line. Both sides wait
//! for each other, within the deadline.
//!
//! Between `comm_group_start` and its `comm_group_end` a rank's collectives are held, then
//! issued together: each brings its send bytes before any waits, so a ring exchange (each
//! rank sends to the next and receives from the one before) completes, where one by one
//! every rank would wait in its send for a receive its peer never reaches.
//!
//! A collective on a capturing stream is a node of the graph (`Work::Collective`, as NCCL's
//! kernels are captured, and vLLM captures its decode with them): each launch of the graph
//! meets the other ranks again, under the communicator's next sequence number then. Such
//! nodes run one by one, group or not: a ring exchange captured in a group waits on the mock
//! (its deadline names the pair), where NCCL fuses it.

use super::{here, MockError, MockGpuBackend};
use crate::backend::{
    reduce_into, CallKind, CollDtype, Collective, CommHandle, CommUniqueId, DevicePtr, Exchange,
    Numbering,
};
use std::collections::{BTreeMap, HashMap};
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

impl World {
    /// Waits, holding the world's lock `m` between looks, until `done` holds; after `wait`,
    /// the error `late` makes of what the meeting then is.
    fn wait_for<'w>(
        &'w self,
        mut m: std::sync::MutexGuard<'w, Meeting>,
        wait: Duration,
        done: impl Fn(&Meeting) -> bool,
        late: impl FnOnce(&Meeting) -> anyhow::Error,
    ) -> anyhow::Result<std::sync::MutexGuard<'w, Meeting>> {
        let until = Instant::now() + wait;
        while !done(&m) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late(&m));
            }
            m = self
                .arrived
                .wait_timeout(m, left)
                .expect("a world's lock")
                .0;
        }
        Ok(m)
    }
}

#[derive(Default)]
struct Meeting {
    joined: Vec<u32>,
    /// Collectives under way: what each rank brought, and how many have taken their result
    /// (the entry goes when all have).
    rounds: BTreeMap<Exchange, Round>,
}

#[derive(Default)]
struct Round {
    brought: BTreeMap<u32, Brought>,
    taken: u32,
}

/// This rank's numbers on a communicator, shared with the graphs that captured its
/// collectives: a graph's collective takes its number when the graph runs.
type Counters = Mutex<Numbering>;

/// The number `op` takes on this rank (`Numbering::take`).
fn take(c: &Counters, op: Collective) -> u64 {
    c.lock().unwrap_or_else(|p| p.into_inner()).take(op)
}

/// This rank's side of a communicator.
pub(super) struct RankComm {
    world: Arc<World>,
    rank: u32,
    counters: Arc<Counters>,
}

/// A collective made now and run later: captured into a graph, or held in a group.
struct Later {
    world: Arc<World>,
    rank: u32,
    op: Collective,
    send: u64,
    recv: u64,
    count: u64,
    dtype: CollDtype,
}

impl Later {
    /// Bytes it sends and bytes it receives.
    fn sizes(&self) -> (u64, u64) {
        let n = self.world.nranks;
        (
            self.op.send_bytes(self.count, self.dtype, n),
            self.op.recv_bytes(self.count, self.dtype, n),
        )
    }
}

/// A collective captured into a graph, run at each of the graph's launches.
pub(crate) struct CapturedCollective {
    c: Later,
    counters: Arc<Counters>,
    timeout: Duration,
}

impl CapturedCollective {
    /// (address, bytes) of what it reads and of what it writes.
    pub(super) fn ranges(&self) -> [(u64, usize); 2] {
        // Past usize: the locate that follows refuses it.
        let len = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
        let (sb, rb) = self.c.sizes();
        [(self.c.send, len(sb)), (self.c.recv, len(rb))]
    }

    /// Meets the other ranks for one run of the graph: reads its send bytes from `read`,
    /// returns what it receives. `Err`: the meeting failed (a rank missing, or asking for
    /// another collective), in words.
    pub(super) fn run(&self, mine: Vec<u8>) -> Result<Vec<u8>, String> {
        let c = &self.c;
        let seq = take(&self.counters, c.op);
        meet(
            &c.world,
            c.rank,
            seq,
            (c.op, c.count, c.dtype, mine),
            self.timeout,
        )
        .map_err(|e| format!("captured {}: {e:#}", c.op.name()))
    }

    pub(super) fn name(&self) -> &'static str {
        self.c.op.name()
    }
}

/// Communicators of one mock backend, by handle, and the group it has open.
#[derive(Default)]
pub(super) struct Comms {
    by_handle: HashMap<u64, RankComm>,
    next: u64,
    /// `comm_group_start`s not yet ended.
    group_depth: u32,
    /// Collectives made while a group is open, issued at its outermost end.
    held: Vec<Held>,
}

/// A collective made inside a group (or alone), numbered when it was made.
struct Held {
    c: Later,
    seq: u64,
    stream: u64,
    site: crate::backend::Site,
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
            drop(world.wait_for(
                m,
                wait,
                |m| m.joined.len() >= nranks as usize,
                |m| {
                    let missing: Vec<u32> = (0..nranks)
                        .filter(|r| !m.joined.contains(r))
                        .take(64)
                        .collect();
                    anyhow::anyhow!(
                        "comm_init: rank {rank} of communicator {id} waited {wait:?} for ranks {missing:?}, which never joined"
                    )
                },
            )?);
        }
        let mut c = self.comms.lock();
        c.next += 1;
        let h = c.next;
        c.by_handle.insert(
            h,
            RankComm {
                world,
                rank,
                counters: Arc::default(),
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
            (rc.world.clone(), rc.rank, rc.counters.clone())
        };
        let c = Later {
            world,
            rank,
            op,
            send: send.0,
            recv: recv.0,
            count,
            dtype,
        };
        if self.stream_is_capturing_now(stream) {
            let captured = CapturedCollective {
                c,
                counters: counter,
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
        let seq = take(&counter, op);
        let held = Held {
            c,
            seq,
            stream,
            site,
        };
        {
            let mut c = self.comms.lock();
            if c.group_depth > 0 {
                c.held.push(held);
                return Ok(());
            }
        }
        self.issue(&[held])
    }

    /// Collectives issued together (one alone, or a group's): each brings what it sends
    /// before any waits, then each takes its result, in order.
    fn issue(&self, held: &[Held]) -> anyhow::Result<()> {
        let mut placed = Vec::with_capacity(held.len());
        for h in held {
            let c = &h.c;
            let what = (c.op, c.count, c.dtype);
            let at = place(&c.world, c.rank, h.seq, what)?;
            // This stream's work first (the mock runs it at submission unless in chaos mode).
            self.drain_stream(h.stream)?;
            let mine = self.read_device(DevicePtr(c.send), c.sizes().0, c.op.name(), h.site)?;
            bring(&c.world, c.rank, at, (c.op, c.count, c.dtype, mine));
            placed.push(at);
        }
        for (h, at) in held.iter().zip(placed) {
            let c = &h.c;
            let what = (c.op, c.count, c.dtype);
            let result = collect(&c.world, c.rank, h.seq, at, what, self.cfg.comm_timeout)?;
            if c.sizes().1 > 0 {
                self.write_device(DevicePtr(c.recv), &result, c.op.name(), h.site)?;
            }
        }
        Ok(())
    }

    #[track_caller]
    pub(super) fn comm_group_start_impl(&self) -> anyhow::Result<()> {
        self.tick_kind(CallKind::CommGroupStart)?;
        let mut c = self.comms.lock();
        c.group_depth = c.group_depth.saturating_add(1);
        Ok(())
    }

    #[track_caller]
    pub(super) fn comm_group_end_impl(&self) -> anyhow::Result<()> {
        self.tick_kind(CallKind::CommGroupEnd)?;
        let held = {
            let mut c = self.comms.lock();
            anyhow::ensure!(
                c.group_depth > 0,
                "comm_group_end: no group is open (comm_group_start was not called)"
            );
            c.group_depth -= 1;
            if c.group_depth > 0 {
                return Ok(());
            }
            std::mem::take(&mut c.held)
        };
        self.issue(&held).map_err(|e| {
            e.context(format!(
                "comm_group_end: the group's {} collectives",
                held.len()
            ))
        })
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

/// What a rank brings to a collective: which, how many of what, and its send bytes.
type Brought = (Collective, u64, CollDtype, Vec<u8>);

/// Rank `rank`'s part of collective `seq` (for a send or receive, its number between the
/// two ranks): bring what it sends, wait for every rank's (the peer's), and work out its
/// result.
fn meet(
    world: &World,
    rank: u32,
    seq: u64,
    brought: Brought,
    wait: Duration,
) -> anyhow::Result<Vec<u8>> {
    let what = (brought.0, brought.1, brought.2);
    let at = place(world, rank, seq, what)?;
    bring(world, rank, at, brought);
    collect(world, rank, seq, at, what, wait)
}

/// The meeting collective `seq` is, and how many ranks take part: every rank of the world
/// for a group collective, the two sides of a send.
fn place(
    world: &World,
    rank: u32,
    seq: u64,
    (op, count, dtype): (Collective, u64, CollDtype),
) -> anyhow::Result<(Exchange, u32)> {
    let n = world.nranks;
    let key = Exchange::of(op, seq, rank);
    let Exchange::Pair { from, to, .. } = key else {
        return Ok((key, n));
    };
    let peer = if rank == from { to } else { from };
    anyhow::ensure!(
        peer < n && peer != rank,
        "{} #{seq} of {count} {dtype:?}: rank {rank} names rank {peer} of {n} as its peer",
        op.name()
    );
    Ok((key, 2))
}

/// Put `brought` into meeting `key` and wake the ranks waiting there; returns at once, so a
/// group brings all its collectives before it waits for any.
fn bring(world: &World, rank: u32, (key, _): (Exchange, u32), brought: Brought) {
    let mut m = world.state.lock().expect("a world's lock");
    m.rounds
        .entry(key)
        .or_default()
        .brought
        .insert(rank, brought);
    world.arrived.notify_all();
}

/// Wait until all `expected` ranks have brought their part of meeting `key` (after `wait`,
/// an error naming who never came), and take this rank's result; the meeting goes once all
/// have taken theirs.
fn collect(
    world: &World,
    rank: u32,
    seq: u64,
    (key, expected): (Exchange, u32),
    (op, count, dtype): (Collective, u64, CollDtype),
    wait: Duration,
) -> anyhow::Result<Vec<u8>> {
    let n = world.nranks;
    let late = |m: &Meeting| match key {
        Exchange::Group(_) => {
            let r = &m.rounds[&key];
            let missing: Vec<u32> = (0..n)
                .filter(|q| !r.brought.contains_key(q))
                .take(64)
                .collect();
            anyhow::anyhow!(
                "collective #{seq} ({} of {count} {dtype:?}): rank {rank} waited {wait:?} for ranks {missing:?}, which never made it",
                op.name()
            )
        }
        Exchange::Pair { from, to, .. } => {
            let (peer, mine, theirs) = if rank == from {
                (to, "send", "received")
            } else {
                (from, "receive", "sent")
            };
            anyhow::anyhow!(
                "{mine} #{seq} from rank {from} to rank {to} ({count} {dtype:?}): rank {rank} waited {wait:?}; rank {peer} never {theirs} it"
            )
        }
    };
    let m = world.state.lock().expect("a world's lock");
    let full = |m: &Meeting| m.rounds.get(&key).map_or(0, |r| r.brought.len()) == expected as usize;
    let mut m = world.wait_for(m, wait, full, late)?;
    let round = m.rounds.get_mut(&key).expect("this round");
    let result = outcome(rank, n, seq, &round.brought);
    round.taken += 1;
    if round.taken == expected {
        m.rounds.remove(&key);
    }
    result
}

/// What `rank` receives from collective `seq`, given what every rank brought; an error when
/// the ranks did not ask for the same collective.
fn outcome(rank: u32, n: u32, seq: u64, all: &BTreeMap<u32, Brought>) -> anyhow::Result<Vec<u8>> {
    let (op, count, dtype, _) = &all[&rank];
    let same = |q: &Brought| match (op, &q.0) {
        // Point to point: the two sides of one exchange (`exchange` paired them), which
        // must agree on how much of what.
        (Collective::Send { .. } | Collective::Recv { .. }, _) => q.1 == *count && q.2 == *dtype,
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
