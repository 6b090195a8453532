//! A crate with one cycle of every kind the checker must see: through a re-export, a child path and a macro.
mod a;
mod b;
mod c;
mod clean;

pub use a::Alpha;
