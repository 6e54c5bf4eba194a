//! The names of the limits made from a file's descriptors.

use std::collections::HashSet;

use ratekeeper::store::MAX_LIMIT_NAME;
use sha2::{Digest, Sha256};

/// A limit name for the descriptor at `path`, not among `names` (which it
/// joins): the path itself when it is a valid name, else the path with
/// every character a name may not hold as `_`, cut to fit, and a digest of
/// the path, so that two paths never meet.
///
/// The one naming rule of a descriptor's limit: [`import_files`](super::import_files)
/// writes these names, and the service names the limits it counts for
/// `--envoy-config` the same way, so both agree on each name.
pub fn limit_name(path: &str, names: &mut HashSet<String>) -> String {
    let allowed = |c: char| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '{' | '}' | ':');
    let clean: String = path
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    let name = if clean == path && clean.len() <= MAX_LIMIT_NAME && !names.contains(&clean) {
        clean
    } else {
        let digest = Sha256::digest(path.as_bytes());
        let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        // Every character of `clean` is ASCII: any cut is a boundary.
        let keep = clean.len().min(MAX_LIMIT_NAME - tag.len() - 1);
        let mut name = format!("{}~{tag}", &clean[..keep]);
        // Two paths with the same cut and digest prefix: count on.
        let mut n = 0u32;
        while names.contains(&name) {
            n += 1;
            let suffix = format!("~{tag}{n}");
            let keep = clean.len().min(MAX_LIMIT_NAME - suffix.len());
            name = format!("{}{suffix}", &clean[..keep]);
        }
        name
    };
    names.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratekeeper::Limit;

    #[test]
    fn names_are_valid_unique_and_stable() {
        let mut names = HashSet::from(["edge.key".to_owned()]);
        assert_eq!(limit_name("edge.path", &mut names), "edge.path");
        // Taken by a native limit: a digest makes it another.
        let taken = limit_name("edge.key", &mut names);
        assert!(taken.starts_with("edge.key~"), "{taken}");
        let odd = limit_name("edge.path_/a b:\"c\"é", &mut names);
        assert!(Limit::new(odd.clone(), ratekeeper::Gcra::per_second(1).unwrap()).is_ok());
        assert!(odd.starts_with("edge.path_/a_b__c__~"), "{odd}");
        let long = "d.".to_owned() + &"k_v.".repeat(40);
        let first = limit_name(&long, &mut names);
        assert!(first.len() <= MAX_LIMIT_NAME);
        // The same path again (another file, another domain cut the same
        // way) never shares the name.
        let again = limit_name(&long, &mut names);
        assert_ne!(first, again);
        assert!(again.len() <= MAX_LIMIT_NAME);
        // The same path in a fresh set gets the same name: names survive
        // reloads, and with them counts and statistics.
        let mut fresh = HashSet::new();
        assert_eq!(limit_name(&long, &mut fresh), first);
    }
}
