//! A leaf that imports nothing from the crate; only test code looks back up, and test code does not count.
pub struct Leaf;

#[cfg(test)]
fn uses_alpha(_: crate::Alpha) {}
