//! Which scheduled snapshots a schedule keeps: the timeline policy of snapper and sanoid
//! (`last=N,hourly=N,daily=N,weekly=N,monthly=N,yearly=N`) and the space thresholds of
//! CCFS and snapper's FREE_LIMIT (`--keep-while-free`, `--min-free`). Pure functions of the
//! snapshots and the host's free space: the scheduler applies what they decide.

use super::clock::Period;
use std::collections::{BTreeSet, HashSet};
use std::fmt;

/// A timeline policy. A scheduled snapshot is kept if it is one of the newest `last`, or the
/// newest of its hour among the newest `hourly` hours that have one, and so on for each
/// period. Zero: the rule keeps nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keep {
    pub last: u32,
    pub hourly: u32,
    pub daily: u32,
    pub weekly: u32,
    pub monthly: u32,
    pub yearly: u32,
}

/// Most snapshots one rule may keep (ten years of hourly snapshots).
pub const MAX_PER_RULE: u32 = 100_000;

impl Default for Keep {
    /// `last=10,hourly=24,daily=7,weekly=4,monthly=12`.
    fn default() -> Keep {
        Keep {
            last: 10,
            hourly: 24,
            daily: 7,
            weekly: 4,
            monthly: 12,
            yearly: 0,
        }
    }
}

impl Keep {
    fn rules(&self) -> [(&'static str, u32, Option<Period>); 6] {
        [
            ("last", self.last, None),
            ("hourly", self.hourly, Some(Period::Hour)),
            ("daily", self.daily, Some(Period::Day)),
            ("weekly", self.weekly, Some(Period::Week)),
            ("monthly", self.monthly, Some(Period::Month)),
            ("yearly", self.yearly, Some(Period::Year)),
        ]
    }

    /// `last=N,hourly=N,...`: any subset, in any order; absent rules keep nothing.
    pub fn parse(s: &str) -> Result<Keep, String> {
        let mut k = Keep {
            last: 0,
            hourly: 0,
            daily: 0,
            weekly: 0,
            monthly: 0,
            yearly: 0,
        };
        let mut seen = HashSet::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, n) = part
                .split_once('=')
                .ok_or_else(|| format!("keep rule {part:?} is not NAME=N"))?;
            let n: u32 = n
                .parse()
                .map_err(|_| format!("keep rule {part:?}: {n:?} is not a number"))?;
            if n > MAX_PER_RULE {
                return Err(format!("keep rule {part:?}: at most {MAX_PER_RULE}"));
            }
            if !seen.insert(name.to_string()) {
                return Err(format!("keep rule {name:?} given twice"));
            }
            let slot = match name {
                "last" => &mut k.last,
                "hourly" => &mut k.hourly,
                "daily" => &mut k.daily,
                "weekly" => &mut k.weekly,
                "monthly" => &mut k.monthly,
                "yearly" => &mut k.yearly,
                _ => {
                    return Err(format!(
                        "unknown keep rule {name:?} (last, hourly, daily, weekly, monthly, yearly)"
                    ))
                }
            };
            *slot = n;
        }
        if k.rules().iter().all(|r| r.1 == 0) {
            return Err(format!(
                "keep policy {s:?} keeps nothing: give at least one rule above 0"
            ));
        }
        Ok(k)
    }
}

impl fmt::Display for Keep {
    /// The rules above zero, in a fixed order (what `parse` reads back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .rules()
            .iter()
            .filter(|r| r.1 > 0)
            .map(|(name, n, _)| format!("{name}={n}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// A scheduled snapshot as retention sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snap {
    pub id: u32,
    /// When it was taken, seconds since the epoch.
    pub created: i64,
    /// Bytes only it holds (what removing it frees, as `scion list` counts).
    pub exclusive: u64,
}

/// Newest first; ties (same second) by id, the later-made first.
fn newest_first(snaps: &[Snap]) -> Vec<Snap> {
    let mut v = snaps.to_vec();
    v.sort_by(|a, b| b.created.cmp(&a.created).then(b.id.cmp(&a.id)));
    v
}

/// The ids of the snapshots the policy keeps.
pub fn kept(snaps: &[Snap], keep: &Keep) -> BTreeSet<u32> {
    let order = newest_first(snaps);
    let mut out: BTreeSet<u32> = order.iter().take(keep.last as usize).map(|s| s.id).collect();
    for (_, n, period) in keep.rules() {
        let Some(period) = period else { continue };
        // Going newest first, the first snapshot met in a period is that period's newest.
        let mut periods = HashSet::new();
        for s in &order {
            if periods.len() >= n as usize {
                break;
            }
            if periods.insert(period.bucket(s.created)) {
                out.insert(s.id);
            }
        }
    }
    out
}

/// Why a scheduled snapshot is removed (logged with each removal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The policy no longer keeps it.
    Policy,
    /// The policy no longer keeps it, and the host's free space fell to `pct`% or below.
    KeepWhileFree { pct: u8 },
    /// The host's free space is below `pct`%: removed though the policy keeps it.
    MinFree { pct: u8 },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Policy => f.write_str("the keep policy no longer keeps it"),
            Reason::KeepWhileFree { pct } => write!(
                f,
                "the keep policy no longer keeps it and the host has {pct}% free or less (--keep-while-free)"
            ),
            Reason::MinFree { pct } => write!(
                f,
                "the host has less than {pct}% free (--min-free), oldest scheduled snapshot first"
            ),
        }
    }
}

