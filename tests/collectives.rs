//! Collectives over mock ranks: one `MockGpuBackend` per rank, each on its own thread as a
//! tensor-parallel engine runs one process per GPU, really exchanging bytes; recorded, one
//! trace per rank tied by the communicator's unique id; a rank that skips a collective
//! fails the others' calls by name instead of hanging them.

use gputape::analysis::{self, ranks::RankFinding};
use gputape::backend::{CollDtype, Collective, CommUniqueId, DevicePtr, GpuBackend, ReduceOp};
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{ReplayOptions, Replayer};
use gputape::trace::{self, Adopted, Call, Trace};
use std::path::PathBuf;
use std::time::Duration;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_f32(gpu: &dyn GpuBackend, p: DevicePtr, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    gpu.copy_d2h(p, &mut b).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn mock(timeout: Duration) -> MockGpuBackend {
    MockGpuBackend::new(MockConfig {
        comm_timeout: timeout,
        ..Default::default()
    })
}

/// One rank's step: all-reduce of 4 values, all-gather of 2, reduce-scatter of 2 per rank,
/// broadcast from rank 0. Returns what it received, for the caller to check; `skip`: this
/// rank leaves out the all-reduce, as a rank that took another branch would.
fn rank_step(
    gpu: &dyn GpuBackend,
    id: CommUniqueId,
    n: u32,
    rank: u32,
    skip: bool,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let comm = gpu.comm_init(id, n, rank)?;
    let s = gpu.default_stream();
    let r = rank as f32;
    let (send, recv) = (gpu.alloc(64)?, gpu.alloc(64)?);
    gpu.copy_h2d(&f32s(&[r, r + 1.0, 2.0 * r, 1.0]), send)?;
    let mut out = Vec::new();
    if !skip {
        gpu.collective(
            comm,
            Collective::AllReduce(ReduceOp::Sum),
            send,
            recv,
            4,
            CollDtype::F32,
            s,
        )?;
        out.push(read_f32(gpu, recv, 4));
    }
    gpu.collective(
        comm,
        Collective::AllGather,
        send,
        recv,
        2,
        CollDtype::F32,
        s,
    )?;
    out.push(read_f32(gpu, recv, 2 * n as usize));
    let scatter: Vec<f32> = (0..2 * n).map(|i| r * 10.0 + i as f32).collect();
    gpu.copy_h2d(&f32s(&scatter), send)?;
    gpu.collective(
        comm,
        Collective::ReduceScatter(ReduceOp::Max),
        send,
        recv,
        2,
        CollDtype::F32,
        s,
    )?;
    out.push(read_f32(gpu, recv, 2));
    gpu.collective(
        comm,
        Collective::Broadcast { root: 0 },
        send,
        recv,
        1,
        CollDtype::F32,
        s,
    )?;
    out.push(read_f32(gpu, recv, 1));
    gpu.comm_destroy(comm)?;
    Ok(out)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-coll-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn four_recorded_ranks_exchange_bytes_and_their_traces_line_up() {
    let n = 4u32;
    let dir = scratch("four");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let recorded = record_ranks(
        &dir,
        n,
        || mock(Duration::from_secs(20)),
        |g, rank| rank_step(g, id, n, rank, false).unwrap(),
    );
    let results: Vec<_> = recorded.iter().map(|(_, out)| out).collect();
    for (rank, out) in results.iter().enumerate() {
        // Sum over ranks r of [r, r + 1, 2r, 1].
        assert_eq!(out[0], vec![6.0, 10.0, 12.0, 4.0], "rank {rank}");
        // Every rank's first two values, in rank order.
        assert_eq!(out[1], vec![0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0]);
        // Block `rank` of the max over ranks: rank 3's (30 + i).
        let r = rank as f32;
        assert_eq!(out[2], vec![30.0 + 2.0 * r, 31.0 + 2.0 * r]);
        // Rank 0's first value after the scatter upload: 0.
        assert_eq!(out[3], vec![0.0]);
    }
    // Each trace: its rank, the same unique id, and collectives 0..4 in the same order.
    let mut lines = Vec::new();
    for rank in 0..n {
        let t = Trace::open(&dir.join(format!("rank{rank}.gtape"))).unwrap();
        let init = t
            .calls
            .iter()
            .find_map(|c| match &c.call {
                Call::CommInit {
                    unique,
                    nranks,
                    rank,
                } => Some((*unique, *nranks, *rank)),
                _ => None,
            })
            .expect("comm_init recorded");
        assert_eq!(init, (id, n, rank));
        let colls: Vec<String> = t
            .calls
            .iter()
            .filter(|c| matches!(c.call, Call::Collective { .. }))
            .map(|c| trace::call_text(&t, &c.call))
            .collect();
        assert_eq!(colls.len(), 4, "{colls:?}");
        assert!(
            colls[0].starts_with("all_reduce<Sum>(comm0 #0, "),
            "{colls:?}"
        );
        assert!(
            colls[3].starts_with("broadcast<root 0>(comm0 #3, "),
            "{colls:?}"
        );
        lines.push(colls);
    }
    assert!(lines.windows(2).all(|w| w[0] == w[1]), "{lines:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_rank_that_skips_a_collective_fails_the_others_naming_it() {
    let n = 2u32;
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let errs: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                sc.spawn(move || {
                    // The ranks meet with different asks: found at once, whatever the deadline.
                    let m = mock(Duration::from_secs(10));
                    rank_step(&m, id, n, rank, rank == 1)
                        .err()
                        .map(|e| format!("{e:#}"))
                        .unwrap_or_default()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Rank 1's all-gather met rank 0's all-reduce: both see the mismatch, with each
    // rank's ask.
    for e in &errs {
        assert!(e.contains("collective #0"), "{errs:?}");
        assert!(
            e.contains("rank 0: all_reduce of 4 F32") && e.contains("rank 1: all_gather of 2 F32"),
            "{errs:?}"
        );
    }
}

#[test]
fn a_rank_that_never_comes_is_named_after_the_deadline() {
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let m = mock(Duration::from_millis(200));
    let e = m.comm_init(id, 3, 0).unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("ranks [1, 2], which never joined"), "{e}");
}

/// A communicator of one rank: its collectives are local, so its trace replays alone and
/// the readbacks after them match.
#[test]
fn a_single_rank_trace_replays_its_collectives() {
    let m = mock(Duration::from_secs(5));
    let sink = gputape::trace::VecSink::default();
    let buf = sink.0.clone();
    let rec = RecordingBackend::new(m, Box::new(sink), BackendDesc::new("mock")).unwrap();
    rec.start().unwrap();
    let id = rec.comm_unique_id().unwrap();
    let out = rank_step(&rec, id, 1, 0, false).unwrap();
    assert_eq!(out[0], vec![0.0, 1.0, 0.0, 1.0]);
    rec.stop().unwrap();
    let bytes = buf.lock().clone();
    let t = Trace::from_bytes(std::path::Path::new("mem"), &bytes).unwrap();
    let r = Replayer::new(&t)
        .run(
            &mock(Duration::from_secs(5)),
            &ReplayOptions::default(),
            None,
            |_| {},
        )
        .unwrap();
    assert!(r.passed(), "{}", r.summary());
    assert!(
        r.d2h_checked >= 4 && r.d2h_checked == r.d2h_matched,
        "{}",
        r.summary()
    );
}

/// Record `n` ranks, each on its own thread over its own backend from `make`, running
/// `f(rank's recorder, rank)`, into `dir/rank{r}.gtape`; returns each trace's path and what
/// `f` returned, by rank.
fn record_ranks<T: Send>(
    dir: &std::path::Path,
    n: u32,
    make: impl Fn() -> MockGpuBackend + Sync,
    f: impl Fn(&dyn GpuBackend, u32) -> T + Sync,
) -> Vec<(PathBuf, T)> {
    std::thread::scope(|sc| {
        let (make, f) = (&make, &f);
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let path = dir.join(format!("rank{rank}.gtape"));
                sc.spawn(move || {
                    let rec =
                        RecordingBackend::to_file(make(), &path, BackendDesc::new("mock")).unwrap();
                    rec.start().unwrap();
                    let out = f(&rec, rank);
                    rec.stop().unwrap();
                    (path, out)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The paths of `record_ranks`' traces.
fn paths_of<T>(recorded: Vec<(PathBuf, T)>) -> Vec<PathBuf> {
    recorded.into_iter().map(|(p, _)| p).collect()
}

/// The one finding of a rank set whose ranks parted at collective `seq`, rank 0 asking for
/// an all-reduce and rank 1 for an all-gather, both made in this file.
fn assert_all_reduce_met_all_gather(found: &[RankFinding], seq: u64) {
    assert_eq!(found.len(), 1, "{found:?}");
    let RankFinding::Mismatch { seq: at, calls, .. } = &found[0] else {
        panic!("{found:?}")
    };
    assert_eq!(*at, seq);
    assert!(
        calls[0]
            .text
            .starts_with(&format!("all_reduce<Sum>(comm0 #{seq}")),
        "{calls:?}"
    );
    assert!(
        calls[1]
            .text
            .starts_with(&format!("all_gather(comm0 #{seq}")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.site.contains("tests/collectives.rs")),
        "{calls:?}"
    );
}

fn open_all(paths: &[PathBuf]) -> Vec<Trace> {
    paths.iter().map(|p| Trace::open(p).unwrap()).collect()
}

/// Rank 1 leaves out the step's all-reduce: its all-gather meets rank 0's all-reduce. The
/// rank set's traces, laid side by side, name collective #0 with each rank's ask and site;
/// `gputape ranks` exits 1 saying so, and 0 on a rank set that agrees.
#[test]
fn the_rank_set_analysis_names_a_skipped_all_reduce_with_its_ranks_and_sites() {
    let dir = scratch("skip");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let paths = paths_of(record_ranks(
        &dir,
        2,
        || mock(Duration::from_secs(10)),
        |g, rank| {
            let _ = rank_step(g, id, 2, rank, rank == 1);
        },
    ));
    let found = analysis::ranks::match_ranks(&open_all(&paths));
    assert_all_reduce_met_all_gather(&found, 0);
    let text = analysis::ranks::render_findings(&found);
    assert!(
        text.contains("collective #0: the ranks asked for different collectives"),
        "{text}"
    );

    let bin = env!("CARGO_BIN_EXE_gputape");
    let out = std::process::Command::new(bin)
        .arg("ranks")
        .args(&paths)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("rank 1: #"));

    let good = scratch("good");
    let paths = paths_of(record_ranks(
        &good,
        2,
        || mock(Duration::from_secs(20)),
        |g, rank| {
            rank_step(g, id_for_good(), 2, rank, false).unwrap();
        },
    ));
    assert!(analysis::ranks::match_ranks(&open_all(&paths)).is_empty());
    let out = std::process::Command::new(bin)
        .arg("ranks")
        .args(&paths)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&good).ok();
}

/// A unique id for the agreeing rank set, the same for both of its threads.
fn id_for_good() -> CommUniqueId {
    static ID: std::sync::OnceLock<CommUniqueId> = std::sync::OnceLock::new();
    *ID.get_or_init(|| MockGpuBackend::default().comm_unique_id().unwrap())
}

/// Rank 1 stops after joining (an early return on its side): rank 0's all-reduce waits out
/// the deadline. The analysis names rank 1 as the one that never made collective #0, with
/// its last calls.
#[test]
fn the_rank_set_analysis_names_the_rank_that_never_came_and_what_it_did_last() {
    let dir = scratch("late");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let paths = paths_of(record_ranks(
        &dir,
        2,
        || mock(Duration::from_millis(300)),
        |g, rank| {
            let comm = g.comm_init(id, 2, rank).unwrap();
            let buf = g.alloc(16).unwrap();
            if rank == 0 {
                let e = g
                    .collective(
                        comm,
                        Collective::AllReduce(ReduceOp::Sum),
                        buf,
                        buf,
                        4,
                        CollDtype::F32,
                        g.default_stream(),
                    )
                    .unwrap_err();
                assert!(
                    format!("{e:#}").contains("ranks [1], which never made it"),
                    "{e:#}"
                );
            } else {
                g.synchronize(g.default_stream()).unwrap();
            }
        },
    ));
    let found = analysis::ranks::match_ranks(&open_all(&paths));
    assert_eq!(found.len(), 1, "{found:?}");
    let RankFinding::Missing {
        seq, made, missing, ..
    } = &found[0]
    else {
        panic!("{found:?}")
    };
    assert_eq!(*seq, 0);
    assert_eq!(made[0].rank, 0);
    assert!(made[0].ret.starts_with("ERR"), "{made:?}");
    assert_eq!(missing[0].0, 1);
    assert!(
        missing[0]
            .1
            .iter()
            .any(|c| c.text.starts_with("synchronize")),
        "{missing:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A tensor-parallel-shaped step on each rank: its shard of a saxpy, the partial sums
/// all-reduced, the result read back; three steps.
fn tp_steps(g: &dyn GpuBackend, id: CommUniqueId, n: u32, rank: u32) {
    let comm = g.comm_init(id, n, rank).unwrap();
    let s = g.default_stream();
    let len = 64u32;
    let (x, y, sum) = (
        g.alloc(len as usize * 4).unwrap(),
        g.alloc(len as usize * 4).unwrap(),
        g.alloc(len as usize * 4).unwrap(),
    );
    let xs: Vec<f32> = (0..len).map(|i| (i + rank) as f32 * 0.25).collect();
    g.copy_h2d(&f32s(&xs), x).unwrap();
    g.memset(y, 0, len as usize * 4).unwrap();
    for step in 0..3u64 {
        g.step_boundary(step);
        gputape::workloads::saxpy(g, x, y, len, 1.0 + rank as f32, s).unwrap();
        g.collective(
            comm,
            Collective::AllReduce(ReduceOp::Sum),
            y,
            sum,
            len as u64,
            CollDtype::F32,
            s,
        )
        .unwrap();
        let _ = read_f32(g, sum, len as usize);
    }
    g.comm_destroy(comm).unwrap();
}

fn with_kernels(timeout: Duration) -> MockGpuBackend {
    let m = mock(timeout);
    gputape::workloads::load_kernels(&m).unwrap();
    m
}

/// TP=2 and TP=4: each rank's step recorded, then the rank set replayed together on fresh
/// mock ranks; every rank's readbacks, after every all-reduce, match its recording.
#[test]
fn tp2_and_tp4_steps_are_recorded_and_replayed_together() {
    for n in [2u32, 4] {
        let dir = scratch(&format!("tp{n}"));
        let id = MockGpuBackend::default().comm_unique_id().unwrap();
        let paths = paths_of(record_ranks(
            &dir,
            n,
            || with_kernels(Duration::from_secs(20)),
            |g, rank| tp_steps(g, id, n, rank),
        ));
        let traces = open_all(&paths);
        assert!(analysis::ranks::match_ranks(&traces).is_empty());
        // Replayed alone, a rank cannot meet the others: said so, not hung.
        let alone = Replayer::new(&traces[0])
            .run(
                &with_kernels(Duration::from_secs(1)),
                &ReplayOptions::default(),
                None,
                |_| {},
            )
            .unwrap();
        assert!(!alone.passed());
        assert_replayed_together(&traces, 3, &format!("TP={n}"));
        // The same from the command line.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
            .args(["ranks", "--replay"])
            .args(&paths)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert_eq!(text.matches("3 of 3").count(), n as usize, "{text}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The flight recorder on every rank: rank 1 leaves out the all-reduce of step 13 (a branch
/// the others did not take). Every rank's call fails there, every rank dumps its last steps,
/// and the dumps laid side by side name the collective, each rank's ask and its site, though
/// the communicators were joined long before the dumps begin; replayed together, the dumps
/// match every readback and part at the same collective again.
#[test]
fn every_rank_dumps_and_the_dumps_name_the_skipped_all_reduce() {
    let n = 2u32;
    let dir = scratch("flight");
    let (id, dumps) = skipped_all_reduce_dumps(&dir, n, |_| 4);
    let traces = open_all(&dumps);
    for t in &traces {
        // The dump begins after comm_init: its checkpoint says which rank set it is.
        assert!(!t
            .calls
            .iter()
            .any(|c| matches!(c.call, Call::CommInit { .. })));
        assert!(t
            .adopted
            .iter()
            .any(|a| matches!(a, gputape::trace::Adopted::Comm { unique, .. } if *unique == id)));
    }
    let found = analysis::ranks::match_ranks(&traces);
    assert_all_reduce_met_all_gather(&found, 13);
    // The dumps, replayed together, meet at the same collective and part there again.
    let backends: Vec<MockGpuBackend> = (0..n)
        .map(|_| with_kernels(Duration::from_secs(10)))
        .collect();
    let reports =
        gputape::replayer::replay_ranks(&traces, &backends, &ReplayOptions::default()).unwrap();
    for (rank, r) in reports.into_iter().enumerate() {
        let r = r.unwrap();
        assert!(r.passed(), "rank {rank}: {}", r.summary());
        assert!(
            r.d2h_checked > 0 && r.d2h_checked == r.d2h_matched,
            "rank {rank}: {}",
            r.summary()
        );
        assert!(
            r.faults.first().is_some_and(|f| f.reproduced),
            "rank {rank}: {}",
            r.summary()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The one dump a rank's flight recorder wrote into `dir`.
fn only_dump(dir: &std::path::Path) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtape"))
        .collect();
    assert_eq!(v.len(), 1, "{} holds one dump: {v:?}", dir.display());
    v.pop().unwrap()
}

/// A rank that faults and stops (a process that died): its peer waits in the next
/// all-reduce, where no call of its returns (NCCL spins; the mock gives up only at its
/// deadline). With a peers directory, the faulting rank's dump tells the other, whose watcher
/// dumps at once: the waiting all-reduce is in that dump as not returned, the reason names
/// rank 1, and the two dumps laid side by side name rank 1 as the rank that never came, with
/// its failed call.
#[test]
fn a_rank_that_faults_makes_its_waiting_peer_dump() {
    let n = 2u32;
    let dir = scratch("peers");
    let peers = dir.join("peers");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    std::thread::scope(|sc| {
        for rank in 0..n {
            let (dir, peers) = (dir.join(format!("rank{rank}")), peers.clone());
            sc.spawn(move || {
                let rec = flight_rank(&dir, 4, Some(peers), Duration::from_secs(5));
                let g: &dyn GpuBackend = &rec;
                let (comm, s, x, y) = join_with_buffers(g, id, n, rank);
                for step in 0..20u64 {
                    g.step_boundary(step);
                    if step == 9 && rank == 1 {
                        // A launch on a freed buffer: the mock faults, the sync says so.
                        g.free(x).unwrap();
                        gputape::workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
                        assert!(g.synchronize(s).is_err(), "the planted fault");
                        return;
                    }
                    gputape::workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
                    let r = g.collective(
                        comm,
                        Collective::AllReduce(ReduceOp::Sum),
                        y,
                        x,
                        64,
                        CollDtype::F32,
                        s,
                    );
                    if r.is_err() {
                        assert_eq!((rank, step), (0, 9), "only rank 0's step 9 waits in vain");
                        return;
                    }
                    let _ = read_f32(g, x, 4);
                }
                panic!("rank {rank}: the missing rank went unnoticed");
            });
        }
    });
    let dumps: Vec<PathBuf> = (0..n)
        .map(|rank| only_dump(&dir.join(format!("rank{rank}"))))
        .collect();
    let traces = open_all(&dumps);
    let info = traces[0].dump.as_ref().expect("rank 0's dump says why");
    assert!(
        info.reason.starts_with("peer:") && info.reason.contains("rank 1 of communicator"),
        "{}",
        info.reason
    );
    // Written while the all-reduce waited: it is in the dump as not returned.
    let waiting = traces[0]
        .calls
        .iter()
        .find(|c| matches!(c.call, Call::Collective { seq: 9, .. }))
        .expect("rank 0's dump holds the all-reduce it waits in");
    assert!(
        info.in_flight.iter().any(|&(seq, _)| seq == waiting.seq),
        "{:?} in flight, the all-reduce is #{}",
        info.in_flight,
        waiting.seq
    );
    // Rank 1's own dump is its fault's, not a peer's.
    let own = traces[1].dump.as_ref().expect("rank 1's dump says why");
    assert!(!own.reason.starts_with("peer:"), "{}", own.reason);
    let found = analysis::ranks::match_ranks(&traces);
    let missing = found.iter().find_map(|f| match f {
        RankFinding::Missing {
            seq: 9, missing, ..
        } => Some(missing),
        _ => None,
    });
    let missing = missing.unwrap_or_else(|| panic!("collective #9's missing rank: {found:?}"));
    assert_eq!(missing.len(), 1, "{found:?}");
    let (rank, _, failed) = &missing[0];
    assert_eq!(*rank, 1);
    let failed = failed.as_ref().expect("rank 1's failed call is named");
    assert!(failed.text.contains("synchronize"), "{failed:?}");
    // The same from the command line: exit 1, rank 1 named with its failed call.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .arg("ranks")
        .args(&dumps)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("collective #9: rank(s) 1 never made it")
            && text.contains("rank 1 failed first at"),
        "{text}"
    );
    // The two dumps shrunk together: rank 1's fault is its own (no collective needed), so
    // rank 0's dump, whose all-reduce waited, is not needed.
    let (code, text, err) = cli_minimize(&dumps, &dir.join("small.gtape"), &[]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.contains("(rank 0): not needed")
            && text.contains("collectives: ")
            && text.contains(" -> 0, kept"),
        "{text}"
    );
    let small = Trace::open(&dir.join("small.rank1.gtape")).unwrap();
    assert!(small.calls.len() < traces[1].calls.len(), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// One rank's step captured into a graph with its all-reduce (as vLLM captures its decode):
/// `y += x` then `sum = all_reduce(y)`, launched three times; what each launch's sum read
/// back holds.
fn captured_steps(g: &dyn GpuBackend, id: CommUniqueId, n: u32, rank: u32) -> Vec<Vec<f32>> {
    let comm = g.comm_init(id, n, rank).unwrap();
    let s = g.create_stream().unwrap();
    let len = 8u32;
    let bytes = len as usize * 4;
    let (x, y, sum) = (
        g.alloc(bytes).unwrap(),
        g.alloc(bytes).unwrap(),
        g.alloc(bytes).unwrap(),
    );
    g.copy_h2d(&f32s(&vec![rank as f32 + 1.0; len as usize]), x)
        .unwrap();
    g.memset(y, 0, bytes).unwrap();
    g.begin_capture(s).unwrap();
    gputape::workloads::saxpy(g, x, y, len, 1.0, s).unwrap();
    g.collective(
        comm,
        Collective::AllReduce(ReduceOp::Sum),
        y,
        sum,
        len as u64,
        CollDtype::F32,
        s,
    )
    .unwrap();
    let graph = g.end_capture(s).unwrap();
    let mut seen = Vec::new();
    for step in 0..3u64 {
        g.step_boundary(step);
        g.launch_graph(graph, s).unwrap();
        g.synchronize(s).unwrap();
        seen.push(read_f32(g, sum, len as usize));
    }
    g.destroy_graph(graph).unwrap();
    g.comm_destroy(comm).unwrap();
    seen
}

/// Collectives captured into a graph run at each launch of it: on 2 ranks the k-th launch's
/// sum is 3k everywhere; recorded, the capture holds the all-reduce, and the rank set replays
/// together, each launch meeting the other rank again, every read back matching.
#[test]
fn collectives_captured_into_a_graph_run_at_each_launch_and_replay() {
    let n = 2u32;
    let dir = scratch("captured");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let recorded = record_ranks(
        &dir,
        n,
        || with_kernels(Duration::from_secs(10)),
        |g, rank| captured_steps(g, id, n, rank),
    );
    for (path, seen) in &recorded {
        let want: Vec<Vec<f32>> = (1..=3).map(|k| vec![3.0 * k as f32; 8]).collect();
        assert_eq!(seen, &want, "{}", path.display());
    }
    let traces = open_all(&paths_of(recorded));
    for t in &traces {
        let at = |f: fn(&Call) -> bool| t.calls.iter().position(|c| f(&c.call));
        let begin = at(|c| matches!(c, Call::BeginCapture { .. }));
        let coll = at(|c| matches!(c, Call::Collective { .. }));
        let end = at(|c| matches!(c, Call::EndCapture { .. }));
        assert!(
            begin.is_some() && begin < coll && coll < end,
            "{begin:?} {coll:?} {end:?}"
        );
        let launches = t
            .calls
            .iter()
            .filter(|c| matches!(c.call, Call::LaunchGraph { .. }))
            .count();
        assert_eq!(launches, 3);
    }
    assert!(analysis::ranks::match_ranks(&traces).is_empty());
    assert_replayed_together(&traces, 3, "captured");
    std::fs::remove_dir_all(&dir).ok();
}

/// Flight recorders on `n` ranks (`every(rank)` steps between each one's checkpoints), rank 1
/// leaving out the all-reduce of step 13; the communicator's unique id, and each rank's one
/// dump in rank order.
fn skipped_all_reduce_dumps(
    dir: &std::path::Path,
    n: u32,
    every: impl Fn(u32) -> u64 + Sync,
) -> (CommUniqueId, Vec<PathBuf>) {
    let every = &every;
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    std::thread::scope(|sc| {
        for rank in 0..n {
            let dir = dir.join(format!("rank{rank}"));
            sc.spawn(move || {
                let rec = flight_rank(&dir, every(rank), None, Duration::from_secs(10));
                let g: &dyn GpuBackend = &rec;
                let (comm, s, x, y) = join_with_buffers(g, id, n, rank);
                // Each rank's own values, so what a step reads back depends on every
                // all-reduce before it.
                g.copy_h2d(&f32s(&[1.0 + rank as f32; 64]), y).unwrap();
                for step in 0..20u64 {
                    g.step_boundary(step);
                    gputape::workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
                    let r = if step == 13 && rank == 1 {
                        g.collective(comm, Collective::AllGather, y, x, 32, CollDtype::F32, s)
                    } else {
                        g.collective(
                            comm,
                            Collective::AllReduce(ReduceOp::Sum),
                            y,
                            x,
                            64,
                            CollDtype::F32,
                            s,
                        )
                    };
                    if r.is_err() {
                        return;
                    }
                    let _ = read_f32(g, x, 4);
                }
                panic!("rank {rank}: the skipped all-reduce went unnoticed");
            });
        }
    });
    let dumps = (0..n)
        .map(|rank| only_dump(&dir.join(format!("rank{rank}"))))
        .collect();
    (id, dumps)
}

/// Rank `rank`'s replay reproduced the planted parting (an all-gather where the others
/// all-reduced).
fn assert_parting_reproduced(r: &gputape::replayer::ReplayReport, rank: usize) {
    assert!(
        r.faults
            .iter()
            .any(|f| f.reproduced && f.recorded.contains("different collectives")),
        "rank {rank}: {}",
        r.summary()
    );
}

/// Flight dumps that start at different collectives (the ranks' checkpoints fell at
/// different steps) replay together from the first collective both hold: the rank whose dump
/// begins earlier leaves out the collectives the other rank made before its dump, and says
/// which; the skipped all-reduce's parting is reproduced on both ranks. `ranks` names it too,
/// comparing from the first collective both dumps hold.
#[test]
fn dumps_that_start_at_different_collectives_replay_from_the_first_both_hold() {
    let n = 2u32;
    let dir = scratch("unaligned");
    let (_, dumps) = skipped_all_reduce_dumps(&dir, n, |rank| 4 + 3 * rank as u64);
    let traces = open_all(&dumps);
    let found = analysis::ranks::match_ranks(&traces);
    assert_all_reduce_met_all_gather(&found, 13);
    let starts: Vec<u64> = traces
        .iter()
        .map(|t| {
            t.adopted
                .iter()
                .find_map(|a| match a {
                    Adopted::Comm { next_seq, .. } => Some(*next_seq),
                    _ => None,
                })
                .expect("a dump lists its communicator")
        })
        .collect();
    assert_ne!(
        starts[0], starts[1],
        "the dumps begin at different collectives"
    );
    let backends: Vec<MockGpuBackend> = (0..n)
        .map(|_| with_kernels(Duration::from_secs(10)))
        .collect();
    let reports = gputape::replayer::replay_ranks(&traces, &backends, &ReplayOptions::default())
        .expect("unaligned dumps replay");
    let later = starts[0].max(starts[1]);
    for (rank, r) in reports.into_iter().enumerate() {
        let r = r.unwrap();
        let text = r.summary();
        assert_parting_reproduced(&r, rank);
        // The earlier dump leaves out one group collective per step it begins before.
        let left_out = (later - starts[rank]) as usize;
        assert_eq!(r.skipped_count, left_out, "rank {rank}: {text}");
        if left_out > 0 {
            assert!(
                text.contains("not replayed") && text.contains(&format!("begins at #{later}")),
                "rank {rank}: {text}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Dumps whose older checkpoints fell at different steps (rank 0 checkpoints every 4 steps,
/// rank 1 every 8) but that both hold one at step 8: the replay begins rank 1's at its later
/// checkpoint, leaves nothing out, and every readback matches on both ranks; the skipped
/// all-reduce's parting is reproduced. The same dumps with their later checkpoints removed
/// replay as before: rank 1 leaves out the all-reduces rank 0's dump does not hold, and what
/// it computes from them no longer matches its recording.
#[test]
fn dumps_that_begin_at_different_checkpoints_replay_byte_for_byte_from_one_they_share() {
    let n = 2u32;
    let dir = scratch("restart");
    let (_, dumps) = skipped_all_reduce_dumps(&dir, n, |rank| 4 << rank);
    let traces = open_all(&dumps);
    let steps: Vec<Vec<u64>> = traces
        .iter()
        .map(|t| t.restarts.iter().map(|r| r.step).collect())
        .collect();
    assert!(
        steps[0] == [12] && steps[1] == [8],
        "rank 0's dump begins at step 8 and holds 12, rank 1's begins at 0 and holds 8: {steps:?}"
    );
    let replay = |traces: &[Trace]| {
        let backends: Vec<MockGpuBackend> = (0..n)
            .map(|_| with_kernels(Duration::from_secs(10)))
            .collect();
        gputape::replayer::replay_ranks(traces, &backends, &ReplayOptions::default())
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
    };
    for (rank, r) in replay(&traces).iter().enumerate() {
        let text = r.summary();
        assert_parting_reproduced(r, rank);
        assert_eq!(r.skipped_count, 0, "rank {rank}: {text}");
        assert!(r.d2h_checked >= 4, "rank {rank}: {text}");
        assert_eq!(r.d2h_checked, r.d2h_matched, "rank {rank}: {text}");
        assert_eq!(
            r.begun_at.is_some(),
            rank == 1,
            "only rank 1's dump is begun again: {text}"
        );
    }
    let without: Vec<Trace> = traces
        .iter()
        .cloned()
        .map(|mut t| {
            t.restarts.clear();
            t
        })
        .collect();
    let before = replay(&without);
    assert!(before[1].skipped_count > 0, "{}", before[1].summary());
    assert!(
        before[1].d2h_matched < before[1].d2h_checked,
        "{}",
        before[1].summary()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A rank's flight recorder on a mock whose ranks wait `timeout` for a missing one: host
/// checkpoints every `every` steps, taken as they fall due (a device checkpoint completes on
/// the recorder's thread, late on a loaded machine, and a dump would then reach back to
/// before comm_init, which these tests mean to leave out); `peers`, the rank set's shared
/// directory.
fn flight_rank(
    dir: &std::path::Path,
    every: u64,
    peers: Option<PathBuf>,
    timeout: Duration,
) -> RecordingBackend<MockGpuBackend> {
    let mut cfg = gputape::recorder::FlightConfig::new(dir);
    cfg.checkpoint_every = every;
    cfg.device_checkpoints = false;
    cfg.peers = peers;
    RecordingBackend::flight(with_kernels(timeout), cfg, BackendDesc::new("mock")).unwrap()
}

/// Rank `rank` of `n` joined on `id`, with the default stream and two 64-float buffers, the
/// first zeroed: (communicator, stream, x, y).
fn join_with_buffers(
    g: &dyn GpuBackend,
    id: CommUniqueId,
    n: u32,
    rank: u32,
) -> (gputape::backend::CommHandle, u64, DevicePtr, DevicePtr) {
    let comm = g.comm_init(id, n, rank).unwrap();
    let (x, y) = (g.alloc(256).unwrap(), g.alloc(256).unwrap());
    g.memset(x, 0, 256).unwrap();
    (comm, g.default_stream(), x, y)
}

/// `traces` replayed together on fresh mock ranks: every rank passes, `d2h` read backs each,
/// all matching (`what` names the case in failures).
fn assert_replayed_together(traces: &[Trace], d2h: u64, what: &str) {
    let backends: Vec<MockGpuBackend> = traces
        .iter()
        .map(|_| with_kernels(Duration::from_secs(20)))
        .collect();
    let reports =
        gputape::replayer::replay_ranks(traces, &backends, &ReplayOptions::default()).unwrap();
    for (rank, r) in reports.into_iter().enumerate() {
        let r = r.unwrap();
        assert!(r.passed(), "{what} rank {rank}: {}", r.summary());
        assert_eq!(r.d2h_checked, d2h, "{what} rank {rank}: {}", r.summary());
        assert_eq!(
            r.d2h_checked,
            r.d2h_matched,
            "{what} rank {rank}: {}",
            r.summary()
        );
    }
}

/// Two ranks, six steps of an all-reduce each; `plant(rank, step, g, x)` may break a rank at
/// a step (returning true: that rank stops there). Recorded into `dir` on mocks whose ranks
/// give up on a missing peer after a second.
fn faulting_pair(
    dir: &std::path::Path,
    plant: impl Fn(u32, u64, &dyn GpuBackend, DevicePtr, DevicePtr) -> bool + Sync,
) -> Vec<PathBuf> {
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let plant = &plant;
    paths_of(record_ranks(
        dir,
        2,
        || with_kernels(Duration::from_secs(1)),
        move |g, rank| {
            let (comm, s, x, y) = join_with_buffers(g, id, 2, rank);
            for step in 0..6u64 {
                gputape::workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
                if plant(rank, step, g, x, y) {
                    return;
                }
                let r = g.collective(
                    comm,
                    Collective::AllReduce(ReduceOp::Sum),
                    y,
                    x,
                    2,
                    CollDtype::I32,
                    s,
                );
                if r.is_err() || g.synchronize(s).is_err() {
                    return;
                }
            }
        },
    ))
}

/// `gputape minimize TRACES EXTRA... -o OUT`: its exit code, stdout and stderr.
fn cli_minimize(
    traces: &[PathBuf],
    out: &std::path::Path,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .arg("minimize")
        .args(traces)
        .args(extra)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (run.status.code(), text(&run.stdout), text(&run.stderr))
}

/// `minimize_ranks` on mock ranks, each candidate set replayed together (unverified, as
/// `minimize` replays: a fault's trace may use a freed buffer on purpose).
fn minimize_pair(traces: &[Trace]) -> gputape::replayer::RanksMinimized {
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let mut oracle = |cand: &[Trace], at: usize| {
        let backends: Vec<MockGpuBackend> = cand
            .iter()
            .map(|_| with_kernels(Duration::from_secs(5)))
            .collect();
        let mut reports = gputape::replayer::replay_ranks(cand, &backends, &opts)?;
        Ok(reports
            .swap_remove(at)
            .ok()
            .and_then(|r| gputape::replayer::signature(&r).map(|(s, _)| s)))
    };
    gputape::replayer::minimize_ranks(traces, None, &mut oracle, 300, &mut |_, _| {}).unwrap()
}

/// A fault of one rank's own (a launch on a buffer it freed) needs no collective: the rank
/// set shrinks to that rank alone, a few calls, and the other rank, left waiting in its
/// all-reduce when recorded, is not needed.
#[test]
fn a_rank_set_whose_fault_is_one_ranks_own_shrinks_to_that_rank() {
    let dir = scratch("min-own");
    let paths = faulting_pair(&dir, |rank, step, g, x, y| {
        if (rank, step) != (1, 3) {
            return false;
        }
        g.free(x).unwrap();
        gputape::workloads::saxpy(g, x, y, 64, 1.0, g.default_stream()).unwrap();
        assert!(
            g.synchronize(g.default_stream()).is_err(),
            "the planted fault"
        );
        true
    });
    let traces = open_all(&paths);
    let m = minimize_pair(&traces);
    assert_eq!(m.faulting, 1);
    assert_eq!(
        m.collectives,
        (3, 0),
        "rank 1 made 3 all-reduces first; none is needed"
    );
    assert!(m.traces[0].is_none(), "rank 0 is not needed");
    let small = m.traces[1].as_ref().unwrap();
    assert!(
        small.calls.len() <= 6 && small.calls.len() < traces[1].calls.len() / 3,
        "{} of {} calls: {}",
        small.calls.len(),
        traces[1].calls.len(),
        trace::render(small)
    );
    assert!(
        !small
            .calls
            .iter()
            .any(|c| matches!(c.call, Call::CommInit { .. })),
        "no communicator left to join: {}",
        trace::render(small)
    );
    // The small trace faults alone, as minimize said.
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let r = Replayer::new(small)
        .run(&with_kernels(Duration::from_secs(1)), &opts, None, |_| {})
        .unwrap();
    assert!(r.faults.iter().any(|f| f.reproduced), "{}", r.summary());
    std::fs::remove_dir_all(&dir).ok();
}

/// A fault that follows a collective: rank 0 sends an offset into the all-reduce of step 4
/// that turns rank 1's pointer table wild, and rank 1's gather reads through it. With every
/// other call there, only that all-reduce makes the fault (the earlier sums are valid
/// pointers, and without it the table holds rank 1's own), so the shrunk set keeps it on both
/// ranks and both ranks in the set; replayed together, rank 1 faults again. (The calls are
/// shrunk after the collectives, and a table of zeros faults too: which of the contributions
/// stays is ddmin's to find.) From the command line the same, one trace per rank written.
#[test]
fn a_fault_after_a_collective_keeps_that_collective_on_every_rank() {
    let dir = scratch("min-peer");
    let paths = faulting_pair(&dir, |rank, step, g, x, y| {
        let s = g.default_stream();
        match rank {
            // Its contribution: zeros, but at step 4 a high word of 0x100 (2^40 bytes on).
            0 => {
                let hi: i32 = if step == 4 { 0x100 } else { 0 };
                let words: Vec<u8> = [0i32, hi].iter().flat_map(|w| w.to_le_bytes()).collect();
                g.copy_h2d(&words, y).unwrap();
                false
            }
            // Its contribution: the address of its own `x`, as two 32-bit words; after the
            // all-reduce of step 4 it gathers through the sum.
            _ => {
                if step == 5 {
                    let out = g.alloc(16).unwrap();
                    let k = g.op_cache().kernel(g, "blas", "gather").unwrap();
                    g.launch_typed(
                        k,
                        [1, 1, 1],
                        [32, 1, 1],
                        0,
                        s,
                        &[
                            gputape::backend::KernelArg::Buffer(x),
                            gputape::backend::KernelArg::Buffer(out),
                            gputape::backend::KernelArg::Bytes(&1u32.to_le_bytes()),
                        ],
                    )
                    .unwrap();
                    assert!(
                        g.synchronize(s).is_err(),
                        "the gather through a wild address"
                    );
                    return true;
                }
                // Into `x` as well: without the all-reduce the gather would still read
                // through a valid address.
                g.copy_h2d(&x.0.to_le_bytes(), y).unwrap();
                g.copy_h2d(&x.0.to_le_bytes(), x).unwrap();
                false
            }
        }
    });
    let traces = open_all(&paths);
    let m = minimize_pair(&traces);
    assert_eq!(m.faulting, 1);
    assert_eq!(m.collectives, (5, 1), "only step 4's all-reduce is needed");
    let (r0, r1) = (m.traces[0].as_ref(), m.traces[1].as_ref());
    let (r0, r1) = (r0.expect("rank 0 is needed"), r1.expect("rank 1 faults"));
    for (t, what) in [(r0, "rank 0"), (r1, "rank 1")] {
        let colls: Vec<u64> = t
            .calls
            .iter()
            .filter_map(|c| match c.call {
                Call::Collective { seq, .. } => Some(seq),
                _ => None,
            })
            .collect();
        assert_eq!(colls, vec![4], "{what}: {}", trace::render(t));
    }
    assert!(
        r0.calls.len() < traces[0].calls.len() / 2 && r1.calls.len() < traces[1].calls.len() / 2,
        "{} and {} calls of {} and {}",
        r0.calls.len(),
        r1.calls.len(),
        traces[0].calls.len(),
        traces[1].calls.len()
    );
    let backends = [
        with_kernels(Duration::from_secs(5)),
        with_kernels(Duration::from_secs(5)),
    ];
    let small = [r0.clone(), r1.clone()];
    let reports =
        gputape::replayer::replay_ranks(&small, &backends, &ReplayOptions::default()).unwrap();
    let rep1 = reports[1].as_ref().unwrap();
    assert!(
        rep1.faults.iter().any(|f| f.reproduced),
        "{}",
        rep1.summary()
    );
    // The command line: one small trace per rank, the fault and the collectives said.
    let out = dir.join("small.gtape");
    let (code, text, err) = cli_minimize(&paths, &out, &[]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("collectives: 5 -> 1"), "{text}");
    assert!(text.contains("raised by blas::gather"), "{text}");
    for r in 0..2 {
        let p = dir.join(format!("small.rank{r}.gtape"));
        assert!(Trace::open(&p).is_ok(), "{} written: {text}", p.display());
    }
    // As JSON: the schema, the fault, the collectives, each rank's calls before and after.
    let (_, json, err) = cli_minimize(&paths, &out, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect(&err);
    assert_eq!(v["schema"], "gputape.minimize-ranks.v1", "{v}");
    assert_eq!(v["reproduced"], true, "{v}");
    assert_eq!(v["collectives"], serde_json::json!([5, 1]), "{v}");
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{v}");
    for (r, entry) in ranks.iter().enumerate() {
        assert_eq!(entry["rank"], r as u64, "{v}");
        assert!(
            entry["calls_after"].as_u64().unwrap() < entry["calls_before"].as_u64().unwrap(),
            "{v}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A send that one rank skips where neither dump holds an earlier exchange of the pair: rank
/// 1 sends to rank 0 at steps 3 and 13 and leaves out the second; its checkpoints (every 7
/// steps) put its dump's start after the first send, and rank 0's (every 4) after the first
/// receive. Neither window holds send #0, and rank 1's holds no send at all, yet each
/// checkpoint says where its numbering of the pair stood (`Adopted::CommPairs`), so the
/// analysis names rank 1 as the side that never made send #1; the dumps replay together, the
/// lone receive failing again as recorded.
#[test]
fn a_skipped_send_is_named_from_where_each_dump_began_on_the_pair() {
    let n = 2u32;
    let dir = scratch("skipped-send");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    std::thread::scope(|sc| {
        for rank in 0..n {
            let dir = dir.join(format!("rank{rank}"));
            sc.spawn(move || {
                let rec = flight_rank(&dir, [4, 7][rank as usize], None, Duration::from_secs(2));
                let g: &dyn GpuBackend = &rec;
                let (comm, s, x, y) = join_with_buffers(g, id, n, rank);
                for step in 0..20u64 {
                    g.step_boundary(step);
                    gputape::workloads::saxpy(g, x, y, 64, 1.0, s).unwrap();
                    if step == 3 || step == 13 {
                        let r = match rank {
                            1 if step == 13 => Ok(()),
                            1 => g.collective(
                                comm,
                                Collective::Send { peer: 0 },
                                y,
                                y,
                                16,
                                CollDtype::F32,
                                s,
                            ),
                            _ => g.collective(
                                comm,
                                Collective::Recv { peer: 1 },
                                x,
                                x,
                                16,
                                CollDtype::F32,
                                s,
                            ),
                        };
                        if r.is_err() {
                            return;
                        }
                    }
                    let r = g.collective(
                        comm,
                        Collective::AllReduce(ReduceOp::Sum),
                        y,
                        x,
                        64,
                        CollDtype::F32,
                        s,
                    );
                    if r.is_err() || g.synchronize(s).is_err() {
                        return;
                    }
                }
                panic!("rank {rank}: the skipped send went unnoticed");
            });
        }
    });
    let dumps: Vec<PathBuf> = (0..n)
        .map(|rank| only_dump(&dir.join(format!("rank{rank}"))))
        .collect();
    let traces = open_all(&dumps);
    // Neither dump holds the pair's first exchange; rank 1's holds none of them.
    let pair_calls = |t: &Trace| {
        t.calls
            .iter()
            .filter(|c| {
                matches!(
                    &c.call,
                    Call::Collective {
                        op: Collective::Send { .. } | Collective::Recv { .. },
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(pair_calls(&traces[0]), 1, "rank 0 holds its failed receive");
    assert_eq!(pair_calls(&traces[1]), 0, "rank 1 holds no send");
    let next = |t: &Trace| {
        t.adopted
            .iter()
            .find_map(|a| match a {
                Adopted::CommPairs { sends, recvs, .. } => Some((sends.clone(), recvs.clone())),
                _ => None,
            })
            .expect("a dump lists where its communicator stood with each peer")
    };
    assert_eq!(next(&traces[0]), (vec![], vec![(1, 1)]));
    assert_eq!(next(&traces[1]), (vec![(0, 1)], vec![]));
    let found = analysis::ranks::match_ranks(&traces);
    let unpaired = found.iter().find_map(|f| match f {
        RankFinding::Unpaired {
            from,
            to,
            seq,
            made,
            missing,
            ..
        } => Some((*from, *to, *seq, made.clone(), missing.0)),
        _ => None,
    });
    let Some((from, to, seq, made, missing)) = unpaired else {
        panic!("no unpaired send named: {found:?}")
    };
    assert_eq!((from, to, seq, missing), (1, 0, 1, 1), "{found:?}");
    assert_eq!(made.rank, 0);
    assert!(made.text.contains("recv"), "{made:?}");
    assert!(made.ret.starts_with("ERR"), "{made:?}");
    assert!(
        analysis::ranks::render_findings(&found).contains("rank 1"),
        "{}",
        analysis::ranks::render_findings(&found)
    );
    let backends: Vec<MockGpuBackend> = (0..n)
        .map(|_| with_kernels(Duration::from_secs(2)))
        .collect();
    let reports = gputape::replayer::replay_ranks(&traces, &backends, &ReplayOptions::default())
        .expect("the dumps replay together");
    let r0 = reports[0].as_ref().unwrap();
    assert!(
        r0.faults.iter().any(|f| f.reproduced),
        "rank 0's lone receive fails again: {}",
        r0.summary()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A rank set on one time line (`gputape export --perfetto` of several traces): rank 1's
/// recorder starts a second after rank 0's, so its call times count from a later 0; laid by
/// each trace's clock (`Trace::clock_epoch_ns`), the all-reduce they met in ends at the same
/// moment on both ranks' tracks (rank 0 waited in it; the test allows 400 ms for a loaded
/// machine), where their own times put the ends a second apart. The collective is joined across the ranks by one flow.
#[test]
fn a_rank_sets_traces_lie_on_one_time_line() {
    let dir = scratch("timeline");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    std::thread::scope(|sc| {
        for rank in 0..2u32 {
            let path = dir.join(format!("rank{rank}.gtape"));
            sc.spawn(move || {
                if rank == 1 {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let rec = RecordingBackend::to_file(
                    mock(Duration::from_secs(20)),
                    &path,
                    BackendDesc::new("mock"),
                )
                .unwrap();
                rec.start().unwrap();
                let g: &dyn GpuBackend = &rec;
                let (comm, s, x, y) = join_with_buffers(g, id, 2, rank);
                let sum = Collective::AllReduce(ReduceOp::Sum);
                g.collective(comm, sum, y, x, 64, CollDtype::F32, s)
                    .unwrap();
                let _ = read_f32(g, x, 4);
                rec.stop().unwrap();
            });
        }
    });
    let traces = open_all(&[dir.join("rank0.gtape"), dir.join("rank1.gtape")]);
    assert!(traces.iter().all(|t| t.clock_epoch_ns.is_some()));
    let refs: Vec<&Trace> = traces.iter().collect();
    let j = analysis::timeline::perfetto_ranks(&refs, &["r0".into(), "r1".into()]);
    let events = j["traceEvents"].as_array().unwrap();
    // Each rank's all-reduce: (pid, end in µs on the shared line, end in its own time).
    let ends: Vec<(u64, f64)> = events
        .iter()
        .filter(|e| {
            e["ph"] == "X"
                && e["args"]["call"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("all_reduce"))
        })
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(
        (ends[0].1 - ends[1].1).abs() < 400_000.0,
        "the all-reduce ends together on the shared line: {ends:?}"
    );
    let own = |t: &Trace| {
        let c = t
            .calls
            .iter()
            .find(|c| matches!(c.call, Call::Collective { .. }))
            .unwrap();
        (c.t_ns + c.dur_ns.unwrap()) as f64 / 1e3
    };
    assert!(
        (own(&traces[0]) - own(&traces[1])).abs() > 700_000.0,
        "in each trace's own time the ends are apart"
    );
    let flows: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["cat"] == "collective").collect();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert_eq!(
        (flows[0]["ph"].as_str(), flows[1]["ph"].as_str()),
        (Some("s"), Some("f"))
    );
    assert!(events.iter().any(|e| e["args"]["name"]
        .as_str()
        .is_some_and(|n| n.starts_with("rank 1: host calls (r1; clock)"))));
    std::fs::remove_dir_all(&dir).ok();
}
