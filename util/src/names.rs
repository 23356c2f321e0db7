//! Names written as strings: the serde half of a type that configs, flags and records spell
//! as text (`cuda:1`, `bf16`, `raft-small`).

/// Serialises each type as its `Display` text and deserialises it through its `FromStr` (whose
/// error becomes the deserialiser's message, naming the value and what is allowed). The caller
/// depends on `serde`.
#[macro_export]
macro_rules! serde_as_string {
    ($($name:ty),* $(,)?) => {$(
        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    )*};
}
