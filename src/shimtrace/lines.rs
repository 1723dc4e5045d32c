//! The program's lines: a shim log's Python stacks (`Rec::Code`, `Rec::Stack`) turned into the
//! trace's sites, each naming the program's own line and keeping the stack it came through
//! (`SiteStack`). The shim logs raw facts (a code object's line table, the instruction each
//! frame is at); lines are worked out here, from CPython's location table (3.11 and later:
//! `Objects/locations.md` in CPython's sources describes it).

use std::collections::HashMap;

use crate::trace::{SiteDef, SiteId, SiteStack, StackFrame, Trace};

/// The packages a program calls through, whose frames are not the program's own line
/// (`GPUTAPE_LIBRARY_FRAMES`, comma-separated, replaces them): matched as directories of the
/// path below its last `site-packages/` (`is_library`), so a virtual environment under
/// `/opt/torch/` does not make every installed package PyTorch.
const LIBRARIES: &[&str] = &["torch/", "triton/"];
/// Set to replace `LIBRARIES`.
pub const ENV_LIBRARY_FRAMES: &str = "GPUTAPE_LIBRARY_FRAMES";
/// Path fragments of installed packages: the script's line is the innermost frame outside them.
const INSTALLED: &[&str] = &["/site-packages/", "/dist-packages/", "<frozen "];

/// A code object as the shim logged it.
struct Code {
    py_minor: u8,
    first_line: i32,
    file: String,
    function: String,
    linetable: Vec<u8>,
}

/// The stacks of one log, as they are named.
pub struct Lines {
    codes: HashMap<u32, Code>,
    /// Native frames by the log's number for them.
    natives: HashMap<u32, StackFrame>,
    /// The log's stack numbers -> the trace's sites.
    sites: HashMap<u32, SiteId>,
    /// Sites made so far, by what they hold (two log stacks at different instructions of the
    /// same lines are one site).
    made: HashMap<SiteStack, SiteId>,
    libraries: Vec<String>,
}

impl Lines {
    pub fn new() -> Self {
        let libraries = match std::env::var(ENV_LIBRARY_FRAMES) {
            Ok(v) => v
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            Err(_) => LIBRARIES.iter().map(|s| s.to_string()).collect(),
        };
        Lines {
            codes: HashMap::new(),
            natives: HashMap::new(),
            sites: HashMap::new(),
            made: HashMap::new(),
            libraries,
        }
    }

    /// A `Rec::Code`.
    pub fn code(
        &mut self,
        id: u32,
        py_minor: u8,
        first_line: i32,
        (file, function): (&[u8], &[u8]),
        linetable: &[u8],
    ) {
        self.codes.insert(
            id,
            Code {
                py_minor,
                first_line,
                file: String::from_utf8_lossy(file).into_owned(),
                function: String::from_utf8_lossy(function).into_owned(),
                linetable: linetable.to_vec(),
            },
        );
    }

    /// A `Rec::Stack`: its frames resolved to lines, and the site that names it (made, with
    /// its `SiteDef` and `SiteStack`, in `t` the first time).
    pub fn stack(&mut self, t: &mut Trace, id: u32, frames: impl Iterator<Item = (u32, u32)>) {
        let frames: Vec<StackFrame> = frames
            .map(|(code, instr)| match self.codes.get(&code) {
                Some(c) => {
                    let (line, col) = position(c, instr).unwrap_or((0, 0));
                    StackFrame {
                        file: c.file.clone(),
                        function: c.function.clone(),
                        line,
                        col,
                    }
                }
                None => StackFrame {
                    file: format!("<code {code} not in the log>"),
                    function: "?".into(),
                    line: 0,
                    col: 0,
                },
            })
            .collect();
        let outside = |skip: &dyn Fn(&str) -> bool| {
            frames
                .iter()
                .position(|f| !skip(&f.file))
                .and_then(|i| u16::try_from(i).ok())
        };
        let stack = SiteStack {
            user: outside(&|f| is_library(f, &self.libraries)),
            script: outside(&|f| INSTALLED.iter().any(|l| f.contains(l))),
            frames,
        };
        self.name(t, id, stack, "<no Python frame>");
    }

