//! Limits that refuse every request (`rate = "0/minute"`, a ban): decided
//! here, without a store, as envoyproxy/ratelimit decides
//! `requests_per_unit: 0`.

use ratekeeper::{Decision, Outcome, RetryAfter};

use super::LimitCheck;

/// Whether `check` is under a ban.
pub(super) fn is_ban(check: &LimitCheck) -> bool {
    check.limit.config().ban
}

/// A ban's answer: refused, nothing allowed or left, whole again never
/// (the reset is its window, as Envoy's service reports a zero limit).
pub(super) fn answer(check: &LimitCheck) -> Outcome {
    let decision = Decision::denied(0, 0, check.limit.window(), RetryAfter::Never);
    Outcome::Decided(decision)
}

/// Whether a ban among `checks` refuses the request before any store is
/// asked: one not in shadow mode that costs something. The other limits
/// are then only read, whatever the counting, as envoyproxy/ratelimit
/// reads the others when a descriptor's limit is 0. A check only (cost
/// 0) is refused by it but does not stop the others.
pub(super) fn blocks(checks: &[LimitCheck]) -> bool {
    checks
        .iter()
        .any(|check| is_ban(check) && check.cost > 0 && !check.limit.is_shadow())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ratekeeper::{clock::ManualClock, Timestamp};

    use crate::engine::{Engine, LimitCheck};
    use crate::Config;

    #[test]
    fn a_ban_refuses_and_the_others_take_nothing() {
        let toml = "[[limits]]\nname = \"ban\"\nrate = \"0/minute\"\nkey = [\"global\"]\n\
                    [[limits]]\nname = \"two\"\nrate = \"2/minute\"\npolicy = \"fixed_window\"\nkey = [\"global\"]\n";
        let config = Config::from_toml_str(toml, "t.toml").unwrap();
        assert_eq!(config.limits[0].rate_text(), "0/minute");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
            let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
            let limits = engine.limits();
            let check = |name: &str, cost| {
                LimitCheck::new(Arc::clone(limits.get(name).unwrap()), b"k".to_vec(), cost)
            };
            for _ in 0..3 {
                let verdict = engine
                    .check(vec![check("two", 1), check("ban", 1)])
                    .await
                    .unwrap();
                assert!(!verdict.is_allowed());
                assert_eq!(verdict.denied_by().unwrap().check.limit.name(), "ban");
                let two = verdict.results[0].decision();
                assert_eq!((two.limit(), two.remaining()), (2, 2));
                let ban = verdict.results[1].decision();
                assert_eq!((ban.limit(), ban.remaining()), (0, 0));
            }
            // A check only (cost 0) is refused, and does not stop the rest.
            let verdict = engine
                .check(vec![check("two", 1), check("ban", 0)])
                .await
                .unwrap();
            assert!(!verdict.is_allowed());
            assert_eq!(verdict.results[0].decision().remaining(), 1);
            // Alone, the other limit was never charged by the refusals.
            let verdict = engine.check(vec![check("two", 1)]).await.unwrap();
            assert!(verdict.is_allowed());
            assert_eq!(verdict.results[0].decision().remaining(), 0);
        });
    }
}
