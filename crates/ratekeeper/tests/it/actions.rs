//! Named limits from configuration: seed 003's actions.

use std::time::Duration;

use ratekeeper::{
    actions::{Actions, ActionsError},
    clock::ManualClock,
    policy::{PolicyError, PolicyKind},
    Timestamp,
};

fn actions(publish_limit: u64) -> (Actions<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let actions = Actions::builder()
        .action("auth", 10, Duration::from_secs(60))
        .action("dashboard_auth", 10, Duration::from_secs(60))
        .action("dashboard_api", 300, Duration::from_secs(60))
        .action_with(
            "publish",
            PolicyKind::FixedWindow,
            publish_limit,
            Duration::from_secs(1),
        )
        .action("subscribe", 0, Duration::from_secs(60))
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap();
    (actions, clock)
}

#[test]
fn each_action_limits_its_own_keys() {
    let (actions, clock) = actions(0);
    let allowed = (0..12)
        .filter(|_| {
            actions
                .check("auth", "198.51.100.7", 1)
                .unwrap()
                .is_allowed()
        })
        .count();
    assert_eq!(allowed, 10);
    // Another address, and the same address under another action, are separate.
    assert!(actions
        .check("auth", "198.51.100.8", 1)
        .unwrap()
        .is_allowed());
    assert!(actions
        .check("dashboard_auth", "198.51.100.7", 1)
        .unwrap()
        .is_allowed());
    // The token bucket refills: one more after six seconds.
    clock.advance(Duration::from_secs(6));
    assert!(actions
        .check("auth", "198.51.100.7", 1)
        .unwrap()
        .is_allowed());
    assert!(!actions
        .check("auth", "198.51.100.7", 1)
        .unwrap()
        .is_allowed());
}

#[test]
fn a_limit_of_zero_or_an_unknown_name_applies_no_limit() {
    let (actions, _) = actions(0);
    assert!(actions.check("publish", "alice", 1).is_none());
    assert!(actions.check("subscribe", "alice", 1).is_none());
    assert!(actions.check("nope", "alice", 1).is_none());
    assert!(!actions.is_limited("publish"));
    assert!(actions.is_limited("dashboard_api"));
    let mut names: Vec<_> = actions.names().collect();
    names.sort_unstable();
    assert_eq!(names, ["auth", "dashboard_api", "dashboard_auth"]);
}

#[test]
fn an_operator_opts_in_by_configuring_a_limit() {
    let (actions, clock) = actions(3);
    let allowed = (0..5)
        .filter(|_| actions.check("publish", "alice", 1).unwrap().is_allowed())
        .count();
    assert_eq!(allowed, 3);
    let limiter = actions.limiter("publish").unwrap();
    assert_eq!(limiter.len(), 1);
    // The next second is a new window; the sweep forgets the old one.
    clock.advance(Duration::from_secs(1));
    assert_eq!(actions.sweep(), 1);
    assert!(actions.check("publish", "alice", 1).unwrap().is_allowed());
}

#[test]
fn configuration_errors_name_the_action() {
    let err = Actions::builder()
        .action("auth", 10, Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, ActionsError::Policy { action, source: PolicyError::Zero { field: "period" } } if action == "auth")
    );
    assert_eq!(
        err.to_string(),
        r#"action "auth": period must be greater than zero"#
    );
    let err = Actions::builder()
        .action("auth", 0, Duration::from_secs(1))
        .action("auth", 5, Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), r#"action "auth" is configured twice"#);
}
