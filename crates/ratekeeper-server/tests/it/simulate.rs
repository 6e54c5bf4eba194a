//! `ratekeeper simulate`: known traces decided exactly, the CSV and SVG it
//! writes, the parsers' errors, and the binary run as a process.

use std::process::Command;
use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{policy::PolicyKind, RetryAfter, Timestamp};
use ratekeeper_server::simulate::{
    self, parse_trace, Pattern, PatternErrorKind, Phase, Request, SimPolicy, SimulationOptions,
    Simulator, TraceErrorKind, MAX_REQUESTS,
};

fn policies(texts: &[&str]) -> Vec<SimPolicy> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

fn at_millis(millis: &[u64]) -> Vec<Request> {
    millis
        .iter()
        .map(|&ms| Request {
            time: Timestamp::from_millis(ms),
            cost: 1,
        })
        .collect()
}

fn csv_of(policies: &[SimPolicy], requests: &[Request]) -> String {
    let mut out = Vec::new();
    simulate::run(
        policies,
        requests,
        &SimulationOptions::default(),
        Some(&mut out),
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn five_requests_at_once_under_3_per_second_gcra() {
    let policy: SimPolicy = "gcra:3/s".parse().unwrap();
    let decisions = policy.simulate(&at_millis(&[0; 5]));
    let seen: Vec<(bool, u64, RetryAfter)> = decisions
        .iter()
        .map(|d| (d.is_allowed(), d.remaining(), d.retry_after()))
        .collect();
    // The emission interval is 1/3 s rounded up to the nanosecond.
    let wait = RetryAfter::After(Duration::from_nanos(333_333_334));
    assert_eq!(
        seen,
        [
            (true, 2, RetryAfter::NOW),
            (true, 1, RetryAfter::NOW),
            (true, 0, RetryAfter::NOW),
            (false, 0, wait),
            (false, 0, wait),
        ]
    );
    assert!(decisions.iter().all(|d| d.limit() == 3));
}

#[test]
fn the_csv_of_a_known_trace_is_exact() {
    let requests =
        parse_trace(b"# five at once, then one after the wait\n0\n0\n0\n0\n0\n333.333334ms\n")
            .unwrap();
    let csv = csv_of(&policies(&["gcra:3/s", "fixed_window:3/s"]), &requests);
    assert_eq!(
        csv,
        "time,cost,\
gcra:3/second allowed,gcra:3/second remaining,gcra:3/second retry_after,\
fixed_window:3/second allowed,fixed_window:3/second remaining,fixed_window:3/second retry_after
0,1,true,2,0,true,2,0
0,1,true,1,0,true,1,0
0,1,true,0,0,true,0,0
0,1,false,0,0.333333334,false,0,1
0,1,false,0,0.333333334,false,0,1
0.333333334,1,true,0,0,false,0,0.666666666
"
    );
}

#[test]
fn costs_and_never_in_the_csv() {
    let requests = parse_trace(b"0,2\n0.5 , 5  # more than the quota\n1,0\n").unwrap();
    let csv = csv_of(&policies(&["token_bucket:4/s"]), &requests);
    assert_eq!(
        csv.lines().skip(1).collect::<Vec<_>>(),
        ["0,2,true,2,0", "0.5,5,false,4,never", "1,0,true,4,0"]
    );
}

/// Seed 002's boundary burst: a fixed window admits twice its limit across
/// a window boundary; the sliding log never admits more than the limit in
/// any window.
#[test]
fn fixed_window_admits_double_across_a_boundary_and_sliding_log_does_not() {
    // 10 per second; 10 requests at 0.9 s and 10 more at 1.0 s.
    let mut millis = vec![900; 10];
    millis.extend([1000; 10]);
    let requests = at_millis(&millis);
    let policies = policies(&[
        "fixed_window:10/s",
        "sliding_log:10/s",
        "sliding_window:10/s",
    ]);
    let report = simulate::run(&policies, &requests, &SimulationOptions::default(), None).unwrap();
    let admitted: Vec<u64> = report.totals().iter().map(|t| t.admitted).collect();
    assert_eq!(admitted, [20, 10, 10]);

    let log = policies[1].simulate(&requests);
    assert!(log[..10].iter().all(|d| d.is_allowed()));
    for d in &log[10..] {
        assert!(!d.is_allowed());
        // The first hit leaves the log at 1.9 s.
        assert_eq!(
            d.retry_after(),
            RetryAfter::After(Duration::from_millis(900))
        );
    }
    let fixed = policies[0].simulate(&requests);
    assert!(fixed.iter().all(|d| d.is_allowed()));
    assert_eq!(fixed[19].remaining(), 0);
}

#[test]
fn compare_runs_the_five_kinds_and_they_differ() {
    let compared = SimPolicy::compare("10/s burst 20".parse().unwrap()).unwrap();
    let kinds: Vec<PolicyKind> = compared.iter().map(SimPolicy::kind).collect();
    assert_eq!(kinds, PolicyKind::ALL);
    let requests: Vec<Request> = "burst:30,steady:20/s for 3s"
        .parse::<Pattern>()
        .unwrap()
        .requests();
    let report = simulate::run(&compared, &requests, &SimulationOptions::default(), None).unwrap();
    let admitted: Vec<u64> = report.totals().iter().map(|t| t.admitted).collect();
    // The burst and the steady traffic both start at 0. The buckets admit
    // their burst of 20, then refill 10/s until the last request at 2.95 s
    // (29 more); the fixed window and the sliding log admit 10 in each of
    // three seconds; the sliding window's weighted estimate of the last
    // second admits less just after each boundary.
    assert_eq!(admitted, [49, 49, 30, 30, 28]);
    assert!(report.totals().iter().all(|t| t.offered == 90));
    assert_eq!(
        report.summary().lines().nth(1).unwrap(),
        "token_bucket:10/second burst 20         90         49         41       54.4"
    );
}

#[test]
fn the_svg_parses_and_has_one_series_per_policy() {
    let compared = SimPolicy::compare("5/s".parse().unwrap()).unwrap();
    let requests = "steady:8/s for 5s,burst:20@2s"
        .parse::<Pattern>()
        .unwrap()
        .requests();
    let report = simulate::run(
        &compared,
        &requests,
        &SimulationOptions::default().with_bucket(Duration::from_millis(500)),
        None,
    )
    .unwrap();
    // A title that needs escaping.
    let svg = report.series().to_svg("a <trace> & \"quotes\"");
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let title = root
        .descendants()
        .find(|n| n.has_tag_name("title"))
        .and_then(|n| n.text());
    assert_eq!(title, Some("a <trace> & \"quotes\""));

    let series: Vec<_> = root
        .descendants()
        .filter(|n| n.attribute("class") == Some("series"))
        .collect();
    let labels: Vec<&str> = series
        .iter()
        .map(|n| n.attribute("data-policy").unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "token_bucket:5/second",
            "gcra:5/second",
            "fixed_window:5/second",
            "sliding_log:5/second",
            "sliding_window:5/second"
        ]
    );
    // Each line has two points per bucket (10 buckets over 5 s), and each
    // policy its own colour.
    let mut colours = Vec::new();
    for node in &series {
        let line = node.first_element_child().unwrap();
        assert_eq!(line.tag_name().name(), "polyline");
        assert_eq!(line.attribute("points").unwrap().split(' ').count(), 20);
        colours.push(line.attribute("stroke").unwrap());
    }
    colours.sort_unstable();
    colours.dedup();
    assert_eq!(colours.len(), 5);
    // One shared limit, dashed: 2.5 requests per half second.
    let limits: Vec<_> = root
        .descendants()
        .filter(|n| n.attribute("class") == Some("limit"))
        .collect();
    assert_eq!(limits.len(), 1);
    assert!(limits[0].attribute("stroke-dasharray").is_some());
    let legend: String = root
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("|");
    assert!(legend.contains("limit: 2.5 requests per 0.5s"), "{legend}");
    assert!(legend.contains("offered: 60 requests"), "{legend}");
    assert!(legend.contains("time (s)"), "{legend}");

    // The series the chart draws.
    let s = report.series();
    assert_eq!(s.offered(), [4, 4, 4, 4, 24, 4, 4, 4, 4, 4]);
    // The fixed window (5 per second) fills in each second's first half;
    // at 2 s, one steady request and the burst of 20 take the window at
    // once.
    assert_eq!(s.admitted(2), [4, 1, 4, 1, 5, 0, 4, 1, 4, 1]);
}

#[test]
fn different_limits_get_a_dashed_line_each() {
    let policies = policies(&["gcra:5/s", "gcra:2/s"]);
    let requests = at_millis(&[0, 100, 2000]);
    let report = simulate::run(&policies, &requests, &SimulationOptions::default(), None).unwrap();
    let svg = report.series().to_svg("two limits");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let limits = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("limit"))
        .count();
    assert_eq!(limits, 2);
}

