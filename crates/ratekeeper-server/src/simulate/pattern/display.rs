//! Writing a pattern back in its own grammar.

use std::fmt;
use std::time::Duration;

use super::{Pattern, Phase, NANOS_PER_SEC};

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, phase) in self.phases.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match *phase {
                Phase::Steady {
                    count,
                    per,
                    duration,
                } => write!(
                    f,
                    "steady:{count}/{} for {}",
                    Period(per),
                    DisplayDuration(duration)
                )?,
                Phase::Ramp {
                    from,
                    to,
                    per,
                    duration,
                } => write!(
                    f,
                    "ramp:{from}..{to}/{} for {}",
                    Period(per),
                    DisplayDuration(duration)
                )?,
                Phase::Idle { duration } => write!(f, "idle:{}", DisplayDuration(duration))?,
                Phase::Burst { count, at: None } => write!(f, "burst:{count}")?,
                Phase::Burst {
                    count,
                    at: Some(at),
                } => write!(f, "burst:{count}@{}", DisplayDuration(at))?,
            }
        }
        Ok(())
    }
}

/// A duration in the largest unit that writes it whole (`2m`, `1h`), in
/// milliseconds below a second (`250ms`), or in seconds with a fraction.
struct DisplayDuration(Duration);

impl fmt::Display for DisplayDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.as_nanos();
        for (unit, size) in [("h", 3600 * NANOS_PER_SEC), ("m", 60 * NANOS_PER_SEC)] {
            if n > 0 && n.is_multiple_of(u128::from(size)) {
                return write!(f, "{}{unit}", n / u128::from(size));
            }
        }
        if n.is_multiple_of(1_000_000) && n > 0 && n < u128::from(NANOS_PER_SEC) {
            return write!(f, "{}ms", n / 1_000_000);
        }
        write!(f, "{}s", crate::simulate::seconds(self.0))
    }
}

/// A rate's period: `s` for one second, `30s` for thirty.
struct Period(Duration);

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = DisplayDuration(self.0).to_string();
        match text.strip_prefix('1') {
            Some(unit) if unit.chars().all(|c| c.is_ascii_alphabetic()) => f.write_str(unit),
            _ => f.write_str(&text),
        }
    }
}
