//! `gputape ranks`: a rank set's traces side by side (one trace per rank, as each rank's
//! recorder wrote it): their communicators' collectives matched by number, and the first
//! place each communicator's ranks parted named with the ranks, the calls and their sites.
//! Flight dumps among them (a rank set's, or any processes' that waited on each other) are
//! first laid side by side: why each dumped, the calls it was blocked in, the launches not
//! known to have completed. With `--replay`, the rank set is then replayed together (one thread and one backend each:
//! mock ranks with the engine's modules loaded, or `--backend cuda`, each rank on the GPU it
//! was recorded on), every rank's readbacks checked. Processes that shared device memory
//! through IPC handles (`gputape run` of a program that forks, say) replay together too: a
//! buffer one opened is the other's buffer again (`replayer::shared`).

use anyhow::Result;
use std::path::PathBuf;

use super::common::open_trace;
use super::{Ctx, Exit};

#[derive(clap::Args)]
pub struct Args {
    /// One trace per rank, in any order (their `comm_init` calls say which rank each is), or
    /// one per process of a program whose processes shared memory through IPC handles.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Replay the rank set together after matching it, and check every rank's readbacks
    /// against its recording.
    #[arg(long)]
    replay: bool,
    /// Where `--replay` runs the ranks: mock ranks in this process, or CUDA, each rank on the
    /// GPU its trace was recorded on, meeting over NCCL (pin `NCCL_ALGO` and `NCCL_PROTO` for
    /// sums that must match the recording's bit for bit).
    #[arg(long, value_enum, default_value_t = super::backends::Backend::Mock, requires = "replay")]
    backend: super::backends::Backend,
    /// Print the findings (and, with `--replay`, each rank's replay report) as JSON
    /// (schema gputape.ranks.v1) instead of text.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when every communicator's ranks made the same collectives and every send met its
/// receive (and, with `--replay`, every rank's replay matched its recording), 1 where they
/// parted or a replay did not. With `--replay` the set is replayed where they parted too (a
/// rank set's flight dumps after a skipped collective): each rank's report says whether the
/// parting was reproduced.
pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let traces = a
        .traces
        .iter()
        .map(|p| open_trace(ctx, p))
        .collect::<Result<Vec<_>, _>>()?;
    let (comms, collectives) = counts(&traces);
    let found = crate::analysis::ranks::match_ranks(&traces);
    let at_dump: Vec<serde_json::Value> = traces
        .iter()
        .zip(&a.traces)
        .filter_map(|(t, p)| where_dumped(t, p))
        .collect();
    // With --json the document is printed once, at the end, with the replays' reports.
    if !a.json {
        print_where_dumped(&at_dump);
        // What the processes opened of each other's (through IPC or shareable handles), when
        // any did.
        let opened: usize = sharing(&traces).iter().flatten().map(|r| r.opens()).sum();
        if opened > 0 {
            println!(
                "{opened} buffer(s) and event(s) opened through IPC or shareable handles by processes that shared with each other (--replay makes each the exporter's)"
            );
        }
        if comms == 0 {
            println!(
                "{} trace(s), no communicator joined in any: no collectives to match",
                traces.len()
            );
        } else if found.is_empty() {
            println!(
                "{} trace(s), {comms} communicator join(s), {collectives} collective(s) in all: every rank made the same collectives, every send met its receive",
                traces.len()
            );
        } else {
            print!("{}", crate::analysis::ranks::render_findings(&found));
        }
    }
    let doc = |replays: serde_json::Value| {
        serde_json::json!({
            "schema": "gputape.ranks.v1",
            "traces": a.traces,
            "communicator_joins": comms,
            "collectives": collectives,
            "parted": !found.is_empty(),
            "findings": found,
            "dumps": at_dump,
            "replays": replays,
        })
    };
    if !a.replay {
        if a.json {
            super::common::print_json(&doc(serde_json::Value::Null))?;
        }
        return Ok(if found.is_empty() {
            Exit::Pass
        } else {
            Exit::Findings
        });
    }
    // Where the ranks parted, the replay shows whether the parting happens again: each
    // rank's report says which recorded failures it reproduced.
    if !found.is_empty() && !a.json {
        println!("replaying the rank set together:");
    }
    let (backends, spaces) = open_backends(ctx, &a, &traces)?;
    let reports = crate::replayer::replay_ranks_sharing(
        &traces,
        &backends,
        &spaces,
        &crate::replayer::ReplayOptions {
            // Compiled GPU code on mock ranks: its launches skipped and said, as `replay --on
            // mock` does.
            opaque_kernels: a.backend == super::backends::Backend::Mock,
            ..Default::default()
        },
    )?;
    let mut all = true;
    let mut replays = Vec::new();
    for (p, r) in a.traces.iter().zip(reports) {
        if a.json {
            all &= r.as_ref().is_ok_and(|r| r.passed());
            replays.push(match r {
                Ok(r) => serde_json::json!({"trace": p, "passed": r.passed(), "report": r}),
                Err(e) => serde_json::json!({"trace": p, "passed": false, "error": e.to_string()}),
            });
            continue;
        }
        match r {
            Ok(r) => {
                all &= r.passed();
                println!(
                    "{}: {}",
                    p.display(),
                    r.summary().lines().next().unwrap_or("")
                );
                // The whole report where there is more to say than the first line: what
                // failed, what was reproduced, what was left out, where it was begun.
                if !r.passed() || !found.is_empty() || r.skipped_count > 0 || r.begun_at.is_some() {
                    println!("{}", r.summary());
                }
            }
            Err(e) => {
                all = false;
                println!("{}: the replay could not run: {e}", p.display());
            }
        }
    }
    if a.json {
        super::common::print_json(&doc(serde_json::Value::Array(replays)))?;
    }
    Ok(if all && found.is_empty() {
        Exit::Pass
    } else {
        Exit::Findings
    })
}