/// A schedule's space thresholds, in percent of the host filesystem's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub keep_while_free: Option<u8>,
    pub min_free: Option<u8>,
}

/// The host filesystem's space as retention weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub total: u64,
    pub available: u64,
}

impl Space {
    /// Whether `available` is at most `pct`% of the total.
    fn at_most(&self, available: u64, pct: u8) -> bool {
        (available as u128) * 100 <= (self.total as u128) * u128::from(pct)
    }

    /// Whether `available` is below `pct`% of the total.
    fn below(&self, available: u64, pct: u8) -> bool {
        (available as u128) * 100 < (self.total as u128) * u128::from(pct)
    }
}

/// The snapshots to remove, in order, each with its reason. Snapshots the policy does not
/// keep go at once, or, with `keep_while_free`, only while the host has that much free or
/// less, oldest first. Below `min_free`, kept ones go too, oldest first, never the newest.
/// The space a removal gives back is taken as the snapshot's exclusive bytes (what it alone
/// holds; blocks it shares with other snapshots come back only when they go too, so this
/// errs towards removing one more than needed, never towards keeping too little).
pub fn plan(snaps: &[Snap], keep: &Keep, limits: Thresholds, space: Space) -> Vec<(u32, Reason)> {
    let keep_ids = kept(snaps, keep);
    let mut oldest_first = newest_first(snaps);
    oldest_first.reverse();
    let mut available = space.available;
    let mut out = Vec::new();
    for s in oldest_first.iter().filter(|s| !keep_ids.contains(&s.id)) {
        let reason = match limits.keep_while_free {
            None => Reason::Policy,
            Some(pct) if space.at_most(available, pct) => Reason::KeepWhileFree { pct },
            Some(_) => break,
        };
        available = available.saturating_add(s.exclusive);
        out.push((s.id, reason));
    }
    if let Some(pct) = limits.min_free {
        let newest = oldest_first.last().map(|s| s.id);
        for s in oldest_first.iter().filter(|s| keep_ids.contains(&s.id)) {
            // The newest snapshot always stays.
            if !space.below(available, pct) || Some(s.id) == newest {
                break;
            }
            available = available.saturating_add(s.exclusive);
            out.push((s.id, Reason::MinFree { pct }));
        }
    }
    // Every rule above zero keeps the newest snapshot, and `min_free` stops before it.
    let newest = oldest_first.last().map(|s| s.id);
    assert!(
        out.iter().all(|(id, _)| Some(*id) != newest),
        "retention would remove the newest snapshot of a schedule"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        let k = Keep::parse("hourly=24, last=3,yearly=2").unwrap();
        assert_eq!((k.last, k.hourly, k.yearly, k.daily), (3, 24, 2, 0));
        assert_eq!(k.to_string(), "last=3,hourly=24,yearly=2");
        assert_eq!(Keep::parse(&k.to_string()).unwrap(), k);
        assert_eq!(
            Keep::default().to_string(),
            "last=10,hourly=24,daily=7,weekly=4,monthly=12"
        );
        for bad in [
            "",
            "last=0",
            "last",
            "last=x",
            "fortnightly=2",
            "last=1,last=2",
            "last=100001",
        ] {
            assert!(Keep::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// The policy's text read literally, one snapshot at a time: an independent model.
    fn model_keeps(snaps: &[Snap], keep: &Keep, s: &Snap) -> bool {
        let newer = |a: &Snap, b: &Snap| (a.created, a.id) > (b.created, b.id);
        let rank = snaps.iter().filter(|o| newer(o, s)).count();
        if rank < keep.last as usize {
            return true;
        }
        for (n, p) in [
            (keep.hourly, Period::Hour),
            (keep.daily, Period::Day),
            (keep.weekly, Period::Week),
            (keep.monthly, Period::Month),
            (keep.yearly, Period::Year),
        ] {
            let b = p.bucket(s.created);
            let newest_of_its_period = !snaps.iter().any(|o| p.bucket(o.created) == b && newer(o, s));
            // Periods with a snapshot, at or after s's period.
            let periods: BTreeSet<i64> = snaps.iter().map(|o| p.bucket(o.created)).filter(|&x| x >= b).collect();
            if newest_of_its_period && periods.len() <= n as usize {
                return true;
            }
        }
        false
    }

    /// A simulated year of snapshots every 15 minutes (with gaps: the machine was off),
    /// retention applied after each as the daemon does, checked against the model each time.
    #[test]
    fn a_simulated_year_against_the_model() {
        for keep in [
            Keep::default(),
            Keep::parse("last=3,daily=5,yearly=2").unwrap(),
            Keep::parse("hourly=6,weekly=3,monthly=2").unwrap(),
        ] {
            let mut live: Vec<Snap> = Vec::new();
            let mut t: i64 = 1_767_225_600 - 3 * 86_400; // late December 2025
            let mut id = 0;
            let mut rng = 0x9e3779b97f4a7c15u64;
            let end = t + 400 * 86_400;
            let mut checks = 0;
            while t < end {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Now and then the machine is off for up to four days.
                t += if rng % 97 == 0 {
                    (rng % (4 * 86_400)) as i64
                } else {
                    900
                };
                id += 1;
                live.push(Snap {
                    id,
                    created: t,
                    exclusive: 0,
                });
                let k = kept(&live, &keep);
                if checks % 7 == 0 || t + 900 >= end {
                    for s in &live {
                        assert_eq!(
                            k.contains(&s.id),
                            model_keeps(&live, &keep, s),
                            "{keep} at {t}: snapshot {s:?}"
                        );
                    }
                }
                checks += 1;
                assert!(k.contains(&id), "the newest snapshot is always kept");
                let removed = plan(
                    &live,
                    &keep,
                    Thresholds::default(),
                    Space {
                        total: 100,
                        available: 50,
                    },
                );
                assert!(removed.iter().all(|(_, r)| *r == Reason::Policy));
                live.retain(|s| k.contains(&s.id));
                assert_eq!(removed.len() + live.len(), k.len() + removed.len());
            }
            let bound = keep.last + keep.hourly + keep.daily + keep.weekly + keep.monthly + keep.yearly;
            assert!(
                live.len() as u32 <= bound && live.len() >= 2,
                "{keep}: {} left",
                live.len()
            );
        }
    }

    #[test]
    fn space_thresholds() {
        let snaps: Vec<Snap> = (1..=6)
            .map(|i| Snap {
                id: i,
                created: i64::from(i) * 86_400 * 40,
                exclusive: 10,
            })
            .collect();
        let keep = Keep::parse("last=3").unwrap();
        let total = 1000;
        let t = |kwf, mf| Thresholds {
            keep_while_free: kwf,
            min_free: mf,
        };
        let sp = |available| Space { total, available };
        // Without thresholds the three the policy drops go, oldest first.
        let ids = |v: Vec<(u32, Reason)>| v.into_iter().map(|(i, _)| i).collect::<Vec<_>>();
        assert_eq!(ids(plan(&snaps, &keep, t(None, None), sp(500))), vec![1, 2, 3]);
        // With plenty free they stay; at 10% free or less they go until above it.
        assert!(plan(&snaps, &keep, t(Some(10), None), sp(500)).is_empty());
        let p = plan(&snaps, &keep, t(Some(10), None), sp(85));
        assert_eq!(ids(p.clone()), vec![1, 2]);
        assert!(p.iter().all(|(_, r)| *r == Reason::KeepWhileFree { pct: 10 }));
        // Below --min-free even kept ones go, oldest first, never the newest.
        let p = plan(&snaps, &keep, t(None, Some(20)), sp(0));
        assert_eq!(ids(p.clone()), vec![1, 2, 3, 4, 5]);
        assert_eq!(p[3].1, Reason::MinFree { pct: 20 });
        let p = plan(&snaps, &keep, t(None, Some(20)), sp(165));
        assert_eq!(ids(p), vec![1, 2, 3, 4]);
        assert_eq!(ids(plan(&snaps, &keep, t(None, Some(20)), sp(185))), vec![1, 2, 3]);
        let one = [snaps[0]];
        assert!(
            plan(&one, &keep, t(Some(50), Some(50)), sp(0)).is_empty(),
            "the newest always stays"
        );
    }
}
