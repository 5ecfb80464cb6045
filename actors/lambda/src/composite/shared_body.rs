//! A settled parent's request body, kept without a copy of the objects in it.
//!
//! A request body is the controller, the parent and the children as compact JSON, with a
//! little framing between them (field names, group and object keys). The informer cache
//! keeps each object as exactly that compact JSON ([`Cluster::cached_text`]), so a body
//! is kept as its framing plus shared references to the cache's texts, and put together
//! again (a copy of bytes, no serializing) when the parent's next sync sends it as it is.
//! An object whose text the cache no longer holds as it was written stays inline: the
//! body put together is always the body that was sent. A body just written comes with
//! the places of its objects, so each text is compared at its place; a body sent again
//! is searched for the texts.
//!
//! [`Cluster::cached_text`]: crate::ports::Cluster::cached_text

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

/// A request body as framing and shared object texts: the body's own bytes (framing,
/// and objects the cache has no text for) in one buffer, and each shared text with the
/// place in that buffer where it goes.
#[derive(Debug)]
pub(super) struct SharedBody {
    inline: Box<[u8]>,
    shared: Box<[(usize, Arc<str>)]>,
}

impl SharedBody {
    /// `body`, with each of `texts` that it contains referenced instead of copied.
    pub(super) fn new(body: &[u8], texts: impl IntoIterator<Item = Arc<str>>) -> SharedBody {
        // The body is JSON, so text; a body that is not keeps no shared parts.
        let found: Vec<(usize, Arc<str>)> = match std::str::from_utf8(body) {
            Ok(whole) => texts
                .into_iter()
                .filter(|t| !t.is_empty())
                .filter_map(|t| Some((whole.find(&*t)?, t)))
                .collect(),
            Err(_) => Vec::new(),
        };
        Self::with(body, found)
    }

    /// `body`, with each text that it holds at the place given with it referenced instead
    /// of copied.
    pub(super) fn placed(
        body: &[u8],
        texts: impl IntoIterator<Item = (Range<usize>, Arc<str>)>,
    ) -> SharedBody {
        let found = texts
            .into_iter()
            .filter(|(place, t)| !t.is_empty() && body.get(place.clone()) == Some(t.as_bytes()))
            .map(|(place, t)| (place.start, t))
            .collect();
        Self::with(body, found)
    }

    /// `body` with the texts found at their starts referenced instead of copied (one of
    /// two overlapping texts stays inline).
    fn with(body: &[u8], mut found: Vec<(usize, Arc<str>)>) -> SharedBody {
        found.sort_by_key(|(start, _)| *start);
        let mut inline = Vec::with_capacity(body.len());
        let mut shared = Vec::with_capacity(found.len());
        let mut at = 0;
        for (start, text) in found {
            if start < at {
                continue;
            }
            inline.extend_from_slice(&body[at..start]);
            at = start + text.len();
            shared.push((inline.len(), text));
        }
        inline.extend_from_slice(&body[at..]);
        SharedBody {
            inline: inline.into_boxed_slice(),
            shared: shared.into_boxed_slice(),
        }
    }

    /// The body, put together.
    pub(super) fn bytes(&self) -> Bytes {
        let len = self.inline.len() + self.shared.iter().map(|(_, t)| t.len()).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        let mut at = 0;
        for (place, text) in &self.shared {
            out.extend_from_slice(&self.inline[at..*place]);
            out.extend_from_slice(text.as_bytes());
            at = *place;
        }
        out.extend_from_slice(&self.inline[at..]);
        Bytes::from(out)
    }

    /// The bytes it holds of its own (not shared with the cache).
    #[cfg(test)]
    fn inline_len(&self) -> usize {
        self.inline.len()
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
    fn placed_texts_are_shared_where_the_body_holds_them() {
        let parent: Arc<str> = r#"{"metadata":{"name":"p"}}"#.into();
        let child: Arc<str> = r#"{"metadata":{"name":"c"}}"#.into();
        let body = format!(r#"{{"children":{{"C.v1":{{"c":{child}}}}},"parent":{parent}}}"#);
        let at = |t: &str| {
            let start = body.find(t).expect("in the body");
            start..start + t.len()
        };
        let (child_at, parent_at) = (at(&child), at(&parent));
        let kept = SharedBody::placed(
            body.as_bytes(),
            [
                (parent_at.clone(), Arc::clone(&parent)),
                (child_at.clone(), Arc::clone(&child)),
            ],
        );
        assert_eq!(kept.bytes(), body.as_bytes());
        assert_eq!(kept.inline_len(), body.len() - parent.len() - child.len());
        // A text that differs from the body at its place, a place out of the body,
        // overlapping places: inline.
        let other: Arc<str> = r#"{"metadata":{"name":"q"}}"#.into();
        let beyond = body.len()..body.len() + 3;
        for texts in [
            vec![(parent_at.clone(), Arc::clone(&other))],
            vec![(child_at.clone(), Arc::clone(&parent))],
            vec![(beyond, "abc".into())],
            vec![(parent_at.start..parent_at.start, "".into())],
        ] {
            let kept = SharedBody::placed(body.as_bytes(), texts);
            assert_eq!(kept.bytes(), body.as_bytes());
            assert_eq!(kept.inline_len(), body.len());
        }
        let kept = SharedBody::placed(
            body.as_bytes(),
            [
                (parent_at.clone(), Arc::clone(&parent)),
                (parent_at.start + 1..parent_at.end, parent[1..].into()),
            ],
        );
        assert_eq!(kept.bytes(), body.as_bytes());
        assert_eq!(kept.inline_len(), body.len() - parent.len());
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
