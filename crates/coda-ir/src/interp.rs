//! placeholder: the reference interpreter (being written).
