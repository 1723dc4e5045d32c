//! A replay under NVIDIA's compute-sanitizer (`replay --sanitize TOOL`): the tool found, the
//! child replay's command wrapped in it, and its report read back into findings. Under the
//! sanitizer the driver returns other codes than the recording saw (memcheck stops a faulting
//! kernel with `CUDA_ERROR_LAUNCH_FAILED` where the recording had an illegal address), so a
//! fault counts as reproduced when the sanitizer names a launch of the recorded fault's window,
//! whatever the driver said.

use crate::trace::Trace;
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
    if tool == "racecheck" {
        v.extend(["--racecheck-report".into(), "hazard".into()]);
    }
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
        s
    }
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
            if text.starts_with("COMPUTE-SANITIZER")
                || text.starts_with("ERROR SUMMARY")
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
            // "at KERNEL+0xOFF in FILE:LINE" (the `in` part only with line information).
            let (code, src) = match rest.split_once(" in ") {
                Some((c, s)) => (c, Some(s.to_string())),
                None => (rest, None),
            };
            let (k, off) = match code.rsplit_once('+') {
                Some((k, o)) if o.starts_with("0x") => (k, Some(o.to_string())),
                _ => (code, None),
            };
            f.kernel = Some(k.to_string());
            f.offset = off;
            f.source = src;
        } else if let Some(rest) = text.strip_prefix("by thread ") {
            let (t, b) = rest.split_once(" in block ").unwrap_or((rest, ""));
            f.thread = Some(t.to_string());
            f.block = (!b.is_empty()).then(|| b.to_string());
        } else {
            f.detail.push(text.to_string());
        }
    }
    out
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

/// Whether `findings` show the fault `t` recorded: a kernel finding in a launch of one of its
/// fault windows (the kernel's name as the trace has it ends with the sanitizer's, which
/// drops the module). The first such finding.
pub fn reproduces<'f>(t: &Trace, findings: &'f [Finding]) -> Option<&'f Finding> {
    let windows = crate::analysis::window::fault_windows(t);
    let in_windows: Vec<String> = t
        .calls
        .iter()
        .filter(|c| windows.iter().any(|w| w.contains(c.seq)))
        .filter_map(|c| c.call.launch().map(|(k, _)| t.kernel_name(k)))
        .collect();
    findings.iter().filter(|f| f.in_kernel()).find(|f| {
        let k = f.kernel.as_deref().unwrap_or_default();
        in_windows
            .iter()
            .any(|name| name == k || name.ends_with(&format!("::{k}")) || name.contains(k))
    })
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

    #[test]
    fn a_clean_report_has_no_findings() {
        let clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        assert!(parse(clean).is_empty());
        assert!(parse("").is_empty());
    }

    #[test]
    fn a_kernel_without_line_information_is_named_without_a_source() {
        let r = "========= Invalid __global__ write of size 4 bytes\n=========     at k+0x70\n";
        let f = parse(r);
        assert_eq!(f[0].kernel.as_deref(), Some("k"));
        assert_eq!(f[0].source, None);
    }
}
