//! `gputape inspect`: look at a buffer's contents after any call (replayed on any backend),
//! as a summary line or a file numpy, PyTorch and JAX read (`.npy`, `.safetensors`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use super::backends::{self, Backend, Want};
use super::common::{open_trace, write_out};
use super::{Ctx, Exit};
use crate::backend::ElemType;
use crate::trace::BufferId;

#[derive(clap::Args)]
pub struct Args {
    /// The trace.
    trace: PathBuf,
    /// The call after which to look (its seq, as `show` numbers calls).
    #[arg(long)]
    at: u64,
    /// The buffer to look at (`buf12`), or a range of it (`buf12+1024` to its end,
    /// `buf12+1024..+3072`: a tensor in a caching allocator's segment); repeatable. Without
    /// it, `--writes` names them.
    #[arg(long = "buffer", value_name = "BUF[+OFF[..+END]]", value_parser = parse_region)]
    buffers: Vec<Region>,
    /// What call N wrote: a copy's or memset's destination; a launch's written pointers, each
    /// cut to the bytes it was measured writing and typed (for kernels nobody described the
    /// replay measures that first, or reads it from beside the trace: `replay
    /// --write-extents`), else from the pointer to the end of its buffer.
    #[arg(long)]
    writes: bool,
    /// Read the bytes as f32, f16 or bf16 (default: what the kernels using the buffer say;
    /// raw bytes where none does).
    #[arg(long)]
    dtype: Option<String>,
    /// The array's shape (`32,4096`); its elements must number the buffer's. Default: flat.
    #[arg(long, value_delimiter = ',')]
    shape: Vec<u64>,
    /// Write to FILE: `.npy` (numpy has no bf16: bf16 widens to f32, exactly, and says so) or
    /// `.safetensors` (bf16 kept). With several buffers, one file each (`FILE` gains
    /// `.bufK` before its extension) for `.npy`, one file for `.safetensors`.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The backend to replay on.
    #[arg(long, value_enum, default_value_t = Backend::Mock)]
    on: Backend,
    /// Print the summaries as JSON.
    #[arg(long)]
    json: bool,
}

/// A buffer, or the bytes `[off, end)` of it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Region {
    buf: BufferId,
    off: u64,
    end: Option<u64>,
}

/// `buf12`, `buf12+1024`, `buf12+1024..+3072` (also `..3072`).
fn parse_region(s: &str) -> Result<Region, String> {
    let (b, range) = match s.split_once('+') {
        Some((b, r)) => (b, Some(r)),
        None => (s, None),
    };
    let buf = super::replay::parse_buffer(b)?;
    let bad = || format!("{s:?}: expected BUF, BUF+OFF or BUF+OFF..+END (bytes)");
    let Some(range) = range else {
        return Ok(Region {
            buf,
            off: 0,
            end: None,
        });
    };
    let (off, end) = match range.split_once("..") {
        Some((o, e)) => (o, Some(e.strip_prefix('+').unwrap_or(e))),
        None => (range, None),
    };
    let off: u64 = off.parse().map_err(|_| bad())?;
    let end = match end {
        Some(e) => Some(e.parse::<u64>().map_err(|_| bad())?),
        None => None,
    };
    if end.is_some_and(|e| e <= off) {
        return Err(format!("{s:?}: the range ends before it starts"));
    }
    Ok(Region { buf, off, end })
}

/// One buffer's values (or a range's), decoded.
struct Array {
    buf: BufferId,
    /// Where the range starts in the buffer.
    off: u64,
    /// The range is the whole buffer.
    whole: bool,
    elem: Option<ElemType>,
    /// How `elem` was known, where the call's kernel said it.
    how: &'static str,
    bytes: Vec<u8>,
    shape: Vec<u64>,
}

impl Array {
    /// `buf7`, or `buf7+1024..+3072` for a range.
    fn label(&self) -> String {
        match self.whole {
            true => self.buf.to_string(),
            false => format!(
                "{}+{}..+{}",
                self.buf,
                self.off,
                self.off + self.bytes.len() as u64
            ),
        }
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64 / self.elem.map_or(1, |e| e.size())
    }

    /// Each element as f64 (exact for all three types).
    fn values(&self) -> Vec<f64> {
        match self.elem {
            None => self.bytes.iter().map(|b| *b as f64).collect(),
            Some(e) => self
                .bytes
                .chunks_exact(e.size() as usize)
                .filter_map(|c| e.decode(c).map(|(v, _)| v))
                .collect(),
        }
    }

