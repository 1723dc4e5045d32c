//! `gputape run [-o TRACE] [--counts FILE] -- COMMAND ARGS...`: an unmodified CUDA program run with
//! gputape's driver shim (`crates/gputape-cuda-shim`, a `libcuda.so.1` of gputape's) in front of
//! the real driver. The shim is found beside this binary (`gputape-shim/libcuda.so.1`), or as
//! cargo built it (`target/<profile>/libgputape_cuda_shim.so`), or in `GPUTAPE_SHIM_DIR`; a
//! temporary directory gets `libcuda.so.1` and `libcuda.so` links to it, which goes first on
//! `LD_LIBRARY_PATH` (a program or library that loads the driver by name finds it) and into
//! `LD_PRELOAD` (a program whose RPATH names the real driver's directory gets the shim anyway:
//! the loader matches the preloaded object's soname). The real driver is found as the shim would
//! find it (`locate.rs`, shared) and passed on in `GPUTAPE_REAL_LIBCUDA`, unless the user set
//! that. Every process of the command that called the driver appends a line of counts to
//! `GPUTAPE_SHIM_COUNTS`; they are summed, printed as a table on stderr, and written to
//! `--counts` as one JSON document. The command's exit status is relayed.
//!
//! With `-o TRACE` the shim also logs each process's driver calls (`GPUTAPE_SHIM_LOG_DIR`, one
//! log per process), and when the command is over each log becomes a trace (`shimtrace`): the
//! process that made the most calls is `TRACE`, any other `TRACE` with `.PID` before its
//! extension. With `--flight DIR` the shim keeps the records in a ring in memory instead
//! (`GPUTAPE_SHIM_FLIGHT_DIR`; the shim's `flight.rs` says what a dump holds) and a process
//! whose driver reports a fault writes its dump to DIR; each becomes `DIR/PID.gtape`.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::common::write_out;
use super::{Ctx, Exit};

/// The driver search the shim itself does, shared so both find the same driver.
#[path = "../../crates/gputape-cuda-shim/src/locate.rs"]
#[allow(dead_code)]
mod locate;

/// A directory holding `libcuda.so.1` (gputape's shim) to use instead of the one found.
const ENV_SHIM_DIR: &str = "GPUTAPE_SHIM_DIR";
/// Where the shim appends each process's counts.
const ENV_COUNTS: &str = "GPUTAPE_SHIM_COUNTS";
/// Where the shim writes each process's call log (with `-o`).
const ENV_LOG_DIR: &str = "GPUTAPE_SHIM_LOG_DIR";
/// Where the shim writes a faulting process's flight dump (with `--flight`).
pub(super) const ENV_FLIGHT_DIR: &str = "GPUTAPE_SHIM_FLIGHT_DIR";
/// This run's id, which ties the processes whose dumps wake each other (the shim's `peers.rs`).
const ENV_RUN: &str = "GPUTAPE_SHIM_RUN";