/// Communicators joined (in the traces, or before they began: a checkpoint lists those) and
/// collectives made, over the whole set.
fn counts(traces: &[crate::trace::Trace]) -> (usize, usize) {
    use crate::trace::{Adopted, Call};
    let comms = traces
        .iter()
        .map(|t| {
            let joined = t
                .calls
                .iter()
                .filter(|c| matches!(c.call, Call::CommInit { .. }))
                .count();
            let adopted = t
                .adopted
                .iter()
                .filter(|a| matches!(a, Adopted::Comm { .. }))
                .count();
            joined + adopted
        })
        .sum();
    let collectives = traces
        .iter()
        .map(|t| {
            t.calls
                .iter()
                .filter(|c| matches!(c.call, Call::Collective { .. }))
                .count()
        })
        .sum();
    (comms, collectives)
}

/// Each rank's backend, and the memory it addresses (`replay_ranks_sharing`'s spaces).
type RankBackends = (
    Vec<std::sync::Arc<dyn crate::backend::GpuBackend>>,
    Vec<usize>,
);

/// A backend per rank, with the modules its trace embeds loaded, and which memory each
/// addresses (`replay_ranks_sharing`'s spaces).
fn open_backends(ctx: &Ctx, a: &Args, traces: &[crate::trace::Trace]) -> Result<RankBackends> {
    // Each rank on the device its trace was recorded on; where two say the same one (traces
    // from before the header said which), rank by rank in the order given. Processes that
    // shared memory through IPC handles shared a device with it: they keep theirs.
    let recorded: Vec<usize> = traces
        .iter()
        .map(|t| t.header.as_ref().map_or(0, |h| h.device_ordinal as usize))
        .collect();
    let linked = linked(traces);
    let distinct = recorded
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        == recorded.len();
    let devices: Vec<usize> = (0..traces.len())
        .map(|i| {
            if distinct || linked[i] {
                recorded[i]
            } else {
                i
            }
        })
        .collect();
    // Mock ranks that shared memory on one device are one mock, as they were one device
    // (unless they joined communicators: a mock's collectives are one rank's).
    let one_mock: Vec<bool> = traces
        .iter()
        .zip(&linked)
        .map(|(t, &linked)| {
            a.backend == super::backends::Backend::Mock
                && linked
                && t.calls.iter().all(|c| {
                    !matches!(
                        c.call,
                        crate::trace::Call::CommInit { .. } | crate::trace::Call::Collective { .. }
                    )
                })
        })
        .collect();
    let mut mocks: std::collections::BTreeMap<
        usize,
        std::sync::Arc<dyn crate::backend::GpuBackend>,
    > = Default::default();
    let mut spaces = Vec::with_capacity(traces.len());
    let mut gpus = Vec::with_capacity(traces.len());
    for (i, (t, p)) in traces.iter().zip(&a.traces).enumerate() {
        let device = devices[i];
        // A mock loads no code (its kernels are registered), so a shared one needs nothing more.
        let shared = one_mock[i].then(|| mocks.get(&device).cloned()).flatten();
        let gpu = match shared {
            Some(gpu) => gpu,
            None => {
                let want = super::backends::Want {
                    device,
                    ..super::backends::Want::replay()
                };
                let o = super::backends::open(ctx, a.backend, want).map_err(|e| {
                    e.context(format!(
                        "opening device {device}'s backend for {}",
                        p.display()
                    ))
                })?;
                if one_mock[i] {
                    mocks.insert(device, o.gpu.clone());
                }
                // A backend that compiles code gets the modules the trace embeds.
                load_modules(&o, t, p)?;
                o.gpu
            }
        };
        // CUDA ranks on one device address its one memory; a mock rank its own unless shared.
        spaces.push(match a.backend {
            super::backends::Backend::Cuda => device,
            super::backends::Backend::Mock if one_mock[i] => device,
            super::backends::Backend::Mock => usize::MAX - i,
        });
        gpus.push(gpu);
    }
    Ok((gpus, spaces))
}

