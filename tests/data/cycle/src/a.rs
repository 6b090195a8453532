//! Refers to `b` through a grouped use tree.
use crate::{b::Beta, clean};

pub struct Alpha(pub Beta, pub clean::Leaf);