    fn summary(&self) -> serde_json::Value {
        let v = self.values();
        let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        let nan = v.iter().filter(|x| x.is_nan()).count();
        let inf = v.iter().filter(|x| x.is_infinite()).count();
        let (min, max) = finite
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let mean = (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64);
        serde_json::json!({
            "buffer": self.buf.to_string(),
            "range": self.label(),
            "dtype": self.elem.map_or("u8 (raw bytes)", |e| e.name()),
            "dtype_from": self.how,
            "elements": self.len(),
            "shape": self.shape,
            "min": (!finite.is_empty()).then_some(min),
            "max": (!finite.is_empty()).then_some(max),
            "mean": mean,
            "nan": nan,
            "inf": inf,
        })
    }
}

pub fn exec(a: Args, ctx: &Ctx) -> Result<Exit> {
    let t = open_trace(ctx, &a.trace)?;
    let call = t
        .calls
        .iter()
        .find(|c| c.seq == a.at)
        .with_context(|| format!("{} has no call #{}", a.trace.display(), a.at))?;
    let dtype = match a.dtype.as_deref() {
        Some(s) => Some(
            ElemType::parse(s)
                .with_context(|| format!("{s:?} is not an element type (f32, f16, bf16)"))?,
        ),
        None => None,
    };
    let opened = backends::open(ctx, a.on, Want::replay())?;
    let load = |m: &crate::backend::ModuleCode| opened.load_trace_code(m);
    let mut r = crate::replayer::Replayer::new(&t);
    if a.on.runs_cpu_twins() {
        r = r.with_opaque_kernels();
    }
    // (region, its type and how it was known)
    let mut regions: Vec<(Region, Option<ElemType>, &'static str)> =
        a.buffers.iter().map(|b| (*b, None, "")).collect();
    if a.writes {
        let writes = match call.call.launch().is_some() && crate::replayer::writes::wanted(&t) {
            true => {
                let (w, note) = r.writes_for(opened.gpu.as_ref(), &a.trace, Some(&load))?;
                eprintln!("{note}");
                Some(w)
            }
            false => None,
        };
        for w in crate::replayer::written_tensors(&t, a.at, writes.as_ref(), &[]) {
            let region = Region {
                buf: w.buf,
                off: w.off,
                end: Some(w.off + w.bytes),
            };
            if !regions.iter().any(|(r, _, _)| *r == region) {
                regions.push((region, w.elem, w.how));
            }
        }
    }
    anyhow::ensure!(
        !regions.is_empty(),
        "nothing to inspect: name a buffer (--buffer bufK) or ask for what call #{} writes (--writes){}",
        a.at,
        if a.writes { ", which is nothing" } else { "" }
    );
    let mut bufs: Vec<BufferId> = Vec::new();
    for (r, _, _) in &regions {
        let size = t.sizes.get(&r.buf).copied().unwrap_or(0);
        anyhow::ensure!(
            r.off < size.max(1) && r.end.is_none_or(|e| e <= size),
            "{}: bytes {}..{} lie outside its {size} bytes",
            r.buf,
            r.off,
            r.end.map_or("its end".into(), |e| e.to_string())
        );
        if !bufs.contains(&r.buf) {
            bufs.push(r.buf);
        }
    }
    let read = r.inspect(opened.gpu.as_ref(), a.at, &bufs, Some(&load))?;
    let mut arrays = Vec::new();
    for (region, elem, how) in regions {
        let Some((_, whole)) = read.iter().find(|(b, _)| *b == region.buf) else {
            continue;
        };
        let end = region
            .end
            .map_or(whole.len(), |e| (e as usize).min(whole.len()));
        let bytes = whole[(region.off as usize).min(end)..end].to_vec();
        let (elem, how) = match (dtype, elem) {
            (Some(d), _) => (Some(d), "--dtype"),
            (None, Some(e)) => (Some(e), how),
            (None, None) => (crate::trace::elem_of(&t, region.buf, a.at), ""),
        };
        let mut arr = Array {
            buf: region.buf,
            off: region.off,
            whole: region.off == 0 && end == whole.len(),
            elem,
            how,
            bytes,
            shape: Vec::new(),
        };
        arr.shape = match a.shape.as_slice() {
            [] => vec![arr.len()],
            s => {
                let n = s.iter().try_fold(1u64, |p, d| p.checked_mul(*d));
                anyhow::ensure!(
                    n == Some(arr.len()),
                    "--shape {:?} has {} elements; {} holds {} {}",
                    s,
                    n.map_or("too many".into(), |n| n.to_string()),
                    arr.label(),
                    arr.len(),
                    arr.elem.map_or("bytes", |e| e.name())
                );
                s.to_vec()
            }
        };
        arrays.push(arr);
    }
    let summaries: Vec<serde_json::Value> = arrays.iter().map(Array::summary).collect();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "schema": "gputape.inspect.v1",
                "at": a.at,
                "buffers": summaries,
            }))?
        );
    } else {
        let num = |v: &serde_json::Value| match v.as_f64() {
            Some(x) => format!("{x}"),
            None => "-".into(),
        };
        for s in &summaries {
            let from = match s["dtype_from"].as_str() {
                Some(h) if !h.is_empty() => format!(" (type from {h})"),
                _ => String::new(),
            };
            println!(
                "{} after call #{}: {} {} elements{from}; min {} max {} mean {} (finite values); {} NaN, {} Inf",
                s["range"].as_str().unwrap_or_default(),
                a.at,
                s["elements"],
                s["dtype"].as_str().unwrap_or_default(),
                num(&s["min"]),
                num(&s["max"]),
                num(&s["mean"]),
                s["nan"],
                s["inf"]
            );
        }
    }
    if let Some(out) = &a.output {
        write_arrays(out, &arrays)?;
    }
    Ok(Exit::Pass)
}

