//! UTC calendar arithmetic for schedules: the periods retention counts in, and the names
//! scheduled snapshots get. Seconds since the epoch, proleptic Gregorian, no leap seconds.

/// A moment's UTC calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1-12
    pub month: u32,
    /// 1-31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

const DAY: i64 = 86_400;

/// (year, month, day) of a day number (days since 1970-01-01); Howard Hinnant's
/// `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl Civil {
    pub fn from_secs(t: i64) -> Civil {
        let (days, rem) = (t.div_euclid(DAY), t.rem_euclid(DAY));
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

/// The calendar periods a retention policy counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    Hour,
    Day,
    /// ISO weeks: Monday to Sunday.
    Week,
    Month,
    Year,
}

impl Period {
    pub const ALL: [Period; 5] = [Period::Hour, Period::Day, Period::Week, Period::Month, Period::Year];

    /// Which period of this kind `t` falls in: equal numbers, same period; later periods
    /// have larger numbers.
    pub fn bucket(self, t: i64) -> i64 {
        match self {
            Period::Hour => t.div_euclid(3600),
            Period::Day => t.div_euclid(DAY),
            // 1970-01-01 was a Thursday: day + 3 counts from the Monday before it.
            Period::Week => (t.div_euclid(DAY) + 3).div_euclid(7),
            Period::Month => {
                let c = Civil::from_secs(t);
                c.year * 12 + i64::from(c.month) - 1
            }
            Period::Year => Civil::from_secs(t).year,
        }
    }
}

/// A scheduled snapshot's name: its UTC time as `YYYY-MM-DDTHHMMSSZ`.
pub fn snapshot_name(t: i64) -> String {
    let c = Civil::from_secs(t);
    format!(
        "{:04}-{:02}-{:02}T{:02}{:02}{:02}Z",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// Now, in seconds since the epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the C library's gmtime_r over a range of moments.
    #[test]
    fn civil_matches_gmtime() {
        let mut t: i64 = -10 * 365 * DAY;
        while t < 200 * 365 * DAY {
            let tt = t as libc::time_t;
            let mut tm: libc::tm = unsafe { std::mem::zeroed() };
            assert!(!unsafe { libc::gmtime_r(&tt, &mut tm) }.is_null());
            let c = Civil::from_secs(t);
            assert_eq!(
                (c.year, c.month, c.day, c.hour, c.minute, c.second),
                (
                    i64::from(tm.tm_year) + 1900,
                    (tm.tm_mon + 1) as u32,
                    tm.tm_mday as u32,
                    tm.tm_hour as u32,
                    tm.tm_min as u32,
                    tm.tm_sec as u32
                ),
                "at {t}"
            );
            // Weeks begin on Mondays (tm_wday 1).
            let monday = tm.tm_wday == 1 && t.rem_euclid(DAY) == 0;
            assert_eq!(Period::Week.bucket(t) != Period::Week.bucket(t - 1), monday, "at {t}");
            t += 7_777 + (t.rem_euclid(13) * 3_001);
        }
        assert_eq!(snapshot_name(1_795_551_302), "2026-11-24T201502Z");
    }
}
