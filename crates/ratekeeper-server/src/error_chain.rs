//! An error and its causes as one line, the way every log line, `error:`
//! message and span status of the service tells them.

/// `error`'s text, then each of its sources' after `: `; a source whose
/// text is its error's own (the redis crate's I/O errors repeat their
/// cause) is said once.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    let mut last = text.clone();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if cause_text != last {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        last = cause_text;
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut error: Option<Box<Layer>> = None;
        for text in texts.iter().rev() {
            error = Some(Box::new(Layer {
                text,
                source: error,
            }));
        }
        *error.expect("at least one layer")
    }

    #[test]
    fn each_cause_is_said_once_in_order() {
        assert_eq!(error_chain(&layers(&["a"])), "a");
        assert_eq!(error_chain(&layers(&["a", "b", "c"])), "a: b: c");
        assert_eq!(error_chain(&layers(&["a", "b", "b", "c"])), "a: b: c");
    }
}