#[test]
fn pattern_requests_are_where_the_grammar_says() {
    let pattern: Pattern = "steady:50/s,burst:200@10s".parse().unwrap();
    assert_eq!(
        pattern.phases(),
        [
            Phase::Steady {
                count: 50,
                per: Duration::from_secs(1),
                duration: Duration::from_secs(60)
            },
            Phase::Burst {
                count: 200,
                at: Some(Duration::from_secs(10))
            },
        ]
    );
    let requests = pattern.requests();
    assert_eq!(requests.len(), 3200);
    assert_eq!(pattern.len(), 3200);
    let at_10 = requests
        .iter()
        .filter(|r| r.time == Timestamp::from_secs(10))
        .count();
    assert_eq!(at_10, 201);
    assert_eq!(
        requests.last().unwrap().time,
        Timestamp::from_millis(59_980)
    );

    let millis = |p: &str| -> Vec<u64> {
        p.parse::<Pattern>()
            .unwrap()
            .requests()
            .iter()
            .map(|r| r.time.as_millis())
            .collect()
    };
    assert_eq!(millis("steady:5/2s for 1s"), [0, 400, 800]);
    assert_eq!(
        millis("idle:1.5s, burst:2, STEADY : 1/s for 2s"),
        [1500, 1500, 1500, 2500]
    );
    assert_eq!(millis("steady:1/s for 2s,burst:1@0.5s"), [0, 500, 1000]);
    assert_eq!(millis("ramp:4..0/s for 1s"), [0, 292]);
    assert!(millis("idle:1m").is_empty());
}

