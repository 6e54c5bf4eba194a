//! The decision script: its Lua source, the Redis function library made
//! of it, how it is called and the argument it reads.

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};
use std::sync::OnceLock;

use crate::params::MAX_EXACT;
use crate::store::{Now, Prepared, PEEK};

/// The Lua source of the decision script, as `EVAL` runs it.
///
/// On Redis 7 and later the store runs the same body as a Redis function
/// ([`library`]), which costs Redis fewer instructions per call.
pub(crate) const SCRIPT: &str = include_str!("ratekeeper.lua");

/// The script's first statement: the functions it uses. In the function
/// form they become the library's own locals, read once.
const PRELUDE: &str = "local sunpack, pack, call, floor, ceil = struct.unpack, struct.pack, redis.call, math.floor, math.ceil\n";

/// The name of the Redis function (and of its library) that runs
/// [`SCRIPT`]: `ratekeeper_` and the first 16 hex digits of the script's
/// SHA-1, so that stores of different versions sharing a server each find
/// their own.
pub(crate) fn function_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let sha = redis::Script::new(SCRIPT).get_hash().to_owned();
        format!("ratekeeper_{}", &sha[..16])
    })
}

/// The Redis 7 function library (`FUNCTION LOAD`) that runs [`SCRIPT`]'s body
/// as the function [`function_name`], with `KEYS` and `ARGV` as its
/// arguments.
///
/// `FCALL` costs Redis fewer instructions per call than `EVALSHA` (no global
/// `KEYS` and `ARGV` tables set, no script flags looked up by SHA), and the
/// functions the script uses are looked up once per library instead of
/// once per call (they cannot be read while the library loads, so the
/// first call reads them).
pub(crate) fn library() -> &'static str {
    static LIBRARY: OnceLock<String> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let name = function_name();
        let first_call = "if not call then\n  sunpack, pack, call, floor, ceil = struct.unpack, struct.pack, redis.call, math.floor, math.ceil\nend\n";
        let body = SCRIPT.replacen(PRELUDE, first_call, 1);
        format!(
            "#!lua name={name}\nlocal sunpack, pack, call, floor, ceil\nredis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n"
        )
    })
}

/// `ERR Function not found`: the library is not loaded on that server (a
/// new or restarted server, or `FUNCTION FLUSH`).
pub(crate) fn function_missing(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && error
            .detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// A server without functions (before Redis 7: `FCALL` is an unknown
/// command) or whose user may not use them (`NOPERM`).
pub(crate) fn functions_unavailable(error: &RedisError) -> bool {
    error.code() == Some("NOPERM")
        || (error.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && error
                .detail()
                .is_some_and(|d| d.starts_with("unknown command")))
}

pub(crate) fn script_cmd(name: &str, script: &str, keys: &[&[u8]], arg: &[u8]) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd.arg(arg);
    cmd
}

/// The script's argument: one string of little-endian doubles (exact: all
/// are below 2^53), which the script reads with one `struct.unpack`: the
/// op, the number of keys and the time, then each key's limit and cost (0
/// for a peek, which takes nothing).
pub(crate) fn script_arg(op: u8, prepared: &[Prepared], now: Now) -> Vec<u8> {
    let mut arg = Vec::with_capacity(17 + 33 * prepared.len());
    arg.push(op);
    arg.extend_from_slice(&(prepared.len() as f64).to_le_bytes());
    arg.extend_from_slice(&(now.unwrap_or(0).min(MAX_EXACT) as f64).to_le_bytes());
    for p in prepared {
        arg.push(p.params.code);
        for value in p.params.args {
            arg.extend_from_slice(&(value as f64).to_le_bytes());
        }
        // Anything past 2^53 is past every quota; the script sees it exactly.
        let cost = if op == PEEK { 0 } else { p.cost.min(MAX_EXACT) };
        arg.extend_from_slice(&(cost as f64).to_le_bytes());
    }
    arg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_reads_the_functions_once() {
        // The function form hoists the script's first statement; an edit
        // that changes it must change PRELUDE too.
        assert_eq!(SCRIPT.matches(PRELUDE).count(), 1);
        let library = library();
        assert!(!library.contains(PRELUDE));
        assert!(library.starts_with(&format!("#!lua name={}\n", function_name())));
        assert!(function_name().len() == "ratekeeper_".len() + 16);
    }
}