#[derive(clap::Args)]
#[command(
    after_help = "The shim counts every CUDA driver entry point called (directly, or through \
                  pointers from cuGetProcAddress, as the CUDA runtime calls them) and forwards each \
                  call to the real driver unchanged; the table goes to stderr when the command \
                  exits, and gputape exits with the command's status. With -o, the calls are also \
                  recorded into a trace, which show, analyze, replay --on cuda and minimize read \
                  like any other (what is recorded and what is kept by name only: \
                  the book's reference, \"Driver entry points\").\n\n\
                  With --flight, nothing is written unless a process faults (or, with \
                  GPUTAPE_FLIGHT_HANG_S=SECS, a host sync waits longer than SECS): that process's \
                  dump becomes DIR/PID.gtape, and every other process of the command that called \
                  the driver dumps too within a fraction of a second (one process per GPU: the \
                  others wait in a sync or a collective), its waiting calls written as not \
                  returned and its reason beginning \"peer:\".\n\n\
                  Environment: GPUTAPE_REAL_LIBCUDA (the real driver; found by search when unset), \
                  GPUTAPE_SHIM_DIR (a directory holding the shim as libcuda.so.1), \
                  GPUTAPE_FLIGHT_RING_MB (the flight ring, default 256), GPUTAPE_FLIGHT_HANG_S \
                  (the flight recorder's hang deadline, off when unset)."
)]
pub struct Args {
    /// Record the command's driver calls into TRACE (one trace per process that called the
    /// driver: the busiest is TRACE, others TRACE with .PID before the extension).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "TRACE",
        conflicts_with = "flight"
    )]
    output: Option<PathBuf>,
    /// Keep each process's recent driver calls in memory (a ring of GPUTAPE_FLIGHT_RING_MB,
    /// default 256, plus every allocation, module and kernel) and write nothing unless the
    /// driver reports a fault (an illegal address, a device-side assert, a launch failure):
    /// then that process's dump becomes DIR/PID.gtape, ready for replay and minimize.
    #[arg(long, value_name = "DIR")]
    flight: Option<PathBuf>,
    /// Also write the counts, summed over every process of the command, to FILE as JSON
    /// (schema gputape.shim-counts.v1; `-` for stdout).
    #[arg(long, value_name = "FILE")]
    counts: Option<PathBuf>,
    /// How many entry points the table lists, most called first.
    #[arg(long, default_value_t = 30, value_name = "N")]
    top: usize,
    /// The program to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

pub fn exec(args: Args, _ctx: &Ctx) -> Result<Exit> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        bail!("gputape's CUDA driver shim is built for x86_64 Linux only");
    }
    let shim = find_shim()?;
    let dir = ShimDir::new(&shim)?;
    let counts = dir.path.join("counts.jsonl");

    let user_real = std::env::var_os(locate::ENV_REAL).map(PathBuf::from);
    let real = user_real.clone().or_else(|| {
        locate::candidates().find(|p| !locate::same_file(p, &shim) && !p.starts_with(&dir.path))
    });
    if real.is_none() {
        eprintln!(
            "gputape run: no real libcuda.so.1 found on this machine: every driver call of the \
             command will return CUDA_ERROR_NO_DEVICE (100)"
        );
    }

    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_LIBRARY_PATH", prepend(&dir.path, "LD_LIBRARY_PATH"))
        .env(
            "LD_PRELOAD",
            prepend(&dir.path.join("libcuda.so.1"), "LD_PRELOAD"),
        )
        .env(ENV_COUNTS, &counts);
    // Beside TRACE, not in the temporary directory: a `gputape run` killed before it converts
    // leaves them, and every verb opens a raw log as it opens a trace.
    let logs = args
        .output
        .as_deref()
        .map_or_else(|| dir.path.join("logs"), logs_beside);
    if args.output.is_some() {
        let earlier = std::fs::read_dir(&logs).is_ok_and(|mut d| d.next().is_some());
        if earlier {
            bail!(
                "{} holds call logs of an earlier run that was not converted: open them as they \
                 are (`gputape show {}/PID.gtshm`) or remove the directory",
                logs.display(),
                logs.display()
            );
        }
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("cannot create {}", logs.display()))?;
        cmd.env(ENV_LOG_DIR, &logs);
    } else {
        cmd.env_remove(ENV_LOG_DIR);
    }
    cmd.env_remove(ENV_FLIGHT_DIR);
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    cmd.env(ENV_RUN, &run_id);
    if let Some(dir) = &args.flight {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the flight directory {}", dir.display()))?;
        let abs = std::fs::canonicalize(dir)
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        cmd.env(ENV_FLIGHT_DIR, abs);
    }
    let started = std::time::SystemTime::now();
    if let (None, Some(r)) = (&user_real, &real) {
        cmd.env(locate::ENV_REAL, r);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", Path::new(&args.command[0]).display()))?;
    // Ctrl-C reaches the command (the terminal signals the whole process group); gputape stays
    // to print what it counted. Set after the spawn, so the command keeps its own dispositions.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let announcer = args
        .flight
        .clone()
        .map(|d| announce_dumps(d, started, stop.clone()));
    let status = {
        let _forward = ForwardSignals::new(child.id());
        child.wait().context("waiting for the command")?
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(a) = announcer {
        let _ = a.join();
    }
    let code = exit_code(status);

    let merged = Merged::read(&counts)?;
    eprint!(
        "{}",
        merged.table(
            args.top,
            code,
            args.output.is_some() || args.flight.is_some()
        )
    );
    let recorded = match (&args.output, &args.flight) {
        (Some(out), _) => Some(record_traces(&logs, out, &args.command)?),
        (None, Some(dir)) => {
            remove_announcements(dir, &run_id);
            Some(flight_traces(dir, started, &args.command)?)
        }
        (None, None) => None,
    };
    if let Some(out) = &args.counts {
        let doc = merged.json(&args.command, code, recorded.as_deref());
        write_out(
            out,
            format!("{}\n", serde_json::to_string_pretty(&doc)?).as_bytes(),
        )?;
    }
    Ok(Exit::Relayed(code))
}

/// Where `-o TRACE` has the processes' raw call logs written: `TRACE.logs/`, each log
/// removed once its trace is written, the directory once empty.
fn logs_beside(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".logs");
    out.with_file_name(name)
}

