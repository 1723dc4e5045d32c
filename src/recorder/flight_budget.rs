//! What the flight recorder's checkpoints may cost (`FlightConfig::budget`): a share of the
//! wall time since the engine's first step (or arming, before it), counted over every
//! checkpoint taken, the first included. Not from arming alone: an engine's load, seconds
//! long, would let its first hundreds of short steps take a checkpoint at every interval. A host
//! checkpoint is priced at its own time; a device checkpoint, which stops nothing but still
//! costs short steps its launches and the engine's wait for its kernel, at what the step it
//! fell in took beyond the typical step.
//!
//! A share of wall time bounds the mean, not the tail: a checkpoint that costs a short step
//! half its time, taken every 30 steps, is within 2% and yet is the 99th-percentile step. So
//! one that costs more than a tenth of the typical step falls in at most one step of
//! `TAIL_STEPS`. Such a checkpoint slows two steps, the one it falls in and the next (run 72,
//! an 83 us step: 190 and 105 us against 89 for the others), so one in 256 steps made 0.8% of
//! them slow, and the 99th percentile was the slowest few of the ordinary ones (1.12x plain,
//! where the median was 1.07x); one in 1024 makes 0.2% slow, and the 99th percentile is an
//! ordinary step's. A checkpoint that dear falls in steps under a millisecond or so, so one in
//! 1024 is still one a second or more often.

use std::time::{Duration, Instant};

/// A checkpoint dearer than `TAIL_SHARE` of the typical step is taken at most once in this
/// many steps.
pub(crate) const TAIL_STEPS: u64 = 1024;
const TAIL_SHARE: f64 = 0.1;
/// Steps the typical step is the median of.
const WINDOW: usize = 31;

/// The read rate a first host checkpoint is estimated at (bytes a second): a device-to-host
/// copy into pageable memory, hashed, is about this on the H200's host (runs 45-46).
const DEFAULT_READ_RATE: f64 = 2e9;

/// The budget's accounts.
pub(crate) struct Budget {
    /// When the recorder was armed, and when the first step ended: the budget is a share of
    /// the time since the latter (the former before it).
    armed_at: Instant,
    first_step: Option<Instant>,
    /// What the checkpoints taken since arming cost, in all, as the budget counts it.
    pub(super) spent: Duration,
    /// What they cost the threads that took them.
    pub host_time: Duration,
    /// What the last checkpoint cost, and its read rate (bytes a second) when it read
    /// enough to measure one: the estimate of the next.
    last_cost: Option<(Duration, Option<f64>)>,
    /// Bytes read by checkpoints when the last one was taken.
    read_when_taken: u64,
    /// The step clock (`step_ended`): the last step's end, the typical step (the median of
    /// the last `WINDOW` steps no checkpoint fell in: an engine's first steps after its load,
    /// ten times the later ones, would hold a moving average up for a hundred steps, and a
    /// checkpoint priced against it would look free), and whether a device checkpoint fell
    /// in the step now running, to be priced at its end.
    last_step_end: Option<Instant>,
    window: [f64; WINDOW],
    window_n: usize,
    to_price: bool,
    /// Steps ended since arming, and that count when the last checkpoint was taken.
    steps: u64,
    last_taken_at: Option<u64>,
    /// What the last few checkpoints cost: the tail rule goes by the dearest of them, so
    /// one that happened to cost a step little does not let the next in early.
    recent: [Duration; 4],
    recent_at: usize,
    /// The typical step as `fits` last worked it out, and `window_n` then.
    typical: std::cell::Cell<Option<(usize, f64)>>,
}

/// How many steps `fits` goes by one working out of the typical step: it is asked at every
/// boundary while a checkpoint is owed and held back (on a decode step of 0.3 ms, a median
/// over 31 steps each time was a tenth of what the recorder cost the step on CUDA, run 100),
/// and a median the window moved a few steps under is as typical.
const TYPICAL_EVERY: usize = 16;

impl Budget {
    /// Accounts opened now, at arming.
    pub fn new() -> Self {
        Budget {
            armed_at: Instant::now(),
            first_step: None,
            spent: Duration::ZERO,
            host_time: Duration::ZERO,
            last_cost: None,
            read_when_taken: 0,
            last_step_end: None,
            window: [0.0; WINDOW],
            window_n: 0,
            to_price: false,
            steps: 0,
            last_taken_at: None,
            recent: [Duration::ZERO; 4],
            recent_at: 0,
            typical: std::cell::Cell::new(None),
        }
    }