fn write_arrays(out: &Path, arrays: &[Array]) -> Result<()> {
    match out.extension().and_then(|e| e.to_str()) {
        Some("npy") => {
            for arr in arrays {
                let path = match arrays.len() {
                    1 => out.to_path_buf(),
                    _ => out.with_extension(format!("{}.npy", arr.label().replace("..", "-"))),
                };
                let bytes = npy(arr)?;
                if write_out(&path, &bytes)? {
                    let widened = match arr.elem {
                        Some(ElemType::Bf16) | Some(ElemType::F16) => {
                            format!(
                                " ({} widened to f32: numpy has no bf16; exact)",
                                arr.elem.map_or("", |e| e.name())
                            )
                        }
                        _ => String::new(),
                    };
                    eprintln!(
                        "wrote {} ({} {:?}){widened}",
                        path.display(),
                        arr.label(),
                        arr.shape
                    );
                }
            }
            Ok(())
        }
        Some("safetensors") => {
            let bytes = safetensors_bytes(arrays)?;
            if write_out(out, &bytes)? {
                eprintln!(
                    "wrote {} ({} tensor(s), named by buffer)",
                    out.display(),
                    arrays.len()
                );
            }
            Ok(())
        }
        _ => anyhow::bail!(
            "{}: write .npy or .safetensors (the extension says which)",
            out.display()
        ),
    }
}

/// `.npy` bytes: f32 for every float type (bf16 and f16 widen exactly), u8 for raw bytes.
fn npy(arr: &Array) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    match arr.elem {
        None => {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::<u8>::new()
                .default_dtype()
                .shape(&arr.shape)
                .writer(&mut out)
                .begin_nd()?;
            w.extend(arr.bytes.iter().copied())?;
            w.finish()?;
        }
        Some(_) => {
            use npyz::WriterBuilder;
            let mut w = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&arr.shape)
                .writer(&mut out)
                .begin_nd()?;
            w.extend(arr.values().into_iter().map(|v| v as f32))?;
            w.finish()?;
        }
    }
    Ok(out)
}

/// A `.safetensors` file of every array, each named by its buffer, in its own type.
fn safetensors_bytes(arrays: &[Array]) -> Result<Vec<u8>> {
    use safetensors::tensor::{Dtype, TensorView};
    let mut views = Vec::new();
    for arr in arrays {
        let dtype = match arr.elem {
            None => Dtype::U8,
            Some(ElemType::F32) => Dtype::F32,
            Some(ElemType::F16) => Dtype::F16,
            Some(ElemType::Bf16) => Dtype::BF16,
        };
        let shape: Vec<usize> = arr.shape.iter().map(|d| *d as usize).collect();
        views.push((
            arr.label(),
            TensorView::new(dtype, shape, &arr.bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e:?}", arr.buf))?,
        ));
    }
    safetensors::serialize(views, None).map_err(|e| anyhow::anyhow!("safetensors: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_parse_as_buffers_offsets_and_ranges() {
        let r = |buf, off, end| Region {
            buf: BufferId(buf),
            off,
            end,
        };
        assert_eq!(parse_region("buf7"), Ok(r(7, 0, None)));
        assert_eq!(parse_region("7+1024"), Ok(r(7, 1024, None)));
        assert_eq!(parse_region("buf7+1024..+3072"), Ok(r(7, 1024, Some(3072))));
        assert_eq!(parse_region("buf7+1024..3072"), Ok(r(7, 1024, Some(3072))));
        assert!(parse_region("buf7+x").unwrap_err().contains("BUF+OFF"));
        assert!(parse_region("buf7+9..+3")
            .unwrap_err()
            .contains("ends before"));
    }
}
