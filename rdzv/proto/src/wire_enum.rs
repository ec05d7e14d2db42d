//! [`wire_enum!`](crate::wire_enum): an enum, its wire numbers, its names and its parsing from
//! one table, for the enums whose numbers or names other programs read (TCPStore opcodes here,
//! the engine's dtypes, reduce ops, call kinds and error codes in `dtcomm`).

/// Declares an enum from one table of variants, each with its doc, its wire number (when the
/// enum has a `repr`), its canonical name and the other spellings parsing accepts:
///
/// ```
/// dt_rdzv_proto::wire_enum! {
///     /// A colour.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Colour: u8 {
///         /// Red.
///         Red = 1 => "red" | "r",
///         /// Green.
///         Green = 2 => "green",
///     }
///     /// Every colour, in declaration order.
///     pub const ALL;
///     /// The colour's name.
///     pub const fn name;
///     /// The colour of a wire byte.
///     pub const fn from_u8(code);
///     /// Parses a name or an alias, in any ASCII case.
///     pub fn parse(name);
/// }
/// assert_eq!(Colour::from_u8(1), Some(Colour::Red));
/// assert_eq!(Colour::parse("R"), Some(Colour::Red));
/// assert_eq!(Colour::Green.to_string(), "green");
/// ```
///
/// It writes the enum (with `#[repr(..)]` and the numbers when a repr follows its name), `ALL`
/// (every variant, in declaration order), `name()` (the first spelling) and `Display` (the
/// name), then, each when asked for, in this order:
///
/// * `const fn NAME(code)`: the variant of a number, `None` for any other;
/// * `fn NAME(name)`: the variant one of whose spellings equals `name` ignoring ASCII case;
/// * `impl FromStr for "WHAT";`: `FromStr` (error `String`) accepting the same spellings,
///   whose error is `unknown WHAT "input" (name, name, ...)`, the input lowercased and the
///   canonical names in declaration order.
///
/// Each item takes its own docs and visibility. Under `cfg(test)` it also writes `SPELLINGS`,
/// every variant with its spellings (canonical first), for the tests of the table.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$attr:meta])*
        $vis:vis enum $E:ident $(: $repr:ident)? {
            $(
                $(#[$vattr:meta])*
                $V:ident $(= $code:literal)? => $name:literal $(| $alias:literal)*
            ),+ $(,)?
        }
        $(#[$all_attr:meta])*
        $all_vis:vis const ALL;
        $(#[$name_attr:meta])*
        $name_vis:vis const fn name;
        $($opts:tt)*
    ) => {
        $(#[$attr])*
        $(#[repr($repr)])?
        $vis enum $E {
            $(
                $(#[$vattr])*
                $V $(= $code)?,
            )+
        }

        impl $E {
            $(#[$all_attr])*
            $all_vis const ALL: [Self; [$($name),+].len()] = [$(Self::$V),+];

            $(#[$name_attr])*
            $name_vis const fn name(self) -> &'static str {
                match self {
                    $(Self::$V => $name,)+
                }
            }

            /// Every variant with its spellings, canonical first.
            #[cfg(test)]
            const SPELLINGS: &'static [(Self, &'static [&'static str])] =
                &[$((Self::$V, &[$name $(, $alias)*])),+];
        }

        impl ::core::fmt::Display for $E {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.name())
            }
        }

        $crate::wire_enum!(@opts $E [$($repr)?] { $($V => $name $(| $alias)*),+ } $($opts)*);
    };

    (@opts $E:ident $repr:tt $table:tt) => {};

    (@opts $E:ident [$repr:ident] $table:tt
        $(#[$m:meta])* $v:vis const fn $from:ident(code); $($rest:tt)*
    ) => {
        impl $E {
            $(#[$m])*
            $v const fn $from(code: $repr) -> ::core::option::Option<Self> {
                let mut i = 0;
                while i < Self::ALL.len() {
                    if Self::ALL[i] as $repr == code {
                        return ::core::option::Option::Some(Self::ALL[i]);
                    }
                    i += 1;
                }
                ::core::option::Option::None
            }
        }
        $crate::wire_enum!(@opts $E [$repr] $table $($rest)*);
    };

    (@opts $E:ident $repr:tt $table:tt
        $(#[$m:meta])* $v:vis fn $parse:ident(name); $($rest:tt)*
    ) => {
        impl $E {
            $(#[$m])*
            $v fn $parse(name: &str) -> ::core::option::Option<Self> {
                $crate::wire_enum!(@find name $table)
            }
        }
        $crate::wire_enum!(@opts $E $repr $table $($rest)*);
    };

    (@opts $E:ident $repr:tt $table:tt
        $(#[$m:meta])* impl FromStr for $what:literal; $($rest:tt)*
    ) => {
        $(#[$m])*
        impl ::core::str::FromStr for $E {
            type Err = ::std::string::String;
            fn from_str(s: &str) -> ::core::result::Result<Self, ::std::string::String> {
                $crate::wire_enum!(@find s $table).ok_or_else(|| {
                    ::std::format!(
                        "unknown {} {:?} ({})",
                        $what,
                        s.to_ascii_lowercase(),
                        Self::ALL.map(Self::name).join(", ")
                    )
                })
            }
        }
        $crate::wire_enum!(@opts $E $repr $table $($rest)*);
    };

    (@find $s:ident { $($V:ident => $name:literal $(| $alias:literal)*),+ }) => {
        $(
            if $s.eq_ignore_ascii_case($name) $(|| $s.eq_ignore_ascii_case($alias))* {
                ::core::option::Option::Some(Self::$V)
            } else
        )+ {
            ::core::option::Option::None
        }
    };
}

#[cfg(test)]
mod tests {
    crate::wire_enum! {
        /// A table of the test.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub enum Mode: u8 {
            /// The default.
            #[default]
            Auto = 3 => "auto" | "",
            /// Another.
            Off = 0 => "off" | "none",
        }
        /// Every mode.
        pub const ALL;
        /// Its name.
        pub const fn name;
        pub(crate) const fn from_tag(code);
        pub(crate) fn parse(name);
        impl FromStr for "mode";
    }

    #[test]
    fn one_table_writes_every_item() {
        assert_eq!(Mode::ALL, [Mode::Auto, Mode::Off]);
        assert_eq!((Mode::Auto as u8, Mode::Off as u8), (3, 0));
        assert_eq!(Mode::from_tag(0), Some(Mode::Off));
        assert_eq!(Mode::from_tag(1), None);
        assert_eq!(Mode::parse("NONE"), Some(Mode::Off));
        assert_eq!(Mode::parse(""), Some(Mode::Auto));
        assert_eq!(Mode::parse("au"), None);
        assert_eq!("Off".parse::<Mode>(), Ok(Mode::Off));
        assert_eq!(
            "BOGUS".parse::<Mode>(),
            Err("unknown mode \"bogus\" (auto, off)".to_string())
        );
        assert_eq!(format!("{} {}", Mode::default(), Mode::Off), "auto off");
        assert_eq!(Mode::SPELLINGS[1], (Mode::Off, &["off", "none"][..]));
    }
}