    /// A `Rec::NativeFrame`: kept as the frame it will be in a stack, `module+0x1a2b`.
    pub fn native_frame(&mut self, id: u32, module: &[u8], offset: u64, symbol: (&[u8], u64)) {
        let function = match symbol {
            (b"", _) => String::new(),
            (s, 0) => String::from_utf8_lossy(s).into_owned(),
            (s, off) => format!("{}+{off:#x}", String::from_utf8_lossy(s)),
        };
        self.natives.insert(
            id,
            StackFrame {
                file: format!("{}+{offset:#x}", String::from_utf8_lossy(module)),
                function,
                line: 0,
                col: 0,
            },
        );
    }

    /// A `Rec::NativeStack`: its frames, and the site that names it, the innermost frame
    /// outside the libraries a program calls the driver through (`native_library`).
    pub fn native_stack(&mut self, t: &mut Trace, id: u32, frames: impl Iterator<Item = u32>) {
        let frames: Vec<StackFrame> = frames
            .map(|f| match self.natives.get(&f) {
                Some(n) => n.clone(),
                None => StackFrame {
                    file: format!("<native frame {f} not in the log>"),
                    function: String::new(),
                    line: 0,
                    col: 0,
                },
            })
            .collect();
        let user = frames
            .iter()
            .position(|f| {
                let module = f.file.rsplit_once('+').map_or(f.file.as_str(), |m| m.0);
                !gputape_shimlog::native_library(module.as_bytes())
            })
            .and_then(|i| u16::try_from(i).ok());
        let stack = SiteStack {
            user,
            script: None,
            frames,
        };
        self.name(t, id, stack, "<no native frame>");
    }

    /// Makes the log's stack `id` name the site of `stack` (made, with its `SiteDef`, in `t`
    /// the first time); `empty` is the site's file when the stack has no frame.
    fn name(&mut self, t: &mut Trace, id: u32, stack: SiteStack, empty: &str) {
        let site = match self.made.get(&stack) {
            Some(&s) => s,
            None => {
                let s = SiteId(t.sites.keys().next_back().map_or(0, |k| k.0 + 1));
                let def = match stack.named() {
                    Some(f) => SiteDef {
                        file: f.file.clone(),
                        line: f.line,
                        col: f.col,
                    },
                    None => SiteDef {
                        file: empty.into(),
                        line: 0,
                        col: 0,
                    },
                };
                t.sites.insert(s, def);
                t.stacks.insert(s, stack.clone());
                self.made.insert(stack, s);
                s
            }
        };
        self.sites.insert(id, site);
    }

    /// The site of the log's stack `id`, if it was named.
    pub fn site(&self, id: u32) -> Option<SiteId> {
        self.sites.get(&id).copied()
    }
}

/// Whether `file` lies in one of `libraries` (directories such as `torch/`): below the path's
/// last `site-packages/` or `dist-packages/` when it has one, else anywhere in it.
fn is_library(file: &str, libraries: &[String]) -> bool {
    let tail = ["site-packages/", "dist-packages/"]
        .iter()
        .filter_map(|p| file.rfind(p).map(|i| &file[i + p.len()..]))
        .min_by_key(|t| t.len())
        .unwrap_or(file);
    libraries.iter().any(|l| {
        let l = l.trim_start_matches('/');
        tail.starts_with(l) || tail.contains(&format!("/{l}"))
    })
}

