//! A replay under NVIDIA's compute-sanitizer (`replay --sanitize TOOL`): the tool found, the
//! child replay's command wrapped in it, and its report read back into findings. Under the
//! sanitizer the driver returns other codes than the recording saw (memcheck stops a faulting
//! kernel with `CUDA_ERROR_LAUNCH_FAILED` where the recording had an illegal address), so a
//! fault counts as reproduced when the sanitizer names a launch of the recorded fault's window,
//! whatever the driver said.

use crate::trace::{Arg, BufferId, Call, DevAddr, Trace, Value};
use std::path::{Path, PathBuf};

/// The tools a replay runs under.
pub const TOOLS: [&str; 4] = ["memcheck", "racecheck", "initcheck", "synccheck"];

/// compute-sanitizer: `COMPUTE_SANITIZER`, else on `PATH`, else beside the CUDA toolkit
/// (`CUDA_HOME`, `/usr/local/cuda`). `None` when there is none.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("COMPUTE_SANITIZER").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let toolkit = [
        std::env::var_os("CUDA_HOME").map(PathBuf::from),
        Some(PathBuf::from("/usr/local/cuda")),
    ];
    on_path
        .into_iter()
        .chain(toolkit.into_iter().flatten().map(|d| d.join("bin")))
        .map(|d| d.join("compute-sanitizer"))
        .find(|p| p.is_file())
}

/// The arguments that put a command under `tool`, its report written to `log`.
pub fn wrap_args(tool: &str, log: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "--tool".into(),
        tool.into(),
        "--target-processes".into(),
        "all".into(),
        "--print-limit".into(),
        "64".into(),
    ];
    v.push("--log-file".into());
    v.push(log.as_os_str().to_owned());
    v
}

/// One finding of a report, as the tool wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// Its first line: "Invalid __global__ read of size 4 bytes", "Race reported between ...",
    /// "Program hit CUDA_ERROR_... on CUDA API call to ...".
    pub what: String,
    /// The kernel it was in.
    pub kernel: Option<String>,
    /// The offset into the kernel's code ("0x110").
    pub offset: Option<String>,
    /// `file:line`, where the kernel has line information.
    pub source: Option<String>,
    /// The thread that made it, "(116,0,0)".
    pub thread: Option<String>,
    /// Its block, "(3,0,0)".
    pub block: Option<String>,
    /// Its other lines (the address, how far from the nearest allocation), host frames left
    /// out.
    pub detail: Vec<String>,
    /// The device address it names ("Access to 0x... is out of bounds", "Address 0x...").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    /// That address as the trace names it: inside or nearest below which of the trace's
    /// buffers, and where the program allocated it (`name_addresses`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer: Option<String>,
}

impl Finding {
    /// A finding in a kernel (not a host API call's error, which follows from one).
    pub fn in_kernel(&self) -> bool {
        self.kernel.is_some() && !self.what.starts_with("Program hit")
    }

    /// An error the replay itself made on purpose: it asks each kernel's parameter layout
    /// until the driver says there is no parameter more (`CUDA_ERROR_INVALID_VALUE` from
    /// `cuFuncGetParamInfo`), which the tool reports like any failed call.
    pub fn own_probe(&self) -> bool {
        self.what.starts_with("Program hit") && self.what.ends_with("cuFuncGetParamInfo.")
    }

    /// One line for a person.
    pub fn line(&self) -> String {
        let mut s = self.what.clone();
        if let Some(k) = &self.kernel {
            s.push_str(&format!(" in {k}"));
            if let Some(o) = &self.offset {
                s.push_str(&format!("+{o}"));
            }
        }
        if let Some(src) = &self.source {
            s.push_str(&format!(" at {src}"));
        }
        if let (Some(t), Some(b)) = (&self.thread, &self.block) {
            s.push_str(&format!(", thread {t} of block {b}"));
        }
        for d in &self.detail {
            s.push_str(&format!("; {d}"));
        }
        if let Some(b) = &self.buffer {
            s.push_str(&format!("; the address is {b}"));
        }
        s
    }
}

/// "KERNEL+0xOFF in FILE:LINE" (the `in` part only with line information) as kernel, offset
/// and source.
fn code_location(rest: &str) -> (String, Option<String>, Option<String>) {
    let (code, src) = match rest.rsplit_once(" in ") {
        Some((c, s)) => (c, Some(s.trim().to_string())),
        None => (rest, None),
    };
    match code.rsplit_once('+') {
        Some((k, o)) if o.starts_with("0x") => (k.to_string(), Some(o.to_string()), src),
        _ => (code.to_string(), None, src),
    }
}