#[test]
fn pattern_errors_say_what_and_where() {
    let cases = [
        (
            "",
            "column 1: empty pattern; expected phases such as \"steady:50/s,burst:200@10s\"",
        ),
        (
            "steady:50/x",
            "column 11: unknown time unit \"x\"; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")",
        ),
        (
            "steady:50/s,bursts:200",
            "column 13: unknown phase \"bursts\"; expected steady, ramp, idle or burst",
        ),
        (
            "steady:50/s,,idle:1s",
            "column 13: empty phase; expected steady, ramp, idle or burst",
        ),
        (
            "steady:fifty/s",
            "column 8: expected a whole number, found \"fifty\"",
        ),
        (
            "steady:50",
            "column 10: expected \"/\" and a time unit, as in \"50/s\", found the end",
        ),
        (
            "steady:50/s during 10s",
            "column 13: expected \"for\" and a duration, \",\" or the end of the pattern, found \"during\"",
        ),
        (
            "steady:0/s",
            "column 8: the steady rate must be more than 0",
        ),
        (
            "steady:5/0s",
            "column 10: the rate's period must be more than 0",
        ),
        (
            "burst:10@",
            "column 10: expected a duration such as \"10s\" or \"250ms\", found the end",
        ),
        (
            "burst:10 @ 5s x",
            "column 15: expected \",\" or the end of the pattern, found \"x\"",
        ),
        (
            "ramp:0-10/s",
            "column 7: expected \"..\" between the ramp's two rates, found \"-\"",
        ),
        (
            "steady:99999999999999999999/s",
            "column 8: \"99999999999999999999\" is not a whole number that fits 64 bits",
        ),
        (
            "idle:367d",
            "column 6: too long: a pattern lasts at most 366 days",
        ),
        ("idle:8785h", "column 6: too long: a pattern lasts at most 366 days"),
        (
            "steady:1000/ms for 3h",
            "column 1: the pattern makes 10800000000 requests, more than the 10000000 a simulation takes",
        ),
        (
            "é,steady:1/x",
            "column 1: unknown phase \"é\"; expected steady, ramp, idle or burst",
        ),
        (
            "idle:1s,steady:1/sé",
            "column 18: unknown time unit \"sé\"; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")",
        ),
    ];
    for (pattern, message) in cases {
        let error = pattern.parse::<Pattern>().unwrap_err();
        assert_eq!(error.to_string(), message, "{pattern:?}");
    }
    let error = "burst:5,steady:1/ms for 3h".parse::<Pattern>().unwrap_err();
    assert_eq!(error.column, 9);
    assert_eq!(
        error.kind,
        PatternErrorKind::TooManyRequests {
            requests: 10_800_005,
            max: MAX_REQUESTS
        }
    );
    // The pattern's durations are the core's: the same text, the same length.
    for text in ["1.5 h", "250ms", "2 minutes", "1_000us"] {
        let pattern: Pattern = format!("idle:{text},burst:1").parse().unwrap();
        let requests = pattern.requests();
        let expected = ratekeeper::duration::parse(text).unwrap();
        assert_eq!(
            requests[0].time,
            Timestamp::from_duration(expected),
            "{text}"
        );
    }
}