/// The 1-based line and column of instruction `instr` (in code units) of `c`, from its location
/// table; `None` for a Python before 3.11 (another table format) or an instruction the table
/// does not reach. A column of 0 means the table holds none.
fn position(c: &Code, instr: u32) -> Option<(u32, u32)> {
    if c.py_minor < 11 {
        return None;
    }
    let t = &c.linetable;
    let mut at = 0usize;
    let mut addr = 0u64;
    let mut line = i64::from(c.first_line);
    while at < t.len() {
        let first = t[at];
        if first & 0x80 == 0 {
            return None;
        }
        at += 1;
        let code = (first >> 3) & 15;
        let len = u64::from(first & 7) + 1;
        let (delta, col) = match code {
            15 => (0, None),
            14 => {
                let d = svarint(t, &mut at)?;
                varint(t, &mut at)?; // end line delta
                let col = varint(t, &mut at)?; // start column + 1 (0: none)
                varint(t, &mut at)?; // end column + 1
                (d, Some(col as u32))
            }
            13 => (svarint(t, &mut at)?, Some(0)),
            10..=12 => {
                let col = u32::from(*t.get(at)?);
                at += 2;
                (i64::from(code) - 10, Some(col + 1))
            }
            _ => {
                let b = *t.get(at)?;
                at += 1;
                (0, Some(u32::from(code) * 8 + u32::from((b >> 4) & 7) + 1))
            }
        };
        line += delta;
        if u64::from(instr) < addr + len {
            // No location (code 15): the line the instruction falls under, no column.
            return Some((u32::try_from(line).unwrap_or(0), col.unwrap_or(0)));
        }
        addr += len;
    }
    None
}

/// CPython's location-table varint: 6-bit groups, least significant first, bit 6 set on all
/// but the last.
fn varint(t: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *t.get(*at)?;
        *at += 1;
        if shift < 64 {
            v |= u64::from(b & 63) << shift;
        }
        shift += 6;
        if b & 64 == 0 {
            return Some(v);
        }
    }
}

/// A signed varint: the sign in the lowest bit.
fn svarint(t: &[u8], at: &mut usize) -> Option<i64> {
    let v = varint(t, at)?;
    let m = (v >> 1) as i64;
    Some(if v & 1 == 1 { -m } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Line tables of real code objects with every instruction's position as CPython itself
    /// gives it (`co_positions()`), from each minor version claimed
    /// (`tests/fixtures/python/positions.json`, written by `scripts/python-positions.py`).
    #[test]
    fn positions_agree_with_cpython_on_every_instruction() {
        let text = include_str!("../../tests/fixtures/python/positions.json");
        let cases: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
        let mut minors = std::collections::BTreeSet::new();
        let mut checked = 0;
        for case in &cases {
            let minor = case["py_minor"].as_u64().unwrap() as u8;
            minors.insert(minor);
            let hex = case["linetable"].as_str().unwrap();
            let linetable: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let c = Code {
                py_minor: minor,
                first_line: case["first_line"].as_i64().unwrap() as i32,
                file: String::new(),
                function: case["name"].as_str().unwrap().into(),
                linetable,
            };
            for (i, p) in case["positions"].as_array().unwrap().iter().enumerate() {
                // CPython: line (None: no location), column 0-based (None: none).
                let want_line = p[0].as_u64();
                let want_col = p[1].as_u64().map_or(0, |c| c as u32 + 1);
                let got = position(&c, i as u32);
                if let Some(line) = want_line {
                    assert_eq!(
                        got,
                        Some((line as u32, want_col)),
                        "3.{minor} {} instruction {i}",
                        c.function
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(
            minors.into_iter().collect::<Vec<_>>(),
            [11, 12, 13],
            "fixtures from each minor version claimed"
        );
        assert!(checked > 500, "only {checked} instructions checked");
    }

    #[test]
    fn library_frames_are_judged_below_site_packages() {
        let libs: Vec<String> = LIBRARIES.iter().map(|s| s.to_string()).collect();
        for (file, want) in [
            ("/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", true),
            ("/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py", false),
            ("/usr/lib/python3/dist-packages/triton/runtime/jit.py", true),
            ("/home/u/pytorch/torch/nn/functional.py", true),
            ("/home/u/model.py", false),
            ("/opt/torch/.venv/lib/python3.12/site-packages/torchvision/ops/boxes.py", false),
            ("<frozen runpy>", false),
        ] {
            assert_eq!(is_library(file, &libs), want, "{file}");
        }
    }

    #[test]
    fn a_damaged_table_gives_no_line_and_no_panic() {
        let mut c = Code {
            py_minor: 12,
            first_line: 1,
            file: String::new(),
            function: String::new(),
            linetable: vec![
                0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        };
        for i in 0..8 {
            let _ = position(&c, i);
        }
        c.linetable = vec![0x00, 0x01];
        assert_eq!(position(&c, 0), None);
        c.py_minor = 10;
        assert_eq!(position(&c, 0), None);
    }
}
