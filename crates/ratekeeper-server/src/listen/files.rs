//! The open-file limit: raised at start, and the connection caps fitted
//! under it, so that the process runs out of connections it may accept
//! before it runs out of file descriptors (which would fail the config
//! watcher, the store's connections and every door at once).

/// Descriptors kept out of the connection caps: listeners, the store's
/// connections, the runtime's own, the configuration file and logs.
const RESERVED: u64 = 256;
/// What is kept out when the limit is small.
const RESERVED_SMALL: u64 = 32;

/// The open-file limit at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct OpenFiles {
    /// The soft limit the process started with.
    pub(crate) before: u64,
    /// The soft limit now (the hard limit, if raising it worked).
    pub(crate) now: u64,
}

/// Raises the soft open-file limit to the hard limit, and lowers the caps
/// (each door's name and cap; the admin port's is named `admin`) so that
/// together they fit under it with room to spare; says so in the log.
pub(crate) fn fit_open_files(caps: &mut [(&'static str, usize)]) -> OpenFiles {
    let files = raise();
    if files.now > files.before {
        tracing::info!(
            from = files.before,
            to = files.now,
            "raised the open-file limit to the hard limit"
        );
    }
    let asked: Vec<usize> = caps.iter().map(|(_, cap)| *cap).collect();
    fit(files.now, caps);
    if caps
        .iter()
        .zip(&asked)
        .any(|((_, cap), asked)| cap != asked)
    {
        let fitted: Vec<String> = caps
            .iter()
            .map(|(door, cap)| format!("{door} {cap}"))
            .collect();
        tracing::warn!(
            open_files = files.now,
            "connection caps lowered to fit the open-file limit: {} (raise the hard limit, `ulimit -Hn`, to keep them)",
            fitted.join(", ")
        );
    }
    files
}

/// The soft limit before and after raising it to the hard limit. Where the
/// limit cannot be read, `u64::MAX`: nothing is fitted.
fn raise() -> OpenFiles {
    #[cfg(unix)]
    {
        let Ok((soft, hard)) = rlimit::Resource::NOFILE.get() else {
            return OpenFiles {
                before: u64::MAX,
                now: u64::MAX,
            };
        };
        let now = match rlimit::increase_nofile_limit(hard) {
            Ok(now) => now,
            Err(error) => {
                tracing::warn!(%error, soft, hard, "cannot raise the open-file limit");
                soft
            }
        };
        OpenFiles { before: soft, now }
    }
    #[cfg(not(unix))]
    {
        OpenFiles {
            before: u64::MAX,
            now: u64::MAX,
        }
    }
}

/// Lowers `caps` to fit `limit` descriptors: the admin port keeps up to an
/// eighth of what is left after the reserve, the other doors share the
/// rest in proportion to their caps; no cap goes below 1.
fn fit(limit: u64, caps: &mut [(&'static str, usize)]) {
    let reserved = if limit >= 8 * RESERVED {
        RESERVED
    } else {
        RESERVED_SMALL.min(limit / 2)
    };
    let budget = usize::try_from(limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
    let mut rest = budget;
    for (door, cap) in caps.iter_mut() {
        if *door == "admin" {
            *cap = (*cap).min((budget / 8).max(1));
            rest = rest.saturating_sub(*cap);
        }
    }
    let others: usize = caps
        .iter()
        .filter(|(door, _)| *door != "admin")
        .map(|(_, cap)| *cap)
        .fold(0, usize::saturating_add);
    if others <= rest {
        return;
    }
    for (door, cap) in caps.iter_mut() {
        if *door != "admin" {
            // `cap * rest / others` without overflow: both below 2^20 per
            // door in a checked config, but fit any input.
            let share = (*cap as u128 * rest as u128 / others.max(1) as u128) as usize;
            *cap = share.max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_that_fit_are_kept() {
        let mut caps = [("http", 10_000), ("grpc", 10_000), ("admin", 256)];
        fit(1 << 20, &mut caps);
        assert_eq!(caps, [("http", 10_000), ("grpc", 10_000), ("admin", 256)]);
    }

    #[test]
    fn caps_that_do_not_fit_share_what_is_left_after_the_reserve() {
        let mut caps = [("http", 10_000), ("grpc", 10_000), ("admin", 256)];
        fit(20_000, &mut caps);
        let total: usize = caps.iter().map(|(_, cap)| cap).sum();
        assert!(total <= 20_000 - RESERVED as usize, "{caps:?}");
        assert_eq!(caps[2], ("admin", 256));
        assert_eq!(caps[0].1, caps[1].1);
        assert!(caps[0].1 > 9_000, "{caps:?}");
    }

    #[test]
    fn the_admin_port_keeps_a_share_under_a_small_limit() {
        let mut caps = [("http", 10_000), ("admin", 256)];
        fit(256, &mut caps);
        let (http, admin) = (caps[0].1, caps[1].1);
        assert!(admin >= 1 && http >= 1, "{caps:?}");
        assert!(http + admin <= 256 - 32, "{caps:?}");
        assert_eq!(admin, (256 - 32) / 8);
    }

    #[test]
    fn no_cap_goes_to_zero() {
        let mut caps = [("http", 10), ("grpc", 10), ("proxy", 10), ("admin", 10)];
        fit(3, &mut caps);
        assert!(caps.iter().all(|(_, cap)| *cap >= 1), "{caps:?}");
    }
}
