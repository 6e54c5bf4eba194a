//! Parsing, display and validation of [`Rate`] strings, through the public
//! API only.

use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{
    policy::{ParseRateError, PolicyError},
    Rate,
};

/// The documented bounds: `MAX_QUOTA` and `MAX_PERIOD` in nanoseconds.
const MAX_QUOTA: u64 = 1 << 40;
const MAX_PERIOD_NANOS: u64 = 1 << 62;

const SEC: u64 = 1_000_000_000;
const MIN: u64 = 60 * SEC;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;
const WEEK: u64 = 7 * DAY;

fn parse(s: &str) -> Result<Rate, ParseRateError> {
    s.parse()
}

fn rate(amount: u64, period: Duration) -> Rate {
    Rate::new(amount, period).unwrap()
}

/// (input, amount, period in nanoseconds, burst, explicit burst given)
const ACCEPTED: &[(&str, u64, u64, u64, bool)] = &[
    ("100/minute", 100, MIN, 100, false),
    ("100/min", 100, MIN, 100, false),
    ("100/m", 100, MIN, 100, false),
    ("100/mins", 100, MIN, 100, false),
    ("100/minutes", 100, MIN, 100, false),
    ("10/s burst 20", 10, SEC, 20, true),
    ("10/s, burst 20", 10, SEC, 20, true),
    ("10/s ,burst 20", 10, SEC, 20, true),
    ("10/s,burst 20", 10, SEC, 20, true),
    ("10/s burst20", 10, SEC, 20, true),
    ("10/s burst 10", 10, SEC, 10, true),
    ("10/s burst 3", 10, SEC, 3, true),
    ("1000 per 1h", 1000, HOUR, 1000, false),
    ("5 per 30s", 5, 30 * SEC, 5, false),
    ("5/30s", 5, 30 * SEC, 5, false),
    ("5 / 30 s", 5, 30 * SEC, 5, false),
    ("5 per 30 seconds", 5, 30 * SEC, 5, false),
    ("60 per minute", 60, MIN, 60, false),
    ("2/second", 2, SEC, 2, false),
    ("2/seconds", 2, SEC, 2, false),
    ("2/sec", 2, SEC, 2, false),
    ("2/secs", 2, SEC, 2, false),
    ("3 per 250ms", 3, 250_000_000, 3, false),
    ("3/250msec", 3, 250_000_000, 3, false),
    ("3/250 milliseconds", 3, 250_000_000, 3, false),
    ("1/millisecond", 1, 1_000_000, 1, false),
    ("100/day", 100, DAY, 100, false),
    ("100/days", 100, DAY, 100, false),
    ("100/d", 100, DAY, 100, false),
    ("7/week", 7, WEEK, 7, false),
    ("7/weeks", 7, WEEK, 7, false),
    ("7/w", 7, WEEK, 7, false),
    ("7/wk", 7, WEEK, 7, false),
    ("7/2wks", 7, 2 * WEEK, 7, false),
    ("1/2h", 1, 2 * HOUR, 1, false),
    ("1/hr", 1, HOUR, 1, false),
    ("1/3hrs", 1, 3 * HOUR, 1, false),
    ("1/hours", 1, HOUR, 1, false),
    ("1_000/hour", 1000, HOUR, 1000, false),
    ("1_000_000/1_0s", 1_000_000, 10 * SEC, 1_000_000, false),
    ("1/123ns", 1, 123, 1, false),
    ("1/nanosecond", 1, 1, 1, false),
    ("1/5nsec", 1, 5, 1, false),
    ("1/7us", 1, 7_000, 1, false),
    ("1/7\u{b5}s", 1, 7_000, 1, false),
    ("1/7\u{3bc}s", 1, 7_000, 1, false),
    ("1/microsecond", 1, 1_000, 1, false),
    ("1/2usec", 1, 2_000, 1, false),
    // The period is a duration: a fraction of a unit is one too.
    ("1 per 1.5s", 1, 1_500_000_000, 1, false),
    ("3/0.25h", 3, 15 * 60 * SEC, 3, false),
    // Case and whitespace.
    ("  100 / Minute  ", 100, MIN, 100, false),
    ("10/S BURST 20", 10, SEC, 20, true),
    ("5 PER 30 Seconds", 5, 30 * SEC, 5, false),
    ("5 Per 1H", 5, HOUR, 5, false),
    ("\t10\t/\ts\t,\tburst\t20\t", 10, SEC, 20, true),
    ("10  per  30s ,  burst   40", 10, 30 * SEC, 40, true),
    ("5 per30s", 5, 30 * SEC, 5, false),
    ("7/\u{b5}S", 7, 1_000, 7, false),
    // A count of one, and leading zeros.
    ("1 per 1d", 1, DAY, 1, false),
    ("007/0010s", 7, 10 * SEC, 7, false),
    // The bounds.
    (
        "1099511627776/s burst 1099511627776",
        MAX_QUOTA,
        SEC,
        MAX_QUOTA,
        true,
    ),
    ("1/4611686018427387904ns", 1, MAX_PERIOD_NANOS, 1, false),
    (
        "1/4611686018427387us",
        1,
        4_611_686_018_427_387_000,
        1,
        false,
    ),
];

