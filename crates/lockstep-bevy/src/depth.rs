//! A serde deserializer that refuses values nested deeper than a limit.
//!
//! A snapshot's values come from another machine; postcard decodes a
//! recursive type (an expression, a behaviour tree) as deep as its bytes
//! say, one stack frame per level, and a megabyte of nesting overflows the
//! stack, which aborts the process. Every value is read through [`Depth`],
//! which counts the levels it goes down (sequences, maps, structs, enums,
//! options, newtypes) and fails with an error past [`MAX_DEPTH`].

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

/// The deepest a value of the state may nest.
pub(crate) const MAX_DEPTH: u16 = 128;

/// `inner`, allowed `left` more levels.
pub(crate) struct Depth<D> {
    pub(crate) inner: D,
    pub(crate) left: u16,
}

impl<D> Depth<D> {
    pub(crate) fn new(inner: D) -> Self {
        Self {
            inner,
            left: MAX_DEPTH,
        }
    }
}

/// One level further down, or the error that ends the value.
fn deeper<E: de::Error>(left: u16) -> Result<u16, E> {
    left.checked_sub(1)
        .ok_or_else(|| E::custom(format_args!("nested deeper than {MAX_DEPTH} levels")))
}

macro_rules! plain {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.inner.$method(Guard { inner: visitor, left: self.left })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Depth<D> {
    type Error = D::Error;

    plain!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_unit_struct(
            name,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_newtype_struct(
            name,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_tuple(
            len,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_tuple_struct(
            name,
            len,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_struct(
            name,
            fields,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let left = self.left;
        self.inner.deserialize_enum(
            name,
            variants,
            Guard {
                inner: visitor,
                left,
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// A seed whose value is one level down.
struct Seed<S> {
    inner: S,
    left: u16,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let left = deeper(self.left)?;
        self.inner.deserialize(Depth { inner: d, left })
    }
}

/// The game's visitor, whatever it is handed going one level down.
struct Guard<V> {
    inner: V,
    left: u16,
}

macro_rules! pass {
    ($($method:ident: $t:ty),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $t) -> Result<Self::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Guard<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.inner.expecting(f)
    }

    pass!(
        visit_bool: bool,
        visit_i8: i8,
        visit_i16: i16,
        visit_i32: i32,
        visit_i64: i64,
        visit_i128: i128,
        visit_u8: u8,
        visit_u16: u16,
        visit_u32: u32,
        visit_u64: u64,
        visit_u128: u128,
        visit_f32: f32,
        visit_f64: f64,
        visit_char: char,
        visit_str: &str,
        visit_borrowed_str: &'de str,
        visit_string: String,
        visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8],
        visit_byte_buf: Vec<u8>,
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let left = deeper(self.left)?;
        self.inner.visit_some(Depth { inner: d, left })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let left = deeper(self.left)?;
        self.inner.visit_newtype_struct(Depth { inner: d, left })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let left = deeper(self.left)?;
        self.inner.visit_seq(Guard { inner: seq, left })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let left = deeper(self.left)?;
        self.inner.visit_map(Guard { inner: map, left })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let left = deeper(self.left)?;
        self.inner.visit_enum(Guard { inner: data, left })
    }
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for Guard<A> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }
    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for Guard<A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }
    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: de::EnumAccess<'de>> de::EnumAccess<'de> for Guard<A> {
    type Error = A::Error;
    type Variant = Guard<A::Variant>;
    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let left = self.left;
        let (v, variant) = self.inner.variant_seed(Seed { inner: seed, left })?;
        Ok((
            v,
            Guard {
                inner: variant,
                left,
            },
        ))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Guard<A> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(Seed {
            inner: seed,
            left: self.left,
        })
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let left = self.left;
        self.inner.tuple_variant(
            len,
            Guard {
                inner: visitor,
                left,
            },
        )
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let left = self.left;
        self.inner.struct_variant(
            fields,
            Guard {
                inner: visitor,
                left,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Expr {
        Nil,
        Not(Box<Self>),
        Pair { a: Box<Self>, b: Option<Box<Self>> },
    }

    fn decode(bytes: &[u8]) -> Result<Expr, postcard::Error> {
        let mut de = postcard::Deserializer::from_bytes(bytes);
        Expr::deserialize(Depth::new(&mut de))
    }

    #[test]
    fn shallow_values_decode_as_without_it() {
        let v = Expr::Pair {
            a: Box::new(Expr::Not(Box::new(Expr::Nil))),
            b: Some(Box::new(Expr::Nil)),
        };
        let bytes = postcard::to_allocvec(&v).expect("encodes");
        assert_eq!(decode(&bytes).expect("decodes"), v);
    }

    #[test]
    fn deep_values_are_refused_not_overflowed() {
        // A million `Not`s: without the limit, a stack overflow.
        let mut bytes = vec![1u8; 1_000_000];
        bytes.push(0);
        assert!(decode(&bytes).is_err());
        // Just inside the limit: fine (each `Not` is two levels: the enum
        // and its newtype content).
        let mut ok = vec![1u8; usize::from(MAX_DEPTH / 2) - 1];
        ok.push(0);
        assert!(decode(&ok).is_ok());
    }
}