    /// Whether a checkpoint owed now fits `share` of the time since arming: what checkpoints
    /// have cost since, plus this one's estimate. So over any stretch from arming on,
    /// checkpoints take at most that share, the first one included (a host checkpoint reads
    /// every buffer the engine filled since arming: a 16 GB model's weights take seconds).
    /// The estimate is the last checkpoint's cost, or the bytes no checkpoint has read yet
    /// (`unread`) at the last measured read rate (at first, 2 GB/s), whichever is larger.
    /// Where the dearest of the last few checkpoints cost more than a tenth of the typical
    /// step, one waits, besides, for `TAIL_STEPS` steps since the last.
    pub fn fits(&self, share: f64, unread: u64) -> bool {
        let (last, rate) = self.last_cost.unwrap_or_default();
        let by_bytes = unread as f64 / rate.unwrap_or(DEFAULT_READ_RATE);
        let estimate = last.as_secs_f64().max(by_bytes);
        let since = self.first_step.unwrap_or(self.armed_at).elapsed();
        if self.spent.as_secs_f64() + estimate > share * since.as_secs_f64() {
            return false;
        }
        // The typical step (a median) only where the tail rule could hold the checkpoint
        // back: this is asked at every boundary while one is owed.
        let recent = self
            .last_taken_at
            .is_some_and(|at| self.steps - at < TAIL_STEPS);
        if !recent {
            return true;
        }
        let dearest = self.recent.iter().max().copied().unwrap_or_default();
        let typical = match self.typical.get() {
            Some((at, t)) if self.window_n - at < TYPICAL_EVERY => Some(t),
            _ => {
                let t = self.typical_step();
                self.typical.set(t.map(|t| (self.window_n, t)));
                t
            }
        };
        let dear = typical.is_some_and(|t| estimate.max(dearest.as_secs_f64()) > TAIL_SHARE * t);
        !dear
    }

    /// A host checkpoint was taken: it cost `cost`, and checkpoints have read `read_total`
    /// bytes so far.
    pub fn host_checkpoint(&mut self, cost: Duration, read_total: u64) {
        self.host_time += cost;
        self.taken_now();
        let read = read_total - self.read_when_taken;
        self.read_when_taken = read_total;
        self.spent += cost;
        // Below a mebibyte the time is the checkpoint's fixed cost, not a read rate.
        let rate = (read >= 1 << 20 && !cost.is_zero()).then(|| read as f64 / cost.as_secs_f64());
        let known = self.last_cost.and_then(|(_, r)| r);
        self.last_cost = Some((cost, rate.or(known)));
        self.note_recent(cost);
    }

    /// A device checkpoint was taken: what it cost the engine's thread (`host`) is only part
    /// of it (its launches; the engine's streams wait for its gather, the recorder's thread
    /// takes the lock), so it is priced by the step it fell in (`step_ended`).
    pub fn device_checkpoint(&mut self, host: Duration) {
        self.host_time += host;
        self.taken_now();
        self.to_price = true;
    }

    /// For the tail rule: a checkpoint was taken after `steps` steps. The one a recorder
    /// takes when armed, before the engine's first step, falls in no step.
    fn taken_now(&mut self) {
        if self.first_step.is_some() {
            self.last_taken_at = Some(self.steps);
        }
    }

    fn note_recent(&mut self, cost: Duration) {
        self.recent[self.recent_at % self.recent.len()] = cost;
        self.recent_at += 1;
    }

    /// The typical step (seconds): the median of the window, worked out only where a
    /// checkpoint is priced or due, not at every step boundary.
    fn typical_step(&self) -> Option<f64> {
        let n = self.window_n.min(WINDOW);
        if n == 0 {
            return None;
        }
        let mut w = self.window;
        let w = &mut w[..n];
        let (_, m, _) = w.select_nth_unstable_by(n / 2, f64::total_cmp);
        Some(*m)
    }