#[test]
fn accepted() {
    for &(input, amount, period, burst, explicit) in ACCEPTED {
        let rate = parse(input).unwrap_or_else(|e| panic!("{input:?} refused: {e}"));
        assert_eq!(rate.amount(), amount, "{input:?}");
        assert_eq!(rate.period(), Duration::from_nanos(period), "{input:?}");
        assert_eq!(rate.burst(), burst, "{input:?}");
        assert_eq!(
            rate.explicit_burst(),
            explicit.then_some(burst),
            "{input:?}"
        );
        // The canonical form reads back the same.
        assert_eq!(parse(&rate.to_string()), Ok(rate), "{input:?}");
    }
}

fn invalid_number(text: &str) -> ParseRateError {
    ParseRateError::InvalidNumber { text: text.into() }
}

fn unknown_unit(unit: &str) -> ParseRateError {
    ParseRateError::UnknownUnit { unit: unit.into() }
}

fn trailing(text: &str) -> ParseRateError {
    ParseRateError::UnexpectedTrailing { text: text.into() }
}

fn invalid_burst(text: &str) -> ParseRateError {
    ParseRateError::InvalidBurst { text: text.into() }
}

fn zero(field: &'static str) -> ParseRateError {
    ParseRateError::Invalid(PolicyError::Zero { field })
}

fn too_large(field: &'static str, value: u128, max: u128) -> ParseRateError {
    ParseRateError::Invalid(PolicyError::TooLarge { field, value, max })
}

