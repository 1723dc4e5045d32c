//! Dumps across a rank set: when one rank's flight recorder dumps, every other rank dumps too.
//!
//! A rank that faults stops; its peers then wait inside their next collective, where NCCL
//! spins on the device and no call of theirs returns with an error for a trigger to see. The
//! dump that explains the failure is the faulting rank's, but the dumps that show what the
//! others were doing at that moment (which collective they waited in, what they had queued)
//! are theirs, and a hang deadline of minutes would write them late or never. PyTorch's NCCL
//! flight recorder has each rank tell the others through its store; here a directory every
//! rank can see (`FlightConfig::peers`, `GPUTAPE_FLIGHT_PEERS`) is enough: a dump writes one
//! small file per communicator it had joined, named by the communicator's unique id and the
//! rank, and each recorder's watcher thread (`watch.rs`) looks there a few times a second for
//! a file of a communicator it joined, from another rank. It then dumps with a reason that
//! names that rank and what it said. Such a dump announces nothing itself, so ranks do not
//! wake each other in turn.

use super::comm::CommRec;
use crate::backend::CommUniqueId;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How a dump caused by a peer's begins its reason (and how an announcement is told apart).
pub(crate) const PEER_REASON: &str = "peer:";
/// Announcements are named `gputape-peer-UNIQUEID-rankN.dumped`.
const PREFIX: &str = "gputape-peer-";
const SUFFIX: &str = ".dumped";
/// An announcement is a peer's only if written after its communicator was joined here; this
/// much slack covers file systems whose times are coarse.
const SLACK: Duration = Duration::from_secs(2);
/// An announcement's text is read up to this many bytes (the directory is shared: anything
/// may be there).
const MAX_TEXT: u64 = 4096;

fn file_name(id: &CommUniqueId, rank: u32) -> String {
    format!("{PREFIX}{}-rank{rank}{SUFFIX}", id.hex())
}

/// Tells the rank set of every communicator in `comms` that this rank dumped (`reason`, to
/// `dump`). Written through a temporary name, so a watcher never reads half of one. What
/// could not be written is returned, for the recorder to report: a peer then dumps only at
/// its own failure.
pub(crate) fn announce(
    dir: &Path,
    comms: impl Iterator<Item = CommRec>,
    reason: &str,
    dump: &Path,
) -> Result<(), String> {
    if reason.starts_with(PEER_REASON) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let text = format!(
        "process {} dumped to {}: {reason}\n",
        std::process::id(),
        dump.display()
    );
    for c in comms {
        let Some(j) = c.joined else { continue };
        let path = dir.join(file_name(&j.unique, j.rank));
        let tmp = dir.join(format!(
            ".{}.{}",
            file_name(&j.unique, j.rank),
            std::process::id()
        ));
        std::fs::write(&tmp, &text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("announce the dump to its peers in {}: {e}", path.display())
            })?;
    }
    Ok(())
}

/// A peer's announcement for one of `comms`, not yet acted on (`seen` holds those that
/// were): the reason this rank dumps for it.
pub(crate) fn check(dir: &Path, comms: &[CommRec], seen: &mut Vec<PathBuf>) -> Option<String> {
    let ours: Vec<(String, u32, u32, SystemTime)> = comms
        .iter()
        .filter_map(|c| {
            let j = c.joined?;
            Some((j.unique.hex(), j.rank, c.id.0, j.at))
        })
        .collect();
    if ours.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((k, rank)) = parse(name) else {
            continue;
        };
        let Some((_, own, comm, joined)) = ours.iter().find(|o| o.0 == k) else {
            continue;
        };
        let path = entry.path();
        if rank == *own || seen.contains(&path) {
            continue;
        }
        let fresh = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t + SLACK >= *joined);
        if !fresh {
            continue;
        }
        seen.push(path.clone());
        let said = read_text(&path);
        return Some(format!(
            "{PEER_REASON} rank {rank} of communicator comm{comm} (this process is rank {own}) dumped: {said}"
        ));
    }
    None
}

/// (unique id in hex, rank) from an announcement's file name.
fn parse(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (k, rank) = rest.rsplit_once("-rank")?;
    Some((k, rank.parse().ok()?))
}

/// An announcement's text, bounded and on one line.
fn read_text(path: &Path) -> String {
    use std::io::Read as _;
    let mut s = String::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(MAX_TEXT).read_to_string(&mut s));
    match read {
        Ok(_) => s.trim().replace('\n', " "),
        Err(e) => format!(
            "(its announcement {} could not be read: {e})",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_names_are_ignored() {
        let id = CommUniqueId([0xab; 16]);
        let n = file_name(&id, 3);
        assert_eq!(parse(&n), Some((id.hex().as_str(), 3)));
        for bad in [
            "gputape-peer-abc-rankx.dumped",
            "gputape-peer-abc.dumped",
            "other-rank1.dumped",
            "gputape-peer-abc-rank1.dumpe",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