/// Each process's call log in `logs` as a trace: the one with the most records is `out`, any
/// other `out` with `.PID` before its extension. Every trace is written, or the error says
/// which was not.
fn record_traces(logs: &Path, out: &Path, command: &[OsString]) -> Result<Vec<PathBuf>> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(logs)
        .with_context(|| format!("cannot read {}", logs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gtshm"))
        .map(|p| (std::fs::metadata(&p).map_or(0, |m| m.len()), p))
        .collect();
    if found.is_empty() {
        let _ = std::fs::remove_dir(logs);
        bail!(
            "no trace written to {}: no process of the command recorded a driver call through \
             gputape's shim",
            out.display()
        );
    }
    // The busiest first (the largest log), then by name for a stable order.
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let argv: Vec<String> = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut written = Vec::new();
    let mut sharing = false;
    for (i, (_, log)) in found.iter().enumerate() {
        let converted = crate::shimtrace::read_log(log).and_then(|bytes| {
            crate::shimtrace::convert(&log.display().to_string(), &bytes, argv.clone())
        });
        let (trace, summary) = match converted {
            Ok(c) => c,
            Err(e) => {
                // What was recorded is not lost: the raw log stays where it was written.
                return Err(anyhow!(e))
                    .with_context(|| format!("the call log is kept as {}", log.display()));
            }
        };
        let dst = if i == 0 {
            out.to_path_buf()
        } else {
            super::common::with_tag(out, &summary.pid.to_string())
        };
        let n = super::common::write_trace_atomically(&trace, &dst)?;
        // The trace holds everything the log did.
        let _ = std::fs::remove_file(log);
        eprintln!(
            "recorded {} -> {} ({n} bytes)",
            summary.text(),
            dst.display()
        );
        sharing |= !trace.shared.is_empty();
        written.push(dst);
    }
    let _ = std::fs::remove_file(logs.join(gputape_shimlog::SHARED_FDS));
    let _ = std::fs::remove_dir(logs);
    // Processes that shared memory replay together: each alone has only what it saw.
    if sharing && written.len() > 1 {
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "the processes shared device memory through IPC or shareable handles: replay them together with `gputape ranks --replay {}`",
            names.join(" ")
        );
    }
    Ok(written)
}