#[test]
fn rejected() {
    let quota = u128::from(MAX_QUOTA);
    let period = u128::from(MAX_PERIOD_NANOS);
    let cases: Vec<(&str, ParseRateError)> = vec![
        ("", ParseRateError::Empty),
        ("   \t\n", ParseRateError::Empty),
        // No separator.
        ("100", ParseRateError::MissingSeparator),
        ("100 minute", ParseRateError::MissingSeparator),
        ("100 over minute", ParseRateError::MissingSeparator),
        ("100 perminute", ParseRateError::MissingSeparator),
        ("100 \\ s", ParseRateError::MissingSeparator),
        // Not whole numbers.
        ("1.5/s", invalid_number("1.5")),
        ("5/.5s", invalid_number(".5")),
        ("-3/s", invalid_number("-3")),
        ("+3/s", invalid_number("+3")),
        ("5 per -3s", invalid_number("-3")),
        ("abc/s", invalid_number("abc")),
        ("per minute", invalid_number("per")),
        ("/s", invalid_number("")),
        ("10k/s", invalid_number("10k")),
        ("1e3/s", invalid_number("1e3")),
        ("1,000/s", invalid_number("1,000")),
        ("100per minute", invalid_number("100per")),
        ("_1/s", invalid_number("_1")),
        ("\u{663}/s", invalid_number("\u{663}")),
        (
            "18446744073709551616/s",
            invalid_number("18446744073709551616"),
        ),
        (
            "1/18446744073709551616s",
            invalid_number("18446744073709551616"),
        ),
        // No unit.
        ("5/", ParseRateError::MissingUnit),
        ("5 per", ParseRateError::MissingUnit),
        ("5 per ", ParseRateError::MissingUnit),
        ("5/30", ParseRateError::MissingUnit),
        ("5/30 ,burst 2", ParseRateError::MissingUnit),
        ("5//s", ParseRateError::MissingUnit),
        // Unknown units, quoted as written.
        ("5/fortnight", unknown_unit("fortnight")),
        ("5/Fortnight", unknown_unit("Fortnight")),
        ("5/30 years", unknown_unit("years")),
        ("5/mo", unknown_unit("mo")),
        ("5/sburst 3", unknown_unit("sburst")),
        ("5 per per minute", unknown_unit("per")),
        // Trailing text.
        ("10/s extra", trailing("extra")),
        ("10/s,", trailing(",")),
        ("10/s ,", trailing(",")),
        ("10/s, 20", trailing(", 20")),
        ("10/s/m", trailing("/m")),
        ("10/s2", trailing("2")),
        ("10/s burst 20 more", trailing("more")),
        ("10/s burst 20, burst 30", trailing(", burst 30")),
        ("10/s bursts 20", trailing("bursts 20")),
        // Bad bursts.
        ("10/s burst", invalid_burst("")),
        ("10/s, burst  ", invalid_burst("")),
        ("10/s burst x", invalid_burst("x")),
        ("10/s burst 1.5", invalid_burst("1.5")),
        ("10/s burst -1", invalid_burst("-1")),
        (
            "10/s burst 18446744073709551616",
            invalid_burst("18446744073709551616"),
        ),
        // Well formed, out of range.
        ("0/s", zero("amount")),
        ("0_0/s", zero("amount")),
        ("5 per 0s", zero("period")),
        ("5/0 minutes", zero("period")),
        ("10/s burst 0", zero("burst")),
        ("1099511627777/s", too_large("amount", quota + 1, quota)),
        (
            "18446744073709551615/s",
            too_large("amount", u128::from(u64::MAX), quota),
        ),
        (
            "10/s burst 1099511627777",
            too_large("burst", quota + 1, quota),
        ),
        (
            "1/4611686018427387905ns",
            too_large("period", period + 1, period),
        ),
        (
            "1/18446744073709551615w",
            too_large("period", u128::from(u64::MAX) * u128::from(WEEK), period),
        ),
        (
            "1/7700w",
            too_large("period", 7700 * u128::from(WEEK), period),
        ),
        // The amount is checked before the period, the period before the burst.
        ("0/0s", zero("amount")),
        ("1/0s burst 0", zero("period")),
    ];
    for (input, expected) in cases {
        assert_eq!(parse(input), Err(expected), "{input:?}");
    }
}

#[test]
fn error_messages_are_readable() {
    let message = |s: &str| parse(s).unwrap_err().to_string();
    assert_eq!(
        message("3/fortnight"),
        "unknown time unit \"fortnight\" in rate; expected ms, s, m, h, d or w \
         (or ns, us, or a long name such as \"minutes\")"
    );
    assert!(message("").contains("empty rate"));
    assert!(message("100 minute").contains("missing \"/\" or \"per\""));
    assert!(message("1.5/s").contains("invalid number \"1.5\""));
    assert!(message("1.5/s").contains("whole number"));
    assert!(message("/s").contains("missing amount"));
    assert!(message("99999999999999999999/s").contains("too large"));
    assert!(message("5/30").contains("missing time unit"));
    assert!(message("10/s extra").contains("unexpected \"extra\""));
    assert!(message("10/s burst").contains("missing number after \"burst\""));
    assert!(message("10/s burst x").contains("invalid burst \"x\""));
    assert_eq!(
        message("0/s"),
        "invalid rate: amount must be greater than zero"
    );
    assert!(message("5 per 0s").contains("period must be greater than zero"));
}