/// The first `0x...` word of `text` that follows "Access to " or "Address ".
fn address_in(text: &str) -> Option<u64> {
    let at = ["Access to 0x", "Address 0x", "address 0x"]
        .iter()
        .find_map(|p| text.find(p).map(|i| i + p.len()))?;
    let hex: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u64::from_str_radix(&hex, 16).ok()
}

/// The findings of a compute-sanitizer report (its `--log-file`, or its output), in order.
/// Lines are `========= ` and a finding's first line, then its indented lines; the banner, the
/// error summary, the program's exit and host backtraces are not findings.
pub fn parse(report: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let mut in_frames = false;
    for raw in report.lines() {
        let Some(body) = raw.strip_prefix("=========") else {
            continue;
        };
        if body.trim().is_empty() {
            in_frames = false;
            continue;
        }
        let indented = body.starts_with("     ");
        let text = body.trim();
        if !indented {
            in_frames = false;
            // A tool's tallies ("ERROR SUMMARY: ...", racecheck's "RACECHECK SUMMARY: 3
            // hazards displayed ...") are not findings.
            let tally = text
                .split_once(" SUMMARY:")
                .is_some_and(|(h, _)| h.chars().all(|c| c.is_ascii_uppercase() || c == ' '));
            if tally
                || text.starts_with("COMPUTE-SANITIZER")
                || text.starts_with("Target application returned")
            {
                continue;
            }
            out.push(Finding {
                what: text.trim_start_matches("Error: ").to_string(),
                ..Finding::default()
            });
            continue;
        }
        let Some(f) = out.last_mut() else { continue };
        if text.starts_with("Saved host backtrace") || text.starts_with("Host Frame") {
            in_frames = true;
            continue;
        }
        if in_frames {
            continue;
        }
        if let Some(rest) = text.strip_prefix("at ").filter(|_| f.kernel.is_none()) {
            let (k, off, src) = code_location(rest);
            f.kernel = Some(k);
            f.offset = off;
            f.source = src;
        } else if let Some(rest) = text.strip_prefix("by thread ") {
            let (t, b) = rest.split_once(" in block ").unwrap_or((rest, ""));
            f.thread = Some(t.to_string());
            f.block = (!b.is_empty()).then(|| b.to_string());
        } else {
            f.address = f.address.or_else(|| address_in(text));
            f.detail.push(text.to_string());
        }
    }
    for f in &mut out {
        // racecheck names both accesses on the finding's own lines: "Race reported between
        // Write access at KERNEL+0xOFF in FILE:LINE", then "and Read access at ...".
        if f.kernel.is_none() {
            if let Some((head, rest)) = f.what.split_once(" access at ") {
                let (k, off, src) = code_location(rest);
                f.what = format!("{head} access");
                f.kernel = Some(k);
                f.offset = off;
                f.source = src;
            }
        }
    }
    out
}

/// The kernel a finding names (compute-sanitizer writes a C++ kernel demangled, with its
/// parameter types: "scale(float *, int)"; Triton's as its symbol) without its parameters.
fn finding_kernel(k: &str) -> &str {
    match k.find('(') {
        Some(i) if i > 0 => k[..i].trim_end(),
        _ => k,
    }
}

/// Whether the trace's kernel `name` (a module-qualified symbol, mangled for C++) is the
/// kernel a finding names.
pub fn same_kernel(name: &str, finding: &str) -> bool {
    let k = finding_kernel(finding);
    if k.is_empty() {
        return false;
    }
    let symbol = name.rsplit_once("::").map_or(name, |(_, s)| s);
    let demangled = crate::trace::demangle::full(symbol);
    let hit = [Some(name), Some(symbol), demangled.as_deref()]
        .into_iter()
        .flatten()
        .any(|n| n == k || n.ends_with(&format!("::{k}")) || n.contains(k));
    hit
}

/// Each finding's address named as the trace names it, from where the replay placed each
/// buffer (`placed`: buffer, replay address, bytes, in the order placed, so a later buffer at
/// a reused address wins).
pub fn name_addresses(t: &Trace, placed: &[(BufferId, u64, u64)], findings: &mut [Finding]) {
    if findings.iter().all(|f| f.address.is_none()) {
        return;
    }
    let raws = raw_pointers(t);
    for f in findings {
        f.buffer = f.address.and_then(|a| name_address(t, placed, &raws, a));
    }
}

