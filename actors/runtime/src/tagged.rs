//! Reading internally tagged enums (`{"type": "taskStarted", "id": 7, …}`) without
//! buffering them.
//!
//! serde's `#[serde(tag = "type")]` reads a whole object into an intermediate tree before it
//! knows the variant (the tag may come last), and an untagged variant inside (as the modules'
//! `Event` wraps `TaskEvent`) reads it again: four to five times the cost of the JSON itself,
//! most of a journal replay's time. serde writes the tag first, so a reader can take it
//! first and hand the rest of the object straight to the variant, as if the enum were
//! externally tagged:
//!
//! ```text
//!   {"type": T, rest…}  ──visit_map: first key is "type"──►  TagFirst { tag: T, rest }
//!        └── an externally tagged mirror of the enum reads variant T from `rest`, streaming
//!   {…, "type": T, …}   ──otherwise: the object read into a map, then the same from it
//! ```
//!
//! An enum implements [`Tagged`] (usually with [`read_variant`] and its mirror, a
//! `#[derive(Deserialize)]` twin without `tag`, same variants and fields, which
//! [`tagged_enum!`](crate::tagged_enum) declares with the enum from one text; each enum's
//! tests check that every variant reads back as written) and reads itself with
//! [`deserialize_tagged`].

/// Declares an internally tagged enum of struct variants (and unit ones) together with its
/// externally tagged mirror `$mirror` (variants renamed to camelCase) and `From<$mirror>`,
/// from one text: a field added to a variant is added to both. An optional last part,
/// `untagged { Variant(Type) }`, adds a newtype variant to the enum alone (`#[serde(untagged)]`:
/// its own `type` tags it), which the enum's [`Tagged::from_tag`] reads itself.
///
/// ```
/// use serde::Serialize;
///
/// bosun_runtime::tagged_enum! {
///     #[derive(Debug, PartialEq, Serialize)]
///     #[serde(tag = "type", rename_all = "camelCase")]
///     pub enum Event as EventDe {
///         Started { id: u64 },
///         Stopped,
///     }
/// }
///
/// let written = serde_json::to_string(&Event::Started { id: 7 }).unwrap();
/// assert_eq!(written, r#"{"type":"started","id":7}"#);
/// let read: EventDe = serde_json::from_str(r#"{"started": {"id": 7}}"#).unwrap();
/// assert_eq!(Event::from(read), Event::Started { id: 7 });
/// ```
#[macro_export]
macro_rules! tagged_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident $(<$g:ident>)? as $mirror:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident $({
                    $( $(#[$fmeta:meta])* $field:ident : $ty:ty ),* $(,)?
                })?
            ),* $(,)?
        }
        $( untagged { $(#[$umeta:meta])* $uvariant:ident ( $uty:ty ) $(,)? } )?
    ) => {
        $(#[$meta])*
        $vis enum $name $(<$g>)? {
            $(
                $(#[$vmeta])*
                $variant $({ $( $(#[$fmeta])* $field : $ty ),* })?,
            )*
            $(
                $(#[$umeta])*
                #[serde(untagged)]
                $uvariant($uty),
            )?
        }

        /// The enum as it is read, once its tag is known: the same variants and fields,
        /// externally tagged.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        #[allow(clippy::enum_variant_names)]
        enum $mirror $(<$g>)? {
            $(
                $variant $({ $( $(#[$fmeta])* $field : $ty ),* })?,
            )*
        }

        impl $(<$g>)? From<$mirror $(<$g>)?> for $name $(<$g>)? {
            fn from(e: $mirror $(<$g>)?) -> Self {
                match e {
                    $( $mirror::$variant $({ $($field),* })? => $name::$variant $({ $($field),* })?, )*
                }
            }
        }
    };
}

use std::marker::PhantomData;

use serde::de::{
    self, Deserialize, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, VariantAccess,
    Visitor,
};

/// An internally tagged enum that reads its variant once the tag is known.
pub trait Tagged: Sized {
    /// The tag's field (`type`).
    const TAG: &'static str;
    /// What the enum is, for errors.
    const EXPECTING: &'static str;
    /// The variant `tag` from the object's other fields.
    fn from_tag<'de, A: MapAccess<'de>>(tag: String, rest: A) -> Result<Self, A::Error>;
}

/// Variant `tag` of `M`, an externally tagged enum (the mirror), from the object's other
/// fields: streamed, nothing buffered.
pub fn read_variant<'de, M: Deserialize<'de>, A: MapAccess<'de>>(
    tag: String,
    rest: A,
) -> Result<M, A::Error> {
    M::deserialize(TagFirst { tag, rest })
}

/// Reads a [`Tagged`] enum: `Deserialize::deserialize` of the enum calls this.
pub fn deserialize_tagged<'de, D: de::Deserializer<'de>, T: Tagged>(
    deserializer: D,
) -> Result<T, D::Error> {
    deserializer.deserialize_map(TaggedVisitor(PhantomData))
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(de::Error::missing_field(T::TAG));
        };
        if first == T::TAG {
            let tag: String = map.next_value()?;
            return T::from_tag(tag, map);
        }
        // The tag is elsewhere: read the object, then the same from it.
        let mut all = serde_json::Map::new();
        all.insert(first, map.next_value()?);
        while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
            all.insert(k, v);
        }
        let tag = match all.remove(T::TAG) {
            Some(serde_json::Value::String(tag)) => tag,
            Some(other) => {
                return Err(de::Error::invalid_type(
                    de::Unexpected::Other(&other.to_string()),
                    &"a string tag",
                ));
            }
            None => return Err(de::Error::missing_field(T::TAG)),
        };
        let rest = de::value::MapDeserializer::<_, serde_json::Error>::new(all.into_iter());
        T::from_tag(tag, rest).map_err(de::Error::custom)
    }
}

/// An object whose tag was read: the variant, and the rest of its fields.
struct TagFirst<A> {
    tag: String,
    rest: A,
}

impl<'de, A: MapAccess<'de>> de::Deserializer<'de> for TagFirst<A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for TagFirst<A> {
    type Error = A::Error;
    type Variant = Rest<A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Rest<A>), A::Error> {
        let variant =
            seed.deserialize(IntoDeserializer::<A::Error>::into_deserializer(self.tag))?;
        Ok((variant, Rest(self.rest)))
    }
}

/// The fields after the tag, read as the variant's.
struct Rest<A>(A);

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn unit_variant(mut self) -> Result<(), A::Error> {
        // A unit variant has nothing more; anything else is skipped, as a struct skips
        // fields it does not know.
        while self
            .0
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        seed.deserialize(de::value::MapAccessDeserializer::new(self.0))
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, A::Error> {
        Err(de::Error::custom("a tagged variant cannot be a tuple"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self.0)
    }
}
