//! The READMEs' and the guide's server snippets: each provides the socket
//! peer, and the library guide's is this crate's.

/// Where a line of markdown is.
enum Fence<'a> {
    Outside,
    /// In a block of another language.
    Skipping,
    /// In a block of the language wanted: its lines so far.
    Keeping(Vec<&'a str>),
}

/// The code of every fenced block in `markdown` whose info string starts
/// with `lang`.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut blocks = Vec::new();
    let mut fence = Fence::Outside;
    for line in markdown.lines() {
        let info = line.trim_start().strip_prefix("```");
        fence = match (fence, info) {
            (Fence::Outside, Some(info)) if info.starts_with(lang) => Fence::Keeping(Vec::new()),
            (Fence::Outside, Some(_)) => Fence::Skipping,
            (Fence::Keeping(block), Some(_)) => {
                blocks.push(block);
                Fence::Outside
            }
            (Fence::Skipping, Some(_)) => Fence::Outside,
            (Fence::Keeping(mut block), None) => {
                block.push(line);
                Fence::Keeping(block)
            }
            (fence, None) => fence,
        };
    }
    blocks
}

/// The lines of `markdown` from `heading` to the next heading.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown.find(heading).expect("the section is there");
    let rest = &markdown[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

const TOWER_README: &str = include_str!("../../README.md");
const ROOT_README: &str = include_str!("../../../../README.md");
const LIBRARY_GUIDE: &str = include_str!("../../../../docs/library.md");

#[test]
fn every_readme_server_is_given_the_socket_peer() {
    let rust: Vec<_> = [TOWER_README, ROOT_README, LIBRARY_GUIDE]
        .iter()
        .flat_map(|markdown| blocks(markdown, "rust"))
        .collect();
    let axum: Vec<_> = rust
        .iter()
        .filter(|block| block.iter().any(|line| line.contains("axum::serve(")))
        .collect();
    let hyper: Vec<_> = rust
        .iter()
        .filter(|block| block.iter().any(|line| line.contains("serve_connection(")))
        .collect();
    assert!(!axum.is_empty() && !hyper.is_empty());
    for block in axum {
        assert!(
            block
                .iter()
                .any(|line| line.contains("into_make_service_with_connect_info::<SocketAddr>()")),
            "{block:#?}"
        );
    }
    for block in hyper {
        assert!(
            block.iter().any(|line| line.contains("PeerAddr(")),
            "{block:#?}"
        );
    }
}

#[test]
fn the_library_guides_layer_is_the_compiled_one() {
    let guide = blocks(
        section(LIBRARY_GUIDE, "## HTTP: the tower layer"),
        "rust,no_run",
    );
    let [guide] = guide.as_slice() else {
        panic!("one rust block in docs/library.md's tower section: {guide:#?}");
    };
    let compiled = blocks(TOWER_README, "rust,no_run");
    let first = compiled.first().expect("the tower README's example");
    assert_eq!(
        guide, first,
        "docs/library.md's tower example is this crate's"
    );
}

#[test]
fn the_root_readme_has_a_layer_served_with_its_peer() {
    let root = blocks(section(ROOT_README, "## The tower layer"), "rust,no_run");
    let [root] = root.as_slice() else {
        panic!("one rust block in the root README's tower section: {root:#?}");
    };
    assert!(root
        .iter()
        .any(|line| line.contains("RateLimitLayer::builder(")));
    assert!(root
        .iter()
        .any(|line| line.contains("into_make_service_with_connect_info::<SocketAddr>()")));
}