fn name_address(
    t: &Trace,
    placed: &[(BufferId, u64, u64)],
    raws: &[u64],
    a: u64,
) -> Option<String> {
    let inside = placed
        .iter()
        .rev()
        .find(|(_, p, n)| a >= *p && a - *p < (*n).max(1));
    let below = placed
        .iter()
        .filter(|(_, p, _)| *p <= a)
        .max_by_key(|(_, p, _)| *p);
    // An address the recording passed as it was, in no buffer (a freed one, or memory the
    // recording never saw allocated), reaches the replay unchanged: the fault is there, not
    // past whichever buffer the replay happened to place below it.
    // The greatest such value at or below `a`, within 1 GiB of it.
    let raw = raws[..raws.partition_point(|v| *v <= a)]
        .last()
        .copied()
        .filter(|v| a - v < 1 << 30);
    let (buf, bytes, what) = match (inside, below) {
        (Some(&(b, p, n)), _) => (b, n, format!("{b}+{:#x}", a - p)),
        (None, Some(&(b, p, n))) if raw.is_none_or(|v| a - p - n < a - v) => {
            (b, n, format!("{} bytes past the end of {b}", a - p - n))
        }
        _ => {
            let v = raw?;
            return Some(format!(
                "{v:#x}+{:#x}: an address the recording passed as it was, in none of its \
                 buffers when recorded (freed before the launch, or allocated where gputape \
                 did not see it), so no buffer of the replay holds it",
                a - v
            ));
        }
    };
    let mut s = format!("{what} ({bytes} bytes");
    if let Some(c) = t.calls.iter().find(|c| {
        matches!(&c.call, Call::Alloc { .. } | Call::AllocManaged { .. })
            && matches!(&c.ret, Some(Ok(Value::Buffer(id))) if *id == buf)
    }) {
        s.push_str(&format!(
            ", allocated by call #{} at {}",
            c.seq,
            t.site(c.site)
        ));
    }
    if let Some(c) = t
        .calls
        .iter()
        .find(|c| matches!(&c.call, Call::Free { ptr: DevAddr::Buf { buf: b, .. } } if *b == buf))
    {
        s.push_str(&format!(", freed by call #{}", c.seq));
    }
    s.push(')');
    Some(s)
}

