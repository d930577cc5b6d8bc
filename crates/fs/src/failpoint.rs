//! Test-only failpoints: named places in the engine that panic on their Nth pass once
//! armed, so that tests can show what a bug's panic does (it must mark the volume failed
//! and lose nothing acknowledged). Unarmed, a pass costs one relaxed atomic load.
//!
//! The daemon arms them from `SCION_FAILPOINTS=name:n[,name:n...]` (tests/mount only; a name
//! `place@PART` fires only in a store whose path holds PART, one cube's for instance);
//! engine tests call [`arm`]. Places that panic on their nth pass: `checkpoint` (after the
//! checkpoint took the set of changed inodes, before it wrote anything), `restore.copied`
//! and `restore.exchanged` (a restore --replace with its tree built at the hidden name, and
//! then exchanged with the old one). Places that wait
//! n milliseconds on every pass ([`pause`]): `control.hold` (a control command that has
//! done its work and still holds the engine's `Arc`, not its lock), `cube.swap` (a convert
//! or cube removal whose copy is durable and recorded so, before it is exchanged with the
//! original), `fold.hold` (every checkpoint's fold, under the engine lock: a long fold).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static ARMED: AtomicBool = AtomicBool::new(false);
/// (place, passes left before the panic).
static POINTS: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// Makes the `n`th pass (1: the next) through `place` panic.
pub fn arm(place: &str, n: u64) {
    assert!(n >= 1, "failpoint {place}: n counts from 1");
    let mut p = POINTS.lock().unwrap_or_else(|e| e.into_inner());
    p.retain(|(q, _)| q != place);
    p.push((place.to_string(), n));
    ARMED.store(true, Ordering::Relaxed);
}

/// Arms the failpoints of a spec `name:n[,name:n...]`.
pub fn arm_spec(spec: &str) -> Result<(), String> {
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (place, n) = part
            .split_once(':')
            .ok_or_else(|| format!("failpoint '{part}': expected name:n"))?;
        let n: u64 = n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("failpoint '{part}': n is a count from 1"))?;
        arm(place, n);
    }
    Ok(())
}

/// Disarms every failpoint.
pub fn clear() {
    POINTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    ARMED.store(false, Ordering::Relaxed);
}

/// A pass through `place` in the store at `at`: panics if it is armed and this is its pass.
/// A point armed as `place@PART` counts only the passes of stores whose path holds PART
/// (one cube's: `checkpoint@cubes.d/2`).
pub(crate) fn hit_at(place: &str, at: &str) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let matches = |q: &str| match q.split_once('@') {
        Some((name, part)) => name == place && !part.is_empty() && at.contains(part),
        None => q == place,
    };
    let fire = {
        let mut p = POINTS.lock().unwrap_or_else(|e| e.into_inner());
        match p.iter_mut().position(|(q, _)| matches(q)) {
            Some(i) => {
                p[i].1 -= 1;
                let fire = p[i].1 == 0;
                if fire {
                    p.remove(i);
                }
                fire
            }
            None => false,
        }
    };
    if fire {
        panic!("failpoint {place} fired");
    }
}

/// A pass through a waiting place: sleeps its armed number of milliseconds, if armed.
pub fn pause(place: &str) {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    let ms = {
        let p = POINTS.lock().unwrap_or_else(|e| e.into_inner());
        p.iter().find(|(q, _)| q == place).map(|(_, n)| *n)
    };
    if let Some(ms) = ms {
        log::warn!("failpoint {place}: waiting {ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
