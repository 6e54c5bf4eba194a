//! Reads arbitrary UTF-8 as a reservation token: the reader must never
//! panic, and a token it reads must be written back the same.
//!
//! Run with `cargo fuzz run reservation_token` from `crates/ratekeeper`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper::store::Reservation;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(reservation) = Reservation::from_token(text) {
        let again = Reservation::from_token(&reservation.to_token());
        assert_eq!(again.as_ref(), Ok(&reservation), "{text:?}");
    }
});