#[test]
fn trace_errors_say_which_line() {
    let cases: [(&[u8], &str); 7] = [
        (b"0\n1\nabc\n", "line 3: time \"abc\" is not a number of seconds (\"1.5\") or a duration (\"1.5s\", \"1500ms\")"),
        (b"0\n\n# c\n1,two\n", "line 4: cost \"two\" is not a whole number that fits 64 bits"),
        (b"0,1,2\n", "line 1: unexpected \"2\" after the cost; a line is TIME or TIME,COST"),
        (b"2\n1.5\n", "line 2: time 1.5s is earlier than the request before it at 2s; sort the trace by time"),
        (b"0\n\xff\n", "line 2: not UTF-8 text"),
        (b"99999999999999999999999\n", "line 1: time \"99999999999999999999999\" is too large; times go up to about 584 years"),
        (b"1,-1\n", "line 1: cost \"-1\" is not a whole number that fits 64 bits"),
    ];
    for (input, message) in cases {
        assert_eq!(parse_trace(input).unwrap_err().to_string(), message);
    }
    let error = parse_trace(b"1\r\n0.5ms\r\n").unwrap_err();
    assert_eq!(error.line, 2);
    assert!(matches!(error.kind, TraceErrorKind::OutOfOrder { .. }));
    assert_eq!(parse_trace(b"# nothing\n\n").unwrap(), []);
}

#[test]
fn a_bucket_too_short_is_refused() {
    let requests = at_millis(&[0, 60_000]);
    let error = simulate::run(
        &policies(&["1/s"]),
        &requests,
        &SimulationOptions::default().with_bucket(Duration::from_millis(1)),
        None,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "a bucket of 0.001s makes 60001 buckets; a chart has at most 10000 (choose a longer bucket)"
    );
}

#[test]
fn the_simulator_matches_the_cores_simulate() {
    let policies = SimPolicy::compare("7/s burst 9".parse().unwrap()).unwrap();
    let requests = "ramp:0..30/s for 4s,burst:12,steady:11/s for 2s"
        .parse::<Pattern>()
        .unwrap()
        .requests();
    let mut simulator = Simulator::new(&policies);
    let stepped: Vec<Vec<bool>> = requests
        .iter()
        .map(|r| {
            simulator
                .decide(*r)
                .iter()
                .map(|d| d.is_allowed())
                .collect()
        })
        .collect();
    for (i, policy) in policies.iter().enumerate() {
        let alone: Vec<bool> = policy
            .simulate(&requests)
            .iter()
            .map(|d| d.is_allowed())
            .collect();
        let together: Vec<bool> = stepped.iter().map(|row| row[i]).collect();
        assert_eq!(alone, together, "{policy}");
    }
}

proptest! {
    #[test]
    fn the_pattern_parser_never_panics(text in "\\PC{0,40}") {
        if let Ok(pattern) = text.parse::<Pattern>() {
            prop_assert!(pattern.len() <= MAX_REQUESTS);
            // Display parses back to the same pattern.
            prop_assert_eq!(pattern.to_string().parse::<Pattern>(), Ok(pattern));
        }
    }

    #[test]
    fn the_pattern_parser_never_panics_on_near_misses(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("steady:"), Just("ramp:"), Just("idle:"), Just("burst:"), Just(","),
                Just("/"), Just(".."), Just("@"), Just(" for "), Just("ms"), Just("s"),
                Just("m"), Just("h"), Just("0"), Just("7"), Just("1_0"), Just("."),
                Just("99999999999999999999"), Just(" "), Just("é"),
            ],
            0..12,
        )
    ) {
        let text: String = parts.concat();
        match text.parse::<Pattern>() {
            Ok(pattern) => {
                let requests = if pattern.len() <= 100_000 { pattern.requests() } else { Vec::new() };
                prop_assert!(requests.windows(2).all(|w| w[0].time <= w[1].time));
                prop_assert_eq!(pattern.to_string().parse::<Pattern>(), Ok(pattern));
            }
            Err(error) => prop_assert!(error.column >= 1 && error.column <= text.chars().count() + 1),
        }
    }

    #[test]
    fn the_trace_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(requests) = parse_trace(&bytes) {
            prop_assert!(requests.windows(2).all(|w| w[0].time <= w[1].time));
        }
    }

    #[test]
    fn the_trace_parser_never_panics_on_near_misses(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("0"), Just("1"), Just("."), Just(","), Just("ms"), Just("s"), Just("#"),
                Just("\n"), Just("\r\n"), Just(" "), Just("18446744073709551616"), Just("-"),
            ],
            0..20,
        )
    ) {
        let text: String = parts.concat();
        if let Err(error) = parse_trace(text.as_bytes()) {
            prop_assert!(error.line >= 1 && error.line <= text.split('\n').count());
        }
    }
}

