//! `replay`'s other modes, each a replay of its own: `--check-finite` (the first launch
//! that wrote a NaN), `--against` and `--chaos` (two replays in lockstep) and `--layout`
//! (what the mock did, allocation and ordering).

use anyhow::Result;
use std::path::Path;

use super::super::backends::{self, Backend, Want};
use super::super::{pass_if, Ctx, Exit};
use super::Args;

/// `replay --check-finite`.
pub(super) fn check_finite(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    let t = a.take_trace(ctx)?;
    let opts = crate::replayer::FiniteOptions {
        inf: a.inf,
        ignore: a.ignore,
        dtypes: buffer_types(&a.dtypes),
        rules: type_rules(&a.dtypes),
        writes: None,
    };
    let measure = !a.no_write_extents;
    finite(
        ctx,
        (&t, &a.trace),
        a.on,
        opts,
        (a.json, a.max_memory, measure),
    )
}

/// `replay --write-extents`: measure what every launch wrote, print it, store it beside the
/// trace for the checks that use it.
pub(super) fn write_extents(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    use crate::replayer::writes::trace_key;
    let t = a.take_trace(ctx)?;
    let opened = backends::open(ctx, a.on, Want::replay())?;
    let load = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let mut r = crate::replayer::Replayer::new(&t).with_max_memory(a.max_memory);
    if a.on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let key = match a.trace.is_file() {
        true => Some(trace_key(&a.trace)?),
        false => None,
    };
    let (w, note) = r.measure_and_store(opened.gpu.as_ref(), &a.trace, key, Some(&load))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&w)?);
    } else {
        print!("{}", w.summary(&t));
    }
    eprintln!("{note}");
    Ok(pass_if(w.stopped.is_none()))
}