/// The pointer-like values (at or above 4 GiB) the launches of `t` passed as plain values, in
/// no buffer when recorded: sorted, each once.
fn raw_pointers(t: &Trace) -> Vec<u64> {
    let mut v: Vec<u64> = t
        .calls
        .iter()
        .filter_map(|c| c.call.launch())
        .flat_map(|(_, args)| args.iter())
        .filter_map(|arg| match arg {
            Arg::Val(b) if b.len() == 8 => Some(u64::from_le_bytes(b[..].try_into().ok()?)),
            _ => None,
        })
        .filter(|v| *v >= 1 << 32)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// What a replay under compute-sanitizer comes to (`judge`).
pub struct ToolVerdict {
    /// The lines a person reads: the findings, then the verdict.
    pub text: String,
    /// Whether the replay passed, where the tool decides it (`None`: the replay's own verdict
    /// stands).
    pub passed: Option<bool>,
    /// The call the tool stopped (a launch failure the recording did not have), if that is all
    /// the replay's divergence was.
    pub stopped_by_tool: Option<u64>,
    /// The tool, its findings and whether they show the recorded fault, for `--json`.
    pub json: serde_json::Value,
}

/// The verdict of a replay of `t` under `tool`: its `report` (the tool's log) read, the
/// findings' addresses named from where the replay placed each buffer (`placed`: buffer,
/// address, size), and held against what `t` recorded or `minimize --sanitize` kept, and
/// against `replay` (the replay's JSON report: where it diverged). A finding in the recorded
/// fault's window, or the one kept, reproduces it; a kept one not found does not; a launch
/// failure the tool caused at a finding is the finding, not a divergence.
pub fn judge(
    t: &Trace,
    tool: &str,
    report: &str,
    placed: &[(BufferId, u64, u64)],
    replay: &serde_json::Value,
) -> ToolVerdict {
    let mut findings = parse(report);
    name_addresses(t, placed, &mut findings);
    let shown = reproduces(t, &findings);
    let listed = for_report(&findings);
    let mut text = format!("compute-sanitizer {tool}: {} finding(s)\n", listed.len());
    for f in listed.iter().take(8) {
        text.push_str(&format!("  {}\n", f.line()));
    }
    let kernel = |f: &Finding| f.kernel.clone().unwrap_or_default();
    let (mut passed, mut stopped) = (None, None);
    match (shown, kept(t)) {
        (Some(f), Some(_)) => {
            text.push_str(&format!(
                "-> finding REPRODUCED under {tool}: {} in {}, as minimize kept it\n",
                f.what,
                kernel(f)
            ));
            passed = Some(true);
        }
        (Some(f), None) => {
            text.push_str(&format!(
                "-> fault REPRODUCED under {tool}: {} names {} in the recorded fault's window (the driver's own code under the tool may differ from the recording's)\n",
                f.what,
                kernel(f)
            ));
            passed = Some(true);
        }
        (None, Some((what, k))) => {
            text.push_str(&format!(
                "-> NOT REPRODUCED: the trace keeps {what} in {k} (compute-sanitizer {}), and {tool} did not find it\n",
                kept_tool(t).unwrap_or_default()
            ));
            passed = Some(false);
        }
        (None, None) => {
            if let Some((seq, f)) = stopped_by_tool(replay, &listed) {
                text.push_str(&format!(
                    "-> found under {tool}: {} in {}{}; the recording saw no error there (a bug the driver reports only under the tool): the replay's CUDA_ERROR_LAUNCH_FAILED at call #{seq} is the tool stopping that kernel, not a divergence\n",
                    f.what,
                    kernel(f),
                    f.source.as_deref().map(|s| format!(" at {s}")).unwrap_or_default(),
                ));
                passed = Some(true);
                stopped = Some(seq);
            }
        }
    }
    ToolVerdict {
        text,
        passed,
        stopped_by_tool: stopped,
        json: serde_json::json!({
            "tool": tool,
            "findings": listed,
            "reproduced": shown.is_some(),
        }),
    }
}

/// The findings a person reads: those in kernels first, then the failed calls that followed,
/// the replay's own layout probes left out.
pub fn for_report(findings: &[Finding]) -> Vec<&Finding> {
    let (kernel, host): (Vec<&Finding>, Vec<&Finding>) = findings
        .iter()
        .filter(|f| !f.own_probe())
        .partition(|f| f.in_kernel());
    kernel.into_iter().chain(host).collect()
}

/// Whether `findings` show the fault `t` recorded: the finding `minimize --sanitize` kept
/// (`Finding::Sanitizer`: the same first line in the same kernel), else a kernel finding in a
/// launch of one of its fault windows. The first such finding.
pub fn reproduces<'f>(t: &Trace, findings: &'f [Finding]) -> Option<&'f Finding> {
    if let Some((what, kernel)) = kept(t) {
        return findings.iter().filter(|f| f.in_kernel()).find(|f| {
            f.what == what
                && f.kernel.as_deref().map(finding_kernel) == Some(finding_kernel(kernel))
        });
    }
    let windows = crate::analysis::window::fault_windows(t);
    let in_windows: Vec<String> = t
        .calls
        .iter()
        .filter(|c| windows.iter().any(|w| w.contains(c.seq)))
        .filter_map(|c| c.call.launch().map(|(k, _)| t.kernel_name(k)))
        .collect();
    // A device-side assert stops in `__assertfail`, the function every `assert` calls, which
    // the tool names instead of the kernel (compiled without line information, as PyTorch's
    // are, it has no frame of its own): for a recorded assert it is the fault itself.
    let assert_recorded = windows.iter().any(|w| w.code == Some(CUDA_ERROR_ASSERT));
    findings.iter().filter(|f| f.in_kernel()).find(|f| {
        let k = f.kernel.as_deref().unwrap_or_default();
        (assert_recorded && k == "__assertfail" && !in_windows.is_empty())
            || in_windows.iter().any(|name| same_kernel(name, k))
    })
}

/// `CUDA_ERROR_ASSERT`: a device-side `assert` failed.
const CUDA_ERROR_ASSERT: u32 = 710;

/// `CUDA_ERROR_LAUNCH_FAILED`: what the driver reports for a kernel the tool stopped.
const CUDA_ERROR_LAUNCH_FAILED: u64 = 719;

