//! The decisions as CSV, one row per request.
//!
//! The columns are `time` and `cost`, then for each policy
//! `POLICY allowed` (`true` or `false`), `POLICY remaining` (units left
//! after the request) and `POLICY retry_after` (seconds; `0` when allowed,
//! `never` when the cost is more than the whole quota). Times are seconds
//! with as many decimals as needed. Fields are quoted as RFC 4180 says, when
//! they hold a comma, a quote or a line break.
//!
//! ```
//! use ratekeeper::Timestamp;
//! use ratekeeper_server::simulate::{CsvWriter, Request, SimPolicy, Simulator};
//!
//! let policies = vec!["fixed_window:1/s".parse::<SimPolicy>().unwrap()];
//! let mut simulator = Simulator::new(&policies);
//! let mut csv = CsvWriter::new(Vec::new(), &policies).unwrap();
//! for ms in [0, 250] {
//!     let request = Request { time: Timestamp::from_millis(ms), cost: 1 };
//!     csv.write(&request, simulator.decide(request)).unwrap();
//! }
//! let text = String::from_utf8(csv.finish().unwrap()).unwrap();
//! assert_eq!(text, "\
//! time,cost,fixed_window:1/second allowed,fixed_window:1/second remaining,fixed_window:1/second retry_after
//! 0,1,true,0,0
//! 0.25,1,false,0,0.75
//! ");
//! ```

use std::io::{self, Write};

use ratekeeper::{Decision, RetryAfter};

use super::{seconds, Request, SimPolicy};

/// Writes decisions as CSV (see the [module docs](self)), buffered.
#[derive(Debug)]
pub struct CsvWriter<W: Write> {
    out: io::BufWriter<W>,
}

impl<W: Write> CsvWriter<W> {
    /// Writes the header for `policies` to `out`.
    ///
    /// # Errors
    ///
    /// What writing to `out` fails with.
    pub fn new(out: W, policies: &[SimPolicy]) -> io::Result<CsvWriter<W>> {
        let mut out = io::BufWriter::new(out);
        out.write_all(b"time,cost")?;
        for policy in policies {
            for column in ["allowed", "remaining", "retry_after"] {
                write!(out, ",{}", field(&format!("{policy} {column}")))?;
            }
        }
        out.write_all(b"\n")?;
        Ok(CsvWriter { out })
    }

    /// Writes the row of `request` and its `decisions`, one per policy in
    /// the header's order.
    ///
    /// # Errors
    ///
    /// What writing fails with.
    pub fn write(&mut self, request: &Request, decisions: &[Decision]) -> io::Result<()> {
        write!(
            self.out,
            "{},{}",
            seconds(request.time.as_duration()),
            request.cost
        )?;
        for decision in decisions {
            let retry = match decision.retry_after() {
                RetryAfter::After(wait) => seconds(wait),
                RetryAfter::Never => "never".to_owned(),
            };
            write!(
                self.out,
                ",{},{},{retry}",
                decision.is_allowed(),
                decision.remaining()
            )?;
        }
        self.out.write_all(b"\n")
    }

    /// Flushes and returns the writer.
    ///
    /// # Errors
    ///
    /// What flushing fails with.
    pub fn finish(self) -> io::Result<W> {
        self.out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
    }
}

/// `text` as one CSV field, quoted when it must be.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}