/// The first launch that wrote a NaN (see `replayer::finite`); also what a dump taken for a
/// NaN replays as.
/// Measures what each launch wrote first (or reads it from beside the trace) when the trace
/// launches kernels nobody described and `measure` is on.
pub(super) fn finite(
    ctx: &Ctx,
    (t, path): (&crate::trace::Trace, &Path),
    on: Backend,
    mut opts: crate::replayer::FiniteOptions,
    (json, max_memory, measure): (bool, u64, bool),
) -> Result<Exit> {
    known_buffers(t, path, &opts.ignore, &opts.dtypes)?;
    let opened = backends::open(ctx, on, Want::replay())?;
    let load_cuda = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let mut r = crate::replayer::Replayer::new(t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    if measure && opts.writes.is_none() && crate::replayer::writes::wanted(t) {
        let (w, note) = r.writes_for(opened.gpu.as_ref(), path, Some(&load_cuda))?;
        eprintln!("{note}");
        opts.writes = Some(std::sync::Arc::new(w));
    }
    let rep = r.check_finite(opened.gpu.as_ref(), &opts, Some(&load_cuda))?;
    if json {
        let v = serde_json::json!({
            "schema": crate::replayer::REPLAY_SCHEMA,
            "passed": rep.passed(),
            "finite": rep,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", rep.summary());
    }
    Ok(pass_if(rep.passed()))
}

/// `replay --against`.
pub(super) fn lockstep(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    let t = a.take_trace(ctx)?;
    let opts = crate::replayer::LockstepOptions {
        tolerance: a.tolerance,
        dtypes: buffer_types(&a.dtypes),
        rules: type_rules(&a.dtypes),
        ignore: a.ignore,
        in_stream_order: false,
        delays: None,
        writes: None,
    };
    let substitute = match &a.substitute {
        None => None,
        Some(s) => {
            let (module, file) = s
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--substitute {s:?}: expected MODULE=FILE"))?;
            let code = std::fs::read_to_string(file)
                .map_err(|e| anyhow::anyhow!("--substitute: reading {file}: {e}"))?;
            Some((module.to_string(), code))
        }
    };
    let against = a.against.expect("dispatched on --against");
    two_backends(
        ctx,
        (t, &a.trace),
        (a.on, against),
        opts,
        substitute,
        (a.json, a.max_memory, !a.no_write_extents, a.loops),
    )
}

/// Two backends in lockstep (see `replayer::lockstep`).
fn two_backends(
    ctx: &Ctx,
    (t, path): (crate::trace::Trace, &Path),
    (on, against): (Backend, Backend),
    mut opts: crate::replayer::LockstepOptions,
    substitute: Option<(String, String)>,
    (json, max_memory, measure, rounds): (bool, u64, bool, u32),
) -> Result<Exit> {
    known_buffers(&t, path, &opts.ignore, &opts.dtypes)?;
    if let Some((module, _)) = &substitute {
        anyhow::ensure!(
            t.modules.iter().any(|m| &m.name == module),
            "--substitute: {} has no module {module} (its modules: {})",
            path.display(),
            t.modules
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        anyhow::ensure!(
            !against.runs_cpu_twins(),
            "--substitute needs an --against backend that compiles code (cuda); {} runs CPU twins",
            against.name()
        );
    }
    let a = backends::open(ctx, on, Want::replay())?;
    let b = backends::open(ctx, against, Want::replay())?;
    let load_a = |m: &crate::backend::ModuleCode| a.load_trace_code(m);
    let load_b = |m: &crate::backend::ModuleCode| match &substitute {
        Some((module, code)) if &m.name == module => {
            b.load_trace_code(&crate::backend::ModuleCode {
                name: m.name.clone(),
                source: Some(code.clone()),
                ptx: None,
            })
        }
        _ => b.load_trace_code(m),
    };
    let mut r = crate::replayer::Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() || against.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let b_name = match &substitute {
        Some((module, _)) => format!("{} with {module} substituted", against.name()),
        None => against.name().to_string(),
    };
    let names = (on.name(), b_name.as_str());
    if measure && opts.writes.is_none() && crate::replayer::writes::wanted(&t) {
        let (w, note) = r.writes_for(a.gpu.as_ref(), path, Some(&load_a))?;
        eprintln!("{note}");
        opts.writes = Some(std::sync::Arc::new(w));
    }
    let mut round = 1;
    let rep = loop {
        let rep = r.lockstep(
            (a.gpu.as_ref(), b.gpu.as_ref()),
            names,
            &opts,
            (Some(&load_a), Some(&load_b)),
        )?;
        if !rep.passed() || round >= rounds {
            break rep;
        }
        round += 1;
    };
    if rounds > 1 {
        let what = match rep.passed() {
            true => "no round differed",
            false => "this round differed",
        };
        eprintln!("lockstep round {round} of {rounds}: {what}");
    }
    print_lockstep(&rep, json)
}

/// A lockstep's report on standard output, and its exit status.
fn print_lockstep(rep: &crate::replayer::LockstepReport, json: bool) -> Result<Exit> {
    if json {
        let v = serde_json::json!({
            "schema": crate::replayer::REPLAY_SCHEMA,
            "passed": rep.passed(),
            "lockstep": rep,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", rep.summary());
    }
    Ok(pass_if(rep.passed()))
}

/// `replay --chaos`. On CUDA the schedule is the device's: the perturbed side's streams are
/// held at random before launches instead.
pub(super) fn chaos(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    let t = a.take_trace(ctx)?;
    let seed = a.chaos.expect("dispatched on --chaos");
    let opts = crate::replayer::LockstepOptions {
        tolerance: crate::replayer::Tolerance::Exact,
        dtypes: buffer_types(&a.dtypes),
        rules: type_rules(&a.dtypes),
        ignore: a.ignore,
        in_stream_order: true,
        delays: (!a.on.runs_cpu_twins()).then_some((seed, a.chaos_max_delay_us * 1000)),
        writes: None,
    };
    perturbed(
        ctx,
        (t, &a.trace),
        (a.on, seed),
        &opts,
        (a.json, a.max_memory),
    )
}

/// The trace on a plain mock and on a chaos mock in lockstep, each launch's output read back
/// on its own stream so the chaos side's streams overlap as the trace lets them (see
/// `mock/chaos.rs`, `replayer::lockstep`).
fn perturbed(
    ctx: &Ctx,
    (t, path): (crate::trace::Trace, &Path),
    (on, seed): (Backend, u64),
    opts: &crate::replayer::LockstepOptions,
    (json, max_memory): (bool, u64),
) -> Result<Exit> {
    known_buffers(&t, path, &opts.ignore, &opts.dtypes)?;
    let plain = backends::open(ctx, on, Want::replay())?;
    let perturbed = backends::open(
        ctx,
        on,
        Want {
            chaos: on.runs_cpu_twins().then_some(seed),
            ..Want::replay()
        },
    )?;
    let mut r = crate::replayer::Replayer::new(&t).with_max_memory(max_memory);
    if on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    let (load_a, load_b) = (
        |m: &crate::backend::ModuleCode| plain.load_trace_code(m),
        |m: &crate::backend::ModuleCode| perturbed.load_trace_code(m),
    );
    let name = match opts.delays {
        Some((_, max_ns)) => format!(
            "{} --chaos {seed} (streams held up to {} us before launches)",
            on.name(),
            max_ns / 1000
        ),
        None => format!("{} --chaos {seed}", on.name()),
    };
    let rep = r.lockstep(
        (plain.gpu.as_ref(), perturbed.gpu.as_ref()),
        (on.name(), &name),
        opts,
        (Some(&load_a), Some(&load_b)),
    )?;
    print_lockstep(&rep, json)
}

/// `--layout`: the mock's own log of one replay, rendered.
pub(super) fn layout(ctx: &Ctx, mut a: Args) -> Result<Exit> {
    let t = a.take_trace(ctx)?;
    let o = backends::open(ctx, a.on, Want::replay())?;
    let Some(mock) = o.mock else {
        anyhow::bail!("replay --layout reads the mock's own log of what it did: use --on mock");
    };
    let (text, report) = crate::replayer::replay_layout(&t, &mock)?;
    print!("{text}");
    Ok(pass_if(report.passed()))
}

/// `buf12` or `12`.
pub(in crate::cli) fn parse_buffer(s: &str) -> Result<crate::trace::BufferId, String> {
    s.strip_prefix("buf")
        .unwrap_or(s)
        .parse()
        .map(crate::trace::BufferId)
        .map_err(|_| format!("{s:?} is not a buffer (try `buf12` or `12`)"))
}

/// `buf12=bf16`.
/// A `--dtype`: a buffer's type, or a rule for kernels' pointers.
#[derive(Clone, Debug)]
pub(super) enum Dtype {
    Buf(crate::trace::BufferId, crate::backend::ElemType),
    Rule(crate::trace::kernel_types::TypeRule),
}

pub(super) fn parse_dtype(s: &str) -> Result<Dtype, String> {
    let (b, t) = s.rsplit_once('=').ok_or_else(|| {
        format!("{s:?} is not BUF=TYPE or GLOB[:ARG]=TYPE (try `buf12=bf16` or `'*gemm*=bf16'`)")
    })?;
    let is_buf = b
        .strip_prefix("buf")
        .is_some_and(|n| n.parse::<u32>().is_ok());
    if !is_buf {
        return crate::trace::kernel_types::TypeRule::parse(s).map(Dtype::Rule);
    }
    let e = crate::backend::ElemType::parse(t).ok_or_else(|| {
        format!("{t:?} is not an element type a buffer is read as (f32, f16, bf16)")
    })?;
    Ok(Dtype::Buf(parse_buffer(b)?, e))
}

/// The `--dtype`s of buffers.
fn buffer_types(d: &[Dtype]) -> Vec<(crate::trace::BufferId, crate::backend::ElemType)> {
    d.iter()
        .filter_map(|d| match d {
            Dtype::Buf(b, e) => Some((*b, *e)),
            Dtype::Rule(_) => None,
        })
        .collect()
}

/// The `--dtype` rules for kernels.
fn type_rules(d: &[Dtype]) -> Vec<crate::trace::kernel_types::TypeRule> {
    d.iter()
        .filter_map(|d| match d {
            Dtype::Rule(r) => Some(r.clone()),
            Dtype::Buf(..) => None,
        })
        .collect()
}

/// Refuse buffers the trace does not have, named on the command line.
fn known_buffers(
    t: &crate::trace::Trace,
    path: &Path,
    ignore: &[crate::trace::BufferId],
    dtypes: &[(crate::trace::BufferId, crate::backend::ElemType)],
) -> Result<()> {
    for b in ignore.iter().chain(dtypes.iter().map(|(b, _)| b)) {
        anyhow::ensure!(
            t.sizes.contains_key(b),
            "{} has no buffer {b} (its buffers are buf0..buf{})",
            path.display(),
            t.sizes.keys().last().map_or(0, |b| b.0)
        );
    }
    Ok(())
}
