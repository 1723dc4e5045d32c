//! Live-allocation reporting shared by every backend that keeps a ledger: totals by allocating
//! call site, biggest first, and the two ways they are printed.

use super::{site_string, Site};
use std::collections::BTreeMap;

/// Bytes and count of allocations from one call site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteTotal {
    /// The allocating call site, `file:line:col`.
    pub site: String,
    /// Live bytes allocated there.
    pub bytes: usize,
    /// Live allocations made there.
    pub count: usize,
}

/// Aggregate (site, bytes) pairs by site, biggest first (ties by site, so output is stable).
pub fn by_site(items: impl Iterator<Item = (Site, usize)>) -> Vec<SiteTotal> {
    let mut m: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (site, bytes) in items {
        let e = m.entry(site_string(site)).or_default();
        e.0 += bytes;
        e.1 += 1;
    }
    let mut v: Vec<SiteTotal> = m
        .into_iter()
        .map(|(site, (bytes, count))| SiteTotal { site, bytes, count })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    v
}

/// The one line a teardown sweep logs: how many allocations and bytes it found, why they were
/// left (no owner, or a sticky fault `dead_code` that took them with the context), and the
/// largest sites. Shared so the mock and CUDA say it alike.
pub fn sweep_line(rows: &[SiteTotal], dead_code: Option<u32>) -> String {
    let why = match dead_code {
        Some(code) => format!(
            "go with the context, unusable after {} ({code})",
            super::cuda_error_name(code)
        ),
        None => "had no owner".into(),
    };
    format!(
        "sweep: {} allocation(s), {} bytes, {why}; largest sites: {}",
        rows.iter().map(|r| r.count).sum::<usize>(),
        rows.iter().map(|r| r.bytes).sum::<usize>(),
        format_sites(rows, 5)
    )
}

/// One line of the `top_n` largest sites, as sweep logs print them: `site (bytes xcount)`,
/// comma-separated.
pub fn format_sites(rows: &[SiteTotal], top_n: usize) -> String {
    rows.iter()
        .take(top_n)
        .map(|r| format!("{} ({} bytes x{})", r.site, r.bytes, r.count))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `alloc_report` text: a total, then one line per site of at least `min_mb` MiB.
pub fn alloc_report(rows: &[SiteTotal], top_n: usize, min_mb: usize) -> String {
    let total: usize = rows.iter().map(|r| r.bytes).sum();
    let mut out = format!("live: {total} bytes in {} site(s)\n", rows.len());
    for r in rows.iter().filter(|r| r.bytes >= min_mb << 20).take(top_n) {
        out.push_str(&format!(
            "  {:>14} bytes x{:<4} {}\n",
            r.bytes, r.count, r.site
        ));
    }
    out
}