fn ratekeeper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
}

#[test]
fn the_binary_writes_the_csv_and_the_svg() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("decisions.csv");
    let svg = dir.path().join("chart.svg");
    let output = ratekeeper()
        .args([
            "simulate",
            "--policy",
            "3/s",
            "--compare",
            "--pattern",
            "burst:5",
        ])
        .arg("--csv")
        .arg(&csv)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.lines().take(6).collect::<Vec<_>>(),
        [
            "policy                     offered   admitted    refused  admitted%",
            "token_bucket:3/second            5          3          2       60.0",
            "gcra:3/second                    5          3          2       60.0",
            "fixed_window:3/second            5          3          2       60.0",
            "sliding_log:3/second             5          3          2       60.0",
            "sliding_window:3/second          5          3          2       60.0",
        ]
    );
    assert!(output.stderr.is_empty(), "no progress bar off a terminal");
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 6);
    assert_eq!(
        csv.lines().nth(4).unwrap(),
        "0,1,false,0,0.333333334,false,0,0.333333334,false,0,1,false,0,1,false,0,1.333333334"
    );
    // (The sliding window still weighs the 3 hits fully at 1 s, and enough
    // less a third of a second later.)
    let svg = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let series = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("series"))
        .count();
    assert_eq!(series, 5);
}

#[test]
fn the_binary_reads_a_trace_and_writes_csv_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("requests.trace");
    std::fs::write(&trace, "# boundary burst\n900ms\n900ms\n1s\n1s\n").unwrap();
    let output = ratekeeper()
        .args([
            "simulate",
            "--policy",
            "fixed_window:2/s",
            "--policy",
            "sliding_log:2/s",
        ])
        .arg("--trace")
        .arg(&trace)
        .args(["--csv", "-"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "time,cost,fixed_window:2/second allowed,fixed_window:2/second remaining,fixed_window:2/second retry_after,\
sliding_log:2/second allowed,sliding_log:2/second remaining,sliding_log:2/second retry_after
0.9,1,true,1,0,true,1,0
0.9,1,true,0,0,true,0,0
1,1,true,1,0,false,0,0.9
1,1,true,0,0,false,0,0.9
"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("policy "),
        "the summary goes to stderr: {stderr}"
    );
}

#[test]
fn the_binary_exits_2_on_bad_input() {
    let run = |args: &[&str]| {
        let output = ratekeeper().arg("simulate").args(args).output().unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (code, stderr) = run(&["--policy", "3/s", "--pattern", "steady:50/x"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "error: --pattern: column 11: unknown time unit \"x\"; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")\n  steady:50/x\n            ^\n"
    );
    let (code, stderr) = run(&[
        "--policy",
        "fixed_window:3/s burst 5",
        "--pattern",
        "burst:1",
    ]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr,
        "error: --policy \"fixed_window:3/s burst 5\": the fixed_window policy takes no burst; give the limit per window instead\n"
    );
    let (code, stderr) = run(&["--policy", "leaky:3/s", "--pattern", "burst:1"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown policy \"leaky\""), "{stderr}");
    let (code, stderr) = run(&["--policy", "3/s", "--pattern", "idle:5s"]);
    assert_eq!(
        (code, stderr.as_str()),
        (Some(2), "error: the pattern idle:5s has no requests\n")
    );
    let (code, stderr) = run(&["--policy", "3/s", "--trace", "/nonexistent/trace"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("error: cannot read /nonexistent/trace: "),
        "{stderr}"
    );
    let (code, stderr) = run(&["--policy", "3/s", "--pattern", "burst:1", "--bucket", "0s"]);
    assert_eq!(
        (code, stderr.as_str()),
        (Some(2), "error: --bucket must be longer than 0\n")
    );
    let (code, _) = run(&["--policy", "3/s"]);
    assert_eq!(code, Some(2), "--trace or --pattern is required");
    let (code, _) = run(&["--policy", "3/s", "--pattern", "burst:1", "--trace", "x"]);
    assert_eq!(code, Some(2), "not both");
}
