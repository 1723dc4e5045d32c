//! Sends between some ranks while the others do something else: a pipeline of three mock
//! ranks passes each step's activations down the line (0 -> 1 -> 2) and every other step all
//! three all-reduce a statistic. Recorded, the rank set lines up (its sends paired with their
//! receives, its group collectives numbered without the sends) and replays together; a send
//! one stage skips is named by the rank-set analysis, and a rank set whose fault is a pair's
//! exchange is minimized keeping both of its sides.

use gputape::analysis::ranks::{match_ranks, render_findings, RankFinding};
use gputape::backend::{CollDtype, Collective, CommUniqueId, GpuBackend, ReduceOp};
use gputape::mock::{MockConfig, MockGpuBackend};
use gputape::recorder::{BackendDesc, RecordingBackend};
use gputape::replayer::{replay_ranks, ReplayOptions};
use gputape::trace::{Adopted, Call, Trace, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const STEPS: u64 = 6;

fn mock(timeout: Duration) -> MockGpuBackend {
    let m = MockGpuBackend::new(MockConfig {
        comm_timeout: timeout,
        ..Default::default()
    });
    gputape::workloads::load_kernels(&m).expect("the workloads' kernels");
    m
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The elements step `step` passes down the line: more each step, so an exchange one stage
/// leaves out makes the next pair disagree on their count (as a sequence that grows by a
/// token a step does).
fn width(step: u64) -> u64 {
    4 + step
}

/// One rank's part of the pipeline for `STEPS` steps: rank 0 makes the activations, rank 1
/// receives them, adds 1 and passes them on, rank 2 receives and reads them back; every other
/// step all three all-reduce one value. `skip_send_at`: rank 1 leaves out its send of that
/// step; `fault_at`: rank 2, having received that step's activations, frees them and
/// launches on them (a fault of its own). Stops at the first error (what a rank whose peer is
/// gone does) and returns it.
fn stage(
    gpu: &dyn GpuBackend,
    id: CommUniqueId,
    rank: u32,
    (skip_send_at, fault_at): (Option<u64>, Option<u64>),
) -> String {
    let run = || -> anyhow::Result<()> {
        let comm = gpu.comm_init(id, 3, rank)?;
        let s = gpu.default_stream();
        let (act, stat, sum) = (gpu.alloc(256)?, gpu.alloc(64)?, gpu.alloc(4)?);
        for step in 0..STEPS {
            let n = width(step);
            let f32 = CollDtype::F32;
            match rank {
                0 => {
                    let x: Vec<f32> = (0..n).map(|i| (step * 10 + i) as f32).collect();
                    gpu.copy_h2d(&f32s(&x), act)?;
                    gpu.collective(comm, Collective::Send { peer: 1 }, act, act, n, f32, s)?;
                }
                1 => {
                    gpu.collective(comm, Collective::Recv { peer: 0 }, act, act, n, f32, s)?;
                    let mut b = vec![0u8; n as usize * 4];
                    gpu.copy_d2h(act, &mut b)?;
                    let y: Vec<f32> = b
                        .chunks(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()) + 1.0)
                        .collect();
                    gpu.copy_h2d(&f32s(&y), act)?;
                    if skip_send_at != Some(step) {
                        gpu.collective(comm, Collective::Send { peer: 2 }, act, act, n, f32, s)?;
                    }
                }
                _ => {
                    gpu.collective(comm, Collective::Recv { peer: 1 }, act, act, n, f32, s)?;
                    if fault_at == Some(step) {
                        gpu.free(act)?;
                        gputape::workloads::saxpy(gpu, act, stat, n as u32, 1.0, s)?;
                        gpu.synchronize(s)?;
                    }
                    let mut b = vec![0u8; n as usize * 4];
                    gpu.copy_d2h(act, &mut b)?;
                    let first = f32::from_le_bytes(b[..4].try_into().unwrap());
                    anyhow::ensure!(
                        first == (step * 10) as f32 + 1.0,
                        "rank 2, step {step}: got {first}"
                    );
                }
            }
            if step % 2 == 1 {
                gpu.copy_h2d(&f32s(&[rank as f32 + step as f32]), stat)?;
                let op = Collective::AllReduce(ReduceOp::Sum);
                gpu.collective(comm, op, stat, sum, 1, CollDtype::F32, s)?;
                let mut b = [0u8; 4];
                gpu.copy_d2h(sum, &mut b)?;
            }
        }
        gpu.comm_destroy(comm)?;
        Ok(())
    };
    run().err().map(|e| format!("{e:#}")).unwrap_or_default()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gputape-pipe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `n` ranks, each on its own thread and its own mock (which gives up on a missing peer
/// after `timeout`), running `f` recorded into `dir/rank{R}.gtape`: each trace's path and
/// what `f` returned.
fn record_ranks<T: Send>(
    dir: &Path,
    n: u32,
    timeout: Duration,
    f: impl Fn(&dyn GpuBackend, u32) -> T + Sync,
) -> (Vec<PathBuf>, Vec<T>) {
    let f = &f;
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let path = dir.join(format!("rank{rank}.gtape"));
                sc.spawn(move || {
                    let rec =
                        RecordingBackend::to_file(mock(timeout), &path, BackendDesc::new("mock"))
                            .unwrap();
                    rec.start().unwrap();
                    let out = f(&rec, rank);
                    rec.stop().unwrap();
                    (path, out)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).unzip()
    })
}

/// The three stages recorded into `dir` (a trace each) on mocks that give up on a missing
/// peer after `timeout`; each stage's error, if any.
fn record_pipeline(
    dir: &Path,
    timeout: Duration,
    plant: (Option<u64>, Option<u64>),
) -> (Vec<Trace>, Vec<String>) {
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let (paths, errs) = record_ranks(dir, 3, timeout, |g, rank| stage(g, id, rank, plant));
    (
        paths.iter().map(|p| Trace::open(p).unwrap()).collect(),
        errs,
    )
}

/// (op name, seq) of each collective of `t`, in order.
fn numbered(t: &Trace) -> Vec<(&'static str, u64)> {
    t.calls
        .iter()
        .filter_map(|c| match c.call {
            Call::Collective { op, seq, .. } => Some((op.name(), seq)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_pipeline_passes_activations_down_the_line_and_its_rank_set_replays() {
    let dir = scratch("clean");
    let (traces, errs) = record_pipeline(&dir, Duration::from_secs(20), (None, None));
    assert!(errs.iter().all(String::is_empty), "{errs:?}");
    // Sends numbered per peer, the all-reduces among themselves alone.
    let want1: Vec<(&str, u64)> = (0..STEPS)
        .flat_map(|s| {
            let mut v = vec![("recv", s), ("send", s)];
            if s % 2 == 1 {
                v.push(("all_reduce", s / 2));
            }
            v
        })
        .collect();
    assert_eq!(numbered(&traces[1]), want1);
    assert_eq!(
        numbered(&traces[0])[..3],
        [("send", 0), ("send", 1), ("all_reduce", 0)]
    );
    let found = match_ranks(&traces);
    assert!(found.is_empty(), "{}", render_findings(&found));
    let backends: Vec<MockGpuBackend> = (0..3).map(|_| mock(Duration::from_secs(20))).collect();
    let reports = replay_ranks(&traces, &backends, &ReplayOptions::default()).unwrap();
    // Rank 0 reads back the sums; rank 1 what it received, then the sums; rank 2 the same.
    let d2h = [STEPS / 2, STEPS + STEPS / 2, STEPS + STEPS / 2];
    for (rank, r) in reports.into_iter().enumerate() {
        let r = r.unwrap();
        assert!(r.passed(), "rank {rank}: {}", r.summary());
        assert_eq!(
            (r.d2h_checked, r.d2h_matched),
            (d2h[rank], d2h[rank]),
            "rank {rank}: {}",
            r.summary()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_send_one_stage_leaves_out_before_an_all_reduce_is_named_with_the_stage() {
    // Rank 1 leaves out step 3's send and goes on to the all-reduce, which waits for rank 2,
    // which waits for that send: both give up after the deadline.
    let dir = scratch("skipped");
    let (traces, errs) = record_pipeline(&dir, Duration::from_secs(2), (Some(3), None));
    assert!(errs[2].contains("rank 1 never sent it"), "{errs:?}");
    let found = match_ranks(&traces);
    let text = render_findings(&found);
    let unpaired: Vec<&RankFinding> = found
        .iter()
        .filter(|f| matches!(f, RankFinding::Unpaired { .. }))
        .collect();
    assert_eq!(unpaired.len(), 1, "{text}");
    let RankFinding::Unpaired {
        from,
        to,
        seq,
        made,
        missing,
        ..
    } = unpaired[0]
    else {
        unreachable!()
    };
    assert_eq!((*from, *to, *seq), (1, 2, 3));
    assert_eq!(made.rank, 2);
    assert!(made.text.starts_with("recv<from 1>"), "{made:?}");
    assert!(made.ret.starts_with("ERR"), "{made:?}");
    assert!(made.site.contains("tests/pipeline.rs"), "{made:?}");
    // What rank 1 did instead: the all-reduce it waited in.
    assert_eq!(missing.0, 1);
    assert!(
        missing.1.iter().any(|c| c.text.starts_with("all_reduce")),
        "{missing:?}"
    );
    assert!(
        text.contains("send #3 from rank 1 to rank 2: rank 1 never sent it"),
        "{text}"
    );
    // The all-reduce of step 3 is named too: rank 2 never came to it.
    assert!(
        found.iter().any(
            |f| matches!(f, RankFinding::Missing { seq: 1, missing, .. } if missing[0].0 == 2)
        ),
        "{text}"
    );
    // Rank 0 to 1 paired to the end.
    assert!(
        !found.iter().any(|f| matches!(
            f,
            RankFinding::Unpaired { from: 0, .. } | RankFinding::PairMismatch { from: 0, .. }
        )),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_send_one_stage_leaves_out_shifts_the_next_and_the_pair_disagrees() {
    // Step 2 has no all-reduce after it: rank 1's next send (step 3's, 7 elements) meets
    // rank 2's receive of step 2 (6), and both fail there.
    let dir = scratch("shifted");
    let (traces, errs) = record_pipeline(&dir, Duration::from_secs(2), (Some(2), None));
    assert!(errs[2].contains("different collectives"), "{errs:?}");
    let found = match_ranks(&traces);
    let text = render_findings(&found);
    let pair: Vec<&RankFinding> = found
        .iter()
        .filter(|f| matches!(f, RankFinding::PairMismatch { .. }))
        .collect();
    assert_eq!(pair.len(), 1, "{text}");
    let RankFinding::PairMismatch {
        from,
        to,
        seq,
        calls,
        ..
    } = pair[0]
    else {
        unreachable!()
    };
    assert_eq!((*from, *to, *seq), (1, 2, 2));
    assert!(calls[0].text.starts_with("send<to 2>"), "{calls:?}");
    assert!(calls[1].text.starts_with("recv<from 1>"), "{calls:?}");
    assert!(
        calls.iter().all(|c| c.site.contains("tests/pipeline.rs")),
        "{calls:?}"
    );
    assert!(
        text.contains("send #2 from rank 1 to rank 2: the two sides disagree"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The last stage's own fault (a launch on activations it freed) at step 4: the rank set
/// shrinks to that rank alone. Its receives and the sends between the other two stages were
/// candidates too, each kept or dropped on both of its sides, and none is needed.
#[test]
fn a_rank_set_whose_fault_is_the_last_stages_own_shrinks_to_that_stage() {
    let dir = scratch("min");
    let (traces, errs) = record_pipeline(&dir, Duration::from_secs(1), (None, Some(4)));
    assert!(!errs[2].is_empty(), "the planted fault: {errs:?}");
    let opts = ReplayOptions {
        verify: false,
        ..Default::default()
    };
    let mut oracle = |cand: &[Trace], at: usize| {
        let backends: Vec<MockGpuBackend> =
            cand.iter().map(|_| mock(Duration::from_secs(2))).collect();
        let mut reports = replay_ranks(cand, &backends, &opts)?;
        Ok(reports
            .swap_remove(at)
            .ok()
            .and_then(|r| gputape::replayer::signature(&r).map(|(s, _)| s)))
    };
    let m =
        gputape::replayer::minimize_ranks(&traces, None, &mut oracle, 400, &mut |_, _| {}).unwrap();
    assert_eq!(m.faulting, 2);
    // Rank 2's five receives and two all-reduces, and rank 0's sends to rank 1 before
    // their cuts (the stages it depends on); none kept.
    assert!(m.collectives.0 > 7, "{:?}", m.collectives);
    assert_eq!(m.collectives.1, 0, "{:?}", m.collectives);
    assert!(
        m.traces[0].is_none() && m.traces[1].is_none(),
        "ranks 0 and 1 not needed"
    );
    let small = m.traces[2].as_ref().unwrap();
    assert!(
        small.calls.len() < traces[2].calls.len() / 3,
        "{} of {} calls",
        small.calls.len(),
        traces[2].calls.len()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `t` as a flight dump that began at its call `from` would hold it: the calls before are
/// gone, and the communicator it joined there is listed as joined before it began.
fn as_dump(t: &Trace, from: usize) -> Trace {
    let mut d = t.clone();
    // The group collectives before the cut: the checkpoint's count.
    let next_seq = t.calls[..from]
        .iter()
        .filter(|c| matches!(&c.call, Call::Collective { op, .. } if !matches!(op, Collective::Send { .. } | Collective::Recv { .. })))
        .count() as u64;
    let joined = t.calls[..from]
        .iter()
        .find_map(|c| match (&c.call, &c.ret) {
            (
                Call::CommInit {
                    unique,
                    nranks,
                    rank,
                },
                Some(Ok(Value::Comm(id))),
            ) => Some(Adopted::Comm {
                id: *id,
                unique: *unique,
                nranks: *nranks,
                rank: *rank,
                next_seq,
            }),
            _ => None,
        });
    d.adopted.extend(joined);
    // The buffers made before the cut stay (a dump's checkpoint holds them); everything
    // else before it goes.
    let mut at = 0;
    d.calls.retain(|c| {
        at += 1;
        at > from || matches!(c.call, Call::Alloc { .. })
    });
    d
}

/// The place of `t`'s `seq`-th `op` (a send or a receive).
fn place_of(t: &Trace, name: &str, seq: u64) -> usize {
    t.calls
        .iter()
        .position(|c| matches!(&c.call, Call::Collective { op, seq: s, .. } if op.name() == name && *s == seq))
        .unwrap()
}

#[test]
fn dumps_whose_sends_start_at_different_numbers_replay_from_the_later_start() {
    let dir = scratch("dumps");
    let (traces, errs) = record_pipeline(&dir, Duration::from_secs(20), (None, None));
    assert!(errs.iter().all(String::is_empty), "{errs:?}");
    // Ranks 0 and 1 dump from step 2 on (rank 0's send #2, rank 1's receive #2), rank 2
    // from its receive #0: its receives #0 and #1 have no send in rank 1's dump, and are
    // left out; the all-reduces, numbered alike on every rank from the dumps' first, meet.
    let first_ar = |t: &Trace, from: usize| {
        t.calls[from..]
            .iter()
            .find_map(|c| match &c.call {
                Call::Collective { op, seq, .. } if op.name() == "all_reduce" => Some(*seq),
                _ => None,
            })
            .unwrap()
    };
    // Rank 0's from the upload its send #2 sends.
    let (s0, r1) = (
        place_of(&traces[0], "send", 2) - 1,
        place_of(&traces[1], "recv", 2),
    );
    // Rank 2's dump begins at its receive #0, before step 1's all-reduce (#0), which the
    // others' dumps begin after.
    let r2 = place_of(&traces[2], "recv", 0);
    let set = vec![
        as_dump(&traces[0], s0),
        as_dump(&traces[1], r1),
        as_dump(&traces[2], r2),
    ];
    // Ranks 0 and 1 begin before the same all-reduce (step 3's, #1).
    assert_eq!(first_ar(&traces[0], s0), 1);
    assert_eq!(first_ar(&traces[1], r1), 1);
    let backends: Vec<MockGpuBackend> = (0..3).map(|_| mock(Duration::from_secs(5))).collect();
    let reports = replay_ranks(&set, &backends, &ReplayOptions::default()).unwrap();
    let reports: Vec<_> = reports.into_iter().map(Result::unwrap).collect();
    assert_eq!(reports[0].skipped_count, 0, "{}", reports[0].summary());
    assert_eq!(reports[1].skipped_count, 0, "{}", reports[1].summary());
    // Rank 2 leaves out its receives #0 and #1 (their sends are before rank 1's dump) and
    // the all-reduce of step 1 (#0: before the others' dumps begin).
    let r = &reports[2];
    let text = r.summary();
    assert_eq!(r.skipped_count, 3, "{text}");
    assert!(
        text.contains(
            "(#0 from rank 1 to rank 2), made before the other side's trace begins at #2"
        ) && text.contains("(#1 from rank 1 to rank 2)")
            && text.contains("all_reduce (collective #0"),
        "{text}"
    );
    // Ranks 0 and 1 replay what they recorded; rank 2's readbacks of the two receives it
    // left out differ (what they received is not known here), the rest match.
    for (rank, r) in reports.iter().enumerate().take(2) {
        assert!(r.passed(), "rank {rank}: {}", r.summary());
    }
    assert!(r.d2h_checked > r.d2h_matched && r.d2h_matched > 0, "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `gputape ranks` on the pipeline's traces, as a user runs it: exit code and stdout.
fn cli_ranks(dir: &Path, extra: &[&str]) -> (Option<i32>, String) {
    // A replay's mock ranks give up on a missing peer after 2 s, as the recording's did.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gputape"))
        .env("GPUTAPE_MOCK_COMM_TIMEOUT_S", "2")
        .arg("ranks")
        .args((0..3).map(|r| dir.join(format!("rank{r}.gtape"))))
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn gputape_ranks_lines_up_a_pipeline_and_names_a_left_out_send() {
    let dir = scratch("cli-clean");
    let (_, errs) = record_pipeline(&dir, Duration::from_secs(20), (None, None));
    assert!(errs.iter().all(String::is_empty), "{errs:?}");
    let (code, text) = cli_ranks(&dir, &["--replay"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("every send met its receive"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
    let dir = scratch("cli-skipped");
    record_pipeline(&dir, Duration::from_secs(2), (Some(3), None));
    let (code, text) = cli_ranks(&dir, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("send #3 from rank 1 to rank 2: rank 1 never sent it")
            && text.contains("rank 1 instead, last calls:")
            && text.contains("tests/pipeline.rs"),
        "{text}"
    );
    // With --replay the parted set is replayed as well: rank 2's receive waits again and
    // fails as recorded.
    let (code, text) = cli_ranks(&dir, &["--replay"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("rank 1 never sent it")
            && text.contains("replaying the rank set together:")
            && text.contains("REPRODUCED"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Rank `rank` of `n` sends its four values to the next rank and receives the previous
/// rank's, the two in one group when `grouped` (as NCCL needs for a ring exchange), and
/// returns what it received.
fn ring(
    gpu: &dyn GpuBackend,
    id: CommUniqueId,
    (n, rank): (u32, u32),
    grouped: bool,
) -> anyhow::Result<Vec<f32>> {
    ring_ending(gpu, id, (n, rank), (grouped, true))
}

/// `ring`, where `(grouped, ends)`: `ends` false leaves the group open (a rank that forgot
/// its `comm_group_end`: its collectives are never issued).
fn ring_ending(
    gpu: &dyn GpuBackend,
    id: CommUniqueId,
    (n, rank): (u32, u32),
    (grouped, ends): (bool, bool),
) -> anyhow::Result<Vec<f32>> {
    let comm = gpu.comm_init(id, n, rank)?;
    let s = gpu.default_stream();
    let (mine, theirs) = (gpu.alloc(16)?, gpu.alloc(16)?);
    gpu.copy_h2d(&f32s(&[rank as f32 + 0.5; 4]), mine)?;
    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
    if grouped {
        gpu.comm_group_start()?;
    }
    let f32 = CollDtype::F32;
    gpu.collective(comm, Collective::Send { peer: next }, mine, mine, 4, f32, s)?;
    gpu.collective(
        comm,
        Collective::Recv { peer: prev },
        theirs,
        theirs,
        4,
        f32,
        s,
    )?;
    if grouped && ends {
        gpu.comm_group_end()?;
    }
    let mut b = vec![0u8; 16];
    gpu.copy_d2h(theirs, &mut b)?;
    gpu.comm_destroy(comm)?;
    Ok(b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

#[test]
fn a_ring_exchange_in_a_group_completes_and_its_rank_set_replays() {
    let dir = scratch("ring");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let n = 3u32;
    let (paths, got) = record_ranks(&dir, n, Duration::from_secs(20), |g, rank| {
        ring(g, id, (n, rank), true).unwrap()
    });
    for (rank, got) in got.iter().enumerate() {
        let prev = (rank as u32 + n - 1) % n;
        assert_eq!(*got, vec![prev as f32 + 0.5; 4], "rank {rank}");
    }
    let traces: Vec<Trace> = paths.iter().map(|p| Trace::open(p).unwrap()).collect();
    for t in &traces {
        let kinds: Vec<&str> = t
            .calls
            .iter()
            .filter(|c| {
                matches!(
                    c.call,
                    Call::CommGroupStart | Call::CommGroupEnd | Call::Collective { .. }
                )
            })
            .map(|c| c.call.kind().name())
            .collect();
        assert_eq!(
            kinds,
            [
                "comm_group_start",
                "collective",
                "collective",
                "comm_group_end"
            ]
        );
    }
    let found = match_ranks(&traces);
    assert!(found.is_empty(), "{}", render_findings(&found));
    let backends: Vec<MockGpuBackend> = (0..n).map(|_| mock(Duration::from_secs(20))).collect();
    let reports = replay_ranks(&traces, &backends, &ReplayOptions::default()).unwrap();
    for (rank, r) in reports.into_iter().enumerate() {
        let r = r.unwrap();
        assert!(r.passed(), "rank {rank}: {}", r.summary());
        assert_eq!((r.d2h_checked, r.d2h_matched), (1, 1), "rank {rank}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_ring_exchange_without_a_group_waits_and_names_the_peer_that_never_received() {
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let n = 3u32;
    let errs: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                sc.spawn(move || {
                    let m = mock(Duration::from_millis(300));
                    format!("{:#}", ring(&m, id, (n, rank), false).unwrap_err())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, e) in errs.iter().enumerate() {
        let next = (rank as u32 + 1) % n;
        assert!(
            e.contains(&format!("send #0 from rank {rank} to rank {next}"))
                && e.contains(&format!("rank {next} never received it")),
            "rank {rank}: {e}"
        );
    }
    // A group end without its start is an error that says so.
    let m = mock(Duration::from_millis(300));
    let e = m.comm_group_end().unwrap_err();
    assert!(format!("{e:#}").contains("no group is open"), "{e:#}");
}

#[test]
fn a_rank_that_never_ends_its_group_is_named_with_what_it_held() {
    let dir = scratch("open-group");
    let id = MockGpuBackend::default().comm_unique_id().unwrap();
    let n = 2u32;
    // Rank 1 forgets to end its group.
    let (paths, errs) = record_ranks(&dir, n, Duration::from_millis(300), |g, rank| {
        let r = ring_ending(g, id, (n, rank), (true, rank == 0));
        r.err().map(|e| format!("{e:#}")).unwrap_or_default()
    });
    // Rank 0's group waited for rank 1, which never issued its side; rank 1 saw nothing.
    assert!(errs[0].contains("rank 1 never"), "{errs:?}");
    assert!(errs[1].is_empty(), "{errs:?}");
    let traces: Vec<Trace> = paths.iter().map(|p| Trace::open(p).unwrap()).collect();
    let found = match_ranks(&traces);
    let text = render_findings(&found);
    let open: Vec<&RankFinding> = found
        .iter()
        .filter(|f| matches!(f, RankFinding::OpenGroup { .. }))
        .collect();
    assert_eq!(open.len(), 1, "{text}");
    let RankFinding::OpenGroup {
        start,
        held,
        held_count,
    } = open[0]
    else {
        unreachable!()
    };
    assert_eq!((start.rank, *held_count, held.len()), (1, 2, 2), "{text}");
    assert!(start.text.contains("comm_group_start"), "{text}");
    assert!(start.site.contains("pipeline.rs"), "{text}");
    // Rank 0's send to rank 1 is named as never received: rank 1's receive was held.
    assert!(
        found.iter().any(|f| matches!(
            f,
            RankFinding::Unpaired { from: 0, to: 1, seq: 0, missing, .. } if missing.0 == 1
        )),
        "{text}"
    );
    assert!(text.contains("never issued"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
