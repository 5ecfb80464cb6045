//! A settled parent's request body, kept without a copy of the objects in it.
//!
//! A request body is the controller, the parent and the children as compact JSON, with a
//! little framing between them (field names, group and object keys). The informer cache
//! keeps each object as exactly that compact JSON ([`Cluster::cached_text`]), so a body
//! is kept as its framing plus shared references to the cache's texts, and put together
//! again (a copy of bytes, no serializing) when the parent's next sync sends it as it is.
//! An object whose text the cache no longer holds as it was written stays inline: the
//! body put together is always the body that was sent.
//!
//! [`Cluster::cached_text`]: crate::ports::Cluster::cached_text

use std::sync::Arc;

use bytes::Bytes;

/// One piece of a kept body.
#[derive(Debug)]
enum Part {
    /// Bytes of the body itself (framing, or an object the cache has no text for).
    Inline(Box<[u8]>),
    /// An object's text, shared with the informer cache.
    Shared(Arc<str>),
}

/// A request body as framing and shared object texts.
#[derive(Debug)]
pub(super) struct SharedBody {
    parts: Vec<Part>,
    len: usize,
}

impl SharedBody {
    /// `body`, with each of `texts` that it contains referenced instead of copied.
    pub(super) fn new(body: &[u8], texts: impl IntoIterator<Item = Arc<str>>) -> SharedBody {
        // The body is JSON, so text; a body that is not keeps no shared parts.
        let mut found: Vec<(usize, Arc<str>)> = match std::str::from_utf8(body) {
            Ok(whole) => texts
                .into_iter()
                .filter(|t| !t.is_empty())
                .filter_map(|t| Some((whole.find(&*t)?, t)))
                .collect(),
            Err(_) => Vec::new(),
        };
        found.sort_by_key(|(start, _)| *start);
        let mut parts = Vec::new();
        let mut at = 0;
        for (start, text) in found {
            if start < at {
                continue;
            }
            if start > at {
                parts.push(Part::Inline(body[at..start].into()));
            }
            at = start + text.len();
            parts.push(Part::Shared(text));
        }
        if at < body.len() {
            parts.push(Part::Inline(body[at..].into()));
        }
        parts.shrink_to_fit();
        SharedBody {
            parts,
            len: body.len(),
        }
    }

    /// The body, put together.
    pub(super) fn bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len);
        for part in &self.parts {
            match part {
                Part::Inline(b) => out.extend_from_slice(b),
                Part::Shared(t) => out.extend_from_slice(t.as_bytes()),
            }
        }
        Bytes::from(out)
    }

    /// The bytes it holds of its own (not shared with the cache).
    #[cfg(test)]
    fn inline_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Inline(b) => b.len(),
                Part::Shared(_) => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_put_together_as_it_was_with_the_objects_shared() {
        let parent: Arc<str> = r#"{"metadata":{"name":"p"}}"#.into();
        let child: Arc<str> = r#"{"metadata":{"name":"c"}}"#.into();
        let body = format!(r#"{{"children":{{"C.v1":{{"c":{child}}}}},"parent":{parent}}}"#);
        let kept = SharedBody::new(body.as_bytes(), [Arc::clone(&parent), Arc::clone(&child)]);
        assert_eq!(kept.bytes(), body.as_bytes());
        assert_eq!(kept.inline_len(), body.len() - parent.len() - child.len());
    }

    #[test]
    fn an_object_changed_since_stays_inline() {
        let old = r#"{"metadata":{"name":"p","resourceVersion":"1"}}"#;
        let body = format!(r#"{{"parent":{old}}}"#);
        let newer: Arc<str> = r#"{"metadata":{"name":"p","resourceVersion":"2"}}"#.into();
        let kept = SharedBody::new(body.as_bytes(), [newer]);
        assert_eq!(kept.bytes(), body.as_bytes());
        assert_eq!(kept.inline_len(), body.len());
    }
}