    /// A step ended `now`. One a device checkpoint fell in is priced at what it took beyond
    /// the typical step (the median of the others'): what the checkpoint cost the
    /// engine, whatever part of it was the host's, the device's or the lock's.
    pub fn step_ended(&mut self, now: Instant) {
        self.steps += 1;
        self.first_step.get_or_insert(now);
        if let Some(prev) = self.last_step_end {
            let dt = now.saturating_duration_since(prev).as_secs_f64();
            if !self.to_price {
                self.window[self.window_n % WINDOW] = dt;
                self.window_n += 1;
            } else if let Some(t) = self.typical_step() {
                let extra = Duration::from_secs_f64((dt - t).max(0.0));
                self.spent += extra;
                self.last_cost = Some((extra, None));
                self.note_recent(extra);
            }
        }
        self.to_price = false;
        self.last_step_end = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step a device checkpoint fell in is priced at what it took beyond the typical
    /// step, and the budget then holds the next checkpoint back for as long as that takes
    /// to be 2% of the time since arming.
    #[test]
    fn a_device_checkpoint_is_priced_by_the_step_it_fell_in() {
        let mut b = Budget::new();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        for k in 0..10 {
            b.step_ended(ms(k));
        }
        assert_eq!(b.spent, Duration::ZERO);
        b.device_checkpoint(Duration::from_micros(40));
        // The step it fell in took 4 ms against a typical 1 ms.
        b.step_ended(ms(13));
        let extra = b.spent.as_secs_f64();
        assert!((extra - 0.003).abs() < 1e-6, "{extra}");
        assert_eq!(b.host_time, Duration::from_micros(40));
        // Priced once; the next steps are typical again.
        b.step_ended(ms(14));
        assert!((b.spent.as_secs_f64() - extra).abs() < 1e-9);
        // 3 ms spent and 3 ms expected of the next: not before 300 ms after the first step.
        assert!(!b.fits(0.02, 0));
        b.first_step = Some(t0 - Duration::from_millis(310));
        // Within the share, but 3 ms is three typical steps: not within TAIL_STEPS steps of the last.
        assert!(!b.fits(0.02, 0));
        for k in 0..TAIL_STEPS {
            b.step_ended(ms(15 + k));
        }
        assert!(b.fits(0.02, 0));
    }

    /// One checkpoint that happened to cost its step little does not let the next in before
    /// `TAIL_STEPS`: the dearest of the last few counts.
    #[test]
    fn the_tail_rule_goes_by_the_dearest_recent_checkpoint() {
        let mut b = Budget::new();
        let t0 = Instant::now();
        let us = |n: u64| t0 + Duration::from_micros(n);
        let mut t = 0;
        let mut step = |b: &mut Budget, dt: u64| {
            t += dt;
            b.step_ended(us(t));
        };
        for _ in 0..10 {
            step(&mut b, 100);
        }
        // A dear one (+60 us on a 100 us step), then a cheap one (+2 us).
        b.device_checkpoint(Duration::from_micros(30));
        step(&mut b, 160);
        for _ in 0..TAIL_STEPS {
            step(&mut b, 100);
        }
        b.device_checkpoint(Duration::from_micros(30));
        step(&mut b, 102);
        b.first_step = Some(t0 - Duration::from_secs(10));
        assert!(!b.fits(0.02, 0), "in early after a cheap one");
        for _ in 0..TAIL_STEPS {
            step(&mut b, 100);
        }
        assert!(b.fits(0.02, 0));
    }

    /// An engine's first steps after its load, a hundred times the later ones, do not make a
    /// checkpoint's step look typical.
    #[test]
    fn slow_first_steps_do_not_hide_a_checkpoints_cost() {
        let mut b = Budget::new();
        let t0 = Instant::now();
        let mut t = 0;
        let mut step = |b: &mut Budget, us: u64| {
            t += us;
            b.step_ended(t0 + Duration::from_micros(t));
        };
        for _ in 0..5 {
            step(&mut b, 10_000);
        }
        for _ in 0..20 {
            step(&mut b, 100);
        }
        b.device_checkpoint(Duration::from_micros(30));
        step(&mut b, 150);
        let (cost, _) = b.last_cost.expect("priced");
        assert_eq!(cost, Duration::from_micros(50));
    }

    /// A checkpoint that costs a step little is held back by the share alone: short steps
    /// get one every few steps where their checkpoints are cheap.
    #[test]
    fn a_cheap_checkpoint_is_held_back_by_the_share_alone() {
        let mut b = Budget::new();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        for k in 0..10 {
            b.step_ended(ms(k * 10));
        }
        b.device_checkpoint(Duration::from_micros(5));
        // 10.5 ms against a typical 10 ms: 0.5 ms, a twentieth of a step.
        b.step_ended(ms(100) + Duration::from_micros(500));
        b.first_step = Some(t0 - Duration::from_secs(1));
        assert!(b.fits(0.02, 0), "{:?}", b.last_cost);
    }
}
