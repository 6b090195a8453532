//! Refers to `b` in an expression path; `b` reaches `c` only in a macro, so `b` and `c` form a second edge pair.
pub const GAMMA: u8 = 3;

pub fn beta() -> super::b::Beta {
    super::b::Beta
}

#[cfg(test)]
mod tests {
    use crate::a::Alpha;
}