/// Where a replay under the tool failed only because the tool stopped a kernel at a finding
/// (memcheck and synccheck abort the kernel, and the driver then reports
/// `CUDA_ERROR_LAUNCH_FAILED`) at a call the recording saw succeed: that call's seq and the
/// first kernel finding, from the replay's report (`report`, its JSON) and the tool's
/// `findings`. `None` when the replay diverged otherwise, or the tool found nothing in a kernel.
pub fn stopped_by_tool<'f>(
    report: &serde_json::Value,
    findings: &[&'f Finding],
) -> Option<(u64, &'f Finding)> {
    let finding = findings.iter().copied().find(|f| f.in_kernel())?;
    let faults = report["faults"].as_array()?;
    let only = match faults.as_slice() {
        [f] => f,
        _ => return None,
    };
    let stopped = only["recorded_code"].is_null()
        && only["replayed_code"].as_u64() == Some(CUDA_ERROR_LAUNCH_FAILED);
    stopped.then(|| (only["seq"].as_u64().unwrap_or_default(), finding))
}

/// The finding a minimized trace keeps (`Finding::Sanitizer`): its first line and kernel.
pub fn kept(t: &Trace) -> Option<(&str, &str)> {
    t.findings.iter().find_map(|f| match f {
        crate::trace::Finding::Sanitizer { what, kernel, .. } => {
            Some((what.as_str(), kernel.as_str()))
        }
        _ => None,
    })
}

/// The launch a minimized trace's kept finding was found in.
pub fn kept_launch(t: &Trace) -> Option<u64> {
    t.findings.iter().find_map(|f| match f {
        crate::trace::Finding::Sanitizer { seq, .. } => Some(*seq),
        _ => None,
    })
}

/// The tool a minimized trace's kept finding came from.
pub fn kept_tool(t: &Trace) -> Option<&str> {
    t.findings.iter().find_map(|f| match f {
        crate::trace::Finding::Sanitizer { tool, .. } => Some(tool.as_str()),
        _ => None,
    })
}

