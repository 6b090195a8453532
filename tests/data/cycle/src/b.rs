//! Refers back to `a` only through the root's re-export, and to `c` only inside a macro call.
pub struct Beta;

pub fn alpha_size() -> usize {
    std::mem::size_of::<crate::Alpha>()
}

pub fn gamma() -> String {
    format!("{:?}", crate::c::GAMMA)
}