/// Each trace's part in what the set shared through IPC handles, as if every trace were on
/// one memory (`None`: it shared nothing with the others): the replay's own pairing.
fn sharing(traces: &[crate::trace::Trace]) -> Vec<Option<crate::replayer::shared::RankShare>> {
    let all: Vec<&crate::trace::Trace> = traces.iter().collect();
    crate::replayer::shared::plan(&all, &vec![0; traces.len()]).ranks
}

/// Which traces shared memory or events with another of the set.
fn linked(traces: &[crate::trace::Trace]) -> Vec<bool> {
    sharing(traces).iter().map(Option::is_some).collect()
}

/// The modules trace `t` embeds, onto a backend that compiles code.
fn load_modules(
    o: &super::backends::Opened,
    t: &crate::trace::Trace,
    p: &std::path::Path,
) -> Result<()> {
    // Modules that are binary images are loaded by each replay, as images.
    for m in t
        .modules
        .iter()
        .filter(|m| !t.module_images.contains_key(&m.name))
    {
        o.load_trace_code(m)
            .map_err(|e| e.context(format!("loading module {} of {}", m.name, p.display())))?;
    }
    Ok(())
}

/// Where a dump's process was when it was dumped, side by side with the set's others: why it
/// dumped, the calls it was blocked in (not returned), and the launches since its last
/// completed wait, none known to have finished (a hung kernel is among them). `None` for a
/// trace that is no dump.
fn where_dumped(t: &crate::trace::Trace, path: &std::path::Path) -> Option<serde_json::Value> {
    let d = t.dump.as_ref()?;
    let blocked: Vec<&crate::trace::CallRecord> = d
        .in_flight
        .iter()
        .filter_map(|(seq, _)| t.calls.iter().find(|c| c.seq == *seq))
        .collect();
    let before = blocked.iter().map(|c| c.seq).min();
    let launches = before.map_or_else(Vec::new, |b| {
        crate::analysis::window::stuck_at(t, b.checked_sub(1)).1
    });
    let render = |c: &&crate::trace::CallRecord| crate::trace::render_call(t, c);
    Some(serde_json::json!({
        "trace": path,
        "reason": d.reason,
        "hang": t.is_hang_dump(),
        "blocked_in": blocked.iter().map(render).collect::<Vec<_>>(),
        "launches_not_known_complete": launches.iter().map(render).collect::<Vec<_>>(),
    }))
}

/// The dumps' places, one paragraph each.
fn print_where_dumped(at: &[serde_json::Value]) {
    if at.is_empty() {
        return;
    }
    println!("where each process was when it dumped:");
    for d in at {
        println!(
            "  {}: {}",
            d["trace"].as_str().unwrap_or_default(),
            d["reason"].as_str().unwrap_or_default()
        );
        let list = |key: &str, what: &str| {
            for c in d[key].as_array().into_iter().flatten() {
                println!("    {what}: {}", c.as_str().unwrap_or_default());
            }
        };
        list("blocked_in", "blocked in");
        list("launches_not_known_complete", "not known complete");
    }
}