/// The last launch of `t` that ran the kernel a finding names: a minimized trace ends there
/// (the tool says which kernel, not which of its launches).
pub fn last_launch_of(t: &Trace, kernel: &str) -> Option<u64> {
    t.calls
        .iter()
        .rev()
        .find(|c| {
            c.call
                .launch()
                .is_some_and(|(k, _)| same_kernel(&t.kernel_name(k), kernel))
        })
        .map(|c| c.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memcheck report in compute-sanitizer's shape: the finding's lines are the ones issue
    /// 54 quotes from the H200 (a Triton kernel reading past its input), the rest composed
    /// after the tool's documented format.
    const MEMCHECK: &str = "\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at gather_scaled+0x110 in triton_ima.py:9
=========     by thread (116,0,0) in block (3,0,0)
=========     Address 0x7fb6eac00800 is out of bounds
=========     and is 1536 bytes after the nearest allocation at 0x7fb6eac00000 of size 512 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x2e5c5f] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to \"unspecified launch failure\" on CUDA API call to cuStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
========= ERROR SUMMARY: 2 errors
";

    #[test]
    fn a_memcheck_report_reads_as_its_findings() {
        let f = parse(MEMCHECK);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!(f[0].what, "Invalid __global__ read of size 4 bytes");
        assert_eq!(f[0].kernel.as_deref(), Some("gather_scaled"));
        assert_eq!(f[0].offset.as_deref(), Some("0x110"));
        assert_eq!(f[0].source.as_deref(), Some("triton_ima.py:9"));
        assert_eq!(f[0].thread.as_deref(), Some("(116,0,0)"));
        assert_eq!(f[0].block.as_deref(), Some("(3,0,0)"));
        assert_eq!(
            f[0].detail.len(),
            2,
            "host frames left out: {:?}",
            f[0].detail
        );
        assert!(f[0].in_kernel());
        assert!(f[1]
            .what
            .starts_with("Program hit CUDA_ERROR_LAUNCH_FAILED"));
        assert!(!f[1].in_kernel());
        assert!(f[0]
            .line()
            .contains("gather_scaled+0x110 at triton_ima.py:9"));
    }

    /// The report compute-sanitizer 2025.3.1 wrote on the H200 (run 116) for `gputape replay
    /// --on cuda` of a minimized Triton out-of-bounds read: the replay's own layout probe, the
    /// read with its Triton source line, then the failed calls that followed.
    #[test]
    fn the_h200_s_memcheck_report_reads_as_its_findings() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/memcheck-triton-oob.log"
        ))
        .unwrap();
        let all = parse(&text);
        // The probe, the read, and the 11 calls that failed after it.
        assert_eq!(all.len(), 13, "{all:#?}");
        assert!(all[0].own_probe());
        let shown = for_report(&all);
        assert_eq!(shown.len(), 12);
        let read = shown[0];
        assert_eq!(read.what, "Invalid __global__ read of size 4 bytes");
        assert_eq!(read.kernel.as_deref(), Some("gather_scaled"));
        assert_eq!(read.offset.as_deref(), Some("0x110"));
        assert_eq!(read.source.as_deref(), Some("gpu-triton-oob.py:17"));
        assert_eq!(read.thread.as_deref(), Some("(7,0,0)"));
        assert_eq!(read.block.as_deref(), Some("(0,0,0)"));
        assert_eq!(read.detail.len(), 2, "{:?}", read.detail);
        assert!(read.detail[1].contains("bytes after the nearest allocation"));
        assert!(shown[1..].iter().all(|f| !f.in_kernel()));
    }

    /// A finding counts for the recorded fault only in a launch of the fault's window.
    #[test]
    fn a_finding_reproduces_the_fault_only_in_its_window() {
        let t = Trace::open(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/traces/mock_tiny_fault_step4.gtape"
        )))
        .unwrap();
        let finding = |kernel: &str| Finding {
            what: "Invalid __global__ write of size 4 bytes".into(),
            kernel: Some(kernel.into()),
            ..Finding::default()
        };
        let hit = [finding("silu_mul")];
        assert!(reproduces(&t, &hit).is_some());
        let elsewhere = [finding("no_such_kernel")];
        assert!(reproduces(&t, &elsewhere).is_none());
        let host_only = [Finding {
            what: "Program hit CUDA_ERROR_LAUNCH_FAILED (error 719)".into(),
            ..Finding::default()
        }];
        assert!(reproduces(&t, &host_only).is_none());
    }

    /// memcheck names a device-side assert's `__assertfail`, not the kernel that asserted
    /// (PyTorch's `indexSelectSmallIndex`, an H100's report, compute-sanitizer 2025.3.1): it
    /// reproduces a recorded assert, and no other fault.
    #[test]
    fn a_warp_assert_reproduces_a_recorded_assert_only() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/memcheck-assert.log"
        ));
        let f = parse(r);
        assert_eq!(f.len(), 2, "{f:#?}");
        assert_eq!(f[0].what, "Warp assert");
        assert_eq!(f[0].kernel.as_deref(), Some("__assertfail"));
        let open = |name: &str| {
            Trace::open(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
        };
        let asserted = open("traces/python/h200_py_eager_assert.gtape");
        assert!(reproduces(&asserted, &f).is_some());
        let illegal_address = open("traces/mock_tiny_fault_step4.gtape");
        assert!(reproduces(&illegal_address, &f).is_none());
    }

    /// synccheck's report of a barrier only some threads reach (`scripts/cuda/divergent_sync.cu`
    /// on an H100, compute-sanitizer 2025.3.1): the kernel, its line and each thread.
    #[test]
    fn a_synccheck_report_names_the_barrier_s_kernel_and_line() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/synccheck-divergent.log"
        ));
        let f = parse(r);
        assert_eq!(f.len(), 2, "{f:#?}");
        for (i, x) in f.iter().enumerate() {
            assert_eq!(
                x.what,
                "Barrier error detected. Divergent thread(s) in warp."
            );
            assert_eq!(x.kernel.as_deref(), Some("half_barrier(float *)"));
            assert_eq!(x.offset.as_deref(), Some("0xe0"));
            assert_eq!(x.source.as_deref(), Some("divergent_sync.cu:11"));
            assert_eq!(x.thread.as_deref(), Some(format!("({i},0,0)").as_str()));
            assert!(x.in_kernel());
        }
    }

    /// Under synccheck the barrier bug aborts its kernel and the next sync fails with
    /// CUDA_ERROR_LAUNCH_FAILED where the recording saw success: the tool's doing, not a
    /// divergence. A recorded error, or no kernel finding, is not explained so.
    #[test]
    fn a_launch_failure_the_tool_caused_is_told_from_a_divergence() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/synccheck-divergent.log"
        ));
        let found = parse(r);
        let listed: Vec<&Finding> = found.iter().collect();
        let report = |recorded: serde_json::Value, replayed: u64| serde_json::json!({"faults": [{"seq": 5, "recorded_code": recorded, "replayed_code": replayed}]});
        let (seq, f) = stopped_by_tool(&report(serde_json::Value::Null, 719), &listed).unwrap();
        assert_eq!(seq, 5);
        assert_eq!(f.kernel.as_deref(), Some("half_barrier(float *)"));
        assert!(stopped_by_tool(&report(700.into(), 719), &listed).is_none());
        assert!(stopped_by_tool(&report(serde_json::Value::Null, 700), &listed).is_none());
        assert!(stopped_by_tool(&report(serde_json::Value::Null, 719), &[]).is_none());
    }

    /// The verdict of a replay under the tool: the recorded assert's report passes the replay
    /// of the trace that recorded it and says so; the same report against another fault's
    /// trace decides nothing (the replay's own verdict stands); a clean report lists none.
    #[test]
    fn a_tool_s_verdict_follows_what_the_trace_recorded() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/memcheck-assert.log"
        ));
        let open = |name: &str| {
            Trace::open(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
        };
        let replay = serde_json::json!({"faults": []});
        let asserted = open("traces/python/h200_py_eager_assert.gtape");
        let v = judge(&asserted, "memcheck", r, &[], &replay);
        assert_eq!(v.passed, Some(true), "{}", v.text);
        assert!(
            v.text
                .starts_with("compute-sanitizer memcheck: 2 finding(s)\n"),
            "{}",
            v.text
        );
        assert!(
            v.text
                .contains("-> fault REPRODUCED under memcheck: Warp assert names __assertfail"),
            "{}",
            v.text
        );
        assert_eq!(v.json["reproduced"], true);
        let other = open("traces/mock_tiny_fault_step4.gtape");
        let v = judge(&other, "memcheck", r, &[], &replay);
        assert_eq!((v.passed, v.stopped_by_tool), (None, None), "{}", v.text);
        assert_eq!(v.json["reproduced"], false);
        let v = judge(&other, "memcheck", "", &[], &replay);
        assert_eq!(v.text, "compute-sanitizer memcheck: 0 finding(s)\n");
    }

    #[test]
    fn a_clean_report_has_no_findings() {
        let clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        assert!(parse(clean).is_empty());
        assert!(parse("").is_empty());
    }

    /// racecheck's analysis report names both accesses on the finding's own lines: the report
    /// of `scripts/cuda/race.cu` on an H100 (compute-sanitizer 2025.3.1), three launches.
    #[test]
    fn a_race_report_names_its_kernel_and_both_lines() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/racecheck-race.log"
        ));
        let f = parse(r);
        assert_eq!(f.len(), 3, "{f:#?}");
        let kernel = "neighbor_sum(const float *, float *, int)";
        for x in &f {
            assert_eq!(x.what, "Race reported between Write access");
            assert_eq!(x.kernel.as_deref(), Some(kernel));
            assert_eq!(x.offset.as_deref(), Some("0xf0"));
            assert_eq!(x.source.as_deref(), Some("race.cu:15"));
            assert!(x.detail[0].contains("Read access"), "{:?}", x.detail);
            assert!(x.detail[0].contains("race.cu:17"), "{:?}", x.detail);
            assert!(x.in_kernel());
        }
        assert!(same_kernel("race::_Z12neighbor_sumPKfPfi", kernel));
        assert!(!same_kernel("race::_Z12neighbor_maxPKfPfi", kernel));
    }

    /// initcheck's report: the first four of its 65,536 findings on `scripts/cuda/uninit.cu`
    /// (an H100, compute-sanitizer 2025.3.1) and its two tallies, which are not findings.
    #[test]
    fn an_initcheck_report_names_the_kernel_line_thread_and_address() {
        let r = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sanitizer/initcheck-uninit.log"
        ));
        let f = parse(r);
        assert_eq!(f.len(), 4, "{f:#?}");
        assert_eq!(
            f[0].what,
            "Uninitialized __global__ memory read of size 4 bytes"
        );
        assert_eq!(
            f[0].kernel.as_deref(),
            Some("twice(const float *, float *, int)")
        );
        assert_eq!(f[0].source.as_deref(), Some("uninit.cu:11"));
        assert_eq!(f[0].thread.as_deref(), Some("(64,0,0)"));
        assert_eq!(f[0].block.as_deref(), Some("(8,0,0)"));
        assert_eq!(f[0].address, Some(0x7f64_b484_2100));
        assert_eq!(f[3].address, Some(0x7f64_b484_210c));
        assert!(same_kernel(
            "uninit::_Z5twicePKfPfi",
            f[0].kernel.as_deref().unwrap()
        ));
    }

    /// A finding's address, read from its lines, is named as the trace's buffer it lies in or
    /// past, with the call that allocated it.
    #[test]
    fn a_finding_s_address_is_named_as_the_trace_s_buffer() {
        let t = Trace::open(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/traces/python/h200_py_capture_item.gtape"
        )))
        .unwrap();
        let bufs: Vec<BufferId> = t
            .calls
            .iter()
            .filter_map(|c| match (&c.call, &c.ret) {
                (Call::Alloc { .. }, Some(Ok(Value::Buffer(b)))) => Some(*b),
                _ => None,
            })
            .take(2)
            .collect();
        let placed = [(bufs[0], 0x1000, 0x100), (bufs[1], 0x2000, 0x40)];
        let mut f = parse(
            "========= Invalid __global__ read of size 4 bytes\n\
             =========     at k+0x70\n\
             =========     Access to 0x2048 is out of bounds\n\
             =========     and is 8 bytes after the nearest allocation at 0x2000 of size 64 bytes\n",
        );
        assert_eq!(f[0].address, Some(0x2048));
        name_addresses(&t, &placed, &mut f);
        let named = f[0].buffer.as_deref().unwrap();
        assert!(
            named.starts_with(&format!(
                "8 bytes past the end of {} (64 bytes, allocated by call #",
                bufs[1]
            )),
            "{named}"
        );
        f[0].address = Some(0x1010);
        name_addresses(&t, &placed, &mut f);
        assert!(
            f[0].buffer
                .as_deref()
                .unwrap()
                .starts_with(&format!("{}+0x10 (256 bytes", bufs[0])),
            "{:?}",
            f[0].buffer
        );
        f[0].address = Some(0x10);
        name_addresses(&t, &placed, &mut f);
        assert_eq!(f[0].buffer, None, "below every buffer: no name");
    }

    /// A use after free, minimized: the freed buffer's recorded address reaches the replay as
    /// a plain value, and the sanitizer's address near it is named as that address, not as
    /// some distance past whichever buffer the replay placed below it.
    #[test]
    fn an_address_a_launch_passed_raw_is_named_as_that_not_as_past_a_buffer() {
        let mut t = Trace::open(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/traces/python/h200_py_capture_item.gtape"
        )))
        .unwrap();
        let stale: u64 = 0x7fc9_dfe0_0000;
        let mut launch = t
            .calls
            .iter()
            .find(|c| c.call.launch().is_some())
            .unwrap()
            .clone();
        if let Call::Launch { args, .. } | Call::LaunchTyped { args, .. } = &mut launch.call {
            *args = vec![Arg::Val(crate::trace::ArgBytes(
                stale.to_le_bytes().into_iter().collect(),
            ))]
            .into();
        }
        t.calls.push(launch);
        let buf = t
            .calls
            .iter()
            .find_map(|c| match (&c.call, &c.ret) {
                (Call::Alloc { .. }, Some(Ok(Value::Buffer(b)))) => Some(*b),
                _ => None,
            })
            .unwrap();
        // The replay placed a buffer far below the stale address.
        let placed = [(buf, 0x7f29_5ec0_0000, 0x100000)];
        let mut f = parse(
            "========= Invalid __global__ read of size 4 bytes\n\
             =========     at scale_copy(const float *, float *, int)+0xc0 in uaf.cu:12\n\
             =========     Access to 0x7fc9dfe02000 is out of bounds\n",
        );
        name_addresses(&t, &placed, &mut f);
        let named = f[0].buffer.as_deref().unwrap();
        assert!(
            named.starts_with("0x7fc9dfe00000+0x2000: an address the recording passed as it was"),
            "{named}"
        );
        // Just past the buffer, the buffer still names it.
        f[0].address = Some(0x7f29_5ec0_0000 + 0x100000 + 4);
        name_addresses(&t, &placed, &mut f);
        assert!(
            f[0].buffer
                .as_deref()
                .unwrap()
                .starts_with(&format!("4 bytes past the end of {buf}")),
            "{:?}",
            f[0].buffer
        );
    }

    #[test]
    fn a_kernel_without_line_information_is_named_without_a_source() {
        let r = "========= Invalid __global__ write of size 4 bytes\n=========     at k+0x70\n";
        let f = parse(r);
        assert_eq!(f[0].kernel.as_deref(), Some("k"));
        assert_eq!(f[0].source, None);
    }
}