/// The flight dumps the command's processes wrote to `dir` (since `started`), each made a
/// trace `dir/PID.gtape` and its raw dump removed; a dump that will not convert is kept and
/// named in the error.
fn flight_traces(
    dir: &Path,
    started: std::time::SystemTime,
    command: &[OsString],
) -> Result<Vec<PathBuf>> {
    std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let dumps = new_dumps(dir, started);
    if dumps.is_empty() {
        eprintln!(
            "flight: no process of the command reported a driver fault; nothing was dumped to {}",
            dir.display()
        );
        return Ok(Vec::new());
    }
    let argv: Vec<String> = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut written = Vec::new();
    for dump in dumps {
        let (trace, summary) = crate::shimtrace::read_log(&dump)
            .and_then(|bytes| {
                crate::shimtrace::convert(&dump.display().to_string(), &bytes, argv.clone())
            })
            .map_err(|e| anyhow!(e))
            .with_context(|| format!("the flight dump is kept as {}", dump.display()))?;
        let dst = dump.with_extension("gtape");
        let n = super::common::write_trace_atomically(&trace, &dst)?;
        // The trace holds everything the dump did.
        let _ = std::fs::remove_file(&dump);
        eprintln!(
            "flight: {} -> {} ({n} bytes); replay it with `gputape replay {} --on cuda`",
            summary.text(),
            dst.display(),
            dst.display()
        );
        written.push(dst);
    }
    Ok(written)
}

/// The run's announcements of dumps (`DIR/.peers/RUN.PID`, the shim's `peers.rs`): read by
/// its processes while they ran, of no use after.
fn remove_announcements(dir: &Path, run_id: &str) {
    let peers = dir.join(gputape_shimlog::PEERS_DIR);
    let Ok(entries) = std::fs::read_dir(&peers) else {
        let _ = std::fs::remove_file(dir.join(gputape_shimlog::SHARED_FDS));
        return;
    };
    let prefix = format!("{run_id}.");
    for e in entries.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(&prefix))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    // Only when empty: another run may share the directory (and the list of shared
    // descriptors, which goes with the last run's announcements).
    if std::fs::remove_dir(&peers).is_ok() {
        let _ = std::fs::remove_file(dir.join(gputape_shimlog::SHARED_FDS));
    }
}