#[test]
fn constructors() {
    assert_eq!(
        Rate::per_second(10).unwrap(),
        rate(10, Duration::from_secs(1))
    );
    assert_eq!(
        Rate::per_minute(10).unwrap(),
        rate(10, Duration::from_secs(60))
    );
    assert_eq!(
        Rate::per_hour(10).unwrap(),
        rate(10, Duration::from_secs(3600))
    );
    assert_eq!(
        Rate::per_day(10).unwrap(),
        rate(10, Duration::from_secs(86400))
    );

    let r = Rate::per_second(10).unwrap();
    assert_eq!((r.burst(), r.explicit_burst()), (10, None));
    let b = r.with_burst(25).unwrap();
    assert_eq!(
        (b.amount(), b.burst(), b.explicit_burst()),
        (10, 25, Some(25))
    );
    assert_eq!(b.period(), Duration::from_secs(1));
    // An explicit burst equal to the amount is still explicit.
    assert_ne!(r.with_burst(10).unwrap(), r);

    assert_eq!(
        Rate::new(0, Duration::from_secs(1)),
        Err(PolicyError::Zero { field: "amount" })
    );
    assert_eq!(
        Rate::new(1, Duration::ZERO),
        Err(PolicyError::Zero { field: "period" })
    );
    assert_eq!(
        Rate::per_second(MAX_QUOTA + 1),
        Err(PolicyError::TooLarge {
            field: "amount",
            value: u128::from(MAX_QUOTA) + 1,
            max: u128::from(MAX_QUOTA),
        })
    );
    assert_eq!(
        Rate::new(1, Duration::MAX),
        Err(PolicyError::TooLarge {
            field: "period",
            value: Duration::MAX.as_nanos(),
            max: u128::from(MAX_PERIOD_NANOS),
        })
    );
    assert!(Rate::new(MAX_QUOTA, Duration::from_nanos(MAX_PERIOD_NANOS)).is_ok());
    assert_eq!(r.with_burst(0), Err(PolicyError::Zero { field: "burst" }));
    assert_eq!(
        r.with_burst(u64::MAX),
        Err(PolicyError::TooLarge {
            field: "burst",
            value: u128::from(u64::MAX),
            max: u128::from(MAX_QUOTA),
        })
    );
}

#[test]
fn display() {
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    let cases = [
        (rate(100, s(60)), "100/minute"),
        (rate(5, s(30)), "5/30s"),
        (
            Rate::per_second(10).unwrap().with_burst(20).unwrap(),
            "10/second burst 20",
        ),
        (rate(3, ms(250)), "3/250ms"),
        (rate(1, ms(1)), "1/millisecond"),
        (rate(1, ms(1_500)), "1/1500ms"),
        (rate(1, s(90 * 60)), "1/90m"),
        (rate(1, s(2 * 3600)), "1/2h"),
        (rate(1, s(86400)), "1/day"),
        (rate(1, s(7 * 86400)), "1/week"),
        (rate(1, s(14 * 86400)), "1/2w"),
        (rate(1, s(8 * 86400)), "1/8d"),
        (rate(1, s(3600)), "1/hour"),
        (rate(1, s(1)), "1/second"),
        (rate(1, Duration::from_micros(1)), "1/microsecond"),
        (rate(1, Duration::from_micros(2)), "1/2us"),
        (rate(1, Duration::from_nanos(1)), "1/nanosecond"),
        (rate(1, Duration::from_nanos(123)), "1/123ns"),
        (rate(1, Duration::from_nanos(1_000_001)), "1/1000001ns"),
        (
            rate(MAX_QUOTA, Duration::from_nanos(MAX_PERIOD_NANOS)),
            "1099511627776/4611686018427387904ns",
        ),
    ];
    for (rate, text) in cases {
        assert_eq!(rate.to_string(), text);
        assert_eq!(parse(text), Ok(rate), "{text:?}");
    }
}

/// Pieces of the grammar, valid and not, for strings close to valid ones.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "5",
            "30",
            "1_000",
            "_",
            "007",
            "1099511627776",
            "1099511627777",
            "4611686018427387904",
            "18446744073709551615",
            "18446744073709551616",
            "1.5",
            "-3",
            "+",
            ".",
            "/",
            "//",
            "per",
            "PER",
            "Per",
            ",",
            "burst",
            "BURST",
            " ",
            "  ",
            "\t",
            "\n",
            "ns",
            "nanoseconds",
            "us",
            "\u{b5}s",
            "\u{3bc}s",
            "\u{b5}",
            "ms",
            "msec",
            "s",
            "sec",
            "Seconds",
            "m",
            "min",
            "minute",
            "h",
            "hr",
            "hours",
            "d",
            "day",
            "w",
            "wk",
            "weeks",
            "fortnight",
            "e",
            "\u{663}",
            "\u{0}",
            "\u{feff}",
            "\u{1F600}",
            "é",
        ])
        .prop_map(str::to_owned),
        "[0-9_]{1,25}",
        "[a-z]{1,6}",
    ]
}

