//! `report --bug DIR TRACE`: everything a kernel's owner needs, in one directory, from a dump
//! or recording. Each step is this binary's own verb in a child process (a replay that faults
//! ends its CUDA context, and a failed step must not lose what the others made): `minimize`
//! on CUDA (under compute-sanitizer when there is one, keeping its finding), `replay
//! --sanitize` of the result, `export --program`, then the report page and a README with the
//! verdict, the environment and how to run the program.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::{Ctx, Exit};

/// What one step printed and whether it succeeded.
struct Step {
    ok: bool,
    /// Its exit status (4: no CUDA here).
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn step(name: &str, args: &[&std::ffi::OsStr]) -> Result<Step> {
    eprintln!("report --bug: {name} ...");
    let o = Command::new(std::env::current_exe()?)
        .args(args)
        .output()
        .with_context(|| format!("cannot run gputape for {name}"))?;
    Ok(Step {
        ok: o.status.success(),
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    })
}

/// The last line of `text` that says something, for a one-line why.
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// The tools `--bug` tries in turn when none is named: what a fault needs first, then what
/// finds a bug that faults nothing.
const TOOL_ORDER: [&str; 4] = ["memcheck", "racecheck", "initcheck", "synccheck"];

pub fn exec(ctx: &Ctx, trace: &Path, dir: &Path, tool: Option<&str>) -> Result<Exit> {
    let t = super::common::open_trace(ctx, trace)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let sanitizer = crate::replayer::sanitizer::find();
    let os = |s: &str| std::ffi::OsString::from(s);
    let min = dir.join("min.gtape");

    // 1. The fewest calls that still fail the same way: under the tool named, or under each
    //    in turn until one finds something to keep.
    let tools: Vec<&str> = match (tool, &sanitizer) {
        (_, None) => vec![tool.unwrap_or(TOOL_ORDER[0])],
        (Some(named), Some(_)) => vec![named],
        (None, Some(_)) => TOOL_ORDER.to_vec(),
    };
    let mut log = String::new();
    let mut tool = tools[0];
    let mut m = None;
    for &each in &tools {
        let mut args = vec![
            os("minimize"),
            os("--on"),
            os("cuda"),
            os("-o"),
            min.clone().into(),
        ];
        if sanitizer.is_some() {
            args.extend([os("--sanitize"), os(each)]);
        }
        args.push(trace.into());
        let s = step(
            &format!("minimize under {each}"),
            &args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>(),
        )?;
        let under = if sanitizer.is_some() {
            format!(" --sanitize {each}")
        } else {
            String::new()
        };
        log.push_str(&format!(
            "$ gputape minimize{under}\n{}{}",
            s.stdout, s.stderr
        ));
        tool = each;
        let nothing = s.stderr.contains("finds nothing in a kernel");
        m = Some(s);
        if !nothing {
            break;
        }
    }
    let m = m.expect("at least one tool is tried");
    std::fs::write(dir.join("minimize.log"), log)?;
    let (repro, minimized) = if m.ok && min.is_file() {
        (min.clone(), true)
    } else {
        eprintln!(
            "report --bug: minimize did not shrink it ({}); the rest uses the whole trace",
            last_line(&m.stderr)
        );
        (trace.to_path_buf(), false)
    };

    // 2. The sanitizer's word on the repro.
    let sanitized = match &sanitizer {
        Some(_) => {
            let s = step(
                "replay --sanitize",
                &[
                    "replay".as_ref(),
                    "--on".as_ref(),
                    "cuda".as_ref(),
                    "--sanitize".as_ref(),
                    tool.as_ref(),
                    repro.as_os_str(),
                ],
            )?;
            std::fs::write(
                dir.join("sanitizer.log"),
                format!("{}{}", s.stdout, s.stderr),
            )?;
            Some(s)
        }
        None => None,
    };

    // 3. A program that needs only the driver.
    let program = dir.join("program");
    let e = step(
        "export --program",
        &[
            "export".as_ref(),
            "--program".as_ref(),
            program.as_os_str(),
            repro.as_os_str(),
        ],
    )?;

    // 4. The analyses' page of the repro.
    let rt = super::common::open_trace(ctx, &repro)?;
    let (page, _) = crate::analysis::report::page(&rt, &repro.display().to_string());
    std::fs::write(dir.join("report.html"), page)?;

    let readme = readme(&t, trace, (&m, minimized), sanitized.as_ref(), tool, &e);
    std::fs::write(dir.join("README.md"), &readme)?;
    println!("{readme}");
    eprintln!("report --bug: wrote {}", dir.display());
    let reproduced = sanitized
        .as_ref()
        .map_or(m.ok, |s| s.ok || s.stdout.contains("REPRODUCED"));
    Ok(if minimized && reproduced {
        Exit::Pass
    } else if m.code == Some(4) {
        // What could be written without a GPU is there; the verdict needs one.
        Exit::NoBackend
    } else {
        Exit::Findings
    })
}

fn readme(
    t: &crate::trace::Trace,
    trace: &Path,
    (m, minimized): (&Step, bool),
    sanitized: Option<&Step>,
    tool: &str,
    export: &Step,
) -> String {
    let mut r = String::from("# GPU bug report\n\n");
    r.push_str(&format!(
        "Made by `gputape report --bug` from `{}`.\n\n## What fails\n\n",
        trace.display()
    ));
    if minimized {
        let kept = m
            .stdout
            .lines()
            .filter(|l| l.starts_with("fault kept:") || l.starts_with("calls:"))
            .collect::<Vec<_>>()
            .join("\n");
        r.push_str(&format!("```\n{kept}\n```\n\n"));
    } else {
        r.push_str(&format!(
            "Not minimized: {}\n\n",
            last_line(&format!("{}{}", m.stdout, m.stderr))
        ));
    }
    match sanitized {
        Some(s) => {
            let lines: Vec<&str> = s
                .stdout
                .lines()
                .skip_while(|l| !l.starts_with("compute-sanitizer"))
                .take(10)
                .collect();
            r.push_str(&format!(
                "compute-sanitizer {tool} on the repro:\n\n```\n{}\n```\n\n",
                lines.join("\n")
            ));
        }
        None => r.push_str(
            "compute-sanitizer was not found on this machine (set COMPUTE_SANITIZER or CUDA_HOME), so no sanitizer finding is included.\n\n",
        ),
    }
    r.push_str("## Where it was recorded\n\n| | |\n|---|---|\n");
    if let Some(h) = &t.header {
        r.push_str(&format!(
            "| GPU | {} |\n",
            h.device_name.as_deref().unwrap_or("not recorded")
        ));
        if let Some(v) = h.driver_version {
            r.push_str(&format!(
                "| CUDA driver API | {}.{} |\n",
                v / 1000,
                v % 1000 / 10
            ));
        }
        r.push_str(&format!("| recorded by | gputape {} |\n", h.gputape));
    }
    if let Some(p) = &t.provenance {
        r.push_str(&format!("| command | `{}` |\n", p.command()));
        r.push_str(&format!("| when | {} |\n", p.recorded_at()));
        if let Some(h) = &p.host {
            r.push_str(&format!("| host | {h} |\n"));
        }
    }
    r.push_str("\n## Files\n\n");
    if minimized {
        r.push_str("- `min.gtape`: the minimized trace (`gputape show min.gtape`; `gputape replay --on cuda min.gtape`)\n");
    }
    if export.ok {
        let under = match tool {
            "memcheck" => String::new(),
            _ => format!(
                " A {tool} finding shows only under the tool: `compute-sanitizer --tool {tool} ./repro`."
            ),
        };
        r.push_str(&format!(
            "- `program/`: a standalone C program that makes the same driver calls and checks the result; it needs only a C compiler and the CUDA driver: `cd program && sh build.sh && ./repro`.{under}\n"
        ));
    } else {
        r.push_str(&format!(
            "- no standalone program: {}\n",
            last_line(&format!("{}{}", export.stdout, export.stderr))
        ));
    }
    r.push_str("- `report.html`: what gputape's analyses say about the repro\n");
    r.push_str("- `minimize.log`");
    if sanitized.is_some() {
        r.push_str(", `sanitizer.log`");
    }
    r.push_str(": what each step printed\n");
    r
}

/// Where `--bug` writes, refused when it is a file.
pub fn check_dir(dir: &Path) -> Result<PathBuf> {
    anyhow::ensure!(
        !dir.is_file(),
        "--bug {}: is a file; give a directory to write the report into",
        dir.display()
    );
    Ok(dir.to_path_buf())
}