/// The shim: `GPUTAPE_SHIM_DIR`'s, else `gputape-shim/libcuda.so.1` beside this binary, else
/// where cargo builds it: `deps/libgputape_cuda_shim.so` beside this binary (what `cargo test`
/// last built), else `libgputape_cuda_shim.so` beside it or up to two directories above it
/// (`target/<profile>/` for a test binary in `deps/`), else the one built into this binary
/// (`embedded_shim`: what an installed binary uses).
fn find_shim() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os(ENV_SHIM_DIR) {
        let d = PathBuf::from(d);
        return ["libcuda.so.1", "libgputape_cuda_shim.so"]
            .iter()
            .map(|n| d.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| anyhow!("{ENV_SHIM_DIR}={}: holds no libcuda.so.1", d.display()));
    }
    let tried = near_binary()?;
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    if !EMBEDDED_SHIM.is_empty() {
        return embedded_shim();
    }
    bail!(
        "gputape's CUDA driver shim was not found (looked for {}): build the workspace (`cargo \
         build` makes target/<profile>/libgputape_cuda_shim.so), put it beside gputape as \
         gputape-shim/libcuda.so.1, or set {ENV_SHIM_DIR}",
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Where a shim beside this binary, or built by cargo around it, would be, in order.
fn near_binary() -> Result<Vec<PathBuf>> {
    let exe = std::env::current_exe().context("cannot tell where gputape is")?;
    let mut tried = Vec::new();
    if let Some(d) = exe.parent() {
        tried.push(d.join("gputape-shim").join("libcuda.so.1"));
        // `cargo test` builds it there and only `cargo build` copies it up: deps/ is newest.
        tried.push(d.join("deps").join("libgputape_cuda_shim.so"));
    }
    tried.extend(
        exe.ancestors()
            .skip(1)
            .take(3)
            .map(|d| d.join("libgputape_cuda_shim.so")),
    );
    Ok(tried)
}

/// Which shim `gputape run` would use, in words, without writing anything (`gputape info`).
pub(super) fn shim_status() -> String {
    if let Some(d) = std::env::var_os(ENV_SHIM_DIR) {
        return format!("from {ENV_SHIM_DIR}={}", PathBuf::from(d).display());
    }
    let found = near_binary()
        .ok()
        .and_then(|t| t.into_iter().find(|p| p.is_file()));
    match found {
        Some(p) => format!("{}", p.display()),
        None if !EMBEDDED_SHIM.is_empty() => format!(
            "built into this binary ({} KiB; written to ~/.cache/gputape on first use)",
            EMBEDDED_SHIM.len() >> 10
        ),
        None => format!("none found: `gputape run` needs {ENV_SHIM_DIR}"),
    }
}

/// The shim as this binary's build made it (`build.rs`): empty where it could not be built.
static EMBEDDED_SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libgputape_cuda_shim.so"));

/// The embedded shim as a file: `gputape/shim-HASH/libcuda.so.1` in the user's cache directory
/// (`XDG_CACHE_HOME`, else `~/.cache`), written once through a temporary name, or, where that
/// directory cannot be written or is mounted `noexec` (a library there cannot be loaded), the
/// same under the temporary directory, named by user as well.
fn embedded_shim() -> Result<PathBuf> {
    let hash = blake3::hash(EMBEDDED_SHIM).to_hex();
    let name = format!("shim-{}", &hash[..16]);
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    let tmp = std::env::temp_dir().join(format!("gputape-{uid}"));
    let mut why = Vec::new();
    for dir in cache.map(|c| c.join("gputape")).into_iter().chain([tmp]) {
        match place_shim(&dir.join(&name)) {
            Ok(p) => return Ok(p),
            Err(e) => why.push(format!("{}: {e}", dir.display())),
        }
    }
    bail!(
        "gputape's driver shim (built into this binary) could not be written where it can be loaded: {}; set {ENV_SHIM_DIR} to a directory holding libcuda.so.1",
        why.join("; ")
    )
}

/// `dir/libcuda.so.1` holding the embedded shim, written if missing or different.
fn place_shim(dir: &Path) -> Result<PathBuf> {
    let lib = dir.join("libcuda.so.1");
    if std::fs::metadata(&lib).is_ok_and(|m| m.len() == EMBEDDED_SHIM.len() as u64) {
        return Ok(lib);
    }
    std::fs::create_dir_all(dir).context("cannot create it")?;
    if noexec(dir) {
        bail!("mounted noexec");
    }
    let tmp = dir.join(format!(".libcuda.so.1.{}", std::process::id()));
    std::fs::write(&tmp, EMBEDDED_SHIM)
        .and_then(|()| std::fs::rename(&tmp, &lib))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow!("cannot write the shim: {e}")
        })?;
    Ok(lib)
}