/// A period that is a whole number of one unit, so every display form is hit.
fn period() -> impl Strategy<Value = Duration> {
    let units = [1, 1_000, 1_000_000, SEC, MIN, HOUR, DAY, WEEK];
    prop_oneof![
        (1..=MAX_PERIOD_NANOS).prop_map(Duration::from_nanos),
        (prop::sample::select(units.to_vec()), 1..=1_000u64)
            .prop_map(|(unit, count)| Duration::from_nanos(unit * count)),
    ]
}

fn quota() -> impl Strategy<Value = u64> {
    prop_oneof![1..=MAX_QUOTA, 1..=100u64, Just(MAX_QUOTA)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_strings_never_panic(s in ".*") {
        if let Ok(rate) = parse(&s) {
            prop_assert_eq!(parse(&rate.to_string()), Ok(rate));
        }
    }

    #[test]
    fn grammar_strings_never_panic(tokens in prop::collection::vec(token(), 0..10)) {
        let s = tokens.concat();
        if let Ok(rate) = parse(&s) {
            prop_assert_eq!(parse(&rate.to_string()), Ok(rate));
        }
    }

    #[test]
    fn display_round_trips(
        amount in quota(),
        period in period(),
        burst in prop::option::of(quota()),
    ) {
        let mut rate = Rate::new(amount, period).unwrap();
        if let Some(burst) = burst {
            rate = rate.with_burst(burst).unwrap();
        }
        let text = rate.to_string();
        prop_assert_eq!(parse(&text), Ok(rate), "{}", text);
        // The canonical form is stable.
        prop_assert_eq!(parse(&text).unwrap().to_string(), text);
    }

    #[test]
    fn valid_strings_parse(
        amount in quota(),
        sep in prop::sample::select(vec!["/", " / ", " per ", "PER"]),
        count in prop::option::of(1..=1_000u64),
        unit in prop::sample::select(vec![
            ("ms", 1_000_000), ("s", SEC), ("minutes", MIN), ("Hr", HOUR), ("d", DAY), ("wk", WEEK),
        ]),
        burst in prop::option::of((prop::sample::select(vec![" ", ", ", ","]), quota())),
    ) {
        let sep = if sep == "PER" { " PER " } else { sep };
        let (unit_name, unit_nanos) = unit;
        let count_text = count.map_or(String::new(), |c| c.to_string());
        let burst_text = burst.map_or(String::new(), |(sep, b)| format!("{sep}burst {b}"));
        let s = format!("{amount}{sep}{count_text}{unit_name}{burst_text}");
        let rate = parse(&s).unwrap();
        prop_assert_eq!(rate.amount(), amount);
        prop_assert_eq!(rate.period(), Duration::from_nanos(count.unwrap_or(1) * unit_nanos));
        prop_assert_eq!(rate.explicit_burst(), burst.map(|(_, b)| b));
    }
}

proptest::proptest! {
    /// Any duration written with any unit's name parses back to itself, and
    /// a rate's period is the same duration.
    #[test]
    fn a_written_duration_parses_back(count in 1u64..10_000, unit in 0usize..8, spaced: bool) {
        let names = ["ns", "us", "ms", "s", "m", "h", "d", "w"];
        let nanos: [u64; 8] = [1, 1_000, 1_000_000, SEC, MIN, HOUR, DAY, WEEK];
        let text = format!("{count}{}{}", if spaced { " " } else { "" }, names[unit]);
        let expected = Duration::from_nanos(count * nanos[unit]);
        proptest::prop_assert_eq!(ratekeeper::duration::parse(&text), Ok(expected));
        if let Ok(rate) = format!("1/{text}").parse::<Rate>() {
            proptest::prop_assert_eq!(rate.period(), expected);
        }
    }

    /// No text makes the duration parser panic.
    #[test]
    fn no_text_makes_the_duration_parser_panic(text in "\\PC{0,40}") {
        let _ = ratekeeper::duration::parse(&text);
    }
}