/// Whether `dir`'s file system refuses to map files executable (`noexec`).
fn noexec(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a zeroed struct statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the struct outlives the call.
    unsafe { libc::statvfs(c.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_NOEXEC != 0 }
}

/// A temporary directory with `libcuda.so.1` and `libcuda.so` linking to the shim, and the
/// processes' counts; removed when the run is over.
struct ShimDir {
    path: PathBuf,
}

impl ShimDir {
    fn new(shim: &Path) -> Result<ShimDir> {
        static N: AtomicU32 = AtomicU32::new(0);
        let shim = shim
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", shim.display()))?;
        let path = std::env::temp_dir().join(format!(
            "gputape-run-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let dir = ShimDir { path };
        for name in ["libcuda.so.1", "libcuda.so"] {
            std::os::unix::fs::symlink(&shim, dir.path.join(name))
                .with_context(|| format!("cannot link {name} to {}", shim.display()))?;
        }
        Ok(dir)
    }
}

impl Drop for ShimDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `first` then the variable's current value, `:`-separated.
fn prepend(first: &Path, var: &str) -> OsString {
    let mut v = first.as_os_str().to_owned();
    if let Some(old) = std::env::var_os(var).filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// The command's status as a shell gives it: its exit code, or 128 + the signal that ended it.
fn exit_code(s: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        (None, None) => 1,
    }
}

/// The command's pid, for the signal forwarder (0: none running).
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// What gputape does with a signal meant for the command while it runs: SIGINT, SIGQUIT,
/// SIGTERM and SIGHUP sent to gputape (by `kill`, a job scheduler, a supervisor) are passed
/// to the command, and gputape stays to convert what the command's processes logged or
/// dumped and to exit with the command's status. One the terminal raised (Ctrl-C, Ctrl-\)
/// went to the whole process group, the command included, and is not sent twice.
/// Restored on drop.
struct ForwardSignals(Vec<(libc::c_int, libc::sigaction)>);

const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // SI_KERNEL and the tty's codes are positive; kill(2) and sigqueue(3) give <= 0.
    if code > 0 {
        return;
    }
    let pid = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; `pid` is the command, still ours to signal.
        unsafe { libc::kill(pid, sig) };
    }
}

impl ForwardSignals {
    fn new(child: u32) -> Self {
        CHILD.store(child as i32, std::sync::atomic::Ordering::Relaxed);
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: a zeroed sigaction is a valid start; the handler only calls kill, which
            // is async-signal-safe; the previous action is kept and put back by drop.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = forward as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        ForwardSignals(old)
    }
}

impl Drop for ForwardSignals {
    fn drop(&mut self) {
        for (sig, prev) in &self.0 {
            // SAFETY: restoring the action `new` replaced.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
        CHILD.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// While the command runs: each flight dump its processes write to `dir` named on gputape's
/// own stderr as it appears (a program's stderr is often redirected), until `stop`.
fn announce_dumps(
    dir: PathBuf,
    since: std::time::SystemTime,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut seen = std::collections::BTreeSet::new();
        loop {
            let done = stop.load(std::sync::atomic::Ordering::Relaxed);
            for p in new_dumps(&dir, since) {
                if seen.insert(p.clone()) {
                    eprintln!(
                        "gputape run: flight dump written: {} (it opens as it is: gputape show {})",
                        p.display(),
                        p.display()
                    );
                }
            }
            if done {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    })
}

/// The raw flight dumps in `dir` written since `since` (a second's slack for coarse clocks).
fn new_dumps(dir: &Path, since: std::time::SystemTime) -> Vec<PathBuf> {
    let since = since - std::time::Duration::from_secs(1);
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gtshm"))
        .filter(|p| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        })
        .collect();
    v.sort();
    v
}

/// The counts of every process of the command, summed.
#[derive(Default)]
struct Merged {
    pids: Vec<u64>,
    drivers: Vec<String>,
    calls: BTreeMap<String, u64>,
    export_tables: BTreeMap<String, u64>,
    unmapped: BTreeMap<String, u64>,
    /// Entry points a recording logs with their arguments (the shim's own hooks).
    recorded: std::collections::BTreeSet<String>,
    /// Entry points a recording logs by name only.
    opaque: std::collections::BTreeSet<String>,
}

impl Merged {
    /// The shim's lines (one JSON object per process); a missing file is no process.
    fn read(p: &Path) -> Result<Merged> {
        let mut m = Merged::default();
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(m),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                eprintln!("gputape run: a process's counts were cut short; left out");
                continue;
            };
            m.pids.extend(v["pid"].as_u64());
            if let Some(d) = v["driver"].as_str() {
                if !m.drivers.iter().any(|x| x == d) {
                    m.drivers.push(d.to_string());
                }
            }
            for (key, into) in [("recorded", &mut m.recorded), ("opaque", &mut m.opaque)] {
                for n in v[key].as_array().into_iter().flatten() {
                    into.extend(n.as_str().map(str::to_string));
                }
            }
            for (key, into) in [
                ("calls", &mut m.calls),
                ("export_tables", &mut m.export_tables),
                ("unmapped_proc_addresses", &mut m.unmapped),
            ] {
                for (k, n) in v[key].as_object().into_iter().flatten() {
                    *into.entry(k.clone()).or_default() += n.as_u64().unwrap_or(0);
                }
            }
        }
        Ok(m)
    }

    /// What `gputape run` prints when the command is over.
    fn table(&self, top: usize, code: u8, recording: bool) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let total: u64 = self.calls.values().sum();
        let driver = if self.drivers.is_empty() {
            "not forwarded: the shim loaded no driver (each returned CUDA_ERROR_NO_DEVICE)".into()
        } else {
            format!("forwarded to {}", self.drivers.join(", "))
        };
        let _ = writeln!(s);
        if self.pids.is_empty() {
            let _ = writeln!(
                s,
                "gputape run: the command exited with status {code}; no process of it called the \
                 CUDA driver through gputape's shim (a program that never loads libcuda.so.1, or \
                 loads it by a full path, is not seen)."
            );
            return s;
        }
        let _ = writeln!(
            s,
            "gputape run: the command exited with status {code}; {} to {} in {}, counted and \
             {driver}.",
            crate::shimtrace::count(total as usize, "CUDA driver call", "s"),
            crate::shimtrace::count(self.calls.len(), "entry point", "s"),
            crate::shimtrace::count(self.pids.len(), "process", "es"),
        );
        if !recording {
            let _ = writeln!(
                s,
                "No trace was recorded (`-o TRACE` records one; `--flight DIR` keeps recent calls \
                 and writes a dump at a fault)."
            );
        }
        let mut rows: Vec<(&String, &u64)> = self.calls.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        if recording {
            let _ = writeln!(s, "\n{:>12}  {:<10} entry point", "calls", "recorded");
        } else {
            let _ = writeln!(s, "\n{:>12}  entry point", "calls");
        }
        for (name, n) in rows.iter().take(top) {
            if recording {
                let _ = writeln!(s, "{n:>12}  {:<10} {name}", self.kind(name));
            } else {
                let _ = writeln!(s, "{n:>12}  {name}");
            }
        }
        if rows.len() > top {
            let rest: u64 = rows[top..].iter().map(|r| *r.1).sum();
            let _ = writeln!(s, "{:>12}  ({} more entry points)", rest, rows.len() - top);
        }
        if !self.export_tables.is_empty() {
            let _ = writeln!(
                s,
                "\nexport tables fetched (cuGetExportTable; what is done through them is not \
                 seen or counted here):\n{:>12}  uuid",
                "fetches"
            );
            for (uuid, n) in &self.export_tables {
                let _ = writeln!(s, "{n:>12}  {uuid}");
            }
        }
        if !self.unmapped.is_empty() {
            let _ = writeln!(
                s,
                "\ncuGetProcAddress answers that are no exported entry point (handed out \
                 unchanged: calls through them are not counted):\n{:>12}  symbol",
                "answers"
            );
            for (sym, n) in &self.unmapped {
                let _ = writeln!(s, "{n:>12}  {sym}");
            }
        }
        s
    }

    /// How a recording took an entry point's calls: `yes` (with arguments), `by name`
    /// (opaque), `no` (forwarded and counted only).
    fn kind(&self, name: &str) -> &'static str {
        if self.recorded.contains(name) {
            "yes"
        } else if self.opaque.contains(name) {
            "by name"
        } else {
            "no"
        }
    }

    /// `--counts`' document.
    fn json(
        &self,
        command: &[OsString],
        code: u8,
        traces: Option<&[PathBuf]>,
    ) -> serde_json::Value {
        serde_json::json!({
            "schema": "gputape.shim-counts.v1",
            "command": command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "exit_status": code,
            "recorded": traces.is_some(),
            "traces": traces.unwrap_or(&[]),
            "processes": self.pids,
            "drivers": self.drivers,
            "calls": self.calls,
            "export_tables": self.export_tables,
            "unmapped_proc_addresses": self.unmapped,
            "entry_points_recorded": self.recorded,
            "entry_points_by_name": self.opaque,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::locate::parse_ldconfig;
    use std::path::PathBuf;

    #[test]
    fn the_ldconfig_cache_gives_its_x86_64_libcuda() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
                    \tlibcudart.so.12 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudart.so.12\n\
                    \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
                    \tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n\
                    \tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n";
        assert_eq!(
            parse_ldconfig(text),
            vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")]
        );
    }
}
